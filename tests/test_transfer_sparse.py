"""to_device / to_host for SciPy sparse objects: exact round trips for every format."""

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy

torch = pytest.importorskip("torch")

FORMATS = ["csr", "csc", "coo", "bsr", "dia"]


def _case(fmt, kind, dtype, index_dtype):
    rng = np.random.default_rng(3)
    rows = np.array([3, 0, 3, 1, 0, 3, 5], dtype=index_dtype)
    cols = np.array([1, 4, 1, 0, 2, 7, 5], dtype=index_dtype)
    data = (rng.standard_normal(7) * 10).astype(dtype)
    coo = getattr(sp, f"coo_{kind}")((data, (rows, cols)), shape=(6, 8))
    if fmt == "coo":
        return coo
    if fmt in ("csr", "csc"):  # unsorted, with a duplicate
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        order = np.argsort(major, kind="stable")
        indptr = np.searchsorted(major[order], np.arange(coo.shape[fmt == "csc"] + 1))
        return getattr(sp, f"{fmt}_{kind}")(
            (data[order], minor[order], indptr.astype(index_dtype)), shape=(6, 8))
    return coo.asformat(fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "int64", "bool"])
def test_round_trip_exact(lane, fmt, kind, dtype):
    if lane == "xla" and (dtype not in ("float64", "complex128") or kind == "matrix"):
        pytest.skip("XLA lane: representative subset")
    host = _case(fmt, kind, dtype, np.int64)
    dev = trnscipy.to_device(host, lane)
    assert dev.device.type == lane and dev.format == fmt
    assert isinstance(dev.data, torch.Tensor) and dev.data.device.type == lane
    back = trnscipy.to_host(dev)
    assert type(back) is type(host)
    assert back.dtype == host.dtype and back.shape == host.shape
    for name in ("data", "indices", "indptr", "row", "col", "offsets"):
        if hasattr(host, name):
            a, b = getattr(back, name), getattr(host, name)
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b)
    if fmt in ("csr", "csc", "bsr"):
        assert back.has_sorted_indices == host.has_sorted_indices
        assert back.has_canonical_format == host.has_canonical_format
    if fmt == "coo":
        assert back.has_canonical_format == host.has_canonical_format


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_index_dtype_kept(kind):
    host = _case("csr", kind, "float64", np.int64)
    dev = trnscipy.to_device(host, "cpu")
    assert dev.indices.dtype == torch.from_numpy(host.indices).dtype
    assert trnscipy.to_host(dev).indices.dtype == host.indices.dtype


def test_flags_travel():
    host = _case("csr", "array", "float64", np.int32)
    assert not host.has_sorted_indices
    host.sort_indices()
    dev = trnscipy.to_device(host, "cpu")
    assert dev.has_sorted_indices and dev._sorted is True
    assert trnscipy.to_host(dev).has_sorted_indices


@pytest.mark.parametrize("fmt", ["dok", "lil"])
def test_dok_lil_have_no_device_form(fmt):
    host = sp.random_array((4, 4), density=0.5, format=fmt, rng=0)
    with pytest.raises(TypeError, match="tocsr"):
        trnscipy.to_device(host, "cpu")


def test_move_between_devices(xla_device):
    host = _case("csr", "array", "float64", np.int32)
    dev = trnscipy.to_device(host, "cpu").to(xla_device)
    assert dev.device.type == "xla" and dev.indices.device.type == "xla"
    back = dev.to("cpu")
    assert back.device.type == "cpu"
    assert (back.to_scipy() != host).nnz == 0
