"""Hypothesis strategies for the conformance cases' inputs.

Dense: SPD, symmetric (indefinite) and nonsymmetric square matrices of a chosen
conditioning (singular values log-spaced from 1 to 10**-k between random orthogonal
factors), rectangular matrices, right-hand sides.  Sizes stay small and few (every shape
compiles on the XLA lanes).

Sparse matrices come from the project's shared strategies, tests/sparse/strategies.py
(duplicate and unsorted indices, empty rows, 0xN/1xN/Nx1 shapes, every dtype), converted
to every device format here (``sparse_any_format``).
"""

import numpy as np
from hypothesis import strategies as st

__all__ = ["dense_square", "rectangular", "sparse_any_format", "matrix_from"]

SIZES = (1, 3, 5)


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


def sparse_any_format(formats):
    """(tag, S): a SciPy sparse array or matrix from tests/sparse/strategies.py, converted to
    one of ``formats`` (CSR/CSC/COO keep their duplicate and unsorted entries).  None where
    that module is absent."""
    try:
        from tests.sparse.strategies import sparse_matrices
    except ImportError:
        return None

    def convert(drawn):
        s, fmt = drawn
        s = s if s.format == fmt else s.asformat(fmt)
        kind = "array" if type(s).__name__.endswith("_array") else "matrix"
        m, n = s.shape
        dup = s.format in ("csr", "csc", "coo") and not s.has_canonical_format
        return f"{fmt}_{kind}-{s.dtype.name}-{m}x{n}-nnz{s.nnz}{'-dup' if dup else ''}", s

    return st.tuples(sparse_matrices(), st.sampled_from(formats)).map(convert)
