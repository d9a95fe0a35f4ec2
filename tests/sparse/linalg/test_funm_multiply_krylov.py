"""funm_multiply_krylov on device data against SciPy by paired execution, on the cpu
(SciPy's loop on views and the torch loop) and xla lanes."""

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")


def _laplacian(m):
    """The graph Laplacian of an m x m grid."""
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    return sp.csr_array(sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m)))


def _random(dtype):
    A = sp.csr_array(sp.random(40, 40, density=0.1, random_state=0)
                     - sp.random(40, 40, density=0.05, random_state=1))
    if np.dtype(dtype).kind == "c":
        A = A + 0.5j * sp.csr_array(sp.random(40, 40, density=0.05, random_state=2))
    return A.astype(dtype)


def _phi1(X):
    """X^-1 (e^X - I), SciPy's example."""
    return sl.solve(X, sl.expm(X) - np.eye(X.shape[0]))


def _close(got, ref, device, dtype=np.float64):
    """SciPy's dtype and shape on the device; computed in float32 (``dtype``): to 1e-5 of
    |ref|, in float64 to 1e-12."""
    assert got.device.type == device.type
    got = trnscipy.to_host(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    tol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_funm_multiply_krylov_as_scipy(lane, device, dtype, cpu_loop):
    """exp of a graph Laplacian (Lanczos and Arnoldi; restarts forced by a short cycle)
    and of a nonsymmetric random matrix, phi_1 and a polynomial: SciPy's result."""
    L = (-_laplacian(6)).astype(dtype)
    R = _random(dtype)
    cases = [(sl.expm, L, {}), (sl.expm, L, {"assume_a": "her", "restart_every_m": 5}),
             (sl.expm, L, {"restart_every_m": 5, "t": 0.5}),
             (sl.expm, R, {"restart_every_m": 7, "assume_a": "gen"}),
             (_phi1, R, {"t": 0.1}), (lambda X: X @ X @ X - X, R, {"rtol": 1e-10})]
    # the whole 6-dimensional space in the first cycle: the restart continues from a
    # rounding-noise vector (SciPy's residual there is of order eps, above its breakdown
    # threshold eps**2; classical Gram-Schmidt twice fell below it)
    small = sp.csr_array(np.random.default_rng(0).standard_normal((6, 6))).astype(dtype)
    cases.append((sl.expm, small, {}))
    if lane != "cpu":
        cases = cases[1:4] + cases[-1:]
    for f, A, kw in cases:
        b = np.linspace(-1, 1, A.shape[0]).astype(dtype)
        ref = spla.funm_multiply_krylov(f, A, b, **kw)
        got = tsl.funm_multiply_krylov(f, trnscipy.to_device(A, device),
                                       torch.from_numpy(b).to(device), **kw)
        _close(got, ref, device, dtype)


def test_funm_multiply_krylov_operands_and_dtypes(lane, device, cpu_loop):
    """A dense tensor and a LinearOperator as A; float32 operands with an f returning
    float64 (SciPy's result is float64); a zero b comes back as a copy in b's dtype."""
    A = -_laplacian(4).toarray()
    b = np.linspace(-1, 1, 16)
    At, bt = torch.from_numpy(A).to(device), torch.from_numpy(b).to(device)
    ref = spla.funm_multiply_krylov(sl.expm, A, b, restart_every_m=6)
    _close(tsl.funm_multiply_krylov(sl.expm, At, bt, restart_every_m=6), ref, device)
    _close(tsl.funm_multiply_krylov(sl.expm, tsl.aslinearoperator(At), bt, restart_every_m=6),
           ref, device)

    def f64(X):
        return sl.expm(X).astype(np.float64)

    A32, b32 = A.astype(np.float32), b.astype(np.float32)
    ref = spla.funm_multiply_krylov(f64, A32, b32)
    assert ref.dtype == np.float64
    _close(tsl.funm_multiply_krylov(f64, torch.from_numpy(A32).to(device),
                                    torch.from_numpy(b32).to(device)), ref, device,
           np.float32)
    zero = np.zeros(16, dtype=np.int64)
    ref = spla.funm_multiply_krylov(sl.expm, A, zero)
    got = tsl.funm_multiply_krylov(sl.expm, At, torch.from_numpy(zero).to(device))
    assert ref.dtype == np.int64 and got.dtype == torch.int64
    np.testing.assert_array_equal(trnscipy.to_host(got), ref)


def test_funm_multiply_krylov_bad_input_as_scipy(lane, device, cpu_loop):
    A = -_laplacian(3)
    b = np.ones(9)
    At, bt = trnscipy.to_device(A, device), torch.from_numpy(b).to(device)
    e1 = np.zeros(9)
    e1[0] = 1.0
    D = sp.diags_array(np.arange(1.0, 10.0))
    cases = [((A, b), {"assume_a": "sym"}), ((A, np.ones((9, 1))), {}),
             ((A, b), {"restart_every_m": 0}), ((A, b), {"max_restarts": 0}),
             ((A, b), {"atol": -1.0}), ((A, np.arange(9)), {}),
             ((D, e1), {})]  # an eigenvector: breakdown at step 0, SciPy's IndexError
    if lane == "cpu":  # an exact breakdown in a restart: SciPy's ValueError (its shapes do
        # not align); on XLA the residual rounds to a nonzero above eps**2: no breakdown
        cases.append(((sp.diags_array(np.arange(1.0, 6.0)), np.array([1.0, 1.0, 0.0, 0.0, 0.0])),
                      {"restart_every_m": 2, "assume_a": "her"}))
    for (Ah, bh), kw in cases:
        with pytest.raises(Exception) as ref:
            spla.funm_multiply_krylov(sl.expm, Ah, bh, **kw)
        Ad = At if Ah is A else trnscipy.to_device(Ah, device)
        bd = bt if bh is b else torch.from_numpy(bh).to(device)
        with pytest.raises(type(ref.value)) as ours:
            tsl.funm_multiply_krylov(sl.expm, Ad, bd, **kw)
        assert str(ours.value) == str(ref.value)


@pytest.mark.xla
def test_xla_strict_graph_laplacian(xla_device, monkeypatch):
    """exp(-tL) b on a 20 x 20 grid under TRNSCIPY_STRICT=1 on XLA, Lanczos and Arnoldi
    with restarts: SciPy's result, no DeviceFallbackWarning, no aten CPU fallback, one
    host read per restart, a repeat call compiles nothing."""
    import warnings

    from trnscipy._metrics import xla_counts

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    L = _laplacian(20)
    b = np.zeros(400)
    b[210] = 1.0
    At, bt = trnscipy.to_device(-L, xla_device), torch.from_numpy(b).to(xla_device)

    for kw in ({"assume_a": "her", "restart_every_m": 10}, {"restart_every_m": 10, "t": 2.0}):
        ref = spla.funm_multiply_krylov(sl.expm, -L, b, **kw)
        with warnings.catch_warnings(), aten_fallbacks(xla_device) as fallbacks:
            warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
            with xla_counts() as first:
                got = tsl.funm_multiply_krylov(sl.expm, At, bt, **kw)
            with xla_counts() as second:
                again = tsl.funm_multiply_krylov(sl.expm, At, bt, **kw)
        print(f"\nfunm_multiply_krylov 400-node grid {kw}: first {first}; repeat {second}")
        assert not fallbacks
        _close(got, ref, xla_device)
        _close(again, ref, xla_device)
        assert second.compilations == 0
