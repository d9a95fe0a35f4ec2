"""to_device / to_host for dense data, device names and the default device."""

import numpy as np
import pytest

import trnscipy

torch = pytest.importorskip("torch")

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float32", "float64",
          "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_ndarray_round_trip_exact(lane, dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((5, 3)) * 100).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * a[::-1]
    t = trnscipy.to_device(a, lane)
    assert isinstance(t, torch.Tensor) and t.device.type == lane
    back = trnscipy.to_host(t)
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)


def test_noncontiguous_and_readonly_arrays(lane):
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    ro = np.arange(4.0)
    ro.flags.writeable = False
    np.testing.assert_array_equal(trnscipy.to_host(trnscipy.to_device(a, lane)), a)
    np.testing.assert_array_equal(trnscipy.to_host(trnscipy.to_device(ro, lane)), ro)


def test_zero_dim_tensor_to_numpy_scalar():
    r = trnscipy.to_host(torch.tensor(2.5, dtype=torch.float64))
    assert type(r) is np.float64 and r == 2.5


def test_unknown_device_lists_valid_ones():
    with pytest.raises(ValueError, match="valid devices: cpu, cuda"):
        trnscipy.to_device(np.ones(2), "tpu")
    with pytest.raises(ValueError, match="valid devices"):
        trnscipy.resolve_device("cpu:x")


def test_unmovable_objects_raise_type_error():
    with pytest.raises(TypeError):
        trnscipy.to_device(object(), "cpu")
    with pytest.raises(TypeError):
        trnscipy.to_device(np.array(["a", "b"]), "cpu")
    with pytest.raises(TypeError):
        trnscipy.to_host(object())


def test_default_device_from_env(monkeypatch):
    monkeypatch.setenv("TRNSCIPY_DEVICE", "cpu")
    assert trnscipy.default_device() == torch.device("cpu")
    monkeypatch.setenv("TRNSCIPY_DEVICE", "nowhere")
    with pytest.raises(ValueError, match="valid devices"):
        trnscipy.default_device()


def test_default_device_without_env(monkeypatch):
    monkeypatch.delenv("TRNSCIPY_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert trnscipy.default_device().type == expected


def test_negative_strides(lane):
    a = np.arange(6.0)[::-1]
    np.testing.assert_array_equal(trnscipy.to_host(trnscipy.to_device(a, lane)), a)


@pytest.mark.xla
def test_complex128_from_xla_to_cpu_keeps_imaginary_parts(xla_device):
    """torch-xla 2.9's .cpu()/.to('cpu') of complex128 drops the imaginary part: tensors
    and sparse containers moved to the CPU by trnscipy keep it."""
    import scipy.sparse as sp

    host = sp.csr_array(np.array([[1 + 2j, 0], [0, 3 - 1j]]))
    a = trnscipy.to_device(host, xla_device)
    cpu = trnscipy.resolve_device("cpu")
    np.testing.assert_array_equal(trnscipy.to_device(a.data, cpu).numpy(), host.data)
    np.testing.assert_array_equal(a.to(cpu).to_scipy().toarray(), host.toarray())
