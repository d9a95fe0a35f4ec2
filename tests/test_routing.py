"""The routing rule: host data goes to SciPy untouched; device data stays on its device."""

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

import trnscipy
import trnscipy.linalg
import trnscipy.sparse
import trnscipy.sparse.linalg

torch = pytest.importorskip("torch")


def _poisson(n):
    return scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")


def test_host_inputs_give_scipy_results_bit_identical():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    spd = a @ a.T + 6 * np.eye(6)
    b = rng.standard_normal(6)
    for ours, theirs in [(trnscipy.linalg.cholesky, scipy.linalg.cholesky),
                         (trnscipy.linalg.expm, scipy.linalg.expm)]:
        r1, r2 = ours(spd), theirs(spd)
        assert type(r1) is type(r2)
        np.testing.assert_array_equal(r1, r2)
    x1, i1 = trnscipy.sparse.linalg.cg(_poisson(30), np.ones(30), rtol=1e-8)
    x2, i2 = scipy.sparse.linalg.cg(_poisson(30), np.ones(30), rtol=1e-8)
    assert i1 == i2 and type(x1) is np.ndarray
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(trnscipy.linalg.solve(spd, b), scipy.linalg.solve(spd, b))


def test_host_containers_are_scipy_objects():
    A = trnscipy.sparse.eye(4, format="csr")
    assert type(A) is type(scipy.sparse.eye(4, format="csr"))


def test_two_devices_raise_value_error_naming_both(xla_device):
    from trnscipy._dispatch import find_device

    with pytest.raises(ValueError, match="cpu.*xla|xla.*cpu"):
        find_device((torch.ones(2), torch.ones(2, device=xla_device)))


def test_host_operand_moves_to_device_operand():
    from trnscipy._dispatch import _move, find_device

    args = (torch.ones(3, dtype=torch.float64), np.arange(3.0))
    device = find_device(args)
    moved = [_move(a, device) for a in args]
    assert all(isinstance(m, torch.Tensor) and m.device == device for m in moved)


_ROT = np.array([[0.6, -0.8], [0.8, 0.6]])  # (orthogonal: cossin's input)


def test_host_only_function_warns_and_returns_to_device():
    t = torch.tensor(_ROT, dtype=torch.float64)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="has no device implementation"):
        r = trnscipy.linalg.cossin(t, p=1, q=1)
    assert all(isinstance(x, torch.Tensor) for x in r)
    for x, ref in zip(r, scipy.linalg.cossin(_ROT, p=1, q=1), strict=True):
        np.testing.assert_allclose(x.numpy(), ref)


def test_strict_mode_turns_fallback_into_error(monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    t = torch.tensor(_ROT, dtype=torch.float64)
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="cossin"):
        trnscipy.linalg.cossin(t, p=1, q=1)


def test_offload_host_only_function_warns_and_returns_numpy():
    with trnscipy.offload("cpu"):
        with pytest.warns(trnscipy.DeviceFallbackWarning):
            r = trnscipy.linalg.cossin(_ROT, p=1, q=1)
    assert all(type(x) is np.ndarray for x in r)
    for x, ref in zip(r, scipy.linalg.cossin(_ROT, p=1, q=1), strict=True):
        np.testing.assert_array_equal(x, ref)


def test_fallback_nested_in_an_offloaded_call_returns_device_data():
    """An offloaded implementation calling a routed function with device data that falls
    back to SciPy gets device data back (it was NumPy: polar's svd on xla-neuron,
    'numpy.ndarray' object has no attribute 'to')."""
    from trnscipy._dispatch import dispatch

    def inner_scipy(x):
        return x * 2

    inner = dispatch(inner_scipy, name="test.inner")(None)  # no device implementation
    seen = []

    def outer_scipy(x):
        return x + 1

    @dispatch(outer_scipy, name="test.outer", composite=True)
    def outer(x):
        y = inner(x)
        seen.append(type(y))
        return y + 1

    a = np.arange(3.0)
    with trnscipy.offload("cpu"), pytest.warns(trnscipy.DeviceFallbackWarning, match="inner"):
        got = outer(a)
    assert seen == [torch.Tensor] and type(got) is np.ndarray
    np.testing.assert_array_equal(got, a * 2 + 1)


def test_offload_rejects_unknown_device():
    with pytest.raises(ValueError, match="valid devices"):
        with trnscipy.offload("tpu"):
            pass
