"""splu, spilu and factorized on device data, paired with SciPy on the same data.

The CPU kind runs SuperLU on the data in place (no warning); on XLA the
factorization and every solve run on the host with a DeviceFallbackWarning.
"""

import contextlib
import re

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl
from trnscipy import DeviceFallbackWarning, DeviceUnsupportedError

torch = pytest.importorskip("torch")

N = 6


def _matrix(dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = np.diag(np.full(N, 4.0)) + np.diag(-np.ones(N - 1), 1) + np.diag(-np.ones(N - 2), -2)
    a[0, N - 1] = rng.standard_normal()
    if np.dtype(dtype).kind == "c":
        a = a + 1j * np.triu(rng.standard_normal((N, N)), 3)
    return sp.csc_array(a.astype(dtype))


def _rhs(dtype, shape=(N,)):
    b = np.linspace(1.0, 2.0, int(np.prod(shape))).reshape(shape)
    if np.dtype(dtype).kind == "c":
        b = b - 0.5j * b[::-1]
    return b.astype(dtype)


def _host_work(lane):
    """What a call on the lane must say: nothing on the CPU, a fallback warning elsewhere."""
    if lane == "cpu":
        return contextlib.nullcontext()
    return pytest.warns(DeviceFallbackWarning, match="runs on the host")


def _backward_ok(a, x, b, trans):
    """||b - op(A) x|| <= 10 n eps (||A|| ||x|| + ||b||) in x's precision."""
    a = a.toarray().astype(np.complex128)
    op = {"N": a, "T": a.T, "H": a.conj().T}[trans]
    eps = np.finfo(x.dtype).eps
    res = np.linalg.norm(b - op @ x)
    return res <= 10 * N * eps * (np.linalg.norm(a) * np.linalg.norm(x) + np.linalg.norm(b))


def _check_solution(ours, ref, a, b, trans, device):
    assert isinstance(ours, torch.Tensor) and ours.device == device
    x = trnscipy.to_host(ours)
    assert x.dtype == ref.dtype and x.shape == ref.shape
    assert _backward_ok(a, x, b, trans)
    rtol = 1e-12 if np.finfo(ref.dtype).bits == 64 else 1e-5
    np.testing.assert_allclose(x, ref, rtol=rtol, atol=rtol * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("factor", ["splu", "spilu"])
def test_factor_and_solve_match_scipy(factor, dtype, lane, device):
    a = _matrix(dtype)
    kwargs = {"drop_tol": 1e-12} if factor == "spilu" else {"permc_spec": "COLAMD"}
    ref = getattr(spla, factor)(a, **kwargs)
    da = trnscipy.to_device(a, device)
    with _host_work(lane):
        lu = getattr(tsl, factor)(da, **kwargs)
    assert lu.shape == ref.shape and lu.nnz == ref.nnz and lu.device == device
    for name in ("perm_r", "perm_c"):
        perm = getattr(lu, name)
        assert type(perm) is torch.Tensor and perm.device == device
        np.testing.assert_array_equal(trnscipy.to_host(perm), getattr(ref, name))
    for name in ("L", "U"):
        ours, theirs = getattr(lu, name), getattr(ref, name)
        assert ours.format == "csc" and ours.device == device and ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours.toarray().cpu() if lane == "cpu"
                                   else trnscipy.to_host(ours).toarray(), theirs.toarray())
    for shape in ((N,), (N, 2)):
        b = _rhs(dtype, shape)
        for trans in ("N", "T", "H"):
            with _host_work(lane):
                x = lu.solve(trnscipy.to_device(b, device), trans=trans)
            _check_solution(x, ref.solve(b, trans=trans), a, b, trans, device)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_factorized_matches_scipy(dtype, lane, device):
    a = _matrix(dtype)
    b = _rhs(dtype)
    with _host_work(lane), pytest.warns(sp.SparseEfficiencyWarning):  # as SciPy's
        solve = tsl.factorized(trnscipy.to_device(a.tocsr(), device))
    with _host_work(lane):
        x = solve(trnscipy.to_device(b, device))
    with pytest.warns(sp.SparseEfficiencyWarning):  # SciPy converts CSR to CSC too
        ref = spla.factorized(a.tocsr())(b)
    _check_solution(x, ref, a, b, "N", device)


def test_dense_tensor_and_host_rhs_on_cpu():
    """A dense tensor is factorized as SciPy factorizes a dense array (with its
    efficiency warning); a NumPy right-hand side is moved to the factors' device."""
    a = _matrix(np.float64).toarray()
    with pytest.warns(sp.SparseEfficiencyWarning):
        lu = tsl.splu(torch.from_numpy(a))
    b = _rhs(np.float64)
    x = lu.solve(b)
    assert isinstance(x, torch.Tensor)
    with pytest.warns(sp.SparseEfficiencyWarning):
        ref = spla.splu(a).solve(b)
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-13)


def _scipy_error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.type, re.escape(str(info.value))


def test_bad_input_raises_scipy_errors(lane, device):
    singular = sp.csc_array(np.array([[1.0, 2.0], [2.0, 4.0]]))
    for factor in ("splu", "spilu"):
        exc, msg = _scipy_error(lambda f=factor: getattr(spla, f)(singular))
        with pytest.raises(exc, match=msg), _host_work(lane):
            getattr(tsl, factor)(trnscipy.to_device(singular, device))
    exc, msg = _scipy_error(lambda: spla.splu(sp.csc_array(np.ones((2, 3)))))
    with pytest.raises(exc, match=msg), _host_work(lane):
        tsl.splu(trnscipy.to_device(sp.csc_array(np.ones((2, 3))), device))

    a = _matrix(np.float64)
    ref = spla.splu(a)
    with _host_work(lane):
        lu = tsl.splu(trnscipy.to_device(a, device))
    bad = {
        "wrong length": (np.ones(N + 1), "N"),
        "3-D": (np.ones((N, 2, 1)), "N"),
        "complex rhs of a real factor": (np.ones(N, dtype=np.complex128), "N"),
        "bad trans": (np.ones(N), "X"),
    }
    for rhs, trans in bad.values():
        exc, msg = _scipy_error(lambda r=rhs, t=trans: ref.solve(r, trans=t))
        with pytest.raises(exc, match=msg), _host_work(lane):
            lu.solve(trnscipy.to_device(rhs, device), trans=trans)
    for rhs in ([1.0] * N, 2.0):  # not an array: SciPy's TypeError
        exc, msg = _scipy_error(lambda r=rhs: ref.solve(r))
        with pytest.raises(exc, match=msg):
            lu.solve(rhs)


def test_host_data_is_scipy_untouched():
    a = _matrix(np.float64)
    assert isinstance(tsl.splu(a), spla.SuperLU)
    assert isinstance(tsl.spilu(a), spla.SuperLU)
    np.testing.assert_array_equal(tsl.factorized(a)(_rhs(np.float64)),
                                  spla.factorized(a)(_rhs(np.float64)))


def test_offload_returns_scipy_objects():
    a, b = _matrix(np.float64), _rhs(np.float64)
    with trnscipy.offload("cpu"):
        lu = tsl.splu(a)
        solve = tsl.factorized(a)
    assert isinstance(lu, spla.SuperLU)
    x = solve(b)
    assert type(x) is np.ndarray
    np.testing.assert_allclose(x, spla.splu(a).solve(b), rtol=1e-13)


@pytest.mark.xla
def test_xla_other_device_and_strict_mode(xla_device, monkeypatch):
    a = _matrix(np.float64)
    with pytest.warns(DeviceFallbackWarning, match="splu runs on the host"):
        lu = tsl.splu(trnscipy.to_device(a, xla_device))
    with pytest.raises(ValueError, match="two devices"):
        lu.solve(torch.ones(N, dtype=torch.float64))
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(DeviceUnsupportedError):
        lu.solve(trnscipy.to_device(_rhs(np.float64), xla_device))
    with pytest.raises(DeviceUnsupportedError):
        tsl.splu(trnscipy.to_device(a, xla_device))


@pytest.mark.xla
def test_neuron_float64_factorized_solves_device_tensors(xla_device, emulate_neuron):
    """Under Neuron's limits the float64 factorization and solves run on the host
    (warned), and factorized still returns a solve that takes and returns device tensors
    (factorized's own dispatch does not fall back to SciPy's host-only function)."""
    a, b = _matrix(np.float64), _rhs(np.float64)
    with pytest.warns(DeviceFallbackWarning, match="float64|no neuron"):
        solve = tsl.factorized(trnscipy.to_device(a, xla_device))
    with pytest.warns(DeviceFallbackWarning):
        x = solve(trnscipy.to_device(b, xla_device))
    _check_solution(x, spla.factorized(a)(b), a, b, "N", xla_device)
