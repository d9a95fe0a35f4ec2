"""Bad input, empty input, dtype rules, offload, Neuron's limits and XLA graph counts
for trnscipy.linalg, each paired with SciPy."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl
from tests.linalg._dense_helpers import hpd, tensor, to_np
from trnscipy import DeviceFallbackWarning

torch = pytest.importorskip("torch")

SQUARE_ONLY = ["cholesky", "eigh", "eigvalsh", "inv", "det", "expm", "eig"]


def _same_error(ours, ours_args, theirs, theirs_args):
    """Both raise, the same exception type; returns it."""
    with pytest.raises(Exception) as ref:
        theirs(*theirs_args)
    with pytest.raises(ref.type):
        ours(*ours_args)
    return ref.type


@pytest.mark.parametrize("name", SQUARE_ONLY)
def test_non_square_value_error(dlane, name):
    a = np.ones((3, 4))
    assert _same_error(getattr(tl, name), (tensor(a, dlane),),
                       getattr(sl, name), (a,)) in (ValueError, np.linalg.LinAlgError)


@pytest.mark.parametrize("name", ["cholesky", "eigh", "solve", "inv", "det", "svd",
                                  "solve_triangular", "cho_solve", "lstsq", "norm"])
def test_nan_value_error(dlane, name):
    a = np.eye(3)
    a[1, 1] = np.nan
    b = np.ones(3)
    calls = {"solve": lambda m, v: (m, v), "solve_triangular": lambda m, v: (m, v),
             "cho_solve": lambda m, v: ((m, False), v), "lstsq": lambda m, v: (m, v)}
    make = calls.get(name, lambda m, v: (m,))
    with pytest.raises(ValueError, match="infs or NaNs"):
        getattr(sl, name)(*make(a, b))
    with pytest.raises(ValueError, match="infs or NaNs"):
        getattr(tl, name)(*make(tensor(a, dlane), tensor(b, dlane)))
    # check_finite=False skips the check (SciPy's contract: garbage, no error)
    if name in ("det", "norm"):
        getattr(tl, name)(*make(tensor(a, dlane), tensor(b, dlane)), check_finite=False)


def test_not_positive_definite(dlane):
    a = -np.eye(4)
    for ours, theirs in [
        (lambda t: tl.cholesky(t), lambda m: sl.cholesky(m)),
        (lambda t: tl.cho_factor(t, lower=True), lambda m: sl.cho_factor(m, lower=True)),
        (lambda t: tl.solve(t, t[:, 0], assume_a="pos"),
         lambda m: sl.solve(m, m[:, 0], assume_a="pos")),
        (lambda t: tl.eigh(t, t), lambda m: sl.eigh(m, m)),
    ]:
        assert _same_error(ours, (tensor(a, dlane),), theirs, (a,)) is np.linalg.LinAlgError


def test_singular(dlane):
    z = np.zeros((3, 3))
    b = np.ones(3)
    for name in ("solve", "inv", "solve_triangular"):
        args = (z, b) if name != "inv" else (z,)
        assert _same_error(getattr(tl, name), tuple(tensor(x, dlane) for x in args),
                           getattr(sl, name), args) is np.linalg.LinAlgError
    # rank 1: XLA's inverse of it is finite garbage, caught by the probe residual
    ones = np.ones((4, 4))
    for name, args in (("solve", (ones, np.arange(4.0))), ("inv", (ones,))):
        assert _same_error(getattr(tl, name), tuple(tensor(x, dlane) for x in args),
                           getattr(sl, name), args) is np.linalg.LinAlgError
    hilbert = 1.0 / (np.arange(5)[:, None] + np.arange(5) + 1.0)  # cond 5e5: not singular
    np.testing.assert_allclose(to_np(tl.inv(tensor(hilbert, dlane))), sl.inv(hilbert),
                               rtol=1e-8)
    assert float(to_np(tl.det(tensor(z, dlane)))) == sl.det(z) == 0.0
    with pytest.raises(np.linalg.LinAlgError):
        tl.solve(tensor(np.diag([1.0, 0.0, 2.0]), dlane), tensor(b, dlane),
                 assume_a="diagonal")


def test_linalg_error_translation_unit():
    from trnscipy.linalg._validate import linalg_errors

    with pytest.raises(np.linalg.LinAlgError):
        with linalg_errors():
            torch.linalg.cholesky(-torch.eye(2, dtype=torch.float64))


EMPTY_CASES = {
    "cholesky": lambda e, b: ((e,), {}),
    "cho_factor": lambda e, b: ((e,), {}),
    "eigh": lambda e, b: ((e,), {}),
    "eigvalsh": lambda e, b: ((e,), {}),
    "solve": lambda e, b: ((e, b), {}),
    "solve_triangular": lambda e, b: ((e, b), {}),
    "inv": lambda e, b: ((e,), {}),
    "det": lambda e, b: ((e,), {}),
    "pinv": lambda e, b: ((e,), {}),
    "lu_factor": lambda e, b: ((e,), {}),
    "lu": lambda e, b: ((e,), {}),
    "qr": lambda e, b: ((e,), {}),
    "svd": lambda e, b: ((e,), {}),
    "svdvals": lambda e, b: ((e,), {}),
    "expm": lambda e, b: ((e,), {}),
}


def _flat(r):
    return list(r) if isinstance(r, tuple | list) else [r]


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_empty_inputs_match_scipy(dtype):
    e, b = np.empty((0, 0), dtype), np.empty((0,), dtype)
    for name, make in EMPTY_CASES.items():
        args, kw = make(e, b)
        ref = getattr(sl, name)(*args, **kw)
        ours = getattr(tl, name)(*(torch.from_numpy(x) for x in args), **kw)
        refs, outs = _flat(ref), _flat(ours)
        assert len(refs) == len(outs), name
        for o, r in zip(outs, refs, strict=True):
            if isinstance(r, bool):
                assert o is r
                continue
            r = np.asarray(r)
            assert isinstance(o, torch.Tensor), name
            assert to_np(o).dtype == r.dtype and tuple(o.shape) == r.shape, name
            if r.size:
                assert np.allclose(to_np(o), r), name


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float16])
def test_dtype_rules(dtype):
    a = (np.eye(3) * 4 + 1).astype(dtype) if dtype is not np.bool_ else np.eye(3, dtype=bool)
    t = torch.from_numpy(a)
    for name in ("cholesky", "inv", "expm", "lu_factor", "svdvals", "eigvalsh", "det", "norm"):
        ref = _flat(getattr(sl, name)(a))
        ours = _flat(getattr(tl, name)(t))
        ref, ours = ref + _flat(sl.solve(a, a[:, 0])), ours + _flat(tl.solve(t, t[:, 0]))
        for o, r in zip(ours, ref, strict=True):
            assert to_np(o).dtype == np.asarray(r).dtype, (name, dtype)
            assert np.allclose(to_np(o), r, rtol=1e-6), (name, dtype)


def test_offload_numpy_in_numpy_out():
    rng = np.random.default_rng(20)
    a = hpd(5, np.float64, rng)
    b = rng.standard_normal(5)
    with trnscipy.offload("cpu"):
        c = tl.cholesky(a)
        x = tl.solve(a, b, assume_a="pos")
        w, v = tl.eigh(a)
        lu, piv = tl.lu_factor(a)
    for ours, ref in ((c, sl.cholesky(a)), (x, sl.solve(a, b)), (w, sl.eigh(a)[0]),
                      (lu, sl.lu_factor(a)[0]), (piv, sl.lu_factor(a)[1])):
        assert type(ours) is np.ndarray and ours.dtype == ref.dtype
        assert np.allclose(ours, ref, rtol=1e-10)


@pytest.mark.xla
def test_offload_to_xla_numpy_out(xla_device):
    a = hpd(5, np.float32, np.random.default_rng(21))
    with trnscipy.offload("xla"):
        c = tl.cholesky(a)
    assert type(c) is np.ndarray and c.dtype == np.float32
    assert np.allclose(c, sl.cholesky(a), rtol=1e-5)


def test_host_inputs_untouched():
    a = hpd(4, np.float64, np.random.default_rng(22))
    assert np.array_equal(tl.cholesky(a), sl.cholesky(a))
    assert type(tl.eigh(a)[0]) is np.ndarray


@pytest.mark.xla
def test_neuron_emulation_falls_back_for_float64_and_complex(xla_device, emulate_neuron):
    a32 = hpd(4, np.float32, np.random.default_rng(23))
    t32 = tensor(a32, xla_device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        c = tl.cholesky(t32)  # float32 runs on the device, no warning
        w = tl.eigvalsh(t32)
    assert c.device == xla_device and np.allclose(to_np(c), sl.cholesky(a32), rtol=1e-4)
    assert np.allclose(to_np(w), sl.eigvalsh(a32), rtol=1e-4)
    # float64 cholesky, inv, expm, sqrtm: double-float, on the device; complex: the host
    a = hpd(4, np.complex64, np.random.default_rng(24))
    with pytest.warns(DeviceFallbackWarning, match="runs on the host"):
        c = tl.sqrtm(tensor(a, xla_device))
    assert c.device == xla_device and np.allclose(to_np(c), sl.sqrtm(a))
    with pytest.warns(DeviceFallbackWarning, match="no neuron implementation"):
        tl.funm(t32, np.sin)  # (eigvals runs there now: complex results as parts)


@pytest.mark.xla
def test_neuron_float64_tensor_made_outside_trnscipy_holds_float32(xla_device, emulate_neuron,
                                                                    monkeypatch):
    """A float64 tensor put on a Neuron device by torch itself holds float32 values there
    (torch-xla stores F64 as F32): trnscipy says so and computes from what is held."""
    import torch

    from trnscipy import DeviceUnsupportedError, Float32StorageWarning

    a = hpd(6, np.float64, np.random.default_rng(26))
    t = torch.from_numpy(a).to(xla_device)
    with pytest.warns(Float32StorageWarning, match="holds float32 values"), \
            pytest.warns(DeviceFallbackWarning):
        c = tl.funm(t, np.exp)  # (funm: no Neuron method)
    held = a.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(to_np(c), sl.funm(held, np.exp))  # what the device holds
    assert np.abs(to_np(c) - sl.funm(a, np.exp)).max() > 1e-10  # not float64-accurate
    exact = trnscipy.to_device(a, xla_device)  # through trnscipy: exact on the device
    with pytest.warns(DeviceFallbackWarning):
        np.testing.assert_array_equal(to_np(tl.funm(exact, np.exp)), sl.funm(a, np.exp))
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(DeviceUnsupportedError, match="holds float32 values"):
        tl.funm(t, np.exp)


@pytest.mark.xla
def test_xla_graph_counts(xla_device):
    """Compilations and executions per call on the XLA lane (printed with -s)."""
    from trnscipy._metrics import xla_counts

    rng = np.random.default_rng(25)
    a = tensor(hpd(16, np.float32, rng), xla_device)
    b = tensor(rng.standard_normal(16).astype(np.float32), xla_device)
    calls = {"cholesky": lambda: tl.cholesky(a),
             "eigh": lambda: tl.eigh(a),
             "solve": lambda: tl.solve(a, b),
             "solve_pos": lambda: tl.solve(a, b, assume_a="pos")}
    for name, call in calls.items():
        call()  # warm the compilation cache
        with xla_counts() as counts:
            call()  # the block's closing sync materialises the results
        print(f"{name}: {counts}")
        assert counts.compilations == 0, name  # a repeat call reuses its graphs
        assert counts.executions <= 3, (name, str(counts))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_cuda_finiteness_check(dtype):
    """The CUDA check (0 * x sums to 0) run on CPU tensors: inf and NaN anywhere are found,
    and finite values whose sum overflows are not taken for inf."""
    from trnscipy._kernels import kind_kernel

    check = kind_kernel("linalg._all_finite", "cuda")
    big = torch.full((4, 4), torch.finfo(dtype).max / 2, dtype=dtype)
    assert check(big) and check(big, -big) and check(torch.zeros(0, dtype=dtype))
    for bad in (float("inf"), -float("inf"), float("nan")):
        x = big.clone()
        x[2, 3] = bad
        assert not check(x) and not check(big, x)
    if dtype.is_complex:
        x = big.clone()
        x[1, 1] = complex(1, float("nan"))
        assert not check(x)
    assert check(torch.ones(3, dtype=torch.int64), big)
