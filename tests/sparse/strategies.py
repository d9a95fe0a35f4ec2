"""Hypothesis strategies for random sparse matrices, for tests and the conformance suite.

Everything drawn is on the host: SciPy sparse objects (or COO triplets) that a
test runs through SciPy and, moved with ``trnscipy.to_device``, through trnscipy.

- ``shapes()``: 0x0, 1xN, Nx1, small MxN.
- ``coo_triplets(shape, dtype)``: ``(data, (row, col))`` in no particular order,
  with duplicate coordinates and explicit zeros likely; empty rows and columns
  are common.  Values are small integers (exact in every dtype) so sums of
  duplicates and products compare exactly.
- ``sparse_matrices(formats, kinds, dtypes)``: a SciPy ``coo``/``csr``/``csc``
  ``_array``/``_matrix``; CSR/CSC ones keep the duplicates and unsorted indices
  of their triplets (built from raw ``(data, indices, indptr)``).

Example::

    @given(A=sparse_matrices(formats=("csr",)))
    def test_x(A, device): ... trnscipy.to_device(A, device) ...
"""

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

__all__ = ["DTYPES", "FLOAT_DTYPES", "shapes", "coo_triplets", "sparse_matrices"]

FLOAT_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
DTYPES = FLOAT_DTYPES + (np.int32, np.int64)


@st.composite
def shapes(draw, max_side=6):
    """(m, n) with 0 <= m, n <= max_side; 0x0, 1xN and Nx1 drawn often."""
    special = st.sampled_from([(0, 0), (1, max_side), (max_side, 1), (1, 1), (0, 3), (3, 0)])
    side = st.integers(0, max_side)
    return draw(st.one_of(special, st.tuples(side, side)))


@st.composite
def coo_triplets(draw, shape=None, dtype=None, max_nnz=16):
    """``((data, (row, col)), shape, dtype)``: unsorted, duplicates and explicit zeros likely."""
    shape = draw(shapes()) if shape is None else shape
    dtype = np.dtype(draw(st.sampled_from(DTYPES)) if dtype is None else dtype)
    m, n = shape
    nnz = 0 if m * n == 0 else draw(st.integers(0, max_nnz))
    # a few distinct positions, drawn repeatedly: duplicates are common
    pool = draw(st.lists(st.tuples(st.integers(0, max(m - 1, 0)), st.integers(0, max(n - 1, 0))),
                         min_size=1, max_size=max(1, nnz // 2 + 1)))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=nnz, max_size=nnz))
    row = np.array([pool[p][0] for p in picks], dtype=np.int32)
    col = np.array([pool[p][1] for p in picks], dtype=np.int32)
    real = draw(st.lists(st.integers(-3, 3), min_size=nnz, max_size=nnz))
    data = np.array(real, dtype=np.float64)
    if dtype.kind == "c":
        imag = draw(st.lists(st.integers(-3, 3), min_size=nnz, max_size=nnz))
        data = data + 1j * np.array(imag, dtype=np.float64)
    return (data.astype(dtype), (row, col)), shape, dtype


def _compressed(fmt, array, triplets):
    """CSR/CSC straight from the triplets: entries keep their order and duplicates."""
    (data, (row, col)), shape, _ = triplets
    major, minor = (row, col) if fmt == "csr" else (col, row)
    n_major = shape[0] if fmt == "csr" else shape[1]
    order = np.argsort(major, kind="stable")
    indptr = np.zeros(n_major + 1, dtype=np.int32)
    np.add.at(indptr, major + 1, 1)
    cls = getattr(sp, f"{fmt}_{'array' if array else 'matrix'}")
    return cls((data[order], minor[order], np.cumsum(indptr, dtype=np.int32)), shape=shape)


@st.composite
def sparse_matrices(draw, formats=("coo", "csr", "csc"), kinds=("array", "matrix"),
                    dtypes=DTYPES, shape=None, max_nnz=16):
    """A SciPy sparse array/matrix (host) in one of ``formats`` and ``kinds``."""
    fmt = draw(st.sampled_from(formats))
    array = draw(st.sampled_from(kinds)) == "array"
    triplets = draw(coo_triplets(shape=shape, dtype=draw(st.sampled_from(dtypes)),
                                 max_nnz=max_nnz))
    if fmt in ("csr", "csc"):
        return _compressed(fmt, array, triplets)
    (data, coords), shape, _ = triplets
    return getattr(sp, f"coo_{'array' if array else 'matrix'}")((data, coords), shape=shape)
