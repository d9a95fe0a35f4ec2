"""expm, expm_multiply, norm, matrix_power, onenormest and inv on device data against SciPy
by paired execution, on the cpu and xla lanes."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")


def _laplacian(m, dtype=np.float64):
    """The graph Laplacian of an m x m grid."""
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    return sp.csr_array(sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).astype(dtype)


def _host(x):
    return trnscipy.to_host(x)


def _close(got, ref, dtype, scale=1.0):
    """Equal to rounding; float32 also up to 1e-5 of ``scale`` (the input's size: the Taylor
    terms cancel far below it)."""
    got = _host(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    single = np.dtype(dtype) not in (np.float64, np.complex128)
    tol = 2e-5 if single else 1e-12
    floor = (1e-5 if single else 1e-14) * scale
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max() + floor


# -- expm_multiply --------------------------------------------------------------------------

def _matrices(dtype):
    A = sp.csr_array(sp.random(20, 20, density=0.2, random_state=0) * 3).astype(dtype)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * sp.csr_array(sp.random(20, 20, density=0.1, random_state=1))
    return [-_laplacian(4, dtype), (-6 * _laplacian(4)).astype(dtype), A.astype(dtype)]


TIMES = [{}, {"start": 0, "stop": 1, "num": 4}, {"start": 0, "stop": 2, "num": 30},
         {"start": 0.5, "stop": 3, "num": 7, "endpoint": False}]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_expm_multiply_as_scipy(lane, device, dtype, cpu_loop):
    if lane == "xla" and (dtype == np.float32 or cpu_loop == "torch"):
        pytest.skip("float64 and complex128 (torch-xla's complex128 abs and quotients) on the "
                    "XLA lane (graph compilations dominate)")
    for A in _matrices(dtype) if lane == "cpu" else _matrices(dtype)[:1]:
        b = np.linspace(-1, 1, A.shape[0]).astype(dtype)
        At, bt = trnscipy.to_device(A, device), torch.from_numpy(b).to(device)
        for kw in TIMES if lane == "cpu" else TIMES[:1]:  # (interval cores: CPU lanes)
            ref = spla.expm_multiply(A, b, **kw)
            got = tsl.expm_multiply(At, bt, **kw)
            assert got.device == bt.device
            _close(got, ref, dtype)
    B = np.ones((A.shape[0], 2), dtype=dtype)
    _close(tsl.expm_multiply(At, torch.from_numpy(B).to(device)), spla.expm_multiply(A, B),
           dtype)


def test_expm_multiply_large_norm_estimates_through_onenormest(cpu_loop):
    """A norm past SciPy's condition 3.13 makes it estimate ||A^p||_1 with onenormest (the
    device one in the torch version): seeded alike, the same parameters and result."""
    A = -40 * _laplacian(4)
    b = np.linspace(-1, 1, 16)
    np.random.seed(3)
    ref = spla.expm_multiply(A, b)
    np.random.seed(3)
    got = tsl.expm_multiply(trnscipy.to_device(A, "cpu"), torch.from_numpy(b))
    _close(got, ref, np.float64)


def test_expm_multiply_dense_and_traceA(cpu_loop):
    A = -_laplacian(3).toarray()
    b = np.ones(9)
    At, bt = torch.from_numpy(A), torch.from_numpy(b)
    _close(tsl.expm_multiply(At, bt), spla.expm_multiply(A, b), np.float64)
    _close(tsl.expm_multiply(At, bt, traceA=-30.0), spla.expm_multiply(A, b, traceA=-30.0),
           np.float64)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_expm_multiply_operator_estimates_trace(lane, device, dtype):
    """A LinearOperator without traceA: SciPy's warning, its trace estimated on the device
    (the result does not depend on the shift), the result SciPy's."""
    A = -_laplacian(4, dtype) + (1j * sp.eye(16) if dtype == np.complex128 else 0)
    b = np.linspace(-1, 1, 16).astype(dtype)
    At = trnscipy.to_device(A.toarray(), device)
    with pytest.warns(UserWarning, match="Trace of LinearOperator not available"):
        got = tsl.expm_multiply(tsl.aslinearoperator(At), torch.from_numpy(b).to(device))
    _close(got, spla.expm_multiply(A, b, traceA=A.trace()), dtype)
    from trnscipy.sparse.linalg._expm_multiply import _estimate_trace

    estimates = [_estimate_trace(tsl.aslinearoperator(At), At[0]) for _ in range(30)]
    # unbiased, and exact on span(A s) (16 = the size: the estimate's spread is small)
    assert abs(np.mean(estimates) - A.trace()) < 0.15 * abs(A.trace())


def test_expm_multiply_complex_shift(lane, device):
    """A complex matrix's trace (the shift mu) keeps its imaginary part on device data (a
    zero-length interval shows it: exp(t mu) is the whole result's phase)."""
    rng = np.random.default_rng(0)
    A = np.linalg.inv(rng.random((5, 5)) + 1j * rng.random((5, 5)))
    b = rng.random(5) + 1j * rng.random(5)
    ref = spla.expm_multiply(A, b, start=0.5, stop=0.5, num=2)
    got = tsl.expm_multiply(torch.from_numpy(A).to(device), torch.from_numpy(b).to(device),
                            start=0.5, stop=0.5, num=2)
    _close(got, ref, np.complex128)


def test_expm_multiply_integer_matrix_in_float64(lane, device):
    """Integer A and B: float64 work, as SciPy's A - mu I (torch alone would take float32)."""
    A = (-_laplacian(3)).astype(np.int32)
    b = np.arange(9, dtype=np.int32)
    ref = spla.expm_multiply(A, b)
    got = tsl.expm_multiply(trnscipy.to_device(A.toarray(), device), torch.from_numpy(b).to(device))
    _close(got, ref, np.float64)
    got = tsl.expm_multiply(trnscipy.to_device(A, device), torch.from_numpy(b).to(device))
    _close(got, ref, np.float64)


@pytest.mark.xla
def test_expm_multiply_offloaded_scipy_operator_and_sparse_b(xla_device):
    """Offload (SciPy's test_expm_multiply): SciPy's aslinearoperator of a NumPy matrix is
    data, moved to the device, with the trace estimated and warned about; a sparse B gives
    SciPy's CSR result (simple) and dense samples (interval)."""
    A = -_laplacian(3).toarray()
    b = np.linspace(-1, 1, 9)
    B = sp.csr_array(np.eye(9)[:, :3])
    with trnscipy.offload("xla"):
        with pytest.warns(UserWarning, match="Trace of LinearOperator not available"):
            got = tsl.expm_multiply(spla.aslinearoperator(A), b)
        simple = tsl.expm_multiply(sp.csr_array(A), B)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, spla.expm_multiply(A, b, traceA=np.trace(A)), rtol=1e-12,
                               atol=1e-15)
    ref = spla.expm_multiply(sp.csr_array(A), B)
    assert sp.issparse(simple) and simple.format == "csr"
    np.testing.assert_allclose(simple.toarray(), ref.toarray(), rtol=1e-12, atol=1e-15)


def _compiles():
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return data[0] if data else 0


@pytest.mark.xla
def test_expm_multiply_offloaded_sparse_b_interval(xla_device):
    """The interval form with a sparse B: dense samples, as SciPy's; more samples (more
    Taylor terms) compile a few graphs of the new shapes only."""
    A, B = sp.csr_array(-_laplacian(3)), sp.csr_array(np.eye(9)[:, :3])
    for num in (3, 20):
        before = _compiles()
        with trnscipy.offload("xla"):
            interval = tsl.expm_multiply(A, B, 0, 1, num)
        if num > 3:
            assert _compiles() - before <= 8
        np.testing.assert_allclose(interval, spla.expm_multiply(A, B, 0, 1, num), rtol=1e-12,
                                   atol=1e-15)


@pytest.mark.slow
@pytest.mark.xla
def test_expm_multiply_interval_graphs_do_not_grow_with_samples(xla_device):
    """The interval form's graphs do not depend on the number of samples or Taylor terms
    (the terms are a device loop, h and the samples' k device data): a few compilations
    per call, where a graph per term made hundreds; SciPy's samples."""
    A = -_laplacian(7)  # (a size no other test uses: its graphs are compiled here)
    At = trnscipy.to_device(A, xla_device)
    for num, stop, most in ((30, 4, 25), (45, 4, 8), (12, 3, 8)):
        b = np.linspace(-1, 1, 49) * num
        before = _compiles()
        got = tsl.expm_multiply(At, torch.from_numpy(b).to(xla_device), 0, stop, num)
        assert _compiles() - before <= most
        _close(got, spla.expm_multiply(A, b, 0, stop, num), np.float64)


def test_expm_multiply_bad_input_as_scipy():
    A = -_laplacian(3)
    At = trnscipy.to_device(A, "cpu")
    for args_ref, args in (((A, np.ones(8)), (At, torch.ones(8, dtype=torch.float64))),
                           ((A[:, :8], np.ones(8)), (At[:, :8], torch.ones(8,
                                                                            dtype=torch.float64))),
                           ((A, np.ones(9)), (At, torch.ones(9, dtype=torch.float64)))):
        kw = {"start": 0, "stop": 0, "num": 1} if args_ref[1].shape == (9,) else {}
        with pytest.raises(ValueError) as ref:
            spla.expm_multiply(*args_ref, **kw)
        with pytest.raises(ValueError) as ours:
            tsl.expm_multiply(*args, **kw)
        assert str(ours.value) == str(ref.value)


@pytest.mark.xla
def test_xla_strict_graph_laplacian(xla_device, monkeypatch):
    """The issue's must-show: expm_multiply of a graph Laplacian under TRNSCIPY_STRICT=1 on
    XLA (heat kernel on a 30 x 30 grid): SciPy's result, no aten CPU fallback, a repeat
    call compiles nothing."""
    from trnscipy._metrics import xla_counts

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    L = _laplacian(30)
    b = np.zeros(900)
    b[450] = 1.0
    At, bt = trnscipy.to_device(-L, xla_device), torch.from_numpy(b).to(xla_device)

    ref = spla.expm_multiply(-L, b)
    with aten_fallbacks(xla_device) as fallbacks:
        with xla_counts() as first:
            got = tsl.expm_multiply(At, bt)
        with xla_counts() as second:
            again = tsl.expm_multiply(At, bt)
    print(f"\nexpm_multiply 900-node grid Laplacian: first {first}; repeat {second}")
    assert not fallbacks
    _close(got, ref, np.float64)
    _close(again, ref, np.float64)
    assert second.compilations == 0
    # measured: 15 and 15 (setup graphs of A - mu I and its norms, the Taylor blocks of
    # each of the s steps, the scaling); the bound keeps them from growing unnoticed.
    # Since replayed blocks (utils.run): the Taylor loop spans two blocks, so its graph of
    # UNROLL iterations is replayed, after one copy of its inputs (the graph_function
    # kernel), and each block is ceil(CHECK_EVERY / UNROLL) executions instead of one
    from trnscipy.sparse.linalg._isolve import utils

    per_block = -(-utils.CHECK_EVERY // utils.UNROLL)
    assert first.compilations <= 15 and second.executions <= 15 + 1 + 2 * (per_block - 1)


# -- norm -------------------------------------------------------------------------------------

ORDS = [(None, None), ("fro", None), (1, None), (-1, None), (np.inf, None), (-np.inf, None),
        (None, 0), (None, 1), (1, 0), (-1, 1), (np.inf, 1), (-np.inf, 0), (0, 1), (0, 0), (3, 0),
        (2, 0), ("fro", (0, 1)), (1, (1, 0)), (np.inf, (-1, 0))]


def _sparse(dtype, cls=sp.csr_array):
    X = sp.random(7, 5, density=0.5, random_state=0) - sp.random(7, 5, density=0.3,
                                                                  random_state=2)
    if np.dtype(dtype).kind == "c":
        X = X + 1j * sp.random(7, 5, density=0.3, random_state=3)
    return cls(X).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("cls", [sp.csr_array, sp.csc_matrix, sp.coo_array])
def test_norm_every_ord_as_scipy(lane, device, dtype, cls, monkeypatch):
    """Every ord and axis SciPy computes without svds, under TRNSCIPY_STRICT=1 (no host
    work on the device's data)."""
    if lane == "xla" and (cls is not sp.csr_array or np.dtype(dtype) != np.float64):
        pytest.skip("the XLA lane: one format, float64 (each ord compiles its graphs)")
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = _sparse(dtype, cls)
    Ad = trnscipy.to_device(A, device)
    for ord, axis in ORDS:
        ref = spla.norm(A, ord, axis)
        got = tsl.norm(Ad, ord, axis)
        assert isinstance(got, torch.Tensor) and got.device == Ad.device
        got = _host(got)
        assert got.shape == np.shape(ref), (ord, axis)
        assert got.dtype == np.asarray(ref).dtype, (ord, axis)  # (1.18: float64 more often)
        tol = 1e-13 if np.dtype(dtype).itemsize >= 16 or dtype == np.float64 else 1e-5
        np.testing.assert_allclose(got, ref, rtol=tol, err_msg=f"{ord} {axis}")


def test_norm_2_through_svds():
    """ord=2 is SciPy's svds: the routed svds, on the device (no host fallback)."""
    A = _sparse(np.float64)
    Ad = trnscipy.to_device(A, "cpu")
    got = tsl.norm(Ad, 2)
    np.testing.assert_allclose(_host(got), spla.norm(A, 2), rtol=1e-12)


def test_norm_bad_input_as_scipy():
    A = _sparse(np.float64)
    Ad = trnscipy.to_device(A, "cpu")
    for args in ((3, None), (None, (0, 0)), (None, (0, 2)), (None, 0.5), (None, "x"),
                 (-2, None), ("nuc", (0, 1)), ("x", 0)):
        with pytest.raises(Exception) as ref:
            spla.norm(A, *args)
        with pytest.raises(type(ref.value)) as ours:
            tsl.norm(Ad, *args)
        assert str(ours.value) == str(ref.value), args
    with pytest.raises(TypeError, match="not sparse"):
        tsl.norm(torch.ones(3, 3))


# -- matrix_power, is_sptriangular, spbandwidth -------------------------------------------------

def _structures():
    return [sp.random(6, 6, density=0.4, random_state=0),
            sp.triu(sp.random(6, 6, density=0.5, random_state=1)),
            sp.tril(sp.random(6, 6, density=0.5, random_state=2)),
            sp.diags_array([1.0, 2.0], offsets=[0, 2], shape=(6, 6)),
            sp.random(5, 8, density=0.3, random_state=3)]


def test_triangular_and_bandwidth_as_scipy(lane, device):
    formats = ("csr", "csc", "coo", "dia") if lane == "cpu" else ("csr", "coo")
    for M in _structures():
        for fmt in formats:
            A = M.asformat(fmt)
            Ad = trnscipy.to_device(A, device)
            assert tsl.is_sptriangular(Ad) == tuple(map(bool, spla.is_sptriangular(A)))
            assert tsl.spbandwidth(Ad) == tuple(map(int, spla.spbandwidth(A)))
    empty = sp.csr_array((4, 4))
    with pytest.raises(ValueError):
        spla.spbandwidth(empty)
    with pytest.raises(ValueError):
        tsl.spbandwidth(trnscipy.to_device(empty, device))


def test_matrix_power_as_scipy(lane, device):
    for cls in (sp.csr_array, sp.csr_matrix):
        A = cls(sp.random(6, 6, density=0.4, random_state=0))
        Ad = trnscipy.to_device(A, device)
        for p in (0, 1, 2, 5) if lane == "cpu" else (0, 3):
            ref = spla.matrix_power(A, p)
            got = tsl.matrix_power(Ad, p)
            assert type(got).__name__ == type(ref).__name__
            assert got.device == Ad.device
            np.testing.assert_allclose(_host(got.toarray()), ref.toarray(), rtol=1e-13)
    for args in ((A, -1), (A, 1.5), (A[:, :5], 2)):
        with pytest.raises(Exception) as ref:
            spla.matrix_power(*args)
        with pytest.raises(type(ref.value), match=str(ref.value)):
            tsl.matrix_power(trnscipy.to_device(args[0], device), args[1])


# -- onenormest -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_onenormest_as_scipy(lane, device, dtype):
    """SciPy's estimator draws from NumPy's global generator: seeded alike, the estimate,
    v and w are SciPy's; the estimate is a lower bound of the exact norm (SciPy's tests)."""
    if lane == "xla" and dtype == np.float32:
        pytest.skip("float64 and complex128 (torch-xla's complex128 abs and quotients) on the "
                    "XLA lane")
    cases = [(40, 2), (40, 1), (40, 3), (5, 6)] if lane == "cpu" else [(40, 2)]
    for n, t in cases:
        for seed in range(3 if lane == "cpu" else 1):
            A = sp.csr_array(sp.random(n, n, density=0.1, random_state=seed)
                             - sp.random(n, n, density=0.05, random_state=seed + 9))
            if np.dtype(dtype).kind == "c":
                A = A + 1j * sp.csr_array(sp.random(n, n, density=0.05, random_state=seed + 5))
            A = A.astype(dtype)
            np.random.seed(seed)
            ref = spla.onenormest(A, t=t, compute_v=True, compute_w=True)
            np.random.seed(seed)
            got = tsl.onenormest(trnscipy.to_device(A, device), t=t, compute_v=True,
                                 compute_w=True)
            assert all(g.device == device or g.device.type == device.type for g in got)
            est, v, w = (_host(g) for g in got)
            rtol = 1e-12 if np.dtype(dtype).itemsize >= 8 and dtype != np.float32 else 1e-5
            np.testing.assert_allclose(est, ref[0], rtol=rtol)
            np.testing.assert_array_equal(v, ref[1])
            np.testing.assert_allclose(w, ref[2], rtol=rtol)
            assert est <= spla.norm(A, 1) * (1 + rtol)
    assert tsl.onenormest(trnscipy.to_device(A, device)).shape == ()


def test_onenormest_operator_and_bad_input():
    A = sp.csr_array(sp.random(30, 30, density=0.2, random_state=0))
    At = trnscipy.to_device(A, "cpu")
    op = tsl.aslinearoperator(At) ** 2
    np.random.seed(1)
    ref = spla.onenormest(spla.aslinearoperator(A) ** 2)
    np.random.seed(1)
    np.testing.assert_allclose(_host(tsl.onenormest(op)), ref, rtol=1e-12)
    for args, kw in (((At[:, :20],), {}), ((At,), {"itmax": 1}), ((At,), {"t": 0})):
        host = (A[:, :20],) if args[0].shape != A.shape else (A,)
        with pytest.raises(ValueError) as r:
            spla.onenormest(*host, **kw)
        with pytest.raises(ValueError, match=str(r.value)):
            tsl.onenormest(*args, **kw)


# -- expm ---------------------------------------------------------------------------------------

def _kind(x):
    """A sparse result's class name; "dense" for an ndarray or a tensor."""
    return type(x).__name__ if hasattr(x, "toarray") else "dense"


def _expm_close(got, ref, dtype, device):
    """SciPy's type (class, format) and dtype on the device; values to 1e-12 (float64) or
    1e-5 (float32) of the largest entry."""
    assert _kind(got) == _kind(ref)
    assert got.device.type == device.type
    got, ref = (x.toarray() if hasattr(x, "toarray") else x for x in (got, ref))
    got = _host(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    tol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64])
def test_expm_as_scipy(lane, device, dtype):
    """Every device format: SciPy's result class (CSC for CSC, BSR and DIA input, the BSR and
    DIA ones always csc_array; CSR for the others), dtype (integers: float64) and values;
    a dense tensor gives a dense tensor."""
    if lane == "xla" and dtype in (np.complex128, np.int64):
        pytest.skip("float32 and float64 on the XLA lane (graph compilations dominate)")
    R = sp.random(30, 30, density=0.1, random_state=0) * 3
    if np.dtype(dtype).kind == "c":
        R = R + 1j * sp.random(30, 30, density=0.05, random_state=1)
    L = -_laplacian(5)
    classes = [sp.csr_array, sp.csc_matrix, sp.coo_matrix, sp.bsr_matrix, sp.dia_array,
               sp.csc_array]
    for cls in classes if lane == "cpu" else classes[1:2] + classes[4:5]:
        for M in (R, L) if lane == "cpu" else (R,):
            A = cls(M).astype(dtype)
            _expm_close(tsl.expm(trnscipy.to_device(A, device)), spla.expm(A), dtype, device)
    D = L.toarray().astype(dtype)
    _expm_close(tsl.expm(torch.from_numpy(D).to(device)), spla.expm(D), dtype, device)


def test_expm_small_and_bad_input_as_scipy(lane, device):
    """1 x 1 (exp of the entry, NumPy's dtype) and 0 x 0 (as given) in the input's class;
    SciPy's exceptions for non-square, 1-D, 3-D and non-finite input, and for 1 x 1 input
    of a format without indexing."""
    for a in (np.full((1, 1), 2.0), np.full((1, 1), 3, dtype=np.int32),
              np.zeros((0, 0), dtype=np.int64)):
        for conv in (np.asarray, sp.csr_array, sp.coo_array):
            ref = spla.expm(conv(a))
            got = tsl.expm(trnscipy.to_device(conv(a), device))
            assert _kind(got) == _kind(ref)
            got, ref = (x.toarray() if hasattr(x, "toarray") else x for x in (got, ref))
            got = _host(got)
            assert got.dtype == ref.dtype
            np.testing.assert_allclose(got, ref, rtol=1e-15)
    bad = [np.ones(3), np.ones((2, 3)), np.ones((2, 2, 2)), sp.csr_array(np.ones((2, 3))),
           np.array([[np.inf, 0.0], [0.0, 1.0]]), sp.csr_array([[np.inf, 1.0], [0.0, 1.0]]),
           sp.csc_array([[np.nan, 0.0], [0.0, 1.0]]), sp.coo_matrix([[2.0]]),
           sp.dia_array([[2.0]])]
    for a in bad:
        with pytest.raises(Exception) as ref:
            spla.expm(a)
        with pytest.raises(type(ref.value)) as ours:
            tsl.expm(trnscipy.to_device(a, device))
        assert str(ours.value) == str(ref.value)


@pytest.mark.xla
def test_xla_strict_expm(xla_device, monkeypatch):
    """expm of a sparse graph Laplacian under TRNSCIPY_STRICT=1 on XLA: SciPy's result, no
    DeviceFallbackWarning, no aten CPU fallback, a repeat call compiles nothing."""
    import warnings

    from trnscipy._metrics import xla_counts

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = sp.csc_array(-_laplacian(8) / 4)

    ref = spla.expm(A)
    At = trnscipy.to_device(A, xla_device)
    with warnings.catch_warnings(), aten_fallbacks(xla_device) as fallbacks:
        warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
        with xla_counts() as first:
            got = tsl.expm(At)
        with xla_counts() as second:
            again = tsl.expm(At)
    print(f"\nexpm 64-node grid Laplacian (csc): first {first}; repeat {second}")
    assert not fallbacks
    _expm_close(got, ref, np.float64, xla_device)
    _expm_close(again, ref, np.float64, xla_device)
    assert second.compilations == 0


# -- inv ----------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
def test_inv_through_routed_spsolve():
    """SciPy's spsolve(A, I) through trnscipy's routed spsolve: on the host, warned, while
    spsolve has no device version (a device spsolve drops in)."""
    import warnings

    for cls in (sp.csc_array, sp.csr_matrix):
        A = cls(sp.random(6, 6, density=0.4, random_state=0) + 3 * sp.eye(6))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", trnscipy.DeviceFallbackWarning)
            got = tsl.inv(trnscipy.to_device(A, "cpu"))
        warned = any("spsolve" in str(w.message) for w in caught
                     if issubclass(w.category, trnscipy.DeviceFallbackWarning))
        assert warned == (tsl.spsolve._trnscipy_route == "host")
        ref = spla.inv(A)
        assert type(got).__name__ == type(ref).__name__ and got.device.type == "cpu"
        np.testing.assert_allclose(_host(got).toarray(), ref.toarray(), rtol=1e-13)
    with pytest.raises(TypeError, match="Input must be a sparse arrays"):
        tsl.inv(torch.eye(3))
