"""sqrtm, signm, logm and fractional_matrix_power on an emulated Neuron device (issue 27):
real arithmetic only (trnscipy/linalg/_refine_matfuncs.py), paired against SciPy under
TRNSCIPY_STRICT=1 with no float64 op and no aten fallback on the device; where SciPy's
result is complex, SciPy on the host, announced."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _on_neuron
from tests.linalg.test_double_float_sylvester import _close

torch = pytest.importorskip("torch")

EPS32 = np.finfo(np.float32).eps


def _run(monkeypatch, name, *args, **kw):
    """trnscipy.linalg.<name> offloaded to the emulated Neuron device, strict: (result,
    XLA counts), no float64 op, no aten fallback and no host fallback there."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    out, ops, aten, counts = _on_neuron(lambda: _plain(name, *args, **kw))
    assert ops == [] and aten == 0, (name, ops, aten)
    return out, counts


def _plain(name, *args, **kw):
    import trnscipy
    import trnscipy.linalg as tl

    with trnscipy.offload("xla"):
        return getattr(tl, name)(*args, **kw)


def _positive(n, rng, spread=4.0):
    """A non-symmetric n x n matrix with real positive eigenvalues 1 .. spread and a
    well-conditioned eigenbasis."""
    s = np.eye(n) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    return s @ np.diag(np.linspace(1.0, spread, n)) @ np.linalg.inv(s)


def _spd(n, rng):
    q = rng.standard_normal((n, n))
    return q @ q.T / n + np.eye(n)


def _rotation(n, rng):
    """Complex eigenvalue pairs with positive real parts (2x2 blocks in the Schur form)."""
    d = sl.block_diag(*[np.array([[1.0 + k, 0.5 + k], [-0.5 - k, 1.0 + k]])
                        for k in range(n // 2)])
    s = np.eye(n) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    return s @ d @ np.linalg.inv(s)


@pytest.mark.xla
def test_sqrtm_float32_and_negative_eigenvalue_on_host(emulate_neuron, monkeypatch):
    """float32: the Denman-Beavers root on the device (strict), SciPy's dtype, float32
    backward error.  A negative eigenvalue (SciPy's root is complex): SciPy on the host,
    announced; strict mode raises."""
    import trnscipy

    rng = np.random.default_rng(0)
    a = _positive(4, rng).astype(np.float32)
    x, _ = _run(monkeypatch, "sqrtm", a)
    assert x.dtype == sl.sqrtm(a).dtype == np.float32
    x64, a64 = x.astype(np.float64), a.astype(np.float64)
    assert np.linalg.norm(x64 @ x64 - a64) <= 20 * EPS32 * np.linalg.norm(a64)
    neg = np.diag([-1.0, 2.0, 3.0, 4.0]).astype(np.float32)
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="negative real axis"):
        _plain("sqrtm", neg)
    monkeypatch.delenv("TRNSCIPY_STRICT")
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="negative real axis"):
        got = _plain("sqrtm", neg)
    want = sl.sqrtm(neg)
    assert got.dtype == want.dtype and np.iscomplexobj(got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.xla
@pytest.mark.slow  # about 30 s of XLA compiles (two orders)
def test_sqrtm_float64(emulate_neuron, monkeypatch):
    rng = np.random.default_rng(1)
    for n in (12, 40):
        for a in (_spd(n, rng), _positive(n, rng), _rotation(n, rng)):
            x, _ = _run(monkeypatch, "sqrtm", a)
            _close(x, sl.sqrtm(a))
            assert np.linalg.norm(x @ x - a) <= 1e-14 * np.linalg.norm(a)
    # scaled far from 1; SciPy's disp=False tuple; a stack; a repeat compiles nothing
    a = _positive(12, rng)
    for scale in (1e-20, 1e30):  # (1e-30: low parts below float32's normal range)
        _close(_run(monkeypatch, "sqrtm", a * scale)[0], sl.sqrtm(a * scale))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        (x, err), _ = _run(monkeypatch, "sqrtm", a, disp=False)
        want = sl.sqrtm(a, disp=False)
    _close(x, want[0])
    assert 0 <= err <= 1e-24
    stack = np.stack([a, _spd(12, rng)])
    _close(_run(monkeypatch, "sqrtm", stack)[0], sl.sqrtm(stack))
    _, counts = _run(monkeypatch, "sqrtm", _rotation(12, rng))
    assert counts.compilations == 0, counts


@pytest.mark.xla
@pytest.mark.slow  # about 20 s of XLA compiles
def test_signm_float64(emulate_neuron, monkeypatch):
    """sign(A) = sqrtm(A^2)^-1 A for eigenvalues on both sides of the imaginary axis;
    float32 (SciPy's dtype follows its funm estimate) and an eigenvalue on the axis: the
    host, announced."""
    import trnscipy

    rng = np.random.default_rng(2)
    n = 16
    s = np.eye(n) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    a = s @ np.diag(np.linspace(1.0, 3.0, n) * np.where(np.arange(n) % 2, 1, -1)) \
        @ np.linalg.inv(s)
    for m in (a, _rotation(n, rng) - 2.5 * np.eye(n)):
        x, _ = _run(monkeypatch, "signm", m)
        _close(x, sl.signm(m))
        assert np.linalg.norm(x @ x - np.eye(n)) <= 1e-13 * np.sqrt(n)
    for m in (a.astype(np.float32), np.diag([1.0, 0.0, -1.0])):
        with pytest.raises(trnscipy.DeviceUnsupportedError):
            _plain("signm", m)


@pytest.mark.xla
@pytest.mark.slow  # about 40 s of XLA compiles
def test_logm_float64(emulate_neuron, monkeypatch):
    """float64: SciPy's logm to 1e-12 and expm(logm(A)) = A to 1e-13 (or SciPy's own
    residual); float32 input with a real
    spectrum: SciPy's float64 result to float32 accuracy (SciPy computes in float32);
    complex eigenvalues in float32 (SciPy: complex128) and a negative eigenvalue: host."""
    import trnscipy

    rng = np.random.default_rng(3)
    n = 16
    for a in (_spd(n, rng), _positive(n, rng, 50.0), _rotation(n, rng)):
        f, _ = _run(monkeypatch, "logm", a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (SciPy: "may be inaccurate")
            want = sl.logm(a)
        _close(f, want)
        # expm(logm(A)) = A as closely as SciPy's own (both near 1e-13 for the spread one)
        resid = [np.linalg.norm(sl.expm(x) - a) / np.linalg.norm(a) for x in (f, want)]
        assert resid[0] <= max(1e-13, 3 * resid[1]), resid
    a32 = _positive(n, rng).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (SciPy: "may be inaccurate")
        want = sl.logm(a32)
    f, _ = _run(monkeypatch, "logm", a32)
    assert f.dtype == want.dtype == np.float64
    _close(f, want, rtol=100 * EPS32)
    for m in (_rotation(4, rng).astype(np.float32), np.diag([-1.0, 2.0, 3.0])):
        with pytest.raises(trnscipy.DeviceUnsupportedError):
            _plain("logm", m)


@pytest.mark.xla
@pytest.mark.slow  # about 40 s of XLA compiles
def test_fractional_matrix_power_float64(emulate_neuron, monkeypatch):
    """Integer powers by double-float products (and the inverse), non-integer ones as
    expm(t logm(A)) for a real positive spectrum; complex eigenvalues (SciPy's result is
    complex): the host."""
    import trnscipy

    rng = np.random.default_rng(4)
    n = 16
    a = _positive(n, rng)
    for t in (3, -2, 0.5, -0.5, 1.7):
        x, _ = _run(monkeypatch, "fractional_matrix_power", a, t)
        _close(x, sl.fractional_matrix_power(a, t))
    b = _spd(n, rng) * 1e3
    _close(_run(monkeypatch, "fractional_matrix_power", b, 0.25)[0],
           sl.fractional_matrix_power(b, 0.25))
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="complex"):
        _plain("fractional_matrix_power", _rotation(n, rng), 0.5)
