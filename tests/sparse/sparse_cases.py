"""Shared cases for the sparse container tests: SciPy objects with unsorted and
duplicate entries and empty rows, their device twins, and the paired comparison."""

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy

torch = pytest.importorskip("torch")

FORMATS = ["csr", "csc", "coo", "bsr", "dia"]
KINDS = ["array", "matrix"]
DTYPES = ["float32", "float64", "complex64", "complex128"]

# The XLA lane runs a representative subset (each new graph is a compilation;
# torch-xla on PJRT CPU mishandles complex numbers, so real dtypes only).
XLA_SUBSET = {("csr", "array", "float32"), ("coo", "matrix", "float64")}


def skip_unless_subset(lane, fmt, kind, dtype):
    if lane == "xla" and (fmt, kind, dtype) not in XLA_SUBSET:
        pytest.skip("XLA lane: representative subset only")


def _values(rng, n, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(n).astype(dtype)
    if dtype.kind == "b":
        return rng.random(n) < 0.7
    return rng.integers(-5, 6, n).astype(dtype)


def scipy_case(fmt, kind, dtype, shape=(6, 8), nnz=14, seed=0, duplicates=True):
    """A SciPy object of ``fmt``/``kind`` with unsorted and duplicate entries
    (where the format can hold them) and an empty row."""
    rng = np.random.default_rng(seed)
    m, n = shape
    if m * n == 0:
        nnz = 0
    rows = rng.integers(0, max(m, 1), nnz)
    if m > 3:
        rows[rows == 2] = 3  # row 2 stays empty
    cols = rng.integers(0, max(n, 1), nnz)
    if duplicates and nnz > 3:
        rows[-2:], cols[-2:] = rows[:2], cols[:2]
    data = _values(rng, nnz, dtype)
    cls = getattr(sp, f"{fmt}_{kind}")
    if fmt == "coo":
        return cls((data, (rows, cols)), shape=shape)
    if fmt in ("csr", "csc"):
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        order = np.argsort(major, kind="stable")
        indptr = np.zeros(shape[0 if fmt == "csr" else 1] + 1, dtype=np.int32)
        np.add.at(indptr, major + 1, 1)
        indptr = np.cumsum(indptr).astype(np.int32)
        return cls((data[order], minor[order].astype(np.int32), indptr), shape=shape)
    coo = sp.coo_array((data, (rows, cols)), shape=shape)
    if fmt == "bsr":
        return cls(coo.tobsr(blocksize=(2, 2)))
    return cls(coo.todia())


def device_case(host, lane):
    return trnscipy.to_device(host, lane)


def _tensor_to_np(t):
    return trnscipy.to_host(t)


def assert_same(ours, theirs, rtol=None, atol=0):
    """Paired comparison: same kind of result, format, shape, dtype, values."""
    if sp.issparse(theirs):
        assert getattr(ours, "_trnscipy_device_object", False), type(ours)
        assert ours.format == theirs.format, (ours.format, theirs.format)
        assert isinstance(ours, trnscipy.sparse.sparray) == isinstance(theirs, sp.sparray)
        assert ours.shape == theirs.shape
        assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
        mine = ours.to_scipy()
        assert type(mine) is type(theirs)
        got, want = mine.toarray(), theirs.toarray()
    elif isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_same(a, b, rtol, atol)
        return
    elif isinstance(theirs, (np.ndarray, np.generic)):
        assert isinstance(ours, torch.Tensor) or np.isscalar(ours), type(ours)
        got = _tensor_to_np(ours) if isinstance(ours, torch.Tensor) else np.asarray(ours)
        want = np.asarray(theirs)
        assert got.shape == want.shape, (got.shape, want.shape)
        if isinstance(ours, torch.Tensor):
            assert got.dtype == want.dtype, (got.dtype, want.dtype)
    else:
        got, want = ours, theirs
        if isinstance(ours, torch.Tensor):
            got = _tensor_to_np(ours)
        assert np.asarray(got).dtype.kind == np.asarray(want).dtype.kind or \
            np.isscalar(want)
    want = np.asarray(want)
    if rtol is None:
        rtol = 1e-5 if want.dtype in (np.float32, np.complex64) else 1e-12
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol or rtol)
