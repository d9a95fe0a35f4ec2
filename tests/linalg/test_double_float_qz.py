"""float64 qz on an emulated Neuron device (issue 27): the float32 device QZ refined by
double-float Newton steps (trnscipy/linalg/_refine_qz.py), paired against SciPy under
TRNSCIPY_STRICT=1 with no float64 op and no aten fallback on the device.  The form is
unique up to the order of the eigenvalues and signs (T's diagonal positive: one sign per
column of Q and Z together): where the device QZ deflates in SciPy's order, S, T, Q, Z
are SciPy's to 1e-12 after the signs; always by residuals, structure and eigenvalues."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _on_neuron
from tests.linalg.test_qz import _match, _spectrum

torch = pytest.importorskip("torch")


def _qz_plain(a, b, **kw):
    import trnscipy
    import trnscipy.linalg as tl

    with trnscipy.offload("xla"):
        return tl.qz(a, b, **kw)


def _qz(monkeypatch, a, b, **kw):
    """trnscipy.linalg.qz offloaded to the emulated Neuron device, strict: (S, T, Q, Z),
    XLA counts; no float64 op, no aten fallback and no host fallback there."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    out, ops, aten, counts = _on_neuron(lambda: _qz_plain(a, b, **kw))
    assert ops == [] and aten == 0, (ops, aten)
    return out, counts


def _check(a, b, s, t, q, z, same_order):
    """Backward errors and orthogonality near 1e-15, dlagv2's block form; SciPy's S, T,
    Q, Z to 1e-12 after the signs where ``same_order``, else its eigenvalues."""
    n = a.shape[0]
    assert all(x.dtype == np.float64 for x in (s, t, q, z))
    assert np.linalg.norm(a - q @ s @ z.T) <= 1e-14 * np.linalg.norm(a)
    assert np.linalg.norm(b - q @ t @ z.T) <= 1e-14 * np.linalg.norm(b)
    for u in (q, z):
        assert np.linalg.norm(u.T @ u - np.eye(n)) <= 1e-14
    assert np.all(np.tril(s, -2) == 0) and np.all(np.tril(t, -1) == 0)
    sub = np.diagonal(s, -1)
    assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))
    assert np.all(t[np.flatnonzero(sub), np.flatnonzero(sub) + 1] == 0)
    assert np.all(np.diagonal(t) > 0)
    S, T, Q, Z = sl.qz(a, b)
    assert np.count_nonzero(sub) == np.count_nonzero(np.diagonal(S, -1))
    if same_order:
        d = np.sign(np.sum(q * Q, 0))  # (one sign per column pair)
        for x, y in ((d[:, None] * s * d, S), (d[:, None] * t * d, T), (q * d, Q), (z * d, Z)):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-12 * np.abs(y).max())
    w, w0 = _spectrum(s, t), _spectrum(S, T)
    assert _match(w, w0) <= 1e-12 * max(1.0, np.abs(w0).max()), (w, w0)


def _check_complex(a, b, s, t, q, z):
    """Backward errors and unitarity near 1e-14, zgges's structure (both triangular, T's
    diagonal real and positive), SciPy's eigenvalues to 1e-12."""
    n = a.shape[0]
    assert all(x.dtype == np.complex128 for x in (s, t, q, z))
    assert np.linalg.norm(a - q @ s @ z.conj().T) <= 5e-14 * np.linalg.norm(a)
    assert np.linalg.norm(b - q @ t @ z.conj().T) <= 5e-14 * np.linalg.norm(b)
    for u in (q, z):
        assert np.linalg.norm(u.conj().T @ u - np.eye(n)) <= 5e-14
    assert np.all(np.tril(s, -1) == 0) and np.all(np.tril(t, -1) == 0)
    assert np.all(np.diagonal(t).imag == 0) and np.all(np.diagonal(t).real > 0)
    S, T, _, _ = sl.qz(a, b, output="complex")
    w0 = np.diagonal(S) / np.diagonal(T)
    assert _match(np.diagonal(s) / np.diagonal(t), w0) <= 1e-12 * max(1.0, np.abs(w0).max())


@pytest.mark.xla
@pytest.mark.slow  # 15-30 s of XLA compiles (the float32 QZ and the Newton step's graph)
def test_qz_float64(emulate_neuron, monkeypatch):
    """Order 4 (complex pairs and real eigenvalues; the device QZ deflates in LAPACK's
    order for seeds 0 and 1, in another for 7), scaled far from 1; a repeat of the order
    compiles nothing."""
    for seed, same in ((0, True), (1, True), (7, False)):
        rng = np.random.default_rng(seed)
        a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
        (s, t, q, z), _ = _qz(monkeypatch, a, b)
        _check(a, b, s, t, q, z, same)
    a, b = a * 1e20, b * 1e-20
    (s, t, q, z), counts = _qz(monkeypatch, a, b)
    _check(a, b, s, t, q, z, False)
    assert counts.compilations == 0, counts
    # a stack: each matrix refined alone (PerMatrix), as its single call
    rng = np.random.default_rng(1)
    ab = rng.standard_normal((2, 2, 4, 4))
    got, _ = _qz(monkeypatch, ab[0], ab[1])
    for k in range(2):
        want, _ = _qz(monkeypatch, ab[0, k], ab[1, k])
        for x, y in zip(got, want, strict=True):
            np.testing.assert_array_equal(x[k], y)


@pytest.mark.xla
@pytest.mark.slow  # 40-60 s of XLA compiles (the real form's, then the complex one's)
def test_qz_float64_complex(emulate_neuron, monkeypatch):
    """output='complex': the refined real form's 2x2 blocks made triangular in
    double-float (each block's unitary pair), T's diagonal made real."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    assert np.count_nonzero(np.diagonal(sl.qz(a, b)[0], -1)) == 2  # (two complex pairs)
    (s, t, q, z), _ = _qz(monkeypatch, a, b, output="complex")
    _check_complex(a, b, s, t, q, z)


@pytest.mark.xla
@pytest.mark.slow  # about 15 s of XLA compiles (as test_qz_float64's)
def test_qz_float64_on_host(emulate_neuron, monkeypatch):
    """A singular pencil (infinite eigenvalues), B = I (T's 2x2 blocks multiples of I:
    their rotation undetermined), a defective eigenvalue (a Jordan block in random bases:
    the Newton steps stall), also with complex output: SciPy on the exact values,
    announced; strict mode raises."""
    import trnscipy

    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4))
    sing = rng.standard_normal((4, 4))
    sing[:, 1] = 0
    u, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    v, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    jordan = (u @ (2 * np.eye(4) + np.eye(4, k=1)) @ v.T, u @ v.T)
    cases = [((a, sing), {}), ((a, np.eye(4)), {}), (jordan, {}),
             ((a, sing), {"output": "complex"})]
    for (x, y), kw in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", trnscipy.DeviceFallbackWarning)
            with pytest.warns(trnscipy.DeviceFallbackWarning, match="did not converge"):
                got = _qz_plain(x, y, **kw)
        for u, v in zip(got, sl.qz(x, y, **kw), strict=True):
            np.testing.assert_array_equal(u, v)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="did not converge"):
        _qz_plain(a, sing)


@pytest.mark.xla
def test_qz_float64_complex_input_on_host(emulate_neuron, monkeypatch):
    """complex128 input (no complex arithmetic on Neuron): SciPy on the exact values,
    announced (nothing compiled); strict mode raises."""
    import trnscipy

    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)) for _ in range(2))
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="complex"):
        got = _qz_plain(a, b)
    for u, v in zip(got, sl.qz(a, b), strict=True):
        np.testing.assert_array_equal(u, v)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="complex"):
        _qz_plain(a, b)


@pytest.mark.xla
@pytest.mark.slow  # the QZ, swap and refinement graphs (about 20-40 s on XLA CPU)
@pytest.mark.parametrize("output", ["real", "complex"])
def test_ordqz_float64(output, emulate_neuron, monkeypatch):
    """ordqz: the float32 form reordered on the device, then refined in double-float; the
    selected eigenvalues lead (SciPy's set to 1e-12), backward errors near 1e-15, and
    alpha / beta are the form's eigenvalues."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))

    def run():
        with trnscipy.offload("xla"):
            return tl.ordqz(a, b, sort="lhp", output=output)

    (s, t, alpha, beta, q, z), ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    ref = sl.ordqz(a, b, sort="lhp", output=output)
    for x, y in zip((s, t, alpha, beta, q, z), ref, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
    for m, mm in ((a, s), (b, t)):
        assert np.linalg.norm(m - q @ mm @ z.conj().T) <= 1e-14 * np.linalg.norm(m)
    for u in (q, z):
        assert np.linalg.norm(u.conj().T @ u - np.eye(6)) <= 1e-14
    lam, lam0 = alpha / beta, ref[2] / ref[3]
    k = int(np.sum(lam0.real < 0))
    assert np.all(lam[:k].real < 0) and np.all(lam[k:].real >= 0)
    assert _match(lam[:k], lam0[:k]) <= 1e-12 * np.abs(lam0).max()
    if output == "real":
        assert _match(lam, _spectrum(s, t)) <= 1e-12 * np.abs(lam0).max()
    else:
        np.testing.assert_allclose(alpha, np.diagonal(s), rtol=1e-14)
