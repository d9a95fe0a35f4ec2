"""lobpcg on device data against SciPy's lobpcg by paired execution (same X through both).

CPU tensors run SciPy's lobpcg on views (the ``eigen`` kernel); the torch implementation
(XLA's and CUDA's) is also checked on the CPU through ``torch_impl``.  In float64 the
torch iteration follows SciPy's step for step, so eigenvalues and histories agree to
rounding; eigenvectors are judged by residuals and subspaces, not signs.
"""

import importlib
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl
from trnscipy.sparse.linalg._eigen.lobpcg.lobpcg import _lobpcg

torch = pytest.importorskip("torch")


def _poisson(m, dtype=np.float64):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    return (sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).tocsr().astype(dtype)


def _laplacian(n, seed=0):
    rng = np.random.default_rng(seed)
    i = np.concatenate([np.arange(n), rng.integers(0, n, 2 * n)])
    j = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 2 * n)])
    W = sp.coo_array((np.ones(i.size), (i, j)), shape=(n, n)).tocsr()
    W = ((W + W.T) > 0).astype(float)
    W.setdiag(0)
    W.eliminate_zeros()
    return (sp.diags_array(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()


def _dev(x, device):
    if x is None or not isinstance(x, np.ndarray | sp.sparray | sp.spmatrix):
        return x
    if sp.issparse(x):
        return trnscipy.to_device(x, device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _run(func, *args, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = func(*args, **kw)
    messages = sorted(str(w.message).split(" ")[0] for w in caught
                      if issubclass(w.category, UserWarning))
    return out, messages


def _check(A, B, ref, got, dtype=np.float64, vec_tol=None):
    """Eigenvalues as SciPy's; residuals ||A x - lam B x|| no larger than SciPy's (to a
    factor); the eigenvectors B-orthonormal and spanning SciPy's subspace when converged."""
    lam, X = (trnscipy.to_host(x) for x in got[:2])
    lam_ref, X_ref = ref[:2]
    assert lam.dtype == lam_ref.dtype and X.dtype == X_ref.dtype
    rel = 1e-8 if np.dtype(dtype).itemsize >= 8 and np.dtype(dtype).kind == "f" else 1e-4
    if np.dtype(dtype) == np.complex128:
        rel = 1e-8
    scale = max(np.abs(lam_ref).max(), 1.0)
    assert np.abs(lam - lam_ref).max() <= rel * scale, (lam, lam_ref)
    Ad = A.toarray() if sp.issparse(A) else A
    Bd = np.eye(Ad.shape[0]) if B is None else (B.toarray() if sp.issparse(B) else B)
    res = np.linalg.norm(Ad @ X - Bd @ X * lam, axis=0)
    res_ref = np.linalg.norm(Ad @ X_ref - Bd @ X_ref * lam_ref, axis=0)
    assert res.max() <= 10 * res_ref.max() + (vec_tol or 1e-10 * scale), (res, res_ref)
    gram = X.conj().T @ Bd @ X
    assert np.abs(gram - np.eye(gram.shape[0])).max() <= (1e-8 if rel < 1e-6 else 1e-3)


ROUTES = ["kernel", "torch"]


def _lobpcg_for(route, lane):
    if lane == "cpu" and route == "torch":
        return _lobpcg.torch_impl
    if lane != "cpu" and route == "torch":
        pytest.skip("off the CPU the routed call is the torch loop")
    return tsl.lobpcg


def _slow_on_xla(request, lane):
    if lane == "xla" and (request.config.getoption("markexpr") or "").strip() != "slow":
        pytest.skip("slow on the XLA lane (graph compilations): run with -m slow")


def _cases():
    A = _poisson(10)
    n = A.shape[0]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 3))
    mass = sp.diags_array(rng.uniform(1, 2, n)).tocsr()
    jacobi = sp.diags_array(1 / A.diagonal()).tocsr()
    Y = np.linalg.eigh(A.toarray())[1][:, :2]  # deflate the two lowest modes
    L = _laplacian(90)
    XL = rng.standard_normal((90, 3))
    return {
        "poisson-largest": (A, X, dict(maxiter=100, tol=1e-5)),
        "poisson-smallest-jacobi": (A, X, dict(M=jacobi, largest=False, maxiter=100)),
        "generalized-mass": (A, X, dict(B=mass, maxiter=100)),
        "constraints": (A, X, dict(Y=Y, largest=False, maxiter=100)),
        "histories": (A, X, dict(maxiter=7, retLambdaHistory=True,
                                 retResidualNormsHistory=True)),
        "laplacian-smallest": (L, XL, dict(largest=False, maxiter=150, tol=1e-6)),
    }


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", list(_cases()))
def test_lobpcg_as_scipy(request, lane, device, route, case):
    _slow_on_xla(request, lane)  # in CI the XLA lane is test_lobpcg_xla_graph_counts
    lobpcg = _lobpcg_for(route, lane)
    A, X, kw = _cases()[case]
    ref, ref_warn = _run(spla.lobpcg, A, X.copy(), **kw)  # SciPy overwrites its X
    got, got_warn = _run(lobpcg, _dev(A, device), _dev(X, device),
                         **{k: _dev(v, device) for k, v in kw.items()})
    assert got_warn == ref_warn
    assert got[0].device.type == device.type and got[1].device.type == device.type
    _check(A, kw.get("B"), ref, got)
    if "Y" in kw:
        assert np.abs(kw["Y"].T @ trnscipy.to_host(got[1])).max() <= 1e-10
    if kw.get("retLambdaHistory"):
        assert len(got) == len(ref) == 4
        for h_ref, h in zip(ref[2:], got[2:], strict=True):
            assert len(h) == len(h_ref)
            got_h = np.array([trnscipy.to_host(x) for x in h])
            assert np.abs(got_h - np.array(h_ref)).max() <= 1e-8 * np.abs(h_ref).max()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_lobpcg_dtypes(request, lane, device, route, dtype):
    _slow_on_xla(request, lane)
    lobpcg = _lobpcg_for(route, lane)
    rng = np.random.default_rng(1)
    n = 80
    H = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n))
                                       if np.dtype(dtype).kind == "c" else 0)
    A = ((H + H.conj().T) / 2 + np.diag(np.arange(n) * 0.5)).astype(dtype)
    X = rng.standard_normal((n, 3)).astype(dtype)
    ref, ref_warn = _run(spla.lobpcg, A, X, maxiter=200, largest=False)
    got, got_warn = _run(lobpcg, _dev(A, device), _dev(X, device), maxiter=200, largest=False)
    assert got_warn == ref_warn
    _check(A, None, ref, got, dtype, vec_tol=1e-3 if dtype == np.float32 else None)


@pytest.mark.parametrize("route", ROUTES)
def test_lobpcg_operator_and_callable_inputs(request, lane, device, route):
    _slow_on_xla(request, lane)
    lobpcg = _lobpcg_for(route, lane)
    A = _poisson(8)
    Ad = _dev(A, device)
    X = np.random.default_rng(2).standard_normal((64, 2))
    ref = spla.lobpcg(A, X, maxiter=80, largest=False)
    op = tsl.LinearOperator(A.shape, matvec=lambda v: Ad @ v, matmat=lambda V: Ad @ V,
                            dtype=A.dtype)
    for given in (op, lambda V: Ad @ V, _dev(A.toarray(), device)):
        got = lobpcg(given, _dev(X, device), maxiter=80, largest=False)
        _check(A, None, ref, got)


@pytest.mark.parametrize("route", ROUTES)
def test_lobpcg_small_problem_takes_the_dense_path(lane, device, route):
    lobpcg = _lobpcg_for(route, lane)
    A = _poisson(3)
    B = np.diag(np.linspace(1, 2, 9))
    X = np.random.default_rng(3).standard_normal((9, 2))
    for largest in (True, False):
        ref, ref_warn = _run(spla.lobpcg, A, X, B=B, largest=largest)
        got, got_warn = _run(lobpcg, _dev(A, device), _dev(X, device), B=_dev(B, device),
                             largest=largest)
        assert got_warn == ref_warn == ["The"]
        _check(A, B, ref, got)
    with pytest.raises(NotImplementedError), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lobpcg(_dev(A, device), _dev(X, device), Y=_dev(X[:, :1], device))


@pytest.mark.parametrize("route", ROUTES)
def test_lobpcg_bad_input_as_scipy(lane, device, route):
    lobpcg = _lobpcg_for(route, lane)
    A = _poisson(6)
    X = np.random.default_rng(4).standard_normal((36, 3))
    for bad in (None, X[:, 0]):
        with pytest.raises(ValueError):
            spla.lobpcg(A, bad)
        with pytest.raises(ValueError):
            lobpcg(_dev(A, device), _dev(bad, device))
    dependent = np.repeat(X[:, :1], 3, axis=1)
    with pytest.raises(ValueError, match="Linearly dependent initial"):
        spla.lobpcg(A, dependent)
    with pytest.raises(ValueError, match="Linearly dependent initial"):
        lobpcg(_dev(A, device), _dev(dependent, device))
    Y = np.zeros((36, 2))
    with pytest.raises(ValueError, match="Linearly dependent constraints"):
        spla.lobpcg(A, X, Y=Y)
    with pytest.raises(ValueError, match="Linearly dependent constraints"):
        lobpcg(_dev(A, device), _dev(X, device), Y=_dev(Y, device))
    if lane == "xla":
        return  # the cast below compiles a whole iteration: the CPU lanes check it
    Xi = np.eye(36, 2, dtype=np.int64)
    ref, ref_warn = _run(spla.lobpcg, A, Xi, maxiter=3)
    got, got_warn = _run(lobpcg, _dev(A, device), _dev(Xi, device), maxiter=3)
    assert "Data" in got_warn and "Data" in ref_warn
    assert trnscipy.to_host(got[0]).dtype == ref[0].dtype


@pytest.mark.parametrize("route", ROUTES)
def test_lobpcg_verbose_reports_nonhermitian_grams(lane, device, route, capsys):
    """verbosityLevel: SciPy warns of a non-Hermitian Gram matrix (A not symmetric)."""
    lobpcg = _lobpcg_for(route, lane)
    n = 10
    X = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    A = np.arange(n * n, dtype=np.float32).reshape(n, n)
    for M in (A, A + A.T):
        ref, ref_warn = _run(spla.lobpcg, M, X, verbosityLevel=1, maxiter=0)
        got, got_warn = _run(lobpcg, _dev(M, device), _dev(X, device), verbosityLevel=1,
                             maxiter=0)
        assert ("Matrix" in got_warn) == ("Matrix" in ref_warn) == (M is A)
    assert capsys.readouterr().out.startswith("Solving standard eigenvalue")


# -- XLA: graph counts, no host fallbacks ----------------------------------------------------

def _aten_fallbacks():
    import torch_xla.debug.metrics as met

    return sum(met.counter_value(n) or 0 for n in met.counter_names()
               if n.startswith("aten::") and n != "aten::_local_scalar_dense")


@pytest.mark.xla
def test_lobpcg_xla_graph_counts(xla_device, monkeypatch):
    """One graph execution per iteration (plus setup and postprocessing), no
    compilation on a repeated call, no aten CPU fallback, nothing on the host."""
    from trnscipy._metrics import xla_counts

    module = importlib.import_module("trnscipy.sparse.linalg._eigen.lobpcg.lobpcg")

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    steps = []
    real = module._rayleigh_ritz
    monkeypatch.setattr(module, "_rayleigh_ritz", lambda *a: (steps.append(1), real(*a))[1])
    A = _poisson(10)
    X = np.random.default_rng(5).standard_normal((100, 3))
    kw = {"maxiter": 15, "retResidualNormsHistory": True}
    ref, _ = _run(spla.lobpcg, A, X, **kw)
    Ad, Xd = _dev(A, xla_device), _dev(X, xla_device)
    fallbacks = _aten_fallbacks()
    with xla_counts() as first:
        got, _ = _run(tsl.lobpcg, Ad, Xd, **kw)
    with xla_counts() as again:
        got, _ = _run(tsl.lobpcg, Ad, Xd, **kw)
    assert _aten_fallbacks() == fallbacks
    _check(A, None, ref, got)
    iterations = len(steps) // 2  # two calls
    assert first.executions <= iterations + 3, (first, iterations)
    assert again.compilations == 0 and again.executions == first.executions, again


# -- must show: 2-D Poisson, 10^4 unknowns, strict mode on XLA ------------------------------

@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lobpcg_poisson_1e4_strict_xla(xla_device, monkeypatch, dtype):
    """k=4 largest, no preconditioner (SciPy converges in about 230 iterations)."""
    import time

    from trnscipy._metrics import xla_counts
    module = importlib.import_module("trnscipy.sparse.linalg._eigen.lobpcg.lobpcg")

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    steps = []
    real = module._rayleigh_ritz
    monkeypatch.setattr(module, "_rayleigh_ritz", lambda *a: (steps.append(1), real(*a))[1])
    A = _poisson(100, dtype)
    X = np.random.default_rng(6).standard_normal((A.shape[0], 4)).astype(dtype)
    kw = {"maxiter": 300, "retResidualNormsHistory": True}
    if dtype == np.float32:  # SciPy's default, sqrt(eps) n = 3.5, stops at iteration 0
        kw["tol"] = 1e-3
    ref, ref_warn = _run(spla.lobpcg, A, X.copy(), **kw)
    Ad, Xd = _dev(A, xla_device), _dev(X, xla_device)
    fallbacks = _aten_fallbacks()
    start = time.perf_counter()
    with xla_counts() as first:
        got, got_warn = _run(tsl.lobpcg, Ad, Xd, **kw)
    wall = time.perf_counter() - start
    iterations = len(steps)
    with xla_counts() as again:
        tsl.lobpcg(Ad, Xd, **kw)
    assert _aten_fallbacks() == fallbacks
    print(f"lobpcg Poisson 10^4 {np.dtype(dtype)}: {iterations} iterations "
          f"(SciPy {len(ref[2]) - 1}), first {first} ({wall:.1f} s), repeat {again}")
    _check(A, None, ref[:2], got[:2], dtype, vec_tol=1e-2 if dtype == np.float32 else None)
    assert first.executions <= iterations + 3 and again.compilations == 0


def test_lobpcg_complex128_on_xla(xla_device):
    """complex128 on the XLA lane (torch-xla 2.9 labels complex128 abs complex128 and
    complex128 quotients float32: the refinement's coupling norm failed to lower)."""
    rng = np.random.default_rng(4)
    n = 20
    H = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    A = (H + H.conj().T) / 2 + np.diag(np.arange(n) * 0.5)
    X = rng.standard_normal((n, 2)).astype(np.complex128)
    ref = spla.lobpcg(A, X, maxiter=200, largest=False, tol=1e-9)
    got = tsl.lobpcg(_dev(A, xla_device), _dev(X, xla_device), maxiter=200, largest=False,
                     tol=1e-9)
    _check(A, None, ref, got, np.complex128)
