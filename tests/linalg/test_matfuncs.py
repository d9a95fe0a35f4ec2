"""sqrtm, logm, funm, expm_frechet, solve_sylvester, qr_multiply, lstsq: paired with SciPy
on the cpu (SciPy on views), generic (torch kernels on CPU tensors) and xla lanes.

Their Schur forms, expm and qr come from trnscipy.linalg's schur/expm/qr: where those run
on the host for a device (announced), only that warning is allowed; the rest of the work
must run on the device (no aten CPU fallback on XLA)."""

import contextlib
import re
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, random, tensor, to_np
from tests.linalg._fallbacks import aten_fallbacks
from trnscipy import DeviceFallbackWarning

torch = pytest.importorskip("torch")

_DELEGATED = re.compile(r"scipy\.linalg\.\S*\b(schur|expm|qr) runs on the host")


@contextlib.contextmanager
def on_device(device):
    """Zero aten fallbacks; DeviceFallbackWarnings only for schur/expm/qr."""
    with warnings.catch_warnings(record=True) as caught, aten_fallbacks(device) as host:
        warnings.simplefilter("always")
        yield
    others = [str(w.message) for w in caught if issubclass(w.category, DeviceFallbackWarning)
              and not _DELEGATED.search(str(w.message))]
    assert not others and not host, (others, host)


def _lane(dlane, dtype):
    if dlane.type == "xla" and dtype != np.float32:
        pytest.skip("XLA lane: float32 only (compile budget; the generic lane runs the "
                    "same torch code in every dtype)")
    return 4 if dlane.type == "xla" else 6


def _rel(x, ref):
    return np.linalg.norm(to_np(x) - ref) / np.linalg.norm(ref)


def _tol(dtype):
    return 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 1e-4


DTYPES = [np.float64, np.float32, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
def test_sqrtm_logm_funm(dlane, dtype):
    n = _lane(dlane, dtype)
    rng = np.random.default_rng(50)
    a = random(n, dtype, rng)
    spd = (a @ a.conj().T + np.eye(n)).astype(dtype)
    neg = (-spd).astype(dtype)  # negative eigenvalues: complex square root and logarithm
    with on_device(dlane):
        for m in (a,) if dlane.type == "xla" else (spd, a, neg):  # XLA: compile budget
            for name, args in (("sqrtm", ()), ("logm", ()), ("funm", (np.exp,)),
                               ("funm", (lambda x: x * x,))):
                ref = getattr(sl, name)(m, *args)
                out = getattr(tl, name)(tensor(m, dlane), *args)
                assert out.device.type == dlane.type
                assert to_np(out).dtype == ref.dtype, (name, to_np(out).dtype, ref.dtype)
                assert _rel(out, ref) <= _tol(dtype) * 100, name


@pytest.mark.parametrize("case", ["zeros", "gh4866"])
def test_sqrtm_repeated_zero_eigenvalue(dlane, case):
    """A repeated zero eigenvalue makes the triangular recurrence 0 / 0: SciPy takes 0
    there (sqrtm(0) = 0, SciPy's gh-7839 and gh-4866), not NaN."""
    m = np.zeros((2, 2)) if case == "zeros" else \
        np.array([[1.0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)  # SciPy's "Matrix is singular"
        ref = sl.sqrtm(m)
    with on_device(dlane), warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        out = to_np(tl.sqrtm(tensor(m, dlane)))
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


def test_logm_nonnormal_triangular(dlane):
    """Al-Mohy & Higham 2012's experiment 1 (SciPy's test): ||T - I||_1 stays large under
    square roots (64 of them gave a diagonal of -1.25); SciPy's bound by ||X^p||^(1/p)
    needs few, and the diagonal and superdiagonal are computed exactly."""
    a = np.array([[3.2346e-1, 3e4, 3e4, 3e4], [0, 3.0089e-1, 3e4, 3e4],
                  [0, 0, 3.221e-1, 3e4], [0, 0, 0, 3.0744e-1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # SciPy's "may be inaccurate"
        ref = sl.logm(a)
    with on_device(dlane):
        out = to_np(tl.logm(tensor(a, dlane)))
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-10)


@pytest.mark.parametrize("case", ["exact", "nearly"])
def test_logm_singular_warns_as_scipy(dlane, case):
    """SciPy's logm of a singular matrix: a zero eigenvalue stands in as 1e-20 (not NaN),
    with LogmExactlySingularWarning; one below 1e-20 gives LogmNearlySingularWarning."""
    from scipy.linalg._matfuncs_inv_ssq import (
        LogmExactlySingularWarning,
        LogmNearlySingularWarning,
    )

    m, warning = (np.array([[1.0, 1.0], [0.0, 0.0]]), LogmExactlySingularWarning) \
        if case == "exact" else (np.array([[1e-100]]), LogmNearlySingularWarning)
    with pytest.warns(warning):
        ref = sl.logm(m)
    with on_device(dlane), pytest.warns(warning):
        out = to_np(tl.logm(tensor(m, dlane)))
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_sylvester(dlane, dtype):
    n = _lane(dlane, dtype)
    rng = np.random.default_rng(51)
    a, b = random(n, dtype, rng), random(n - 1, dtype, rng)
    q = random(n - 1, dtype, rng, m=n)
    ref = sl.solve_sylvester(a, b, q)
    with on_device(dlane):
        x = tl.solve_sylvester(tensor(a, dlane), tensor(b, dlane), tensor(q, dlane))
        xn = to_np(x)
    assert xn.dtype == ref.dtype and xn.shape == ref.shape
    resid = np.linalg.norm(a @ xn + xn @ b - q)
    scale = (np.linalg.norm(a) + np.linalg.norm(b)) * np.linalg.norm(xn) + np.linalg.norm(q)
    assert resid <= 100 * n * eps(dtype) * scale
    if dtype != np.float32:
        assert _rel(x, ref) <= 1e-10


@pytest.mark.parametrize("dtype", DTYPES)
def test_expm_frechet(dlane, dtype):
    n = _lane(dlane, dtype)
    rng = np.random.default_rng(52)
    a, e = random(n, dtype, rng) / 3, random(n, dtype, rng)
    with on_device(dlane):
        for method in (None, "blockEnlarge"):
            ea, l = tl.expm_frechet(tensor(a, dlane), tensor(e, dlane), method=method)
            eref, lref = sl.expm_frechet(a, e, method=method)
            assert to_np(l).dtype == lref.dtype and to_np(ea).dtype == eref.dtype
            assert _rel(l, lref) <= 100 * _tol(dtype) and _rel(ea, eref) <= 100 * _tol(dtype)
        only = tl.expm_frechet(tensor(a, dlane), tensor(e, dlane), compute_expm=False)
        assert _rel(only, lref) <= 100 * _tol(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("mode", ["left", "right"])
def test_qr_multiply(dlane, dtype, mode):
    if dlane.type == "xla":
        pytest.skip("qr runs on the host on XLA today (tests/linalg/test_decompositions.py)")
    rng = np.random.default_rng(53)
    for m, n in ((5, 3), (3, 5)):
        a = random(n, dtype, rng, m=m)
        k = min(m, n)
        for c in (random(2, dtype, rng, m=k) if mode == "left" else random(m, dtype, rng, m=2),
                  random(1, dtype, rng, m=k)[:, 0] if mode == "left" else
                  random(m, dtype, rng, m=1)[0]):
            for conjugate, pivoting in ((False, False), (True, True)):
                ref = sl.qr_multiply(a, c, mode=mode, conjugate=conjugate, pivoting=pivoting)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeviceFallbackWarning)  # pivoting
                    out = tl.qr_multiply(tensor(a, dlane), tensor(c, dlane), mode=mode,
                                         conjugate=conjugate, pivoting=pivoting)
                assert len(out) == len(ref)
                for o, r in zip(out, ref, strict=True):
                    assert to_np(o).dtype == r.dtype and o.shape == r.shape
                    np.testing.assert_allclose(to_np(o), r, atol=1e-12 * max(1, abs(r).max()))


def test_bad_input_as_scipy(dlane):
    sq, rect = np.eye(3), np.ones((3, 2))
    cases = [
        ("expm_frechet", (rect, rect), {}), ("expm_frechet", (sq, rect), {}),
        ("expm_frechet", (sq, np.eye(2)), {}), ("expm_frechet", (sq, sq), {"method": "x"}),
        ("expm_frechet", (sq * np.nan, sq), {}),
        ("qr_multiply", (sq, sq), {"mode": "x"}), ("qr_multiply", (sq, np.ones((2, 2))), {}),
        ("qr_multiply", (sq, np.ones((2, 2))), {"mode": "left"}),
        ("sqrtm", (rect,), {}), ("sqrtm", (np.ones(3),), {}), ("logm", (rect,), {}),
        ("funm", (rect, np.exp), {}),
        ("solve_sylvester", (rect, sq, sq), {}),
        ("solve_sylvester", (sq * np.nan, sq, sq), {}),
    ]
    for name, args, kwargs in cases:
        with pytest.raises(Exception) as expected:
            getattr(sl, name)(*args, **kwargs)
        with pytest.raises(expected.type):
            getattr(tl, name)(*(tensor(x, dlane) if isinstance(x, np.ndarray) else x
                                for x in args), **kwargs)


def test_lstsq_on_xla_runs_on_the_device(xla_device):
    """lstsq's SVD route lowers: no aten CPU fallback on XLA (float32, tall and wide)."""
    rng = np.random.default_rng(54)
    for shape in ((6, 4),):
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape[0]).astype(np.float32)
        with aten_fallbacks(xla_device) as host:
            x, res, rank, s = tl.lstsq(tensor(a, xla_device), tensor(b, xla_device))
            xref, resref, rref, sref = sl.lstsq(a, b)
            assert rank == rref
            np.testing.assert_allclose(to_np(x), xref, atol=1e-4 * np.abs(xref).max())
            np.testing.assert_allclose(to_np(res), resref, rtol=1e-3)
        assert not host
