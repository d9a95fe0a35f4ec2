"""Paired execution against SciPy: cholesky, eigh, solve, triangular/LU/QR/SVD, inv, det.

Values are compared where they are unique; otherwise invariants (reconstruction,
orthogonality, residuals) within the bounds of docs/design (DESIGN.md).
"""

import contextlib

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import (
    eps,
    generic_kernels,
    hpd,
    random,
    tensor,
    to_np,
)
from tests.linalg._fallbacks import aten_fallbacks
from trnscipy import DeviceFallbackWarning

torch = pytest.importorskip("torch")

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
N = 7


def _xla_budget(dlane, dtype, dtypes=(np.float32, np.float64)):
    """Each XLA case compiles graphs (an SVD ~10 s here): the XLA lane runs few dtypes."""
    if dlane.type == "xla" and np.dtype(dtype) not in [np.dtype(d) for d in dtypes]:
        pytest.skip("XLA lane compile budget")


def _rel(x, y):
    return np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-300)


def _check_kind(ours, ref, device):
    assert isinstance(ours, torch.Tensor) and ours.device.type == device.type
    assert to_np(ours).dtype == np.asarray(ref).dtype
    assert tuple(ours.shape) == np.shape(ref)


def _backward(a, x, b, dtype):
    r = np.linalg.norm(b.astype(np.complex128) - a.astype(np.complex128) @ x)
    scale = np.linalg.norm(a, 2) * np.linalg.norm(x) + np.linalg.norm(b)
    assert r <= 10 * a.shape[0] * eps(dtype) * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky(dlane, dtype, lower):
    _xla_budget(dlane, dtype, (np.float32, np.float64, np.complex64))
    a = hpd(N, dtype, np.random.default_rng(1))
    ref = sl.cholesky(a, lower=lower)
    c = tl.cholesky(tensor(a, dlane), lower=lower)
    _check_kind(c, ref, dlane)
    c = to_np(c)
    if np.dtype(dtype).itemsize * (1 if np.dtype(dtype).kind == "f" else 0.5) == 8:
        assert _rel(c, ref) < 1e-10
    l_ = c if lower else c.conj().T
    err = np.linalg.norm(l_ @ l_.conj().T - a)
    assert err <= 30 * N * eps(dtype) * np.linalg.norm(a)
    assert np.all((np.triu(c, 1) if lower else np.tril(c, -1)) == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cho_factor_cho_solve(dlane, dtype):
    _xla_budget(dlane, dtype, (np.float32, np.complex64))
    rng = np.random.default_rng(2)
    a, b = hpd(N, dtype, rng), random(2, dtype, rng, m=N)
    for lower in (False, True):
        cf = tl.cho_factor(tensor(a, dlane), lower=lower)
        cf_ref = sl.cho_factor(a, lower=lower)
        # (SciPy 1.17: the flag as given; 1.18: an array)
        assert type(cf[1]) is type(cf_ref[1]) and np.shape(cf[1]) == np.shape(cf_ref[1])
        assert bool(cf[1]) is lower
        x = tl.cho_solve(cf, tensor(b, dlane))
        ref = sl.cho_solve(cf_ref, b)
        _check_kind(x, ref, dlane)
        _backward(a, to_np(x), b, dtype)
    x1 = tl.cho_solve(cf, tensor(b[:, 0], dlane))
    assert tuple(x1.shape) == (N,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh(dlane, dtype):
    _xla_budget(dlane, dtype)
    rng = np.random.default_rng(3)
    a = random(N, dtype, rng)
    a = (a + a.conj().T).astype(dtype)
    wref, vref = sl.eigh(a)
    w, v = tl.eigh(tensor(a, dlane))
    _check_kind(w, wref, dlane)
    _check_kind(v, vref, dlane)
    w, v = to_np(w), to_np(v)
    anorm = np.linalg.norm(a, 2)
    assert np.max(np.abs(w - wref)) <= 60 * N * eps(dtype) * anorm
    assert np.max(np.abs(tl.eigvalsh(tensor(a, dlane)).cpu().numpy() - wref)) <= \
        60 * N * eps(dtype) * anorm
    tol = 60 * N * eps(dtype)
    if dlane.type == "xla" and np.dtype(dtype) in (np.float64, np.complex128):
        tol = 1e-6  # measured: XLA's Jacobi eigh stops at ~1e-8 residual in float64
    assert np.linalg.norm(a @ v - v * w) <= tol * anorm
    assert np.linalg.norm(v.conj().T @ v - np.eye(N)) <= tol
    # eigenvectors equal SciPy's up to sign/phase (distinct eigenvalues)
    phase = np.sum(vref.conj() * v, axis=0)
    assert np.allclose(np.abs(phase), 1, atol=max(tol, 1e-4) * 10)


@pytest.mark.parametrize("itype", [1, 2, 3])
def test_eigh_generalized(dlane, itype):
    rng = np.random.default_rng(4)
    a = random(N, np.float64, rng)
    a = a + a.T
    b = hpd(N, np.float64, rng)
    wref, vref = sl.eigh(a, b, type=itype)
    w, v = tl.eigh(tensor(a, dlane), tensor(b, dlane), type=itype)
    w, v = to_np(w), to_np(v)
    assert _rel(w, wref) < 1e-10
    res = {1: a @ v - b @ v * w, 2: a @ b @ v - v * w, 3: b @ a @ v - v * w}[itype]
    tol = 1e-6 if dlane.type == "xla" else 1e-10
    assert np.linalg.norm(res) <= tol * np.linalg.norm(a) * np.linalg.norm(b)
    norm = v.T @ b @ v if itype in (1, 2) else v.T @ np.linalg.inv(b) @ v
    assert np.linalg.norm(norm - np.eye(N)) < tol * 100


def test_eigh_subsets_and_options(dlane):
    rng = np.random.default_rng(5)
    a = random(N, np.float64, rng)
    a = a + a.T
    t = tensor(a, dlane)
    for kw in ({"subset_by_index": [1, 3]}, {"subset_by_value": [-1.0, 2.0]},
               {"lower": False}, {"driver": "evr"}):
        ref = sl.eigh(a, eigvals_only=True, **kw)
        w = tl.eigh(t, eigvals_only=True, **kw)
        _check_kind(w, ref, dlane)
        assert np.allclose(to_np(w), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError):
        tl.eigh(t, subset_by_index=[3, 9])
    with pytest.raises(ValueError):
        tl.eigh(t, driver="bogus")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("assume_a", [None, "pos"])
def test_solve(dlane, dtype, assume_a):
    _xla_budget(dlane, dtype, (np.float32, np.float64, np.complex64))
    rng = np.random.default_rng(6)
    a = hpd(N, dtype, rng) if assume_a else random(N, dtype, rng) + N * np.eye(N, dtype=dtype)
    b = random(N, dtype, rng)[:, 0]
    ref = sl.solve(a, b, assume_a=assume_a)
    with _xla_complex(dlane, dtype if assume_a is None else np.float64, "wrong results"):
        x = tl.solve(tensor(a, dlane), tensor(b, dlane), assume_a=assume_a)
    _check_kind(x, ref, dlane)
    _backward(a, to_np(x), b, dtype)
    if np.dtype(dtype) in (np.float64, np.complex128):
        assert _rel(to_np(x), ref) < 1e-10


@pytest.mark.parametrize("assume_a", ["gen", "general", "sym", "her", "diagonal", "tridiagonal",
                                      "upper triangular", "lower triangular", "banded",
                                      "positive definite"])
def test_solve_structures(dlane, assume_a):
    rng = np.random.default_rng(7)
    a = hpd(5, np.complex128, rng) if assume_a in ("her", "positive definite") else \
        random(5, np.float64, rng) + 5 * np.eye(5)
    b = random(2, a.dtype, rng, m=5)
    for lower in (False, True):
        ref = sl.solve(a, b, assume_a=assume_a, lower=lower)
        with _xla_complex(dlane, a.dtype if assume_a == "her" else np.float64, "wrong results"):
            x = tl.solve(tensor(a, dlane), tensor(b, dlane), assume_a=assume_a, lower=lower)
        _check_kind(x, ref, dlane)
        assert _rel(to_np(x), ref) < 1e-10


def test_solve_transposed_and_batched(dlane):
    rng = np.random.default_rng(8)
    a = random(5, np.float64, rng) + 5 * np.eye(5)
    b = random(5, np.float64, rng)
    x = tl.solve(tensor(a, dlane), tensor(b, dlane), transposed=True)
    assert _rel(to_np(x), sl.solve(a, b, transposed=True)) < 1e-10
    ab = np.stack([a, a.T, a + np.eye(5)])
    x = tl.solve(tensor(ab, dlane), tensor(b, dlane))
    assert _rel(to_np(x), sl.solve(ab, b)) < 1e-10
    with pytest.raises(NotImplementedError):
        tl.solve(tensor(a + 0j, dlane), tensor(b, dlane), transposed=True)
    with pytest.raises(ValueError):
        tl.solve(tensor(a, dlane), tensor(b, dlane), assume_a="nonsense")


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_solve_triangular(dlane, dtype):
    _xla_budget(dlane, dtype, (np.float32,))
    rng = np.random.default_rng(9)
    a = random(N, dtype, rng) + N * np.eye(N, dtype=dtype)
    b = random(2, dtype, rng, m=N)
    combos = [(t, lo, u) for t in (0, 1, 2, "C") for lo in (False, True) for u in (False, True)]
    if dlane.type == "xla":
        combos = [(0, False, False), (2, True, False), (1, False, True)]
    for trans, lower, unit in combos:
        ref = sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
        x = tl.solve_triangular(tensor(a, dlane), tensor(b, dlane), trans=trans,
                                lower=lower, unit_diagonal=unit)
        _check_kind(x, ref, dlane)
        assert _rel(to_np(x), ref) < 100 * N * eps(dtype)


def _xla_host(dlane, dtype=None):
    """The host fallback the capability table announces for ops that do not lower."""
    if dlane.type == "xla":
        return pytest.warns(DeviceFallbackWarning, match="no xla implementation")
    return contextlib.nullcontext()


def _xla_complex(dlane, dtype, match):
    """Complex cases that a torch-xla op cannot run: announced host work."""
    if dlane.type == "xla" and np.dtype(dtype).kind == "c":
        return pytest.warns(DeviceFallbackWarning, match=match)
    return contextlib.nullcontext()


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_factor_lu_solve(dlane, dtype):
    if dlane.type == "xla":
        pytest.skip("the XLA LU: tests/linalg/test_xla_dense.py")
    rng = np.random.default_rng(10)
    a, b = random(N, dtype, rng), random(N, dtype, rng)[:, :2]
    lu_ref, piv_ref = sl.lu_factor(a)
    lu, piv = tl.lu_factor(tensor(a, dlane))
    _check_kind(lu, lu_ref, dlane)
    _check_kind(piv, piv_ref, dlane)
    assert np.array_equal(to_np(piv), piv_ref)
    assert _rel(to_np(lu), lu_ref) < 100 * N * eps(dtype)
    for trans in (0, 1, 2):
        x = tl.lu_solve((lu, piv), tensor(b, dlane), trans=trans)
        _check_kind(x, sl.lu_solve((lu_ref, piv_ref), b, trans=trans), dlane)
        op = {0: a, 1: a.T, 2: a.conj().T}[trans]
        _backward(op, to_np(x), b, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_lu(dlane, dtype):
    if dlane.type == "xla":
        pytest.skip("the XLA LU: tests/linalg/test_xla_dense.py")
    rng = np.random.default_rng(11)
    for shape in ((N, N), (N, 4), (4, N)):
        a = random(shape[1], dtype, rng, m=shape[0])
        t = tensor(a, dlane)
        for kw in ({}, {"permute_l": True}, {"p_indices": True}):
            ref = sl.lu(a, **kw)
            out = tl.lu(t, **kw)
            assert len(out) == len(ref)
            for o, r in zip(out, ref, strict=True):
                _check_kind(o, r, dlane)
                assert _rel(to_np(o), r) < 100 * N * eps(dtype) or np.array_equal(to_np(o), r)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("shape", [(N, 4), (4, N)])
def test_qr(dlane, dtype, shape):
    if dlane.type == "xla":
        pytest.skip("the XLA QR: tests/linalg/test_xla_dense.py")
    rng = np.random.default_rng(12)
    a = random(shape[1], dtype, rng, m=shape[0])
    t = tensor(a, dlane)
    tol = 60 * N * eps(dtype)
    for mode in ("full", "economic"):
        qref, rref = sl.qr(a, mode=mode)
        with _xla_host(dlane, dtype):
            q, r = tl.qr(t, mode=mode)
        _check_kind(q, qref, dlane)
        _check_kind(r, rref, dlane)
        q, r = to_np(q), to_np(r)
        assert np.linalg.norm(q @ r - a) <= tol * np.linalg.norm(a)
        assert np.linalg.norm(q.conj().T @ q - np.eye(q.shape[1])) <= tol
        assert np.all(np.tril(r, -1) == 0)
    with _xla_host(dlane, dtype):
        (r,) = tl.qr(t, mode="r")
    assert np.allclose(np.abs(to_np(r)), np.abs(sl.qr(a, mode="r")[0]), atol=tol * 10)
    (h_ref, tau_ref), r_ref = sl.qr(a, mode="raw")
    with _xla_host(dlane, dtype):
        (h, tau), r = tl.qr(t, mode="raw")
    for o, ref in ((h, h_ref), (tau, tau_ref), (r, r_ref)):
        _check_kind(o, ref, dlane)
        assert np.allclose(to_np(o), ref, atol=tol * 10)


@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
def test_qr_pivoting(dlane, mode):
    """Column-pivoted Householder QR on the device (real): geqp3's pivots and factors."""
    if dlane.type == "xla" and mode != "economic":
        pytest.skip("XLA compile budget: one mode there")
    rng = np.random.default_rng(13)
    a = random(4, np.float64, rng, m=6)
    ref = sl.qr(a, pivoting=True, mode=mode)
    with aten_fallbacks(dlane) as host:
        out = tl.qr(tensor(a, dlane), pivoting=True, mode=mode)
    assert not host
    flat = [y for z in out for y in (z if isinstance(z, tuple) else (z,))]
    flat_ref = [y for z in ref for y in (z if isinstance(z, tuple) else (z,))]
    for o, r in zip(flat, flat_ref, strict=True):
        _check_kind(o, r, dlane)
        assert np.allclose(to_np(o), r, atol=1e-12)
    if dlane.type != "cpu" or generic_kernels(dlane):
        with pytest.warns(DeviceFallbackWarning, match="pivoting"):  # complex: host
            tl.qr(tensor(a + 1j * a, dlane), pivoting=True, mode=mode)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd(dlane, dtype):
    _xla_budget(dlane, dtype, (np.float32, np.complex64))
    rng = np.random.default_rng(14)
    a = random(4, dtype, rng, m=6)
    t = tensor(a, dlane)
    def warn():
        return _xla_complex(dlane, dtype, "complex SVD")

    tol = 60 * 6 * eps(dtype)
    if dlane.type == "xla" and np.dtype(dtype) == np.float64:
        tol = 1e-6  # measured: XLA's float64 SVD reconstructs to ~1e-7
    for full in (False,) if dlane.type == "xla" else (True, False):
        uref, sref, vhref = sl.svd(a, full_matrices=full)
        with warn():
            u, s, vh = tl.svd(t, full_matrices=full)
        for o, r in ((u, uref), (s, sref), (vh, vhref)):
            _check_kind(o, r, dlane)
        u, s, vh = to_np(u), to_np(s), to_np(vh)
        assert np.max(np.abs(s - sref)) <= 60 * 6 * eps(dtype) * sref[0]
        k = len(s)
        assert np.linalg.norm((u[:, :k] * s) @ vh[:k] - a) <= tol * np.linalg.norm(a)
        assert np.linalg.norm(u.conj().T @ u - np.eye(u.shape[1])) <= tol
    if dlane.type == "xla" and np.dtype(dtype).kind == "f":
        return  # another ~10 s XLA compile: svdvals' lowering is covered by norm(ord=2)
    with warn():
        s = tl.svdvals(t)
    _check_kind(s, sl.svdvals(a), dlane)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inv_det(dlane, dtype):
    _xla_budget(dlane, dtype, (np.float32, np.complex64))
    rng = np.random.default_rng(15)
    a = random(N, dtype, rng) + N * np.eye(N, dtype=dtype)
    t = tensor(a, dlane)
    with _xla_complex(dlane, dtype, "wrong results"):
        ainv, ref = tl.inv(t), sl.inv(a)
    _check_kind(ainv, ref, dlane)
    assert np.linalg.norm(to_np(ainv) @ a - np.eye(N)) <= 100 * N * eps(dtype) * \
        np.linalg.cond(a)
    d, dref = tl.det(t), sl.det(a)  # (complex too on XLA: its own LU, not torch-xla's)
    assert isinstance(d, torch.Tensor) and d.ndim == 0
    assert to_np(d).dtype == np.asarray(dref).dtype
    assert abs(to_np(d) - dref) <= 100 * N * eps(dtype) * abs(dref)
    batch = np.stack([a, 2 * a])
    d = tl.det(tensor(batch, dlane))
    assert np.allclose(to_np(d), sl.det(batch), rtol=100 * N * eps(dtype))
    with _xla_complex(dlane, dtype, "wrong results"):
        ainv = tl.inv(tensor(batch, dlane))
    assert _rel(to_np(ainv), sl.inv(batch)) < 1e3 * N * eps(dtype)


def test_batched_cholesky_eigh_cho_solve(dlane):
    rng = np.random.default_rng(16)
    a = np.stack([hpd(5, np.float64, rng) for _ in range(3)])
    b = rng.standard_normal((3, 5, 2))
    t = tensor(a, dlane)
    c = tl.cholesky(t)
    ref = sl.cholesky(a)
    _check_kind(c, ref, dlane)
    assert _rel(to_np(c), ref) < 1e-10
    x = tl.cho_solve((c, False), tensor(b, dlane))
    assert _rel(to_np(x), np.linalg.solve(a, b)) < 1e-10
    w = tl.eigvalsh(t)
    assert tuple(w.shape) == (3, 5)
    assert _rel(to_np(w), np.stack([sl.eigvalsh(m) for m in a])) < 1e-10
    bad = a.copy()
    bad[1] = -np.eye(5)
    with pytest.raises(np.linalg.LinAlgError):
        tl.cholesky(tensor(bad, dlane))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_eigh_float64_at_lapack_accuracy(dlane, dtype):
    """float64 eigenpairs at LAPACK's level on every lane: residual and orthogonality
    within 10 n eps, eigenvalues within 10 n eps ||A|| of SciPy's, a near-double eigenvalue
    included (XLA's Jacobi eigh alone leaves residuals near 1e-10 ||A||), no host op."""
    n = 24
    rng = np.random.default_rng(5)
    a = random(n, dtype, rng)
    a = a + a.conj().T
    a[:2, :2] = np.diag([3.0, 3.0 + 1e-13])
    a[:2, 2:] = 0
    a[2:, :2] = 0
    with aten_fallbacks(dlane) as host:
        w, v = tl.eigh(tensor(a, dlane))
        w, v = to_np(w), to_np(v)
    assert not host
    norm = np.linalg.norm(a, 2)
    assert np.all(np.diff(w) >= 0)
    assert np.linalg.norm(a @ v - v * w) <= 10 * n * eps(dtype) * norm
    assert np.linalg.norm(v.conj().T @ v - np.eye(n)) <= 10 * n * eps(dtype)
    np.testing.assert_allclose(w, sl.eigh(a, eigvals_only=True), rtol=0,
                               atol=10 * n * eps(dtype) * norm)
