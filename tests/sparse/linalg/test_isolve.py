"""Device Krylov solvers against SciPy by paired execution (same inputs through both)."""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("cpu_loop")

SOLVERS = ["cg", "gmres", "bicgstab", "bicg", "cgs", "qmr", "minres", "tfqmr", "lgmres",
           "gcrotmk"]
SOLVERS = [s for s in SOLVERS if getattr(tsl, s)._trnscipy_route == "device"]
SYMMETRIC_ONLY = {"cg", "minres"}
NO_NONE_MAXITER = {"lgmres", "gcrotmk"}  # SciPy's take an int (default 1000)


def _poisson(m, dtype=np.float64):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    return (sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).toarray().astype(dtype)


def _convdiff(m, dtype=np.float64, c=0.4):
    T = sp.diags_array([-1.0 - c, 2.0, -1.0 + c], offsets=[-1, 0, 1], shape=(m, m))
    return (sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).toarray().astype(dtype)


def _problem(solver, dtype, m=7, seed=0):
    A = (_poisson if solver in SYMMETRIC_ONLY else _convdiff)(m, dtype)
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.shape[0])
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0])
        if solver not in SYMMETRIC_ONLY:
            A = A + 0.2j * np.eye(A.shape[0])
    return A.astype(dtype), b.astype(dtype)


def _jacobi(A):
    """Jacobi preconditioner as a SciPy LinearOperator (host) and as ours (device)."""
    d = 1.0 / np.diag(A)
    host = spla.LinearOperator(A.shape, matvec=lambda v: d * v, rmatvec=lambda v: np.conj(d) * v,
                               dtype=A.dtype)
    return host, d


def _tol(dtype):
    return 1e-10 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-4


def _kwargs(solver):
    return {"restart": 5} if solver == "gmres" else {}


def _m(solver, M):
    """The preconditioner keyword(s): qmr takes M1 (and M2 = I)."""
    if solver != "qmr":
        return {"M": M}
    n = M.shape[0]
    eye = tsl.LinearOperator((n, n), matvec=lambda v: v, rmatvec=lambda v: v, dtype=M.dtype)
    return {"M1": M, "M2": eye}


def _to(x, device):
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _compare(x_ours, x_ref, dtype):
    assert isinstance(x_ours, torch.Tensor)
    assert x_ours.shape == x_ref.shape
    got = trnscipy.to_host(x_ours)  # (torch-xla's .cpu() drops complex imaginary parts)
    assert got.dtype == x_ref.dtype
    scale = max(np.abs(x_ref).max(), 1e-30)
    err = np.abs(got - x_ref).max() / scale
    assert err <= _tol(dtype), f"max rel. difference {err:.3e}"


# -- iterates equal SciPy's: maxiter 1 and 3 check the algorithm, None the convergence ------

@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("precond", [False, True])
def test_iterates_match_scipy_cpu(solver, dtype, precond):
    if solver == "minres" and np.dtype(dtype).kind == "c":
        pytest.skip("SciPy's minres has no complex support")
    A, b = _problem(solver, dtype)
    dev = torch.device("cpu")
    kw = _kwargs(solver)
    if precond:
        host_M, d = _jacobi(A)
        dd = _to(d, dev)
        dev_M = tsl.LinearOperator(A.shape, matvec=lambda v: dd * v,
                                   rmatvec=lambda v: dd.conj() * v, dtype=A.dtype)
        kw_h, kw_d = dict(kw, **_m(solver, host_M)), dict(kw, **_m(solver, dev_M))
    else:
        kw_h = kw_d = kw
    for maxiter in (1, 3, 1000 if solver in NO_NONE_MAXITER else None):
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=maxiter, **kw_h)
        x, info = getattr(tsl, solver)(_to(A, dev), _to(b, dev), maxiter=maxiter, **kw_d)
        assert type(info) is int and info == info_ref, (maxiter, info, info_ref)
        _compare(x, x_ref, dtype)


@pytest.mark.parametrize("solver", SOLVERS)
def test_rtol_atol_x0_as_scipy(solver):
    A, b = _problem(solver, np.float64)
    x0 = np.linspace(0, 1, A.shape[0])
    cases = [{"rtol": 1e-9}, {"x0": x0}, {"x0": "Mb"}]
    if solver != "minres":  # minres has no atol
        cases.append({"atol": 1e-3, "rtol": 0.0})
    for kw in cases:
        x_ref, info_ref = getattr(spla, solver)(A, b, **kw, **_kwargs(solver))
        kw_d = {k: (_to(v, "cpu") if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
        x, info = getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu"), **kw_d, **_kwargs(solver))
        assert info == info_ref
        _compare(x, x_ref, np.float64)


# -- the XLA lane: same answers, and graph counts -----------------------------------------

XLA_SOLVERS = [s for s in ("cg", "gmres", "bicgstab", "minres") if s in SOLVERS]


@pytest.fixture
def short_blocks(monkeypatch):
    """XLA compiles of 25 unrolled iterations take tens of seconds on a busy CPU: the XLA
    tests check the same structure with 5 iterations per block."""
    from trnscipy.sparse.linalg._isolve import utils

    monkeypatch.setattr(utils, "CHECK_EVERY", 5)
    return 5


@pytest.mark.xla
@pytest.mark.parametrize(("solver", "dtype"), [
    ("cg", np.float64), ("bicgstab", np.float64), ("minres", np.float64),
    ("tfqmr", np.float64), ("bicgstab", np.complex128)])  # complex: once unrolled blocks
def test_xla_loop_solvers_run_to_the_stop_flag_in_one_execution(solver, dtype, xla_device):
    """Where the device loop leaves on the stop flag (XLA), the iterations of a solve are
    one execution however many there are: the same count at 4x the unknowns and at a
    maxiter stop, the results SciPy's."""
    from trnscipy._metrics import xla_counts

    counts = []
    for m, kw in ((6, {}), (12, {}), (12, {"maxiter": 30, "rtol": 1e-14})):
        A, b = _problem(solver, dtype, m=m)
        x_ref, info_ref = getattr(spla, solver)(A, b, **kw)
        with xla_counts() as c:
            x, info = getattr(tsl, solver)(_to(A, xla_device), _to(b, xla_device), **kw)
            trnscipy.to_host(x)
        assert info == info_ref and (info == 30) == ("maxiter" in kw)
        _compare(x, x_ref, dtype)
        counts.append(c.executions)
    # a complex result is read back as its real and imaginary parts (two executions)
    limit = 7 if np.dtype(dtype).kind == "c" else 5
    assert counts[0] == counts[1] <= limit and counts[2] <= counts[0], counts


@pytest.mark.xla
@pytest.mark.parametrize("solver", XLA_SOLVERS)
def test_xla_counts_and_iterates(solver, xla_device, short_blocks, monkeypatch):
    from trnscipy._metrics import xla_counts
    from trnscipy.sparse.linalg._isolve import utils

    if solver == "cg":  # one solver with the production block length
        monkeypatch.setattr(utils, "CHECK_EVERY", 25)
    CHECK_EVERY = utils.CHECK_EVERY
    A, b = _problem(solver, np.float64, m=8)
    kw = {"restart": 8} if solver == "gmres" else {}
    calls = []
    kw_cb = dict(kw, callback_type="x") if solver == "gmres" else kw
    x_ref, info_ref = getattr(spla, solver)(A, b, callback=calls.append, **kw_cb)
    iters = len(calls)
    At, bt = _to(A, xla_device), _to(b, xla_device)
    with xla_counts() as first:
        x, info = getattr(tsl, solver)(At, bt, **kw)
    # a second solve: other rhs, other maxiter, same shapes -> nothing to compile
    b2 = np.cos(np.arange(A.shape[0]))
    x2_ref, info2_ref = getattr(spla, solver)(A, b2, maxiter=500, **kw)
    with xla_counts() as second:
        x2, info2 = getattr(tsl, solver)(At, _to(b2, xla_device), maxiter=500, **kw)
    # gmres checks once per max(1, CHECK_EVERY // restart) restart cycles (its "iterations")
    unit = max(1, CHECK_EVERY // kw["restart"]) if solver == "gmres" else CHECK_EVERY
    print(f"\n{solver} xla: {iters} iterations; first solve {first}; second solve {second}")
    assert info == info_ref == 0 and info2 == info2_ref == 0
    _compare(x, x_ref, np.float64)
    _compare(x2, x2_ref, np.float64)
    assert x.device == xla_device
    # the setup's read (zero rhs), iteration 0 (cg, bicgstab) or gmres's first residual
    # check, the copy of the replayed graph's inputs (graph_function), and the blocks,
    # each unit / UNROLL executions of a graph of UNROLL iterations (gmres: one execution
    # per restart cycle, its Arnoldi steps one device loop)
    per_block = 1 if solver == "gmres" else -(-unit // min(unit, utils.UNROLL))
    bound = math.ceil(iters / unit) * per_block + 3
    assert first.executions <= bound, f"{iters} iterations, {first} (bound {bound})"
    assert second.compilations == 0, f"second solve recompiled: {second}"
    # (gmres: setup, first check, the input copies, the cycle)
    assert first.compilations <= (4 if solver == "gmres" else 5), f"{first}"


@pytest.mark.xla
@pytest.mark.parametrize("solver", XLA_SOLVERS)
def test_xla_iterates_match_scipy_at_maxiter(solver, xla_device, short_blocks):
    A, b = _problem(solver, np.float64, m=6)
    kw = _kwargs(solver)
    for maxiter in (1, 3):
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=maxiter, **kw)
        x, info = getattr(tsl, solver)(_to(A, xla_device), _to(b, xla_device), maxiter=maxiter,
                                       **kw)
        assert info == info_ref
        _compare(x, x_ref, np.float64)


@pytest.mark.xla
def test_xla_float32_cg(xla_device, short_blocks):
    A, b = _problem("cg", np.float32, m=6)
    x_ref, info_ref = spla.cg(A, b)
    x, info = tsl.cg(_to(A, xla_device), _to(b, xla_device))
    assert info == info_ref == 0
    _compare(x, x_ref, np.float32)


@pytest.mark.xla
@pytest.mark.parametrize("solver, dtype", [
    *((s, np.complex64) for s in SOLVERS if s != "minres"),
    *((s, np.complex128) for s in ("cg", "gmres", "bicgstab", "qmr") if s in SOLVERS)])
def test_xla_complex(solver, dtype, xla_device, short_blocks):
    """cg on a Hermitian positive definite matrix, the others on a non-Hermitian one:
    iterates at maxiter=3 and the converged solution (compared through to_host:
    torch-xla 2.9's complex128 .cpu() drops the imaginary part).  Their scalars are
    complex quotients, which torch-xla 2.9 labels float32 (``_dtypes.divide``): bicg, qmr
    and tfqmr conjugated such a label's data as real before it was restored."""
    A, b = _problem(solver, dtype, m=6)
    kw = _kwargs(solver)
    for maxiter in (3, 1000 if solver in NO_NONE_MAXITER else None):
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=maxiter, **kw)
        x, info = getattr(tsl, solver)(_to(A, xla_device), _to(b, xla_device), maxiter=maxiter,
                                       **kw)
        assert info == info_ref
        assert x.device == xla_device and x.dtype == _to(b, "cpu").dtype
        _compare(x, x_ref, dtype)


# -- callbacks -------------------------------------------------------------------------------

@pytest.mark.parametrize("solver", SOLVERS)
def test_callback_count_and_values(solver):
    A, b = _problem(solver, np.float64)
    kw = dict(_kwargs(solver), callback_type="x") if solver == "gmres" else {}
    ref, ours = [], []
    spla_fn, tsl_fn = getattr(spla, solver), getattr(tsl, solver)
    spla_fn(A, b, callback=lambda x: ref.append(np.array(x)), **kw)
    tsl_fn(_to(A, "cpu"), _to(b, "cpu"), callback=lambda x: ours.append(x.clone()), **kw)
    assert len(ours) == len(ref) > 0
    for x, r in zip(ours, ref, strict=True):
        _compare(x, r, np.float64)


@pytest.mark.parametrize("callback_type", ["pr_norm", "legacy"])
def test_gmres_residual_callbacks(callback_type):
    A, b = _problem("gmres", np.float64)
    ref, ours = [], []
    x_ref, i_ref = spla.gmres(A, b, restart=5, maxiter=7, callback=ref.append,
                              callback_type=callback_type)
    x, i = tsl.gmres(_to(A, "cpu"), _to(b, "cpu"), restart=5, maxiter=7, callback=ours.append,
                     callback_type=callback_type)
    assert i == i_ref and len(ours) == len(ref)
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    _compare(x, x_ref, np.float64)


@pytest.mark.xla
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gmres_residual_callback_gets_numpy_scalars(dtype, xla_device):
    """The residual callbacks get NumPy float64 scalars, as SciPy's (SciPy's
    test_maxiter calls x.ndim on them; the XLA route gave Python floats)."""
    A, b = _problem("gmres", dtype)
    ref, ours = [], []
    spla.gmres(A, b, restart=5, maxiter=2, callback=ref.append, callback_type="legacy")
    tsl.gmres(_to(A, xla_device), _to(b, xla_device), restart=5, maxiter=2,
              callback=ours.append, callback_type="legacy")
    assert len(ours) == len(ref) > 0
    assert {type(v) for v in ours} == {type(v) for v in ref} == {np.float64}


@pytest.mark.xla
def test_lgmres_host_preconditioner_xla(xla_device):
    """lgmres with a host function as M on XLA converges as SciPy's (SciPy's
    test_precond_dummy: the replayed inner graph stopped it at info 4, residual 0.37)."""
    A, b = _problem("cg", np.float64, m=12)
    d = A.diagonal()
    M = spla.LinearOperator(A.shape, matvec=lambda v: v / _to(d, v.device))
    x_ref, i_ref = spla.lgmres(A, b, M=spla.LinearOperator(A.shape, matvec=lambda v: v / d),
                               rtol=1e-8)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="host .SciPy. operator"):
        x, info = tsl.lgmres(_to(A, xla_device), _to(b, xla_device), M=M, rtol=1e-8)
    assert info == i_ref == 0
    _compare(x, x_ref, np.float64)


def test_gmres_callback_without_type_warns_as_scipy():
    A, b = _problem("gmres", np.float64)
    with pytest.warns(DeprecationWarning, match="callback_type"):
        tsl.gmres(_to(A, "cpu"), _to(b, "cpu"), callback=lambda r: None)
    with pytest.raises(ValueError, match="Unknown callback_type"):
        tsl.gmres(_to(A, "cpu"), _to(b, "cpu"), callback=print, callback_type="bad")


@pytest.mark.xla
def test_xla_callback_per_iteration(xla_device):
    A, b = _problem("cg", np.float64, m=5)
    ref, ours = [], []
    spla.cg(A, b, callback=lambda x: ref.append(np.array(x)))
    tsl.cg(_to(A, xla_device), _to(b, xla_device), callback=lambda x: ours.append(x.cpu()))
    assert len(ours) == len(ref)
    _compare(ours[-1], ref[-1], np.float64)


@pytest.mark.xla
@pytest.mark.parametrize("callback_type", ["x", "pr_norm", "legacy"])
def test_xla_gmres_callback_as_scipy(callback_type, xla_device):
    """A callback runs gmres' host restart cycle on XLA (its state holds host numbers)."""
    A, b = _problem("gmres", np.float64, m=5)
    ref, ours = [], []
    x_ref, info_ref = spla.gmres(A, b, restart=5, callback=ref.append,
                                 callback_type=callback_type)
    x, info = tsl.gmres(_to(A, xla_device), _to(b, xla_device), restart=5,
                        callback=ours.append, callback_type=callback_type)
    assert info == info_ref and len(ours) == len(ref)
    _compare(x, x_ref, np.float64)


# -- info codes, bad input, NaN ----------------------------------------------------------------

@pytest.mark.parametrize("solver", SOLVERS)
def test_breakdown_info_as_scipy(solver):
    A = np.array([[0.0, 1.0], [1.0, 0.0]])
    b = np.array([1.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x_ref, info_ref = getattr(spla, solver)(A, b)
        x, info = getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu"))
    assert info == info_ref
    np.testing.assert_allclose(x.numpy(), x_ref, equal_nan=True, atol=1e-12)


def test_gmres_singular_is_no_false_success():
    A = np.diag([1.0, 1.0, 0.0])
    b = np.array([1.0, 1.0, 1.0])
    x_ref, info_ref = spla.gmres(A, b)
    x, info = tsl.gmres(_to(A, "cpu"), _to(b, "cpu"))
    assert info == info_ref != 0


@pytest.mark.parametrize("solver", SOLVERS)
def test_nan_rhs_as_scipy(solver):
    A, b = _problem(solver, np.float64, m=3)
    b[1] = np.nan
    if solver in ("lgmres", "gcrotmk"):  # both reject a non-finite rhs
        _raises_as_scipy(lambda: getattr(spla, solver)(A, b),
                         lambda: getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu")))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=20)
    x, info = getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu"), maxiter=20)
    assert info == info_ref
    assert np.isnan(x.numpy()).all() == np.isnan(x_ref).all()


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zero_rhs_as_scipy(solver, dtype):
    A, _ = _problem(solver, dtype, m=3)
    b = np.zeros(A.shape[0], dtype=dtype)
    for x0 in (None, np.ones(A.shape[0], dtype=dtype)):
        x_ref, info_ref = getattr(spla, solver)(A, b, x0=x0)
        x, info = getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu"),
                                       x0=None if x0 is None else _to(x0, "cpu"))
        assert info == info_ref == 0
        assert x.numpy().dtype == x_ref.dtype
        np.testing.assert_array_equal(x.numpy(), x_ref)


def _raises_as_scipy(call_ref, call_ours):
    with pytest.raises(Exception) as ref:
        call_ref()
    with pytest.raises(type(ref.value)) as ours:
        call_ours()
    if not isinstance(ref.value, AttributeError):  # those name the array type
        assert str(ours.value) == str(ref.value)


@pytest.mark.parametrize("solver", SOLVERS)
def test_bad_input_as_scipy(solver):
    f_ref, f = getattr(spla, solver), getattr(tsl, solver)
    A, b = _problem(solver, np.float64, m=3)
    At, bt = _to(A, "cpu"), _to(b, "cpu")
    n = A.shape[0]
    cases = [
        ((A[:, :-1], b), (At[:, :-1], bt), {}),
        ((A, b[:-1]), (At, bt[:-1]), {}),
        ((A, b), (At, bt), {"x0": np.ones(n + 1)}),
        ((A, b), (At, bt), {"M": np.eye(n + 1)} if solver != "qmr" else {"M1": np.eye(n + 1)}),
        ((A, b), (At, bt), {"tol": 1e-5}),
    ]
    if solver != "minres":
        cases += [((A, b), (At, bt), {"atol": -1.0}), ((A, b), (At, bt), {"atol": None})]
    for args_ref, args, kw in cases:
        kw_d = {k: (_to(v, "cpu") if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
        _raises_as_scipy(lambda: f_ref(*args_ref, **kw), lambda: f(*args, **kw_d))  # noqa: B023


@pytest.mark.parametrize("solver", ["cg", "gmres", "minres"])
def test_cpu_route_runs_scipys_loop(solver, cpu_loop):
    """On CPU tensors the default route is SciPy's own loop on views: bit-identical
    iterates, also with a device sparse matrix and a trnscipy LinearOperator as M."""
    A, b = _problem(solver, np.float64)
    host_M, d = _jacobi(A)
    dd = _to(d, "cpu")
    dev_M = tsl.LinearOperator(A.shape, matvec=lambda v: dd * v, rmatvec=lambda v: dd * v,
                               dtype=A.dtype)
    x_ref, info_ref = getattr(spla, solver)(sp.csr_array(A), b, M=host_M, maxiter=5)
    x, info = getattr(tsl, solver)(trnscipy.to_device(sp.csr_array(A), "cpu"), _to(b, "cpu"),
                                   M=dev_M, maxiter=5)
    assert isinstance(x, torch.Tensor) and info == info_ref
    if cpu_loop == "scipy":
        np.testing.assert_array_equal(x.numpy(), x_ref)
    else:
        _compare(x, x_ref, np.float64)


@pytest.mark.parametrize("solver", SOLVERS)
def test_x0_string_other_than_mb_is_value_error(solver):
    """SciPy fails with UnboundLocalError here; both CPU routes raise ValueError."""
    A, b = _problem(solver, np.float64, m=3)
    with pytest.raises(UnboundLocalError):
        getattr(spla, solver)(A, b, x0="M")
    with pytest.raises(ValueError, match="x0 must be"):
        getattr(tsl, solver)(_to(A, "cpu"), _to(b, "cpu"), x0="M")


# -- dtypes, operators as A and M, offload -------------------------------------------------------

def test_dtype_promotion_as_scipy():
    A, b = _problem("cg", np.float32)
    for A_, b_ in ((A, b.astype(np.float64)), (A.astype(np.int64) * 0 + np.eye(len(b),
                                                   dtype=np.int64) * 4, b)):
        x_ref, _ = spla.cg(A_, b_)
        x, _ = tsl.cg(_to(A_, "cpu"), _to(b_, "cpu"))
        assert x.cpu().numpy().dtype == x_ref.dtype


def test_operator_and_host_operator_as_A():
    A, b = _problem("gmres", np.float64)
    At = _to(A, "cpu")
    x_ref, info_ref = spla.gmres(A, b)
    op = tsl.LinearOperator(A.shape, matvec=lambda v: At @ v, dtype=A.dtype)
    for A_ in (op, tsl.aslinearoperator(At), spla.aslinearoperator(A)):
        x, info = tsl.gmres(A_, _to(b, "cpu"))
        assert info == info_ref
        _compare(x, x_ref, np.float64)


@pytest.mark.parametrize("target", ["cpu", pytest.param("xla", marks=pytest.mark.xla)])
def test_offload_numpy_in_numpy_out(target):
    if target == "xla":
        pytest.importorskip("torch_xla")
    A, b = _problem("cg", np.float64, m=5)
    x_ref, info_ref = spla.cg(A, b)
    seen = []
    with trnscipy.offload(target):
        x, info = tsl.cg(A, b)
        tsl.cg(A, b, maxiter=2, callback=lambda xk: seen.append(type(xk)))
    assert type(x) is np.ndarray and info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-10)
    assert seen == [np.ndarray, np.ndarray]


# -- trnscipy device sparse matrices as A ------------------------------------------------------

@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("fmt", ["csr", "coo", "dia"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_cpu_sparse_products_bypass_scipys_operator_layers(solver, fmt, dtype, cpu_loop,
                                                           monkeypatch):
    """SciPy's loop on a CPU sparse container calls the product kernel on the views
    directly (``_ViewOperator``; A^T's too where SciPy's solver uses it): the iterates
    stay SciPy's bit for bit, with and without a sparse preconditioner, and operands of
    another dtype take SciPy's own path."""
    if cpu_loop != "scipy":
        pytest.skip("the torch loop does not go through SciPy's operators")
    if solver == "minres" and np.dtype(dtype).kind == "c":
        pytest.skip("SciPy's minres has no complex support")
    from trnscipy._kernels import _cpu

    calls, transposed = [], []
    on_views = _cpu._HostProduct.on_views
    monkeypatch.setattr(_cpu._HostProduct, "on_views",
                        lambda self, x: calls.append(x.dtype) or on_views(self, x))
    t_on_views = _cpu._HostProduct.transposed_on_views
    monkeypatch.setattr(_cpu._HostProduct, "transposed_on_views",
                        lambda self, x: transposed.append(x.dtype) or t_on_views(self, x))
    A, b = _problem(solver, dtype)
    A = sp.csr_array(A).asformat(fmt)
    Ad = trnscipy.to_device(A, "cpu")
    f, f_ref = getattr(tsl, solver), getattr(spla, solver)
    host_M = sp.diags_array(_jacobi(A.toarray())[1]).tocsr()  # (sparse: bit for bit too)
    dev_M = trnscipy.to_device(host_M, "cpu")
    if solver == "qmr":  # (SciPy's qmr calls M1.matvec: operators, M2 given too)
        host_M, dev_M = spla.aslinearoperator(host_M), tsl.aslinearoperator(dev_M)
    maxiter = 1000 if solver in NO_NONE_MAXITER else None
    m_ref, m = _m(solver, host_M), _m(solver, dev_M)
    if solver == "qmr":
        m_ref["M2"] = spla.aslinearoperator(sp.eye_array(A.shape[0], dtype=dtype))
        m["M2"] = tsl.aslinearoperator(trnscipy.to_device(
            sp.eye_array(A.shape[0], dtype=dtype, format="csr"), "cpu"))
    for kw_ref, kw in (({}, {}), (m_ref, m)):
        calls.clear()
        x_ref, info_ref = f_ref(A, b, maxiter=maxiter, **_kwargs(solver), **kw_ref)
        x, info = f(Ad, _to(b, "cpu"), maxiter=maxiter, **_kwargs(solver), **kw)
        assert info == info_ref
        np.testing.assert_array_equal(x.numpy(), x_ref)
        assert calls and set(calls) == {np.dtype(dtype)}
    # A^T's products (bicg, qmr) too, for real CSR/CSC/COO (DIA: SciPy's own A^T)
    if solver not in ("bicg", "qmr") or np.dtype(dtype).kind != "f":
        assert not transposed
    elif fmt != "dia":
        assert transposed
    if np.dtype(dtype) == np.float32:  # float64 operands: SciPy's upcasting product
        calls.clear()
        x_ref, info_ref = f_ref(A, b.astype(np.float64), maxiter=maxiter, **_kwargs(solver))
        x, info = f(Ad, _to(b.astype(np.float64), "cpu"), maxiter=maxiter, **_kwargs(solver))
        assert info == info_ref and x.dtype == torch.float64 and not calls
        np.testing.assert_array_equal(x.numpy(), x_ref)


@pytest.mark.parametrize("solver", ["cg", "gmres", "bicgstab", "minres", "bicg"])
def test_device_csr_matches_scipy(solver):
    A = sp.csr_array(_problem(solver, np.float64)[0])
    b = np.cos(np.arange(A.shape[0]))
    Ad = trnscipy.to_device(A, "cpu")
    for maxiter in (3, None):
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=maxiter)
        x, info = getattr(tsl, solver)(Ad, _to(b, "cpu"), maxiter=maxiter)
        assert info == info_ref
        _compare(x, x_ref, np.float64)
    # host rhs with a device matrix: the rhs moves to the matrix's device, x stays there
    x, info = getattr(tsl, solver)(Ad, b)
    assert isinstance(x, torch.Tensor) and info == info_ref


@pytest.mark.xla
def test_xla_device_csr_cg_counts(xla_device, short_blocks):
    from trnscipy._metrics import xla_counts

    A = sp.csr_array(_poisson(6))
    b = np.cos(np.arange(A.shape[0]))
    calls = []
    x_ref, info_ref = spla.cg(A, b, callback=calls.append)
    Ad = trnscipy.to_device(A, xla_device)
    with xla_counts() as counts:
        x, info = tsl.cg(Ad, _to(b, xla_device))
    print(f"\ncg xla csr: {len(calls)} iterations; {counts}")
    assert info == info_ref == 0
    _compare(x, x_ref, np.float64)
    assert counts.executions <= math.ceil(len(calls) / short_blocks) + 3, str(counts)


@pytest.mark.skipif("lgmres" not in SOLVERS, reason="lgmres runs on SciPy")
@pytest.mark.parametrize("options", [{"inner_m": 4, "outer_k": 2},
                                     {"inner_m": 4, "store_outer_Av": False},
                                     {"inner_m": 3, "prepend_outer_v": True}])
def test_lgmres_options_as_scipy(options):
    A, b = _problem("lgmres", np.float64, m=5)
    for maxiter in (2, 1000):
        x_ref, info_ref = spla.lgmres(A, b, maxiter=maxiter, **options)
        x, info = tsl.lgmres(_to(A, "cpu"), _to(b, "cpu"), maxiter=maxiter, **options)
        assert info == info_ref
        _compare(x, x_ref, np.float64)


@pytest.mark.xla
@pytest.mark.skipif("lgmres" not in SOLVERS, reason="lgmres runs on SciPy")
def test_xla_lgmres(xla_device):
    """Iterates as SciPy's; the same graphs whatever len(outer_v) is (the basis has room
    for outer_k outer vectors): nothing compiles again as outer_v fills up."""
    from trnscipy._metrics import xla_counts

    A, b = _problem("lgmres", np.float64, m=5)
    for maxiter in (2, 1000):
        calls = []
        x_ref, info_ref = spla.lgmres(A, b, maxiter=maxiter, inner_m=4, outer_k=2,
                                      callback=calls.append)
        with xla_counts() as counts:
            x, info = tsl.lgmres(_to(A, xla_device), _to(b, xla_device), maxiter=maxiter,
                                 inner_m=4, outer_k=2)
        print(f"\nlgmres xla maxiter={maxiter}: {len(calls)} outer iterations; {counts}")
        assert info == info_ref
        _compare(x, x_ref, np.float64)
        if maxiter == 1000:
            assert len(calls) > 3  # outer_v went through lengths 0, 1, 2
            assert counts.compilations == 0, counts  # all graphs met at maxiter=2
            # the setup's read, the copy of the replayed inner solve's inputs, then per
            # outer iteration its read and the replayed inner solve (its inner and outer
            # Arnoldi steps device loops)
            assert counts.executions <= 2 * len(calls) + 2, counts


@pytest.mark.skipif("gcrotmk" not in SOLVERS, reason="gcrotmk runs on SciPy")
@pytest.mark.parametrize("options", [{"m": 3, "k": 2}, {"m": 3, "k": 2, "truncate": "smallest"},
                                     {"m": 4, "discard_C": True}])
def test_gcrotmk_options_as_scipy(options):
    A, b = _problem("gcrotmk", np.float64, m=5)
    for maxiter in (3, 1000):
        x_ref, info_ref = spla.gcrotmk(A, b, maxiter=maxiter, **options)
        x, info = tsl.gcrotmk(_to(A, "cpu"), _to(b, "cpu"), maxiter=maxiter, **options)
        assert info == info_ref
        _compare(x, x_ref, np.float64)
    _raises_as_scipy(lambda: spla.gcrotmk(A, b, truncate="x"),
                     lambda: tsl.gcrotmk(_to(A, "cpu"), _to(b, "cpu"), truncate="x"))


@pytest.mark.skipif("gcrotmk" not in SOLVERS, reason="gcrotmk runs on SciPy")
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("options", [{"m": 3, "k": 2}, {"m": 3, "k": 5},
                                     {"m": 3, "k": 2, "truncate": "smallest"},
                                     {"m": 4, "discard_C": True}])
def test_gcrotmk_shared_cu_as_scipy(options, dtype):
    """Two consecutive calls sharing CU (filled by the first, recycled by the second)."""
    A, b = _problem("gcrotmk", dtype, m=5)
    b2 = np.cos(np.arange(A.shape[0])).astype(dtype)
    for maxiter in (1, 3, 1000):
        CU_ref, CU = [], []
        x_ref, info_ref = spla.gcrotmk(A, b, maxiter=3, CU=CU_ref, **options)
        x, info = tsl.gcrotmk(_to(A, "cpu"), _to(b, "cpu"), maxiter=3, CU=CU, **options)
        assert info == info_ref
        _compare(x, x_ref, dtype)
        x_ref, info_ref = spla.gcrotmk(A, b2, maxiter=maxiter, CU=CU_ref, **options)
        x, info = tsl.gcrotmk(_to(A, "cpu"), _to(b2, "cpu"), maxiter=maxiter, CU=CU, **options)
        assert info == info_ref
        _compare(x, x_ref, dtype)
        assert [c is None for c, _ in CU] == [c is None for c, _ in CU_ref]
        for (_, u), (_, u_ref) in zip(CU, CU_ref, strict=True):
            assert isinstance(u, torch.Tensor) and u.shape == u_ref.shape


@pytest.mark.xla
@pytest.mark.skipif("gcrotmk" not in SOLVERS, reason="gcrotmk runs on SciPy")
def test_xla_gcrotmk(xla_device):
    """Two calls sharing CU: the second recycles it on the device.  The graphs do not
    depend on len(CU) (C and U slots filled with zero vectors, the step count graph
    data): a third call, its CU full from the start, compiles nothing."""
    from trnscipy._metrics import xla_counts

    A, b = _problem("gcrotmk", np.float64, m=5)
    CU_ref, CU = [], []
    for rhs in (b, np.cos(np.arange(A.shape[0])), np.sin(np.arange(A.shape[0]))):
        calls = []
        x_ref, info_ref = spla.gcrotmk(A, rhs, m=4, k=2, CU=CU_ref, callback=calls.append)
        with xla_counts() as counts:
            x, info = tsl.gcrotmk(_to(A, xla_device), _to(rhs, xla_device), m=4, k=2, CU=CU)
        print(f"\ngcrotmk xla: {len(calls)} outer iterations, CU {len(CU)}; {counts}")
        assert info == info_ref
        _compare(x, x_ref, np.float64)
        assert len(CU) == len(CU_ref) and all(u.device == xla_device for _, u in CU)
    # (setup reads, the recycled CU's QR and kept count, the input copy; per outer
    # iteration its read and the replayed inner solve)
    assert counts.compilations == 0 and counts.executions <= 2 * len(calls) + 4, counts


@pytest.mark.xla
@pytest.mark.skipif("gcrotmk" not in SOLVERS, reason="gcrotmk runs on SciPy")
def test_xla_gcrotmk_k0_is_gmres_as_scipy(xla_device):
    """k=0 and no CU: no C vectors (SciPy's test_arnoldi: one outer step is GMRES's);
    the device path multiplied by the absent B (TypeError)."""
    A, b = _problem("gcrotmk", np.float64, m=5)
    x_ref, info_ref = spla.gcrotmk(A, b, m=3, k=0, maxiter=1)
    x, info = tsl.gcrotmk(_to(A, xla_device), _to(b, xla_device), m=3, k=0, maxiter=1)
    assert info == info_ref
    _compare(x, x_ref, np.float64)


def test_minres_shift_check_show_as_scipy(capsys):
    A, b = _problem("minres", np.float64, m=4)
    for kw in ({"shift": 0.7}, {"check": True}, {"shift": -1.5, "maxiter": 5}):
        x_ref, info_ref = spla.minres(A, b, **kw)
        x, info = tsl.minres(_to(A, "cpu"), _to(b, "cpu"), **kw)
        assert info == info_ref
        _compare(x, x_ref, np.float64)
    spla.minres(A, b, show=True, maxiter=4)
    ref = capsys.readouterr().out
    tsl.minres(_to(A, "cpu"), _to(b, "cpu"), show=True, maxiter=4)
    ours = capsys.readouterr().out
    assert ours == ref
    nonsym = A + np.triu(A, 1)
    _raises_as_scipy(lambda: spla.minres(nonsym, b, check=True),
                     lambda: tsl.minres(_to(nonsym, "cpu"), _to(b, "cpu"), check=True))


def test_host_sparse_preconditioner_moves_to_device():
    A = sp.csr_array(_problem("gmres", np.float64)[0])
    b = np.cos(np.arange(A.shape[0]))
    M = sp.diags_array(1.0 / A.diagonal()).tocsr()
    x_ref, info_ref = spla.gmres(A, b, M=M, maxiter=2)
    x, info = tsl.gmres(trnscipy.to_device(A, "cpu"), _to(b, "cpu"), M=M, maxiter=2)
    assert info == info_ref
    _compare(x, x_ref, np.float64)


def test_lgmres_outer_v_reaches_the_caller_as_scipy():
    """The caller's outer_v list is filled in place (the router must not copy it)."""
    A, b = _problem("lgmres", np.float64, m=5)
    outer_ref, outer = [], []
    spla.lgmres(A, b, inner_m=4, outer_k=3, outer_v=outer_ref)
    tsl.lgmres(_to(A, "cpu"), _to(b, "cpu"), inner_m=4, outer_k=3, outer_v=outer)
    assert len(outer) == len(outer_ref) > 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("solver", SOLVERS)
def test_cuda_blocks_replay_as_cuda_graphs(solver, monkeypatch):
    """On CUDA the solvers' replayed blocks are captured as CUDA graphs (none falls back
    to eager launches) and the solve still matches SciPy's."""
    from trnscipy._kernels import _cuda

    captured = []
    capture = _cuda._CudaGraph._capture

    def recording(self, args):
        plan = capture(self, args)
        captured.append(self.failure)
        return plan

    monkeypatch.setattr(_cuda._CudaGraph, "_capture", recording)
    A = sp.csr_array(_poisson(30) if solver in SYMMETRIC_ONLY else _convdiff(30))
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    x_ref, info_ref = getattr(spla, solver)(A, b, rtol=1e-8, maxiter=2000)
    cuda = torch.device("cuda")
    x, info = getattr(tsl, solver)(trnscipy.to_device(A, cuda),
                                   torch.from_numpy(b).to(cuda), rtol=1e-8, maxiter=2000)
    assert info == info_ref == 0
    assert captured and not any(captured), captured
    np.testing.assert_allclose(x.cpu().numpy(), x_ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("solver", SOLVERS)
def test_graph_functions_are_replayed(solver, cpu_loop, monkeypatch):
    """The CPU twin of test_cuda_blocks_replay_as_cuda_graphs: run on CPU tensors as on
    CUDA (host reads not free, no device While), some graph function of the solve is
    called at least three times (its first call runs eagerly, the second captures, the
    later ones replay).  gcrotmk's inner solve was a new graph per outer iteration while
    CU filled (a step count each): none replayed."""
    import importlib

    if cpu_loop == "scipy":
        pytest.skip("runs the torch loop itself")

    from trnscipy import _kernels

    for name in ("utils", "lgmres", "_gcrotmk", "iterative"):
        monkeypatch.setattr(importlib.import_module(
            f"trnscipy.sparse.linalg._isolve.{name}"), "host_reads_free", lambda device: False)
    calls = {}

    def recording(fn):
        def call(*args):
            calls[id(call)] = calls.get(id(call), 0) + 1
            return fn(*args)
        return call

    monkeypatch.setattr(_kernels.backend(torch.device("cpu")), "graph_function", recording)
    A = sp.csr_array(_poisson(12) if solver in SYMMETRIC_ONLY else _convdiff(12))
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    # (gcrotmk: k larger than its outer iterations, so CU never fills)
    kw = {"gmres": {"restart": 6}, "lgmres": {"inner_m": 4}, "gcrotmk": {"m": 4, "k": 10}}.get(
        solver, {})
    x_ref, info_ref = getattr(spla, solver)(A, b, rtol=1e-8, maxiter=2000, **kw)
    loop = getattr(tsl, solver)._trnscipy_device_impl.torch_loop
    x, info = loop(trnscipy.to_device(A, "cpu"), _to(b, "cpu"), rtol=1e-8, maxiter=2000, **kw)
    assert info == info_ref == 0
    assert max(calls.values()) >= 3, calls
    np.testing.assert_allclose(x.numpy(), x_ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("solver", ["gmres", "lgmres", "gcrotmk", "cg", "bicgstab", "qmr",
                                    "minres"])
def test_graph_functions_read_nothing_on_the_host(solver, monkeypatch):
    """The functions the Arnoldi solvers give ``graph_function`` (a restart cycle, an
    inner solve with its device loops) read nothing on the host and copy nothing from
    it (CUDA graphs need that): run on CPU tensors as on a graph device, with
    ``.item()``, ``int``/``float``/``bool`` of a tensor and ``torch.tensor`` raising
    inside them; the results still match SciPy's."""
    import importlib

    from trnscipy import _kernels

    module = {"lgmres": "lgmres", "gcrotmk": "_gcrotmk"}.get(solver, "iterative")
    for name in ("utils", module):
        monkeypatch.setattr(importlib.import_module(
            f"trnscipy.sparse.linalg._isolve.{name}"), "host_reads_free", lambda device: False)
    calls = []

    def no_host_reads(fn):
        def call(*args):
            def refuse(*_, **__):
                raise AssertionError("a host read or host copy in a graph function")

            calls.append(fn)
            with pytest.MonkeyPatch.context() as mp:
                for name in ("item", "__bool__", "__int__", "__float__", "__index__"):
                    mp.setattr(torch.Tensor, name, refuse)
                mp.setattr(torch, "tensor", refuse)
                return fn(*args)
        return call

    monkeypatch.setattr(_kernels.backend(torch.device("cpu")), "graph_function", no_host_reads)
    A, b = _problem(solver, np.float64, m=5)
    kw = {"gmres": {"restart": 6}, "lgmres": {"inner_m": 4}, "gcrotmk": {"m": 4, "k": 2}}.get(
        solver, {})
    x_ref, info_ref = getattr(spla, solver)(A, b, **kw)
    loop = getattr(tsl, solver)._trnscipy_device_impl.torch_loop
    x, info = loop(_to(A, "cpu"), _to(b, "cpu"), **kw)
    assert calls and info == info_ref
    _compare(x, x_ref, np.float64)


# -- lgmres / gcrotmk: breakdown with a rank-deficient inner problem, state kept by offload ----

def _nilpotent_residuals(solver, device):
    """SciPy's test_breakdown_underdetermined: A nilpotent, maxiter=1; the inner problem's
    R is rank deficient after the breakdown and SciPy's lstsq takes its minimum-norm
    solution (a triangular solve gave x ~ 1e16)."""
    A = np.triu(np.ones((4, 4)), 1)
    kw = {"lgmres": {"inner_m": 6}, "gcrotmk": {"m": 6}}[solver]  # (short: fewer steps)
    for b in (np.ones(4), np.array([1.0, 1, 1, 0]), np.array([1.0, 1, 0, 0])):
        x_ref, info_ref = getattr(spla, solver)(A, b, maxiter=1, **kw)
        x, info = getattr(tsl, solver)(_to(A, device), _to(b, device), maxiter=1, **kw)
        assert info == info_ref
        res, res_ref = (np.linalg.norm(A @ v - b) for v in (trnscipy.to_host(x), x_ref))
        # (x itself is SciPy's only up to the rounding noise its breakdown step spans)
        np.testing.assert_allclose(res, res_ref, rtol=1e-10, err_msg=repr(b))


@pytest.mark.parametrize("solver", ["lgmres", "gcrotmk"])
@pytest.mark.parametrize("route", ["host", "graph"])
def test_breakdown_underdetermined_as_scipy(solver, route, cpu_loop, monkeypatch):
    """Both inner-solve routes of the torch loop on CPU tensors: the host loop and the
    graph devices' masked solve (``host_reads_free`` False), whose rank-deficient R the
    host solves after the outer read."""
    import importlib

    if route == "graph":
        module = {"lgmres": "lgmres", "gcrotmk": "_gcrotmk"}[solver]
        for name in ("utils", module):
            monkeypatch.setattr(importlib.import_module(
                f"trnscipy.sparse.linalg._isolve.{name}"), "host_reads_free", lambda d: False)
    _nilpotent_residuals(solver, "cpu")


@pytest.mark.xla
@pytest.mark.parametrize("solver", ["lgmres", "gcrotmk"])
def test_xla_breakdown_underdetermined_as_scipy(solver, xla_device):
    _nilpotent_residuals(solver, xla_device)


def _scipys_system():
    """The system of SciPy's test_gcrotmk.py / test_lgmres.py: a host LinearOperator (a
    NumPy matvec over an integer csr_array) that counts its products in ``counts[-1]``."""
    Am = sp.csr_array(np.array([[-2, 1, 0, 0, 0, 9], [1, -2, 1, 0, 5, 0], [0, 1, -2, 1, 0, 0],
                                [0, 0, 1, -2, 1, 0], [0, 3, 0, 1, -2, 1], [1, 0, 0, 0, 1, -2]]))
    counts = []

    def matvec(v):
        counts[-1] += 1
        return Am @ v

    return Am, spla.LinearOperator(Am.shape, matvec=matvec, dtype=Am.dtype), counts


@pytest.mark.parametrize("target", ["cpu", pytest.param("xla", marks=[pytest.mark.xla,
                                                                      pytest.mark.slow])])
def test_offload_solver_state_as_scipy(target):
    """SciPy's test_CU and test_outer_v under offload: CU / outer_v come back holding NumPy
    arrays as SciPy's do (they held device tensors, so the second call sharing them was a
    device call and returned a tensor, which the tests' NumPy operator could not take),
    with SciPy's product counts and iterates."""
    if target == "xla":
        pytest.importorskip("torch_xla")
    Am, A, counts = _scipys_system()
    b = np.arange(1.0, 7.0)
    runs = {}
    for mod in (spla, tsl):
        counts.clear()
        CU, outer_v, xs = [], [], []
        calls = [("gcrotmk", {"CU": CU}), ("gcrotmk", {"CU": CU}),
                 ("lgmres", {"outer_v": outer_v, "inner_m": 6, "outer_k": 6}),
                 ("lgmres", {"outer_v": outer_v, "inner_m": 6, "outer_k": 6,
                             "prepend_outer_v": True})]
        with warnings.catch_warnings(), trnscipy.offload(target):
            warnings.simplefilter("ignore", trnscipy.DeviceFallbackWarning)
            for solver, kw in calls:
                counts.append(0)
                xs.append(getattr(mod, solver)(A, b, x0=np.zeros(6), rtol=1e-14, **kw))
        runs[mod] = (list(counts), xs, [type(t) for pair in CU + outer_v for t in pair])
    (counts_ref, xs_ref, state_ref), (counts, xs, state) = runs[spla], runs[tsl]
    assert counts == counts_ref and state == state_ref
    for (x, info), (x_ref, info_ref) in zip(xs, xs_ref, strict=True):
        assert type(x) is np.ndarray and info == info_ref
        np.testing.assert_allclose(x, x_ref, rtol=1e-12)


@pytest.mark.xla
def test_xla_gcrotmk_host_operator_products_as_scipy(xla_device):
    """SciPy's test_gcrotmk.py test_preconditioner under offload to XLA: with a host
    operator the inner solve stops where SciPy's does (it ran all m + k Arnoldi steps on
    the device's masked route: m + k + 2 products of A, SciPy 3)."""
    Am, A, counts = _scipys_system()
    b = np.arange(1.0, 7.0)
    M = spla.LinearOperator(Am.shape, matvec=spla.splu(Am.tocsc().astype(float)).solve)
    runs = []
    for mod in (spla, tsl):
        counts.append(0)
        with warnings.catch_warnings(), trnscipy.offload("xla"):
            warnings.simplefilter("ignore", trnscipy.DeviceFallbackWarning)
            x, info = mod.gcrotmk(A, b, x0=np.zeros(6), rtol=1e-14, M=M, m=4, k=2)
        runs.append((counts[-1], x, info))
    (count_ref, x_ref, info_ref), (count, x, info) = runs
    assert count == count_ref and info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-12)
