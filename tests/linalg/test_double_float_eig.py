"""eigvals and eig of real input on an emulated Neuron device (issue 27): the real Schur
form's diagonal blocks in real arithmetic (double-float for float64), the complex results
assembled from their real and imaginary parts by data movement, paired against SciPy
under TRNSCIPY_STRICT=1 with no float64 or complex op and no aten fallback on the device.
The order of the eigenvalues is the Schur form's (no balancing, other shifts than
LAPACK's), not SciPy's: compared as sorted multisets."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _aten_fallbacks

torch = pytest.importorskip("torch")


def _on_neuron(monkeypatch, name, *args, **kw):
    """trnscipy.linalg.<name> offloaded to the emulated Neuron device, strict: NumPy results,
    after checking that no float64 or complex op and no aten fallback ran there."""
    import trnscipy
    import trnscipy.linalg as tl
    from conformance.device_ops import DeviceArithmetic

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
        before = _aten_fallbacks()
        with DeviceArithmetic("xla", [torch.float64, torch.complex64,
                                      torch.complex128]) as rec, trnscipy.offload("xla"):
            out = getattr(tl, name)(*args, **kw)
    assert rec.ops == [] and _aten_fallbacks() == before, (rec.ops, _aten_fallbacks() - before)
    return out


def _sorted(w):
    return w[np.lexsort((np.round(w.imag, 6), np.round(w.real, 6)))]


def _spectrum(n, seed, normal=True):
    """A real matrix V B V^-1, B with 2x2 blocks [[x, y], [-z, x]] and 1x1 entries (real
    parts 4/n apart), V orthogonal (a normal matrix, ``normal``: every eigenvalue perfectly
    conditioned) or near it (cond(V) below 2: well conditioned, and its blocks' b + c far
    from zero).  Complex pairs and real eigenvalues, well separated."""
    rng = np.random.default_rng(seed)
    xs = rng.permutation(np.linspace(-2, 2, n))
    b = np.zeros((n, n))
    i = 0
    while i < n:
        if i + 1 < n and i % 3 != 2:
            y = rng.uniform(0.3, 2)
            z = y if normal else rng.uniform(0.3, 2)
            b[i:i + 2, i:i + 2] = [[xs[i], y], [-z, xs[i]]]
            i += 2
        else:
            b[i, i] = xs[i]
            i += 1
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    if not normal:
        v = v @ (np.eye(n) + 0.2 / np.sqrt(n) * rng.standard_normal((n, n)))
    return v @ b @ np.linalg.inv(v)


@pytest.mark.xla
def test_eigvals_float32(emulate_neuron, monkeypatch):
    """float32 eigenvalues of a general matrix within float32's backward error."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((12, 12)).astype(np.float32)
    w = _on_neuron(monkeypatch, "eigvals", a)
    ref = sl.eigvals(a)
    assert w.dtype == ref.dtype == np.complex64
    assert np.count_nonzero(ref.imag) >= 2
    np.testing.assert_allclose(_sorted(w), _sorted(ref), rtol=0,
                               atol=1e-5 * np.linalg.norm(a))


@pytest.mark.xla
def test_eig_float32(emulate_neuron, monkeypatch):
    """float32 eig: SciPy's eigenvalues, A v = v w, LAPACK's normalization; a symmetric
    matrix gives real vectors, as SciPy."""
    a = _spectrum(7, 1).astype(np.float32)
    w, vl, vr = _on_neuron(monkeypatch, "eig", a, left=True)
    ref = sl.eig(a, left=True)
    assert [x.dtype for x in (w, vl, vr)] == [x.dtype for x in ref] == [np.complex64] * 3
    np.testing.assert_allclose(_sorted(w), _sorted(ref[0]), rtol=0, atol=1e-5 * 4)
    norm = np.linalg.norm(a)
    assert np.linalg.norm(a @ vr - vr * w) <= 1e-5 * norm
    assert np.linalg.norm(vl.conj().T @ a - w[:, None] * vl.conj().T) <= 1e-5 * norm
    for v in (vl, vr):
        np.testing.assert_allclose(np.linalg.norm(v, axis=0), 1, rtol=1e-5)
        big = v[np.argmax(np.abs(v), axis=0), np.arange(v.shape[1])]
        assert np.all(big.imag == 0) and np.all(big.real > 0)
    s = (a + a.T).astype(np.float32)
    w, v = _on_neuron(monkeypatch, "eig", s)
    assert v.dtype == sl.eig(s)[1].dtype == np.float32
    assert np.linalg.norm(s @ v - v * w.real) <= 1e-5 * np.linalg.norm(s)


@pytest.mark.xla
@pytest.mark.slow  # about 25 s: the float64 Schur refinement's compiles
def test_eigvals_float64(emulate_neuron, monkeypatch):
    """float64 eigenvalues of well-conditioned matrices (eigenvalue condition numbers
    below 2; a normal one, whose 2x2 blocks are scaled rotations in every orientation) to
    1e-12 relative, from the double-float Schur form."""
    for n, seed, normal in ((9, 2, False), (16, 3, False), (16, 3, True)):
        a = _spectrum(n, seed, normal=normal)
        w = _on_neuron(monkeypatch, "eigvals", a)
        ref = sl.eigvals(a)
        assert w.dtype == ref.dtype == np.complex128
        assert np.count_nonzero(ref.imag) >= 4
        np.testing.assert_allclose(_sorted(w), _sorted(ref), rtol=0,
                                   atol=1e-12 * np.abs(ref).max())


@pytest.mark.xla
@pytest.mark.slow  # about 25 s: the float64 Schur refinement's compiles
def test_eig_float64(emulate_neuron, monkeypatch):
    """float64 eigenvectors, left and right (Newton-refined in double-float): A v = v w to 1e-14,
    unit norms, the largest component real, each column SciPy's up to a unit factor (the
    eigenvalues are simple and well conditioned); real vectors for a real spectrum."""
    a = _spectrum(10, 4, normal=False)
    w, vl, v = _on_neuron(monkeypatch, "eig", a, left=True)
    w0, vl0, v0 = sl.eig(a, left=True)
    assert w.dtype == v.dtype == vl.dtype == v0.dtype == np.complex128
    norm = np.linalg.norm(a)
    assert np.linalg.norm(a @ v - v * w) <= 1e-14 * norm
    assert np.linalg.norm(vl.conj().T @ a - w[:, None] * vl.conj().T) <= 1e-14 * norm
    for x in (v, vl):
        np.testing.assert_allclose(np.linalg.norm(x, axis=0), 1, rtol=3e-14)
        assert np.all(x[np.argmax(np.abs(x), axis=0), np.arange(10)].imag == 0)
    for j in range(10):
        k = np.argmin(np.abs(w0 - w[j]))
        assert abs(w[j] - w0[k]) <= 1e-12 * np.abs(w0).max()
        assert abs(abs(np.vdot(v0[:, k], v[:, j])) - 1) <= 1e-12
        assert abs(abs(np.vdot(vl0[:, k], vl[:, j])) - 1) <= 1e-12
    s = a + a.T
    w, v = _on_neuron(monkeypatch, "eig", s)
    assert v.dtype == sl.eig(s)[1].dtype == np.float64
    assert np.linalg.norm(s @ v - v * w.real) <= 1e-14 * np.linalg.norm(s)


@pytest.mark.xla
def test_rsf2csf_float32(emulate_neuron, monkeypatch):
    """float32 rsf2csf: SciPy's complex Schur form to float32 rounding."""
    rng = np.random.default_rng(6)
    t, z = sl.schur(rng.standard_normal((8, 8)).astype(np.float32))
    assert np.count_nonzero(np.diagonal(t, -1)) >= 1
    tc, zc = _on_neuron(monkeypatch, "rsf2csf", t, z)
    ref = sl.rsf2csf(t, z)
    assert tc.dtype == zc.dtype == ref[0].dtype == np.complex64
    for x, r in zip((tc, zc), ref, strict=True):
        np.testing.assert_allclose(x, r, rtol=0, atol=1e-5 * np.abs(r).max())
