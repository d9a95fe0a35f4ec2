"""Complex results of real data on an emulated Neuron device assembled by data movement:
float32 ``schur(output='complex')`` and ``cdf2rdf``, paired against SciPy under
TRNSCIPY_STRICT=1 with no float64 or complex op and no aten fallback on the device."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_eig import _on_neuron, _sorted, _spectrum

torch = pytest.importorskip("torch")


@pytest.mark.xla
def test_schur_complex_float32(emulate_neuron, monkeypatch):
    """float32 complex Schur form of a real matrix: A = Z T Z^H, T upper triangular, Z
    unitary, within float32's backward error; its diagonal is SciPy's spectrum."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((9, 9)).astype(np.float32)
    t, z = _on_neuron(monkeypatch, "schur", a, output="complex")
    ref = sl.schur(a, output="complex")
    assert t.dtype == z.dtype == ref[0].dtype == np.complex64
    assert np.count_nonzero(np.diagonal(ref[0]).imag) >= 2
    norm = np.linalg.norm(a)
    assert np.all(np.tril(t, -1) == 0)
    assert np.linalg.norm(z @ t @ z.conj().T - a) <= 1e-5 * norm
    assert np.linalg.norm(z.conj().T @ z - np.eye(9)) <= 1e-5 * 9
    w, w0 = _sorted(np.diagonal(t)), _sorted(np.diagonal(ref[0]))
    np.testing.assert_allclose(w, w0, rtol=0, atol=1e-5 * norm)


def _pairs(n, seed, dtype):
    """SciPy's eig of a real matrix with complex pairs and real eigenvalues (a batch of two
    when ``n`` is a tuple)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(dtype)
    w, v = np.linalg.eig(a)
    assert np.count_nonzero(w.imag) >= 2
    return w, v


@pytest.mark.xla
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cdf2rdf(emulate_neuron, monkeypatch, dtype):
    """cdf2rdf of complex eigenpairs, single and stacked: SciPy's dtypes (vr float64 from
    float32 input too) and values, bit for bit (exact sums of the parts, rounded once, as
    SciPy's complex128 ones); real input passes through."""
    for shape in ((7, 7), (2, 6, 6)):
        w, v = _pairs(shape, 8, dtype)
        wr, vr = _on_neuron(monkeypatch, "cdf2rdf", w, v)
        ref = sl.cdf2rdf(w, v)
        assert (wr.dtype, vr.dtype) == (ref[0].dtype, ref[1].dtype)
        np.testing.assert_array_equal(wr, ref[0])
        np.testing.assert_array_equal(vr, ref[1])
    wr, vr = _on_neuron(monkeypatch, "cdf2rdf", w.real[0], v.real[0])
    ref = sl.cdf2rdf(w.real[0], v.real[0])
    assert (wr.dtype, vr.dtype) == (ref[0].dtype, ref[1].dtype)
    np.testing.assert_array_equal(wr, ref[0])
    np.testing.assert_array_equal(vr, ref[1])


@pytest.mark.xla
@pytest.mark.parametrize("mixed", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_rsf2csf_float64(emulate_neuron, monkeypatch, mixed):
    """float64 rsf2csf: SciPy's complex Schur form to double-float rounding (its rotations
    in double-float); float32 Z with float64 T: SciPy's complex128 (slow: a second compile)."""
    rng = np.random.default_rng(9)
    t, z = sl.schur(rng.standard_normal((9, 9)))
    assert np.count_nonzero(np.diagonal(t, -1)) >= 2
    for tz in [(t, z.astype(np.float32) if mixed else z)]:
        tc, zc = _on_neuron(monkeypatch, "rsf2csf", *tz)
        ref = sl.rsf2csf(*tz)
        assert tc.dtype == zc.dtype == ref[0].dtype == np.complex128
        for x, r in zip((tc, zc), ref, strict=True):
            np.testing.assert_allclose(x, r, rtol=0, atol=3e-14 * np.abs(r).max())


@pytest.mark.xla
@pytest.mark.slow  # about 15 s of XLA compiles (the float64 Schur refinement's graph)
def test_schur_complex_float64(emulate_neuron, monkeypatch):
    """float64 complex Schur form of a real matrix (the refined real form's blocks rotated
    in double-float): A = Z T Z^H and Z^H Z = I to 1e-14, T upper triangular, its
    diagonal SciPy's spectrum to 1e-12 (well-conditioned eigenvalues)."""
    a = _spectrum(10, 4, normal=False)
    t, z = _on_neuron(monkeypatch, "schur", a, output="complex")
    ref = sl.schur(a, output="complex")
    assert t.dtype == z.dtype == ref[0].dtype == np.complex128
    assert np.all(np.tril(t, -1) == 0)
    assert np.linalg.norm(z @ t @ z.conj().T - a) <= 1e-14 * np.linalg.norm(a)
    assert np.linalg.norm(z.conj().T @ z - np.eye(10)) <= 1e-14 * 10
    np.testing.assert_allclose(_sorted(np.diagonal(t)), _sorted(np.diagonal(ref[0])),
                               rtol=0, atol=1e-12 * np.abs(np.diagonal(ref[0])).max())
