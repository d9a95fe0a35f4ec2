"""SpMV / SpMM / SpGEMM through the kernel seam, autograd, and XLA graph counts."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg

import trnscipy
from tests.sparse.sparse_cases import (
    DTYPES,
    FORMATS,
    KINDS,
    assert_same,
    device_case,
    scipy_case,
    skip_unless_subset,
)
from trnscipy._kernels import _generic, kind_backend

torch = pytest.importorskip("torch")


def _product(kind, A, x):
    """A @ x by the product primitive of ``A``'s format that device kind ``kind`` has."""
    return getattr(kind_backend(kind), f"{A.format}_matvec{'s' if x.ndim == 2 else ''}")(A, x)


def _dense(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matvec_matmat(lane, fmt, kind, dtype):
    skip_unless_subset(lane, fmt, kind, dtype)
    host = scipy_case(fmt, kind, dtype)
    dev = device_case(host, lane)
    rng = np.random.default_rng(1)
    x, X = _dense(rng, 8, dtype), _dense(rng, (8, 3), dtype)
    assert_same(dev @ trnscipy.to_device(x, lane), host @ x)
    assert_same(dev @ trnscipy.to_device(X, lane), host @ X)
    assert_same(dev.dot(trnscipy.to_device(x, lane)), host.dot(x))
    xt = _dense(rng, 6, dtype)
    assert_same(trnscipy.to_device(xt, lane) @ dev, xt @ host)


@pytest.mark.parametrize("fmt", FORMATS)
def test_generic_kernel_matches_scipy(fmt):
    host = scipy_case(fmt, "array", "complex128")
    dev = device_case(host, "cpu")
    rng = np.random.default_rng(2)
    for x in (_dense(rng, 8, "complex128"), _dense(rng, (8, 2), "complex128")):
        assert_same(_product("generic", dev, torch.from_numpy(x)), host @ x)


def test_mixed_dtypes_promote_as_numpy():
    host = scipy_case("csr", "array", "float32")
    dev = device_case(host, "cpu")
    for x in (np.ones(8, np.float64), np.ones(8, np.complex64), np.ones(8, np.int32)):
        assert_same(dev @ torch.from_numpy(x), host @ x)
    ih = sp.csr_array(np.array([[1, 0], [2, 3]], dtype=np.int64))
    assert_same(device_case(ih, "cpu") @ torch.tensor([1, 1]), ih @ np.array([1, 1]))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_repeated_products_follow_changes_to_the_container(fmt):
    """The CPU kernel caches NumPy views of the stored tensors: products must follow
    in-place value changes, replaced attributes and in-place structural methods."""
    host = scipy_case(fmt, "array", "float64")
    dev = device_case(host, "cpu")
    x = np.arange(1.0, 9.0)
    tx = torch.from_numpy(x)
    assert_same(dev @ tx, host @ x)
    dev.data.mul_(2)             # in place: the cached views share memory
    host.data *= 2
    assert_same(dev @ tx, host @ x)
    dev.data = dev.data * 3      # replaced tensor
    host.data = host.data * 3
    assert_same(dev @ tx, host @ x)
    dev.data = dev.data.to(torch.float32)  # replaced with another dtype
    host.data = host.data.astype(np.float32)
    assert_same(dev @ tx, host @ x)
    dev.sum_duplicates()         # in-place structural change
    host.sum_duplicates()
    assert_same(dev @ tx, host @ x)
    assert_same(dev.conj() @ tx, host.conj() @ x)


def test_matmul_errors():
    dev = device_case(scipy_case("csr", "array", "float64"), "cpu")
    with pytest.raises(ValueError, match="dimension mismatch"):
        dev @ torch.ones(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="Scalar"):
        dev @ 2.0


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("kind", KINDS)
def test_spgemm(lane, fmt, kind):
    if lane == "xla" and (fmt, kind) != ("csr", "matrix"):
        pytest.skip("XLA lane: representative subset")
    a = scipy_case(fmt, kind, "float64", shape=(6, 8))
    b = scipy_case(fmt, kind, "float64", shape=(8, 5), seed=4)
    assert_same(device_case(a, lane) @ device_case(b, lane), a @ b)
    if kind == "matrix":
        assert_same(device_case(a, lane) * device_case(b, lane), a * b)


def test_spgemm_generic_kernel():
    a = scipy_case("csr", "array", "complex128", shape=(6, 8))
    b = scipy_case("csr", "array", "complex128", shape=(8, 5), seed=4)
    parts = _generic.spgemm(device_case(a, "cpu"), device_case(b, "cpu"))
    ours = trnscipy.sparse.csr_array((parts["data"], parts["indices"], parts["indptr"]),
                                     shape=(6, 5))
    assert_same(ours, (a @ b).tocsr())


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dia"])
@pytest.mark.parametrize("generic", [False, True])
def test_gradcheck(fmt, generic):
    host = scipy_case(fmt, "array", "float64", shape=(6, 4), nnz=9)
    dev = device_case(host, "cpu")
    x = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    data = dev.data.clone().requires_grad_(True)

    def f(data, x):
        A = dev._with_data(data, copy=False)
        return _product("generic", A, x) if generic else A @ x

    assert torch.autograd.gradcheck(f, (data, x))
    v = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (data, v))


def test_gradient_values_complex():
    host = scipy_case("csr", "array", "complex128")
    dev = device_case(host, "cpu")
    data = dev.data.clone().requires_grad_(True)
    x = torch.randn(8, dtype=torch.complex128, requires_grad=True)
    y = dev._with_data(data, copy=False) @ x
    y.abs().pow(2).sum().backward()
    data2 = dev.data.clone().requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    y2 = _product("generic", dev._with_data(data2, copy=False), x2)
    y2.abs().pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(data.grad, data2.grad)


@pytest.mark.xla
@pytest.mark.parametrize("fmt", ["csr", "bsr", "dia"])
def test_xla_one_graph_per_shape(xla_device, fmt):
    from trnscipy._metrics import xla_counts

    host = scipy_case(fmt, "array", "float32", shape=(8, 8), nnz=20)
    A = trnscipy.to_device(host, xla_device)
    xs = [torch.randn(8, dtype=torch.float32).to(xla_device) for _ in range(3)]
    with xla_counts() as c:  # a new matrix: its row index was set up with it
        y0 = A @ xs[0]
    assert c.compilations <= 1 and c.executions <= 1, (fmt, str(c))
    for x in xs[1:]:
        with xla_counts() as c:
            y = A @ x
        assert c.compilations == 0, (fmt, str(c))
        assert c.executions <= 1, (fmt, str(c))
        np.testing.assert_allclose(trnscipy.to_host(y), host @ trnscipy.to_host(x),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trnscipy.to_host(y0), host @ trnscipy.to_host(xs[0]),
                               rtol=1e-5, atol=1e-5)
    with xla_counts() as c:
        A @ torch.randn(8, 4).to(xla_device)
    assert c.compilations <= 1 and c.executions <= 1, str(c)


@pytest.mark.xla
def test_neuron_float64_product_falls_back_with_warning(xla_device, emulate_neuron):
    host = scipy_case("csr", "array", "float64")
    A = trnscipy.to_device(host, xla_device)
    x = np.arange(8.0)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="float64"):
        y = A @ trnscipy.to_device(x, xla_device)
    assert y.device.type == "xla"
    np.testing.assert_allclose(trnscipy.to_host(y), host @ x, rtol=1e-12)
    a32 = trnscipy.to_device(host.astype(np.float32), xla_device)
    y32 = a32 @ trnscipy.to_device(x.astype(np.float32), xla_device)  # no warning
    np.testing.assert_allclose(trnscipy.to_host(y32), host @ x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_dense_times_sparse(kind):
    host = scipy_case("csc", kind, "float64")
    dev = device_case(host, "cpu")
    X = np.random.default_rng(3).standard_normal((4, 6))
    assert_same(torch.from_numpy(X) @ dev, X @ host)
    if kind == "matrix":  # dense * sparse matrix is the matrix product
        assert_same(torch.from_numpy(X) * dev, np.asarray(np.asmatrix(X) * host))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_cuda_kernel_code_on_cpu_tensors(fmt):
    """The CUDA kernel's torch sparse-CSR path, run on CPU tensors (no GPU here), with
    none of torch's sparse notices reaching the user (warnings are errors here)."""
    import warnings

    host = scipy_case(fmt, "array", "complex128")
    dev = device_case(host, "cpu")
    rng = np.random.default_rng(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (_dense(rng, 8, "complex128"), _dense(rng, (8, 3), "complex128")):
            assert_same(_product("cuda", dev, torch.from_numpy(x)), host @ x)


def test_int_matmul_is_numpys_integer_product():
    """The integer product CUDA's matmul lacks (run here on CPU tensors): exact, wrapping
    on overflow as NumPy's, batched, 1-D right operands, cut into row blocks."""
    rng = np.random.default_rng(4)
    for dtype in (np.int32, np.int64, np.uint8):
        a = rng.integers(0, 100, (3, 7, 5)).astype(dtype)
        b = rng.integers(0, 100, (3, 5, 4)).astype(dtype)
        for x, y in ((a, b), (a[0], b[0]), (a[0], b[0, :, 0])):
            for chunk in (1, 30, 1 << 24):
                got = _generic.int_matmul(torch.from_numpy(x), torch.from_numpy(y), chunk)
                assert got.numpy().dtype == (x @ y).dtype
                np.testing.assert_array_equal(got.numpy(), x @ y)
    big = np.full((2, 2), 2**62, np.int64)  # wraps as NumPy's
    np.testing.assert_array_equal(_generic.int_matmul(torch.from_numpy(big),
                                                      torch.from_numpy(big)).numpy(), big @ big)


@pytest.mark.parametrize("fmt", FORMATS)
def test_integer_products_on_lanes(lane, device, fmt):
    """Integer and boolean sparse data times a vector (torch's CUDA bmm/addmm have no
    integer kernels: the BSR product failed there)."""
    if lane == "xla" and fmt != "bsr":
        pytest.skip("the XLA lane: the BSR batched product only")
    host = sp.random_array((8, 6), density=0.5, format="csr", rng=5)
    host = sp.csr_array((np.arange(1, host.nnz + 1), host.indices, host.indptr), host.shape)
    for A in (host, host.astype(bool)):
        A = A.tobsr(blocksize=(2, 3)) if fmt == "bsr" else A.asformat(fmt)
        x = np.arange(6, dtype=A.dtype if A.dtype != bool else np.int64)
        got = trnscipy.to_device(A, device) @ torch.from_numpy(x).to(device)
        assert_same(got, A @ x)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_failed_capture_leaves_torch_clean():
    """A function that reads a value on the host cannot be captured: it keeps running
    eagerly with correct results, and torch is left as before (torch's capture_end
    raises before ending the generator's capture mode: every later random op raised
    "Offset increment outside graph capture encountered unexpectedly"); later captures
    and random ops work."""
    from trnscipy._kernels import _cuda

    cuda = torch.device("cuda")
    reads_host = _cuda.graph_function(lambda x: (x * float(x.sum()),))
    x = torch.arange(4.0, device=cuda)
    for _ in range(3):
        (y,) = reads_host(x)
        assert y.tolist() == [0.0, 6.0, 12.0, 18.0]
    assert reads_host.failure and list(reads_host.plans.values()) == [False]
    assert sorted(torch.randperm(10, device=cuda).tolist()) == list(range(10))
    assert torch.rand(5, device=cuda).shape == (5,)
    doubles = _cuda.graph_function(lambda x: (2 * x,))
    for k in range(3):
        (y,) = doubles(x + k)
        assert y.tolist() == [2.0 * (i + k) for i in range(4)]
    assert doubles.failure is None and list(doubles.plans.values())[0] is not False
    assert sorted(torch.randperm(10, device=cuda).tolist()) == list(range(10))


@pytest.mark.xla
def test_xla_first_product_of_a_constructed_matrix_is_one_graph(xla_device):
    """Built from device tensors (validated on the device): the row index is computed in
    the validation read's graph, so the first product is one compilation at most."""
    from trnscipy._metrics import xla_counts

    host = sp.random_array((40, 30), density=0.2, format="csr", rng=np.random.default_rng(4),
                           dtype=np.float32)
    parts = [torch.from_numpy(a).to(xla_device) for a in (host.data, host.indices,
                                                          host.indptr)]
    A = trnscipy.sparse.csr_array(tuple(parts), shape=host.shape)
    x = torch.linspace(-1, 1, 30).to(xla_device)
    with xla_counts() as c:
        y = trnscipy.to_host(A @ x)
    assert c.compilations <= 1 and c.executions <= 1, str(c)
    np.testing.assert_allclose(y, host @ trnscipy.to_host(x), rtol=1e-5, atol=1e-6)


@pytest.mark.xla
def test_xla_construction_validates_with_one_read(xla_device):
    from trnscipy._metrics import xla_counts

    host = scipy_case("csr", "array", "float32")
    parts = [torch.from_numpy(a).to(xla_device) for a in (host.data, host.indices,
                                                           host.indptr)]
    with xla_counts() as c:
        A = trnscipy.sparse.csr_array(tuple(parts), shape=host.shape)
    assert c.transfers_from_device == 1, str(c)
    bad = [parts[0], parts[1] + 100, parts[2]]
    with pytest.raises(ValueError, match="column index"):
        trnscipy.sparse.csr_array(tuple(bad), shape=host.shape)
    x = torch.ones(8, device=xla_device)
    A @ x
    with xla_counts() as c:
        A @ x
    assert c.transfers_from_device == 0 and c.compilations == 0, str(c)


def _spmv_hlo(A, x):
    import torch_xla

    A @ x  # warm: layouts and indices are device data
    torch_xla.sync()
    return torch_xla._XLAC._get_xla_tensors_hlo([A @ x])


@pytest.mark.xla
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dia"])
def test_xla_spmv_graph_has_no_scatter(xla_device, fmt):
    """Row-padded layouts (and DIA's per-diagonal gather): the warm SpMV graph is a
    gather, a multiply and a reduction; results paired with SciPy."""
    host = sp.random_array((60, 48), density=0.15, format="csr", dtype=np.float32,
                           rng=np.random.default_rng(5))
    host = sp.bsr_array(host, blocksize=(4, 4)) if fmt == "bsr" else host.asformat(fmt)
    A = trnscipy.to_device(host, xla_device)
    x = torch.linspace(-1, 1, 48).to(xla_device)
    X = torch.linspace(-1, 1, 48 * 3).reshape(48, 3).to(xla_device)
    assert "scatter" not in _spmv_hlo(A, x)
    assert "scatter" not in _spmv_hlo(A, X)
    np.testing.assert_allclose(trnscipy.to_host(A @ x), host @ trnscipy.to_host(x),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trnscipy.to_host(A @ X), host @ trnscipy.to_host(X),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.xla
def test_xla_layout_choice_falls_back_beyond_twice_the_padding(xla_device):
    """One dense row among sparse ones pads far beyond 2x: the generic index_add kernel,
    still equal to SciPy; a constructed matrix builds its layout from the validation
    read (no scatter)."""
    host = sp.random_array((50, 50), density=0.04, format="csr", dtype=np.float32,
                           rng=np.random.default_rng(6)).tolil()
    host[3, :] = 1.0
    host = host.tocsr()
    A = trnscipy.to_device(host, xla_device)
    x = torch.linspace(-1, 1, 50).to(xla_device)
    assert "scatter" in _spmv_hlo(A, x)
    np.testing.assert_allclose(trnscipy.to_host(A @ x), host @ trnscipy.to_host(x),
                               rtol=1e-5, atol=1e-5)
    host = sp.random_array((50, 50), density=0.3, format="csr", dtype=np.float32,
                           rng=np.random.default_rng(6))
    parts = [torch.from_numpy(a).to(xla_device) for a in (host.data, host.indices,
                                                          host.indptr)]
    B = trnscipy.sparse.csr_array(tuple(parts), shape=host.shape)
    assert "scatter" not in _spmv_hlo(B, x)
    np.testing.assert_allclose(trnscipy.to_host(B @ x), host @ trnscipy.to_host(x),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.xla
@pytest.mark.parametrize("fmt", ["csr", "coo", "bsr"])
def test_xla_wide_rows_are_summed_in_slices(xla_device, fmt):
    """Rows of more than _ell.CHUNK entries: the padded axis is summed by slices of at
    most CHUNK (XLA CPU then fuses the gather and the multiply into the sums: one
    kernel, no products written out), no scatter; products paired with SciPy."""
    from trnscipy._kernels import _ell, _plan

    host = sp.random_array((24, 300), density=0.25, format="csr", dtype=np.float32,
                           rng=np.random.default_rng(8))
    host = sp.bsr_array(host, blocksize=(2, 2)) if fmt == "bsr" else host.asformat(fmt)
    A = trnscipy.to_device(host, xla_device)
    x = torch.linspace(-1, 1, 300).to(xla_device)
    X = torch.linspace(-1, 1, 600).reshape(300, 2).to(xla_device)
    hlo = _spmv_hlo(A, x)
    assert "scatter" not in hlo
    width = _plan.get(A, "xla", "ell")[0].shape[1]  # the slot map's
    assert width > 2 * _ell.CHUNK
    sums = [line for line in hlo.splitlines() if " reduce(" in line]
    assert len(sums) == -(-width // _ell.CHUNK), sums
    np.testing.assert_allclose(trnscipy.to_host(A @ x), host @ trnscipy.to_host(x),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trnscipy.to_host(A @ X), host @ trnscipy.to_host(X),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_row_padded_layout_matches_scipy_rows(fmt):
    """_ell's slot map puts each row's stored entries (duplicates kept, stored order) in
    its slots: per-row sums of the padded values equal SciPy's row sums."""
    from trnscipy._kernels import _ell

    rng = np.random.default_rng(7)
    row, col = rng.integers(0, 9, 40), rng.integers(0, 7, 40)
    host = sp.coo_array((rng.standard_normal(40), (row, col)), shape=(9, 7)).asformat(fmt)
    if fmt == "csr":
        ptr = torch.from_numpy(host.indptr)
        width = int(np.diff(host.indptr).max())
        slot_map, entries = _ell.slots(ptr, width), host.indices
    else:
        rows = host.row if fmt == "coo" else host.indices
        slot_map, width = _ell.row_slots(torch.from_numpy(rows), 9)
        entries = rows
    assert slot_map.shape == (9, width)
    padded = _ell.pad(torch.from_numpy(host.data), slot_map)
    np.testing.assert_allclose(padded.sum(1).numpy(), host.sum(axis=1), rtol=1e-12)
    if fmt != "csr":  # each slot's entry lies in its row
        got = _ell.pad(torch.from_numpy(entries.astype(np.int64)), slot_map, fill=-1)
        assert ((got == torch.arange(9)[:, None]) | (got == -1)).all()


@pytest.mark.parametrize("case", ["bsr16", "csr_dense_rows", "csr_sparse_rows", "vector"])
def test_cpu_spmm_kernel_choice(case, monkeypatch):
    """SpMM with >= 16 columns goes through torch's kernels where they are faster (BSR with
    large blocks; CSR with >= 8 entries per row); vectors and thin rows stay on SciPy's.
    Results paired with SciPy either way."""
    from trnscipy._kernels import _cpu

    rng = np.random.default_rng(9)
    if case == "bsr16":
        host = sp.bsr_array(sp.random_array((64, 48), density=0.3, rng=rng).toarray(),
                            blocksize=(16, 16))
    else:
        density = 0.05 if case == "csr_sparse_rows" else 0.4
        host = sp.random_array((40, 30), density=density, format="csr", rng=rng)
    dev = device_case(host, "cpu")
    X = rng.standard_normal((host.shape[1],) if case == "vector" else (host.shape[1], 16))
    used = []
    monkeypatch.setattr(_cpu, "_idle_core", lambda: False)  # a busy machine: one thread
    monkeypatch.setattr(_cpu, "_torch_spmm",
                        lambda A, x, f=_cpu._torch_spmm: used.append(1) or f(A, x))
    np.testing.assert_allclose((dev @ torch.from_numpy(X)).numpy(), host @ X, rtol=1e-12,
                               atol=1e-12)
    assert bool(used) == (case in ("bsr16", "csr_dense_rows")), case


def test_cpu_spmv_kernel_choice(monkeypatch):
    """CSR vectors with >= 2**15 stored entries go through torch's CSR kernel while a
    core is idle (set here), except inside SciPy's loops on views (here cg on a
    LinearOperator's products), where NumPy work interleaves with them, or with a busy
    machine; results paired with SciPy either way."""
    import trnscipy.sparse.linalg as tsl
    from trnscipy._kernels import _cpu

    rng = np.random.default_rng(4)
    B = sp.random_array((2000, 2000), density=0.01, format="csr", rng=rng)
    host = (B + B.T + 40 * sp.eye_array(2000)).tocsr()
    assert host.nnz >= _cpu._TORCH_SPMV_MIN_NNZ
    dev = device_case(host, "cpu")
    used = []
    monkeypatch.setattr(_cpu, "_torch_csr", lambda A, f=_cpu._torch_csr: used.append(1) or f(A))
    monkeypatch.setattr(_cpu, "_idle_core", lambda: True)
    x = rng.standard_normal(2000)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        np.testing.assert_allclose((dev @ torch.from_numpy(x)).numpy(), host @ x,
                                   rtol=1e-12, atol=1e-12)
        assert used
        used.clear()
        got, info = tsl.cg(tsl.aslinearoperator(dev), torch.from_numpy(x), rtol=1e-10)
    finally:
        torch.set_num_threads(threads)
    ref, info_ref = scipy.sparse.linalg.cg(host, x, rtol=1e-10)
    assert not used and info == info_ref == 0
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-8, atol=1e-10)
    monkeypatch.setattr(_cpu, "_idle_core", lambda: False)
    np.testing.assert_allclose((dev @ torch.from_numpy(x)).numpy(), host @ x,
                               rtol=1e-12, atol=1e-12)
    assert not used


def test_cpu_idle_core_leaves_out_this_process(monkeypatch):
    """A core counts as idle while the other processes used at most cores - 1.5 of them
    since the last reading, this process's own CPU time left out (its threads made the
    load average say busy); the first reading and a machine without /proc/stat go by the
    1-minute load average."""
    import os
    import time

    from trnscipy._kernels import _cpu

    clock, machine, own = [100.0], [50.0], [10.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_cpu, "_busy_seconds", lambda: machine[0])
    monkeypatch.setattr(os, "times", lambda: (own[0], 0.0, 0.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.9, 1.9, 1.9))
    monkeypatch.setattr(_cpu, "_IDLE", [-1.0, None, None, False])
    assert _cpu._idle_core() is False  # first reading: the load average (1.9 > 1.5)

    def second(others, ours):
        clock[0] += 2.0
        machine[0] += 2.0 * (others + ours)
        own[0] += 2.0 * ours
        return _cpu._idle_core()

    assert second(others=0.0, ours=2.0) is True  # only this process ran: idle
    assert second(others=0.4, ours=1.0) is True
    assert second(others=0.8, ours=1.0) is False  # another process holds most of a core
    machine[0] += 100.0
    clock[0] += 0.5
    assert _cpu._idle_core() is False  # read at most once a second: the last answer
    monkeypatch.setattr(_cpu, "_busy_seconds", lambda: None)
    clock[0] += 2.0
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    assert _cpu._idle_core() is True  # no /proc/stat: the load average


def test_cpu_spmm_kernel_route(monkeypatch):
    """Per format and operand shape: CSR SpMM through torch's CSR kernel (one thread) for
    16 <= N <= 64 and SciPy's csr_matvecs beyond on a busy machine, through torch's
    kernel on its threads for every N >= 16 while a core is idle (not inside SciPy's
    loops); BSR with blocks >= 16 as torch's bmm for N >= 16 and as NumPy's batched
    matmul below (vectors included), uniform and ragged block rows (one empty); every
    result paired with SciPy's (dtype, shape, values)."""
    from trnscipy._kernels import _cpu

    rng = np.random.default_rng(5)
    host = sp.random_array((300, 300), density=0.05, format="csr", rng=rng)
    dev = device_case(host, "cpu")
    routes = []  # torch's CSR kernel on its threads, or on one thread
    monkeypatch.setattr(_cpu._HostProduct, "_csr", lambda self, A, f=_cpu._HostProduct._csr:
                        routes.append("threads") or f(self, A))
    monkeypatch.setattr(_cpu, "_torch_spmm", lambda A, x, f=_cpu._torch_spmm:
                        routes.append("one") or f(A, x))
    monkeypatch.setattr(_cpu, "_idle_core", lambda: True)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for N, free, in_loop in ((16, ["threads"], ["one"]), (128, ["threads"], []),
                                 (4, [], [])):
            x = rng.standard_normal((300, N))
            np.testing.assert_allclose((dev @ torch.from_numpy(x)).numpy(), host @ x,
                                       rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(
                _cpu._in_host_loop(lambda x: dev @ torch.from_numpy(x), {"x": x}).numpy(),
                host @ x, rtol=1e-12, atol=1e-12)
            assert routes == free + in_loop, N
            routes.clear()
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(_cpu, "_idle_core", lambda: False)
    used = []
    monkeypatch.setattr(_cpu, "_torch_spmm", lambda A, x, f=_cpu._torch_spmm:
                        used.append(A.format) or f(A, x))
    blocks = []
    monkeypatch.setattr(_cpu._HostProduct, "_blocks", lambda self, xv, f=_cpu._HostProduct._blocks:
                        blocks.append(xv.shape) or f(self, xv))
    for N, route in ((16, ["csr"]), (64, ["csr"]), (65, []), (4, [])):
        x = rng.standard_normal((300, N))
        got = dev @ torch.from_numpy(x)
        assert got.dtype == torch.float64 and got.shape == (300, N)
        np.testing.assert_allclose(got.numpy(), host @ x, rtol=1e-12, atol=1e-12)
        assert used == route, N
        used.clear()
    uniform = sp.bsr_array((rng.standard_normal((6, 16, 16)), np.array([0, 2, 1, 2, 0, 1]),
                            np.array([0, 2, 4, 6])), shape=(48, 48))
    ragged = sp.bsr_array((rng.standard_normal((4, 16, 16)), np.array([0, 2, 1, 0]),
                           np.array([0, 2, 2, 4])), shape=(48, 48))
    for host in (uniform, ragged):
        dev = device_case(host, "cpu")
        for shape, bmm in (((48,), False), ((48, 3), False), ((48, 16), True)):
            x = rng.standard_normal(shape)
            got = dev @ torch.from_numpy(x)
            assert got.dtype == torch.float64 and got.shape == shape
            np.testing.assert_allclose(got.numpy(), host @ x, rtol=1e-12, atol=1e-12)
            assert used == (["bsr"] if bmm else []) and len(blocks) == (0 if bmm else 1)
            used.clear()
            blocks.clear()
    small = sp.bsr_array(uniform.toarray(), blocksize=(8, 8))  # blocks < 16: SciPy's kernel
    x = rng.standard_normal(48)
    np.testing.assert_allclose((device_case(small, "cpu") @ torch.from_numpy(x)).numpy(),
                               small @ x, rtol=1e-12, atol=1e-12)
    assert not blocks and not used


def test_sum_keeps_indices_of_large_matrices(device):
    """Entries of a sum of 10^4 x 10^4 matrices keep their rows: torch-xla 2.9 divides int64
    tensors through float32 (99999998 // 10000 gave 10000), so row = key // n is exact only
    through ``_sputils.divmod_index``."""
    n = 10000
    A = sp.diags_array([1.0, 2.0], offsets=[0, 1], shape=(n, n), format="csr")
    B = sp.eye_array(n, format="csr")
    got = trnscipy.to_device(A, device) - 0.0 * trnscipy.to_device(B, device)
    ref = (A - 0.0 * B).tocsr()
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(trnscipy.to_host(getattr(got, name)), getattr(ref, name))


@pytest.mark.xla
def test_xla_device_loop_leaves_on_the_until_flag(xla_device):
    """``until``: the While's condition reads the carry's flag, so the loop stops at the
    step that set it (counted by the steps taken), in one execution, with any bounds."""
    import torch_xla

    from trnscipy._kernels import backend
    from trnscipy._metrics import xla_counts

    loop = backend(xla_device).device_loop

    def body(carry, j):
        count, total, done = carry
        return count + 1, total + j.to(total.dtype), done | (total[0] + j >= 10)

    for stop in (100, 1000):
        carry = (torch.zeros(1, dtype=torch.int64).to(xla_device),
                 torch.zeros(1, dtype=torch.int64).to(xla_device),
                 torch.tensor(False).to(xla_device))
        with xla_counts() as counts:
            count, total, done = loop(body, carry, 0, stop, until=2)
            torch_xla.sync()
            got = (int(count.cpu()[0]), int(total.cpu()[0]), bool(done.cpu()))
        assert got == (5, 10, True)  # 0 + 1 + 2 + 3 + 4 = 10 at the fifth step
        assert counts.executions == 1
    (count,) = loop(lambda carry, j: (carry[0] + 1,),
                    (torch.zeros(1, dtype=torch.int64).to(xla_device),), 0, 7)
    assert int(count.cpu()[0]) == 7  # without until: every step


@pytest.mark.xla
def test_xla_device_loop_builds_on_finished_work(xla_device, monkeypatch):
    """A tensor the loop body reads from its closure may be the result of a graph still
    queued when the loop is built; its buffer handle changes when the buffer arrives,
    and if that happened between the body's build and its parameter map, torch-xla
    aborted ("Check failed: param_id.has_value()", once in a full bench run's eigsh).
    Checked: the device data the body reads keep their handles from build on."""
    import torch_xla

    from trnscipy._kernels import backend

    xla = torch_xla._XLAC
    real = xla.lowering.LoweringContext
    changed = []

    class Watched:
        def __init__(self, name):
            self.ctx = real(name)

        def build(self, tensors):
            _, data = xla._get_tensors_xla_device_data_node(list(tensors))
            before = xla._get_tensors_handle(list(data))
            self.ctx.build(tensors)
            xla._xla_wait_device_ops([])
            changed.append(before != xla._get_tensors_handle(list(data)))

        def __getattr__(self, name):
            return getattr(self.ctx, name)

    a = torch.randn(2000, 2000).to(xla_device)
    bounds = [torch.tensor([b]).to(xla_device) for b in (0, 3)]
    loop = backend(xla_device).device_loop
    loop(lambda carry, j: (carry[0] * a[0, :8],), (torch.ones(8).to(xla_device),), *bounds)
    torch_xla.sync()
    monkeypatch.setattr(xla.lowering, "LoweringContext", Watched)
    for _ in range(6):  # the race is lost in about one build in three
        for k in range(20):  # queued graphs: the last one's buffer arrives late
            scale = a + float(k)
            xla._xla_sync_multi([scale], devices=[], wait=False, sync_xla_data=True)
        (out,) = loop(lambda carry, j, scale=scale: (carry[0] * scale[0, :8],),
                      (torch.ones(8).to(xla_device),), *bounds)
        np.testing.assert_allclose(out.cpu().numpy(),
                                   (a[0, :8] + 19).cpu().numpy() ** 3, rtol=1e-5)
    assert changed == [False] * 6


def test_backends_implement_the_primitives():
    """Every backend class has every primitive of the protocol, a kind extends its parent
    (neuron -> xla -> generic, cpu/cuda -> generic), and ``backend`` gives one per kind."""
    from trnscipy._kernels import _backend, _cpu, _cuda, backend

    names = [n for n in vars(_backend.Backend).get("__annotations__", {})] + [
        n for n, v in vars(_backend.Backend).items() if callable(v) and not n.startswith("_")]
    assert set(_backend.PRODUCTS) <= set(names)
    classes = [_generic.Generic, _cpu.Cpu, _cuda.Cuda]
    if _have_torch_xla():
        from trnscipy._kernels import _neuron, _xla

        classes += [_xla.Xla, _neuron.Neuron]
        assert _neuron.Neuron.__mro__[1:3] == (_xla.Xla, _generic.Generic)
    for cls in classes:
        assert isinstance(cls(), _backend.Backend), cls
        for name in names:
            assert getattr(cls, name, None) is not None, (cls, name)
    assert _cpu.Cpu.__mro__[1] is _cuda.Cuda.__mro__[1] is _generic.Generic
    assert backend(torch.device("cpu")) is kind_backend("cpu")
    assert type(kind_backend("cpu")) is _cpu.Cpu


def _have_torch_xla():
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None
