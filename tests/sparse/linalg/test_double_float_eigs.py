"""eigs of real input on an emulated Neuron device (issue 27): float32 by the device
Krylov-Schur iteration, float64 by Krylov-Schur in double-float started from the float32
solve's wanted Ritz vectors; complex results assembled from their parts by data movement.
Paired against SciPy under TRNSCIPY_STRICT=1 with no float64 or complex op and no aten
fallback on the device.  The order of the results is most wanted first (SciPy's is
ARPACK's): compared as sorted multisets."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

torch = pytest.importorskip("torch")


def _convection_diffusion(m, c=(10.0, 4.0)):
    """2-D convection-diffusion (central differences, convection c[0] along x, c[1] along
    y: simple, real eigenvalues, nonsymmetric)."""
    h = 1.0 / (m + 1)
    T = [sp.diags_array([-1 - ci * h / 2, 2.0, -1 + ci * h / 2], offsets=[-1, 0, 1],
                        shape=(m, m)) for ci in c]
    return ((sp.kron(sp.eye_array(m), T[0]) + sp.kron(T[1], sp.eye_array(m))) / h**2).tocsr()


def _random(n, seed=0):
    """A random nonsymmetric sparse matrix (about 5 entries a row and a diagonal): complex
    pairs among its extreme eigenvalues."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=5.0 / n, rng=rng, data_sampler=rng.standard_normal)
    return (A + sp.diags_array(rng.standard_normal(n))).tocsr()


def _recorded(fn):
    """fn() on the emulated Neuron device, strict: (its result, the float64/complex ops the
    device ran); asserts no aten fallback."""
    import warnings

    import torch_xla

    import trnscipy
    from conformance.device_ops import DeviceArithmetic
    from tests.linalg._fallbacks import aten_fallbacks

    with warnings.catch_warnings():
        warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
        with aten_fallbacks(torch_xla.device()) as host, DeviceArithmetic(
                "xla", [torch.float64, torch.complex64, torch.complex128]) as rec:
            out = fn()
    assert host == {}
    return out, rec.ops


def _sorted(w):
    """``w`` sorted; a lone member of a complex pair (the k wanted split the pair: the
    members tie, and which one ARPACK keeps is its own detail) as its member of positive
    imaginary part."""
    w = np.array(w)
    for i, z in enumerate(w):
        if z.imag != 0 and not np.any(np.abs(w - np.conj(z)) <= 1e-6 * abs(z)):
            w[i] = np.conj(z) if z.imag < 0 else z
    return w[np.lexsort((np.round(w.imag, 8), np.round(w.real, 8)))]


def _case(A, which, monkeypatch, k=6, dtype=np.float64, vectors=True):
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = A.astype(dtype)

    def run():
        with trnscipy.offload("xla"):
            return tsl.eigs(A, k=k, which=which, return_eigenvectors=vectors)

    out, ops = _recorded(run)
    assert ops == []
    w, V = out if vectors else (out, None)
    ref = spl.eigs(A.astype(np.float64), k=k, which=which, return_eigenvectors=False)
    complex_ = np.complex128 if dtype == np.float64 else np.complex64
    assert isinstance(w, np.ndarray) and w.dtype == complex_
    anorm = spl.norm(A.astype(np.float64))
    if dtype == np.float64:
        err = np.abs(_sorted(w) - _sorted(ref)) / np.abs(ref).max()
        assert err.max() <= 1e-10, err
    else:  # float32: within float32's backward error of SciPy's float64 values
        assert np.abs(_sorted(w) - _sorted(ref)).max() <= 1e-4 * anorm
    if vectors:
        assert V.dtype == complex_
        res = np.linalg.norm(A @ V - V * w, axis=0) / anorm
        assert res.max() <= (1e-13 if dtype == np.float64 else 1e-5), res
        np.testing.assert_allclose(np.linalg.norm(V, axis=0), 1,
                                   rtol=1e-12 if dtype == np.float64 else 1e-5)
    return w


# float64: about 15 s of compiles each on 2 cores, so slow (the float32 stage, the
# double-float Arnoldi loop, the Ritz vectors' products)
@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("which", ["LM", "LR"])
def test_eigs_float64_convection_diffusion_small(which, emulate_neuron, monkeypatch):
    """A 12 x 12 grid's convection-diffusion matrix: SciPy's eigenvalues within 1e-10,
    residuals at float64 level."""
    _case(_convection_diffusion(12), which, monkeypatch, k=4)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("which", ["LM", "LR"])
def test_eigs_float64_complex_pairs(which, emulate_neuron, monkeypatch):
    """A random nonsymmetric matrix: complex pairs among the wanted eigenvalues (LM splits
    one pair: SciPy returns one member, so does this)."""
    w = _case(_random(300), which, monkeypatch)
    assert np.count_nonzero(w.imag) >= 2


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("which,problem", [("LM", "cd"), ("LR", "cd"), ("LM", "random")])
def test_eigs_float64_1600(which, problem, emulate_neuron, monkeypatch):
    """n = 1600: a 40 x 40 grid's convection-diffusion matrix (clustered eigenvalues near
    the top: 13369.74 and 13369.94) and a random matrix."""
    _case(_convection_diffusion(40) if problem == "cd" else _random(1600), which,
          monkeypatch)


@pytest.mark.xla
@pytest.mark.slow
def test_eigs_float64_values_only_device_operator(emulate_neuron, monkeypatch):
    """return_eigenvectors=False, and A as aslinearoperator of a device matrix."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = _random(200, seed=3)
    w = _case(A, "LR", monkeypatch, vectors=False)
    assert w.shape == (6,)
    op = tsl.aslinearoperator(trnscipy.to_device(A, "xla"))
    (wd, Vd), ops = _recorded(lambda: tsl.eigs(op, k=6, which="LR"))
    assert ops == []
    wd, Vd = trnscipy.to_host(wd), trnscipy.to_host(Vd)
    np.testing.assert_allclose(_sorted(wd), _sorted(w), rtol=1e-10)
    res = np.linalg.norm(A @ Vd - Vd * wd, axis=0) / spl.norm(A)
    assert res.max() <= 1e-13


@pytest.mark.xla
def test_eigs_float32(emulate_neuron, monkeypatch):
    """float32 eigs runs on the device (the complex results assembled from their parts):
    eigenvalues and residuals within float32's backward error; shift-invert on the host,
    announced."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy import DeviceFallbackWarning

    _case(_random(300), "LM", monkeypatch, dtype=np.float32)
    A = _convection_diffusion(6).astype(np.float32)
    monkeypatch.delenv("TRNSCIPY_STRICT")
    with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match="sigma"):
        w = tsl.eigs(A, k=3, sigma=100.0, return_eigenvectors=False)
    ref = spl.eigs(A, k=3, sigma=100.0, return_eigenvectors=False)
    np.testing.assert_allclose(_sorted(w), _sorted(ref), rtol=1e-5)


@pytest.mark.xla
@pytest.mark.parametrize("what", ["sigma", "M", "operator"])
def test_eigs_float64_host_cases(what, emulate_neuron, monkeypatch):
    """float64 shift-invert, generalized problems and operators given by functions run
    SciPy on the host, announced (an error under TRNSCIPY_STRICT=1)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy import DeviceFallbackWarning

    A = _convection_diffusion(6)
    kw = {"sigma": {"sigma": 1.0}, "M": {"M": sp.eye_array(36, format="csr")},
          "operator": {}}[what]
    op = spl.aslinearoperator(A) if what == "operator" else A
    match = {"sigma": "sigma", "M": "M, Minv", "operator": "functions"}[what]
    with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match=match):
        w = tsl.eigs(op, k=3, which="LM", return_eigenvectors=False, **kw)
    ref = spl.eigs(A, k=3, which="LM", return_eigenvectors=False, **kw)
    np.testing.assert_allclose(_sorted(w), _sorted(ref), rtol=1e-12)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with trnscipy.offload("xla"), pytest.raises(trnscipy.DeviceUnsupportedError):
        tsl.eigs(op, k=3, which="LM", return_eigenvectors=False, **kw)
