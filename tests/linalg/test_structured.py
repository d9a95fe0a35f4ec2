"""Banded and tridiagonal solvers, pinvh, null_space, orth, polar: paired with SciPy on
the cpu (SciPy on views), generic (torch kernels on CPU tensors) and xla lanes."""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, hpd, random, tensor, to_np
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")

N = 6
DTYPES = [np.float64, np.float32, np.complex128]


def _band(a, lower, upper):
    """LAPACK band storage of dense ``a``."""
    n = a.shape[0]
    ab = np.zeros((lower + upper + 1, n), dtype=a.dtype)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            ab[upper + i - j, j] = a[i, j]
    return ab


def _banded_matrix(dtype, lower, upper, rng):
    a = random(N, dtype, rng) + 4 * np.eye(N, dtype=dtype)
    return np.triu(np.tril(a, upper), -lower).astype(dtype)


def _close(x, ref, dtype, scale=1.0):
    tol = (1e-10 if np.dtype(dtype).itemsize * (2 if np.dtype(dtype).kind != "c" else 1)
           >= 16 else 200 * N * eps(dtype)) * scale
    np.testing.assert_allclose(to_np(x), ref, rtol=tol, atol=tol * np.abs(ref).max())


def _raise_as_scipy(name, cases, dlane):
    """Each (args, kwargs) raises SciPy's exception type and message on the lane."""
    for args, kwargs in cases:
        with pytest.raises(Exception) as expected:
            getattr(sl, name)(*args, **kwargs)
        with pytest.raises(expected.type) as actual:
            getattr(tl, name)(*(tensor(x, dlane) for x in args), **kwargs)
        assert str(actual.value) == str(expected.value)


def _xla_budget(dlane, keep):
    """The XLA lane runs one representative case per function (each new graph compiles
    for seconds; the torch code is the one the generic lane runs on every case)."""
    if dlane.type == "xla" and not keep:
        pytest.skip("XLA lane: one representative case per function (compile budget)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lu", [(1, 1), (2, 1)])
def test_solve_banded(dlane, dtype, lu):
    _xla_budget(dlane, dtype == np.float32 and lu == (2, 1))
    rng = np.random.default_rng(40)
    a = _banded_matrix(dtype, *lu, rng)
    ab = _band(a, *lu)
    b = random(2, dtype, rng, m=N)
    for rhs in (b, b[:, 0].copy()):
        ref = sl.solve_banded(lu, ab, rhs)
        with aten_fallbacks(dlane) as host:
            x = tl.solve_banded(lu, tensor(ab, dlane), tensor(rhs, dlane))
            assert to_np(x).dtype == ref.dtype and x.shape == ref.shape
            _close(x, ref, dtype)
        assert not host


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_one_column_quotients(dlane, dtype):
    """solve with a 1x1 ``a`` and solve_banded with one column are b / a: complex on the
    XLA lane, where torch-xla 2.9 labels a complex quotient float32 (``_dtypes.divide``);
    solve_banded returned that label's real part before."""
    rng = np.random.default_rng(41)
    a = random(1, dtype, rng, m=1)
    b = random(3, dtype, rng, m=1)
    for rhs in (b, b[:, 0].copy()):
        for ref, x in ((sl.solve(a, rhs), tl.solve(tensor(a, dlane), tensor(rhs, dlane))),
                       (sl.solve_banded((0, 0), a, rhs),
                        tl.solve_banded((0, 0), tensor(a, dlane), tensor(rhs, dlane)))):
            assert to_np(x).dtype == ref.dtype and x.shape == ref.shape
            _close(x, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_solveh_cholesky_banded(dlane, dtype, lower):
    _xla_budget(dlane, dtype == np.float64 and lower)
    rng = np.random.default_rng(41)
    a = hpd(N, dtype, rng)
    a = np.triu(np.tril(a, 2), -2).astype(dtype) + 4 * N * np.eye(N, dtype=dtype)
    ab = _band(a, 2, 0) if lower else _band(a, 0, 2)
    b = random(2, dtype, rng, m=N)
    with aten_fallbacks(dlane) as host:
        x = tl.solveh_banded(tensor(ab, dlane), tensor(b[:, 0].copy(), dlane), lower=lower)
        _close(x, sl.solveh_banded(ab, b[:, 0], lower=lower), dtype)
        c = tl.cholesky_banded(tensor(ab, dlane), lower=lower)
        cref = sl.cholesky_banded(ab, lower=lower)
        assert to_np(c).dtype == cref.dtype
        _close(c, cref, dtype)
        x = tl.cho_solve_banded((c, lower), tensor(b, dlane))
        _close(x, sl.cho_solve_banded((cref, lower), b), dtype)
    assert not host


def test_banded_bad_input(dlane):
    ab = np.array([[0, 1, 2, 3], [5, 6, 7, 8], [1, 1, 1, 0]], dtype=float)
    cases = [
        (lambda m, t: m.solve_banded((1, 1), t(ab), t(np.ones(3)))),
        (lambda m, t: m.solve_banded((1, 2), t(ab), t(np.ones(4)))),
        (lambda m, t: m.solve_banded((1, 1), t(np.zeros((3, 4))), t(np.ones(4)))),
        (lambda m, t: m.solveh_banded(t(np.array([[0.0, 1, 1], [1, -2, 1]])),
                                      t(np.ones(3)))),
        (lambda m, t: m.cholesky_banded(t(np.array([[0.0, 1, 1], [1, -2, 1]])))),
        (lambda m, t: m.cho_solve_banded((t(ab[:2]), False), t(np.ones(3)))),
        (lambda m, t: m.solve_banded((1, 1), t(ab * np.nan), t(np.ones(4)))),
    ]
    for i, call in enumerate(cases):
        with pytest.raises(Exception) as expected:
            call(sl, np.asarray)
        with pytest.raises(expected.type) as actual:
            call(tl, lambda x: tensor(x, dlane))
        if "positive definite" in str(expected.value) and dlane.type == "xla":
            continue  # XLA's Cholesky does not say which minor failed
        assert str(actual.value) == str(expected.value), i


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eigh_tridiagonal(dlane, dtype):
    _xla_budget(dlane, dtype == np.float32)
    rng = np.random.default_rng(42)
    d = rng.standard_normal(N).astype(dtype)
    e = rng.standard_normal(N - 1).astype(dtype)
    a = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    tol = 1e-10 if dtype == np.float64 else 100 * N * eps(dtype)
    if dlane.type == "xla" and dtype == np.float64:
        tol = 1e-7  # XLA's float64 eigh vectors (docs/design.md)
    with aten_fallbacks(dlane) as host:
        for kwargs in ({"select": "v", "select_range": (-0.5, 1.0)},
                       {"select": "i", "select_range": (1, 3)},
                       {"lapack_driver": "stemr"}, {"select": "a", "lapack_driver": "stev"}):
            wref, _ = sl.eigh_tridiagonal(d, e, **kwargs)
            w, v = tl.eigh_tridiagonal(tensor(d, dlane), tensor(e, dlane), **kwargs)
            w, v = to_np(w), to_np(v)
            assert w.dtype == wref.dtype and v.shape == (N, wref.shape[0])
            np.testing.assert_allclose(w, wref, atol=tol * np.abs(a).max() * 10)
            assert np.linalg.norm(a @ v - v * w) <= tol * N * np.linalg.norm(a)
            assert np.linalg.norm(v.T @ v - np.eye(v.shape[1])) <= tol * N
            if dlane.type == "xla":
                break  # one graph is enough on XLA
        w2 = tl.eigvalsh_tridiagonal(tensor(d, dlane), tensor(e, dlane))
        np.testing.assert_allclose(to_np(w2), sl.eigvalsh_tridiagonal(d, e),
                                   atol=tol * np.abs(a).max() * 10)
    assert not host
    if dlane.type == "xla":
        return
    db, eb = np.stack([d, 2 * d]), np.stack([e, 2 * e])  # batches, as SciPy
    np.testing.assert_allclose(to_np(tl.eigvalsh_tridiagonal(tensor(db, dlane),
                                                             tensor(eb, dlane))),
                               sl.eigvalsh_tridiagonal(db, eb), atol=tol * 40)


def test_eigh_tridiagonal_bad_input(dlane):
    d, e = np.ones(4), np.ones(3)
    cases = [
        ((d, e[:2]), {}), ((d + 1j, e), {}), ((d, e), {"select": "x"}),
        ((d, e), {"select": "i", "select_range": (0, 9)}),
        ((d, e), {"select": "i", "select_range": (0.5, 2.0)}),
        ((d, e), {"lapack_driver": "x"}), ((d, e), {"lapack_driver": "sterf"}),
        ((d, e), {"lapack_driver": "stev", "select": "i", "select_range": (0, 1)}),
        ((d[:2].reshape(2, 1), e), {}),
    ]
    _raise_as_scipy("eigh_tridiagonal", cases, dlane)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_eig_banded(dlane, dtype, lower):
    """Eigenvalues as SciPy's, eigenvectors by residual and orthonormality, all selections."""
    _xla_budget(dlane, dtype == np.float32 and not lower)
    rng = np.random.default_rng(7)
    h = random(N, dtype, rng)
    a = np.triu(np.tril(h + h.conj().T, 2), -2)  # Hermitian, bandwidth 2
    ab = _band(a, 2, 0) if lower else _band(a, 0, 2)
    tol = 1e-10 if np.dtype(dtype).itemsize * (1 if np.dtype(dtype).kind == "c" else 2) >= 16 \
        else 200 * N * eps(dtype)
    scale = np.abs(a).max()
    with aten_fallbacks(dlane) as host:
        for kwargs in ({}, {"select": "v", "select_range": (-1.0, 2.0)},
                       {"select": "i", "select_range": (1, 3)}):
            wref, vref = sl.eig_banded(ab, lower=lower, **kwargs)
            w, v = (to_np(t) for t in tl.eig_banded(tensor(ab, dlane), lower=lower, **kwargs))
            assert w.dtype == wref.dtype and v.dtype == vref.dtype and v.shape == vref.shape
            np.testing.assert_allclose(w, wref, atol=tol * scale * 10)
            assert np.linalg.norm(a @ v - v * w) <= tol * N * scale
            assert np.linalg.norm(v.conj().T @ v - np.eye(v.shape[1])) <= tol * N
            w2 = tl.eigvals_banded(tensor(ab, dlane), lower=lower, **kwargs)
            np.testing.assert_allclose(to_np(w2), wref, atol=tol * scale * 10)
            if dlane.type == "xla":
                break  # one graph is enough on XLA
    assert not host


def test_eig_banded_bad_input(dlane):
    ab = np.array([[0.0, 1, 1, 1], [4, 4, 4, 4]])
    cases = [((np.ones(3),), {}), ((ab,), {"select": "x"}),
             ((ab,), {"select": "i", "select_range": (0, 9)}),
             ((ab,), {"select": "i", "select_range": (0.5, 2.0)}),
             ((ab,), {"select": "v", "select_range": (2.0, 1.0)}),
             ((np.where(ab == 4, np.nan, ab),), {"check_finite": False})]
    _raise_as_scipy("eig_banded", cases, dlane)
    with pytest.raises(ValueError, match="max_ev"):  # SciPy writes past its arrays here
        tl.eig_banded(tensor(ab, dlane), select="v", select_range=(0, 10), max_ev=1)
    w = tl.eigvals_banded(tensor(np.zeros((2, 0)), dlane))
    assert tuple(w.shape) == (0,)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_pinvh(dlane, dtype):
    _xla_budget(dlane, dtype == np.float32)
    rng = np.random.default_rng(43)
    a = random(N, dtype, rng, m=3)
    a = (a.conj().T @ a).astype(dtype)  # rank 3
    tol = 1e-7 if dlane.type == "xla" and dtype != np.float32 else 1e-10 \
        if dtype != np.float32 else 1e-3
    if dlane.type == "xla" and np.dtype(dtype).kind == "c":
        tol = 1e-6
    with aten_fallbacks(dlane) as host:
        p, rank = tl.pinvh(tensor(a, dlane), return_rank=True)
        pref, rref = sl.pinvh(a, return_rank=True)
        assert int(rank) == rref == 3 and to_np(p).dtype == pref.dtype
        np.testing.assert_allclose(to_np(p), pref, atol=tol * np.abs(pref).max())
    assert not host
    with pytest.raises(ValueError, match="must be positive"):
        tl.pinvh(tensor(a, dlane), atol=-1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_null_space_orth_polar(dlane, dtype):
    _xla_budget(dlane, dtype == np.float32)
    rng = np.random.default_rng(44)
    a = (random(3, dtype, rng, m=2) @ random(5, dtype, rng, m=3)).astype(dtype)  # rank 2
    tol = 1e-6 if dlane.type == "xla" or dtype == np.float32 else 1e-10
    sq = random(4, dtype, rng)
    with aten_fallbacks(dlane) as host:
        if dlane.type != "xla":  # one SVD graph per shape compiles ~10 s on XLA: polar only
            z = to_np(tl.null_space(tensor(a, dlane)))
            zref = sl.null_space(a)
            assert z.shape == zref.shape and z.dtype == zref.dtype
            assert np.linalg.norm(a @ z) <= tol * np.linalg.norm(a)
            np.testing.assert_allclose(z @ z.T, zref @ zref.T, atol=tol * 10)  # subspace
            q = to_np(tl.orth(tensor(a.T.copy(), dlane)))
            qref = sl.orth(a.T)
            assert q.shape == qref.shape
            np.testing.assert_allclose(q @ q.T, qref @ qref.T, atol=tol * 10)
        for side in ("right",) if dlane.type == "xla" else ("right", "left"):
            u, p = (to_np(x) for x in tl.polar(tensor(sq, dlane), side=side))
            uref, pref = sl.polar(sq, side=side)
            assert u.dtype == uref.dtype and p.dtype == pref.dtype
            np.testing.assert_allclose(u, uref, atol=tol * 10)
            np.testing.assert_allclose(p, pref, atol=tol * 10 * np.abs(pref).max())
    assert not host
    with pytest.raises(ValueError, match="side"):
        tl.polar(tensor(sq, dlane), side="up")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cdf2rdf(dlane, dtype):
    """The real block-diagonal form as SciPy's, from eig's complex pairs (and a batch)."""
    _xla_budget(dlane, dtype == np.float64)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, N, N)).astype(dtype)
    w, v = np.linalg.eig(a)  # complex conjugate pairs, consecutive
    assert np.iscomplex(w).any()
    for args in ((w[0], v[0]), (w, v)):
        wr_ref, vr_ref = sl.cdf2rdf(*args)
        with aten_fallbacks(dlane) as host:
            wr, vr = (to_np(t) for t in tl.cdf2rdf(*(tensor(x, dlane) for x in args)))
        assert not host
        assert wr.dtype == wr_ref.dtype and vr.dtype == vr_ref.dtype
        np.testing.assert_allclose(wr, wr_ref, rtol=1e-6, atol=0)
        np.testing.assert_allclose(vr, vr_ref, rtol=1e-6, atol=1e-7)
    _raise_as_scipy("cdf2rdf", [((w[0][:-1], v[0]), {}), ((w[0], v[0][:, :-1]), {}),
                                ((w[0][:1] + 1j, v[0][:1, :1]), {})], dlane)
