"""eigs (nonsymmetric) against SciPy by paired execution.

CPU tensors run SciPy's ARPACK on views; the torch implementation (restarted Arnoldi in
Krylov-Schur form, XLA's and CUDA's) is also checked on CPU tensors through
``torch_impl``.  Eigenvalues are compared as sets (the device returns the most wanted
first; a complex pair split at the k-th place may come with either member), eigenvectors
by residuals ||A x - w M x|| / ||A||.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl
from tests.linalg.test_xla_dense import _on_device

torch = pytest.importorskip("torch")


def _nonsymmetric(n, seed=0):
    """Sparse, real, with real eigenvalues and complex pairs (a convection-diffusion-like
    operator plus random couplings)."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=4 / n, random_state=rng, format="csr")
    return (A + sp.diags_array(np.linspace(1, 5, n))).tocsr()


def _dev(x, device):
    if sp.issparse(x):
        return trnscipy.to_device(x, device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _key(w):
    return np.lexsort((np.abs(w.imag), w.real))


def _check(A, w, X, w_ref, M=None, tol=1e-8):
    w = trnscipy.to_host(w)
    assert w.dtype == w_ref.dtype and w.shape == w_ref.shape
    got, want = w[_key(w)], w_ref[_key(w_ref)]
    scale = max(np.abs(w_ref).max(), 1.0)
    # a pair split at the boundary: either member
    assert np.abs(got.real - want.real).max() <= tol * scale, (got, want)
    assert np.abs(np.abs(got.imag) - np.abs(want.imag)).max() <= tol * scale, (got, want)
    if X is None:
        return
    X = trnscipy.to_host(X)
    Ad = A.toarray() if sp.issparse(A) else A
    MX = X if M is None else M @ X
    res = np.linalg.norm(Ad @ X - MX * w, axis=0) / np.linalg.norm(Ad, 2)
    assert res.max() <= tol, res


def _impl(lane, route):
    if route == "torch":
        if lane != "cpu":
            pytest.skip("off the CPU the routed call is the torch loop")
        return tsl.eigs._trnscipy_device_impl.torch_impl
    return tsl.eigs


@pytest.mark.parametrize("route", ["kernel", "torch"])
def test_eigs_which(lane, device, route):
    eigs = _impl(lane, route)
    A = _nonsymmetric(60)
    v0 = np.ones(60)
    for which in ("LM", "SM", "LR", "SR", "LI", "SI"):
        ref = spla.eigs(A, 4, which=which, v0=v0, ncv=16)
        w, X = eigs(_dev(A, device), 4, which=which, v0=_dev(v0, device), ncv=16)
        assert w.device.type == device.type
        if which == "SI":  # real eigenvalues tie at |imag| = 0: any of them
            assert np.all(np.abs(trnscipy.to_host(w).imag) <= 1e-8)
            _check(A, w, X, w[np.argsort(trnscipy.to_host(w).real)].cpu().numpy()
                   if hasattr(w, "cpu") else w)
            continue
        _check(A, w, X, ref[0])
    w = eigs(_dev(A, device), 3, which="LR", return_eigenvectors=False)
    _check(A, w, None, spla.eigs(A, 3, which="LR", return_eigenvectors=False))


@pytest.mark.parametrize("route", ["kernel", "torch"])
def test_eigs_shift_invert_and_generalized(lane, device, route):
    if lane == "xla":
        pytest.skip("XLA: test_eigs_xla_device (compile budget)")
    eigs = _impl(lane, route)
    A = _nonsymmetric(40, seed=1)
    Md = np.diag(np.random.default_rng(2).uniform(1, 2, 40))
    v0 = np.ones(40)
    ref = spla.eigs(A, 3, sigma=2.0, v0=v0)
    w, X = eigs(_dev(A, device), 3, sigma=2.0, v0=_dev(v0, device))
    _check(A, w, X, ref[0])
    ref = spla.eigs(A, 3, M=Md, which="LR", v0=v0)
    w, X = eigs(_dev(A, device), 3, M=_dev(Md, device), which="LR", v0=_dev(v0, device))
    _check(A, w, X, ref[0], M=Md)


@pytest.mark.parametrize("route", ["kernel", "torch"])
def test_eigs_complex(lane, device, route):
    eigs = _impl(lane, route)
    rng = np.random.default_rng(6)
    A = rng.standard_normal((50, 50)) + 1j * rng.standard_normal((50, 50))
    v0 = np.ones(50, dtype=complex)
    for which in ("LM", "SR", "LI"):
        ref = spla.eigs(A, 3, which=which, v0=v0)
        w, X = eigs(_dev(A, device), 3, which=which, v0=_dev(v0, device))
        _check(A, w, X, ref[0], tol=1e-10)


def test_eigs_no_convergence_and_errors(lane, device):
    if lane == "xla":
        pytest.skip("XLA: test_eigs_xla_device (compile budget)")
    eigs = _impl(lane, "torch" if lane == "cpu" else "kernel")
    A = _nonsymmetric(60, seed=3)
    with pytest.raises(spla.ArpackNoConvergence) as err:
        eigs(_dev(A, device), 5, which="SM", maxiter=1, ncv=7, v0=_dev(np.ones(60), device))
    assert len(err.value.eigenvalues) < 5
    Ad = _dev(A, device)
    for kwargs, match in ((dict(k=0), "must be greater than 0"),
                          (dict(k=3, which="LA"), "which must be one of"),
                          (dict(k=3, ncv=4), "ncv must be k\\+1<ncv<=n"),
                          (dict(k=3, maxiter=0), "maxiter must be positive"),
                          (dict(k=3, OPinv=Ad), "OPinv should not be specified"),
                          (dict(k=3, sigma=1.0, OPpart="x"), "OPpart must be one of")):
        with pytest.raises(ValueError, match=match):
            eigs(Ad, **kwargs)
        with pytest.raises(ValueError, match=match):
            spla.eigs(A, **kwargs) if "OPinv" not in kwargs else spla.eigs(A, k=3, OPinv=A)
    # k >= n - 1: SciPy's dense eig with its warning; sparse input refused as SciPy
    small = np.random.default_rng(4).standard_normal((6, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w = eigs(_dev(small, device), 5, return_eigenvectors=False)
    assert np.allclose(np.sort_complex(trnscipy.to_host(w)), np.sort_complex(
        np.linalg.eigvals(small)))
    with pytest.raises(TypeError, match="Cannot use scipy.linalg.eig for sparse A"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            eigs(_dev(sp.csr_array(small), device), 5)


@pytest.mark.slow
def test_eigs_xla_device(xla_device):
    """eigs on XLA: Ritz pairs as SciPy's, no aten fallback (its graphs compile for minutes
    on this loaded 2-core machine: run with -m slow)."""
    A = _nonsymmetric(60, seed=5)
    v0 = np.ones(60)
    ref = spla.eigs(A, 2, which="LM", v0=v0, ncv=8)
    with _on_device(xla_device):
        w, X = tsl.eigs(_dev(A, xla_device), 2, which="LM", v0=_dev(v0, xla_device), ncv=8)
    _check(A, w, X, ref[0])


@pytest.mark.xla
def test_eigs_xla_graph_counts(xla_device, monkeypatch):
    """eigs on XLA under TRNSCIPY_STRICT=1: SciPy's Ritz pairs, no aten fallback, no
    compilation on a repeat, one graph execution per restart cycle (the restart's rotation
    and the Arnoldi steps in a device loop: session 6 had about 20, the small eigenproblem's
    device stages) and one read of H per cycle (the small eigenproblem on the host)."""
    from tests.sparse.linalg.test_eigen import _aten_fallbacks
    from trnscipy._metrics import xla_counts
    from trnscipy.sparse.linalg._eigen.arpack import _krylov_schur

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    cycles = []
    real = _krylov_schur.krylov_schur
    monkeypatch.setattr(_krylov_schur, "krylov_schur",
                        lambda *a, **k: (lambda out: (cycles.append(out[3]), out)[1])(
                            real(*a, **k)))
    A = _nonsymmetric(40, seed=1).tolil()
    A[3, 3], A[7, 7] = 30.0, 20.0  # two outlying eigenvalues: a few restart cycles
    A = A.tocsr()
    v0 = np.ones(40)
    ref = spla.eigs(A, 2, which="LM", v0=v0, ncv=8)
    Ad, v0d = _dev(A, xla_device), _dev(v0, xla_device)
    fallbacks = _aten_fallbacks()
    with xla_counts() as first:
        w, X = tsl.eigs(Ad, 2, which="LM", v0=v0d, ncv=8)
    _check(A, w, X, ref[0])
    with xla_counts() as again:
        w, X = tsl.eigs(Ad, 2, which="LM", v0=v0d, ncv=8)
    _check(A, w, X, ref[0])
    assert _aten_fallbacks() == fallbacks
    print(f"eigs n=40 k=2 ncv=8: {cycles[0]} cycles, first {first}, repeat {again}")
    assert cycles[0] == cycles[1] >= 2, cycles
    assert again.compilations == 0, again
    assert first.compilations <= 3, first
    assert first.executions <= cycles[0] + 3, (first, cycles)
    assert again.executions <= cycles[1] + 3, (again, cycles)
    assert again.transfers_from_device <= cycles[1] + 1, (again, cycles)
