"""Hypothesis strategies for the conformance cases' inputs.

Dense: SPD, symmetric (indefinite) and nonsymmetric square matrices of a chosen
conditioning (singular values log-spaced from 1 to 10**-k between random orthogonal
factors), rectangular matrices, right-hand sides.  Sizes stay small and few (every shape
compiles on the XLA lanes).

Sparse: matrices in every format from COO triplets that may hold duplicate and unsorted
indices, empty rows, and shapes including 0xN, 1xN and Nx1.
"""

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

__all__ = ["dense_square", "rectangular", "sparse_matrix", "matrix_from",
           "FORMATS", "SPARSE_DTYPES"]

SIZES = (1, 3, 5)
FORMATS = ("csr", "csc", "coo", "bsr", "dia", "dok", "lil")
SPARSE_DTYPES = (np.float64, np.float32, np.complex128, np.int64, np.bool_)


def _rng_matrix(rng, n, m, dtype):
    a = rng.standard_normal((n, m))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, m))
    return a


def matrix_from(kind, n, log10_cond, seed, dtype):
    """A reproducible n x n matrix of ``kind`` ('spd', 'sym', 'gen') with 2-norm condition
    number about 10**log10_cond, in ``dtype`` (Hermitian for complex 'spd'/'sym')."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(_rng_matrix(rng, n, n, dtype))
    s = np.logspace(0, -log10_cond, n)
    if kind == "spd":
        a = (q * s) @ q.conj().T
    elif kind == "sym":
        signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        a = (q * (s * signs)) @ q.conj().T
    elif kind == "gen":
        p, _ = np.linalg.qr(_rng_matrix(rng, n, n, dtype))
        a = (q * s) @ p.conj().T
    else:
        raise ValueError(f"unknown matrix kind {kind!r}")
    if kind in ("spd", "sym"):
        a = (a + a.conj().T) / 2
    return np.ascontiguousarray(a.astype(dtype))


@st.composite
def dense_square(draw, kinds=("spd", "sym", "gen"), dtypes=(np.float64, np.float32),
                 sizes=SIZES, max_log10_cond=6):
    """(kind, A) with A square of the given kinds/dtypes, conditioning 1 .. 10**max."""
    kind = draw(st.sampled_from(kinds))
    n = draw(st.sampled_from(sizes))
    dtype = draw(st.sampled_from(dtypes))
    top = max_log10_cond if np.dtype(dtype).itemsize >= 8 else min(max_log10_cond, 3)
    log10_cond = draw(st.integers(0, top))
    seed = draw(st.integers(0, 2**16))
    return f"{kind}{n}-c{log10_cond}-s{seed}", matrix_from(kind, n, log10_cond, seed, dtype)


@st.composite
def rectangular(draw, dtypes=(np.float64, np.float32), shapes=((5, 3), (3, 5), (4, 1))):
    """(tag, A) with A a random full-rank rectangular matrix."""
    m, n = draw(st.sampled_from(shapes))
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**16))
    a = _rng_matrix(np.random.default_rng(seed), m, n, dtype).astype(dtype)
    return f"{m}x{n}-s{seed}", a


def _values(draw, dtype, count):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(count, dtype=bool)
    if dtype.kind in "iu":
        return np.asarray(draw(st.lists(st.integers(-9, 9).filter(bool), min_size=count,
                                        max_size=count)), dtype=dtype)
    re = draw(st.lists(st.integers(-8, 8).filter(bool), min_size=count, max_size=count))
    vals = np.asarray(re, dtype=np.float64) / 4
    if dtype.kind == "c":
        vals = vals + 1j * vals[::-1]
    return vals.astype(dtype)


@st.composite
def sparse_matrix(draw, formats=FORMATS, dtypes=SPARSE_DTYPES, kinds=("array", "matrix"),
                  shapes=((0, 3), (1, 5), (5, 1), (4, 4), (3, 6)), max_nnz=10):
    """(tag, S): S a SciPy sparse array or matrix of a drawn format, dtype and shape.

    COO keeps duplicate entries; CSR/CSC are built from unsorted per-row (per-column)
    index lists with duplicates, so ``has_sorted_indices`` and ``has_canonical_format``
    are False when the draw says so; rows may be empty.
    """
    fmt = draw(st.sampled_from(formats))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    kind = draw(st.sampled_from(kinds))
    shape = draw(st.sampled_from(shapes))
    m, n = shape
    nnz = 0 if m * n == 0 else draw(st.integers(0, max_nnz))
    rows = np.asarray(draw(st.lists(st.integers(0, max(m - 1, 0)), min_size=nnz,
                                    max_size=nnz)), dtype=np.int32)
    cols = np.asarray(draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=nnz,
                                    max_size=nnz)), dtype=np.int32)
    vals = _values(draw, dtype, nnz)
    leaf = getattr(sp, f"{fmt}_{kind}")
    if fmt in ("csr", "csc"):
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        nmajor = m if fmt == "csr" else n
        order = np.argsort(major, kind="stable")  # minor indices stay in drawn (unsorted) order
        indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=nmajor))])
        s = leaf((vals[order], minor[order], indptr.astype(np.int32)), shape=shape)
    else:
        coo = sp.coo_array((vals, (rows, cols)), shape=shape)
        s = leaf(coo) if fmt == "coo" else leaf(coo.asformat(fmt))
    dup = nnz > len(set(zip(rows.tolist(), cols.tolist(), strict=True)))
    tag = f"{fmt}_{kind}-{dtype.name}-{m}x{n}-nnz{nnz}{'-dup' if dup else ''}"
    return tag, s
