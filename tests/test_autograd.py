"""Implicit differentiation through solvers (trnscipy/_autograd.py): gradcheck against
finite differences in float64 on CPU tensors, a non-converged solve's backward, and the
float32 XLA gradient of cg against the float64 CPU one with its execution count."""

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torch_xla") is not None:
    # torch's autograd engine sizes its per-device queues at the process's first backward
    # pass: an XLA backward after a CPU one fails an internal assert (engine.cpp) unless
    # the XLA runtime had started (importing torch_xla is not enough).  Started here, at
    # collection, before any test of the process runs.
    import torch_xla

    torch_xla.device()

import trnscipy  # noqa: E402
import trnscipy.linalg as tla  # noqa: E402
import trnscipy.sparse.linalg as tsla  # noqa: E402
from trnscipy._autograd import _with_values  # noqa: E402

N = 12
TIGHT = {"rtol": 1e-13, "atol": 0.0}


def _gradcheck(f, *inputs, fast=False):
    """torch's gradcheck (finite differences); ``fast``: its check of a random projection
    of the Jacobian (dense operands: n^2 inputs by n^2 outputs otherwise)."""
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=fast)


def _rng():
    return np.random.default_rng(7)


def _nonsymmetric(fmt="csr"):
    rng = _rng()
    S = sp.random(N, N, density=0.4, random_state=3, data_rvs=rng.standard_normal)
    return trnscipy.to_device((S + 6 * sp.eye(N)).asformat(fmt), "cpu")


def _spd():
    """A sparse SPD matrix and a parametrisation of its values by its upper triangle
    (symmetric perturbations only: the eigen and symmetric Krylov solvers assume them)."""
    rng = _rng()
    S = sp.random(N, N, density=0.3, random_state=5, data_rvs=rng.standard_normal)
    S = (S + S.T + 8 * sp.eye(N)).tocsr()
    S.sort_indices()
    row = np.repeat(np.arange(N), np.diff(S.indptr))
    keys = np.minimum(row, S.indices) * N + np.maximum(row, S.indices)
    uniq, index = np.unique(keys, return_inverse=True)
    first = np.array([np.flatnonzero(keys == k)[0] for k in uniq])
    A = trnscipy.to_device(S, "cpu")
    params = A.data[first].clone().requires_grad_(True)
    index = torch.from_numpy(index)
    return A, params, lambda p: _with_values(A, p[index])


def _vec(k=None, seed=0):
    rng = np.random.default_rng(seed)
    shape = (N,) if k is None else (N, k)
    return torch.tensor(rng.standard_normal(shape), requires_grad=True)


def _values(A):
    return A.data.clone().requires_grad_(True)


@pytest.fixture(params=["scipy", "device"])
def route(request, monkeypatch):
    """CPU tensors: SciPy's SuperLU and Krylov loops (the CPU kernels), or the algorithms
    the other devices run (block LU, the torch loop)."""
    if request.param == "device":
        from trnscipy._kernels import _IMPLS, kernel

        for op in ("spsolve", "splu"):
            monkeypatch.setitem(_IMPLS, (f"sparse.linalg.{op}", "cpu"),
                                _IMPLS[(f"sparse.linalg.{op}", "generic")])
        monkeypatch.setitem(_IMPLS, ("krylov", "cpu"), kernel("krylov", torch.device("meta")))
    return request.param


# ---- sparse direct ----------------------------------------------------------------------

@pytest.mark.parametrize("k", [None, 3])
def test_spsolve(k, route):
    A = _nonsymmetric()
    _gradcheck(lambda d, b: tsla.spsolve(_with_values(A, d), b), _values(A), _vec(k),
               fast=route == "device")


@pytest.mark.parametrize("trans", ["N", "T", "H"])
def test_splu_solve(trans, route):
    A = _nonsymmetric("csc")
    _gradcheck(lambda d, b: tsla.splu(_with_values(A, d)).solve(b, trans=trans),
               _values(A), _vec(2), fast=route == "device")


def test_splu_solve_rhs_only_and_factorized(route):
    A = _nonsymmetric("csc")
    lu = tsla.splu(A)
    _gradcheck(lambda b: lu.solve(b, trans="T"), _vec(), fast=route == "device")
    _gradcheck(lambda d, b: tsla.factorized(_with_values(A, d))(b), _values(A), _vec(),
               fast=route == "device")


def test_gradient_is_on_the_stored_pattern():
    """dL/dA_ij = -y_i x_j for stored (i, j) only: checked against the dense formula."""
    A = _nonsymmetric()
    d, b = _values(A), _vec()
    x = tsla.spsolve(_with_values(A, d), b)
    w = torch.arange(N, dtype=torch.float64)
    (w * x).sum().backward()
    dense = A.toarray().numpy()
    xs = np.linalg.solve(dense, b.detach().numpy())
    y = np.linalg.solve(dense.T, w.numpy())
    coo = A.tocoo()
    expect = -y[coo.row.numpy()] * xs[coo.col.numpy()]
    np.testing.assert_allclose(d.grad.numpy(), expect, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), y, rtol=1e-12)


# ---- Krylov --------------------------------------------------------------------------------

@pytest.mark.parametrize("solver", ["cg", "minres"])
def test_symmetric_krylov(solver, route):
    A, params, of = _spd()
    _gradcheck(lambda p, b: getattr(tsla, solver)(of(p), b, rtol=1e-13)[0], params, _vec(),
               fast=route == "device")


@pytest.mark.parametrize("solver", ["gmres", "bicgstab", "bicg", "cgs", "qmr", "tfqmr",
                                    "lgmres", "gcrotmk"])
def test_nonsymmetric_krylov(solver, route):
    """A scalar loss w . x (unit right-hand sides break bicg-type solvers down on a
    matrix this sparse, in SciPy too)."""
    A = _nonsymmetric()
    w = torch.from_numpy(np.random.default_rng(1).standard_normal(N))
    _gradcheck(lambda d, b: (w * getattr(tsla, solver)(_with_values(A, d), b, **TIGHT)[0]).sum(),
               _values(A), _vec(), fast=route == "device")


def test_krylov_dense_operand_and_preconditioner():
    A = _nonsymmetric()
    a = torch.tensor(A.toarray().numpy(), requires_grad=True)
    M = trnscipy.to_device(sp.diags(1 / A.toarray().numpy().diagonal()).tocsr(), "cpu")
    _gradcheck(lambda a, b: tsla.gmres(a, b, M=M, **TIGHT)[0], a, _vec())


def test_unconverged_backward_raises(route):
    A, params, of = _spd()
    x, info = tsla.cg(of(params), _vec(), maxiter=1)
    assert info > 0
    with pytest.raises(RuntimeError, match="did not converge"):
        x.sum().backward()


def test_no_grad_keeps_the_plain_route():
    """Without a gradient the solvers return what they returned before (SciPy's iterate
    bit for bit on CPU tensors)."""
    import scipy.sparse.linalg as sla

    A, params, of = _spd()
    b = _vec().detach()
    x, info = tsla.cg(A, b, rtol=1e-8)
    xs, infos = sla.cg(trnscipy.to_host(A), b.numpy(), rtol=1e-8)
    assert info == infos and np.array_equal(x.numpy(), xs)
    with torch.no_grad():
        x2, _ = tsla.cg(of(params), b, rtol=1e-8)
    assert not x2.requires_grad and np.array_equal(x2.numpy(), xs)


def test_calls_without_gradients_run_no_autograd_code():
    """The dispatcher sends only calls with an operand that requires a gradient to the
    differentiable implementation: the others never run code of trnscipy/_autograd.py
    (also with grad mode off and an operand that requires one)."""
    import sys

    import trnscipy._autograd as ag

    A, params, of = _spd()
    Ag = of(params)  # (values that require a gradient, for grad mode off)
    a, b = _dense_spd().detach(), _vec().detach()
    calls = [lambda: tsla.cg(A, b), lambda: tsla.gmres(A, b),
             lambda: tsla.eigsh(A, k=2), lambda: tsla.expm_multiply(A, b),
             lambda: tsla.spsolve(A, b), lambda: tsla.splu(A.tocsc()).solve(b),
             lambda: tla.solve(a, b), lambda: tla.cho_solve(tla.cho_factor(a), b),
             lambda: tla.lu_solve(tla.lu_factor(a), b), lambda: tla.eigh(a)]
    entered = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == ag.__file__:
            entered.append(frame.f_code.co_name)

    for call in calls:
        sys.setprofile(profile)
        try:
            call()
            with torch.no_grad():
                tsla.cg(Ag, b)
        finally:
            sys.setprofile(None)
    assert entered == []
    x, _ = tsla.cg(Ag, b, rtol=1e-10)  # a gradient wanted: the declared route
    assert x.requires_grad


# ---- dense ---------------------------------------------------------------------------------

def _dense():
    rng = _rng()
    return torch.tensor(rng.standard_normal((N, N)) + N * np.eye(N), requires_grad=True)


def _dense_spd():
    m = _rng().standard_normal((N, N))
    return torch.tensor(m @ m.T + N * np.eye(N), requires_grad=True)


@pytest.mark.parametrize("assume_a,transposed", [
    (None, False), (None, True), ("pos", False), ("sym", False), ("lower triangular", False),
    ("upper triangular", True), ("diagonal", False), ("tridiagonal", False)])
def test_solve(assume_a, transposed):
    a = _dense_spd() if assume_a in ("pos", "sym") else _dense()
    _gradcheck(lambda a, b: tla.solve(a, b, assume_a=assume_a, transposed=transposed), a,
               _vec(2), fast=True)


def test_solve_complex():
    rng = _rng()
    a = torch.tensor(rng.standard_normal((N, N)) + 1j * rng.standard_normal((N, N))
                     + N * np.eye(N), requires_grad=True)
    b = torch.tensor(rng.standard_normal(N) + 1j * rng.standard_normal(N), requires_grad=True)
    _gradcheck(lambda a, b: tla.solve(a, b), a, b, fast=True)


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_and_cho_solve(lower):
    a = _dense_spd()
    _gradcheck(lambda a: tla.cholesky(a, lower=lower), a, fast=True)
    c = tla.cho_factor(a.detach(), lower=lower)[0].clone().requires_grad_(True)
    _gradcheck(lambda c, b: tla.cho_solve((c, lower), b), c, _vec(2), fast=True)


@pytest.mark.parametrize("trans", [0, 1, 2])
def test_lu_solve(trans):
    lu, piv = tla.lu_factor(_dense().detach())
    _gradcheck(lambda lu, b: tla.lu_solve((lu, piv), b, trans=trans),
               lu.clone().requires_grad_(True), _vec(2), fast=True)


@pytest.mark.parametrize("lower", [True, False])
def test_eigh(lower):
    a = _dense_spd()
    _gradcheck(lambda a: tla.eigh(a, lower=lower, eigvals_only=True), a, fast=True)

    def vectors(a):  # a loss invariant to each eigenvector's sign
        w, v = tla.eigh(a, lower=lower)
        return w, v * torch.sign(v[:1])
    _gradcheck(vectors, a, fast=True)


def test_eigh_repeated_eigenvalue():
    """Eigenvalue gradients exist; eigenvector gradients only for a loss invariant to the
    basis of the repeated eigenspace (a projector), else ValueError."""
    q, _ = np.linalg.qr(_rng().standard_normal((N, N)))
    lam = np.arange(1.0, N + 1)
    lam[1] = lam[0]
    a = torch.tensor((q * lam) @ q.T, requires_grad=True)
    w, v = tla.eigh(a)
    P = v[:, :2] @ v[:, :2].T  # projector onto the repeated eigenspace
    (P * torch.arange(N * N, dtype=torch.float64).reshape(N, N)).sum().backward()
    assert torch.isfinite(a.grad).all()
    w, v = tla.eigh(a)
    with pytest.raises(ValueError, match="repeated eigenvalue"):
        (v[:, 0] * torch.arange(N, dtype=torch.float64)).sum().backward()


# ---- sparse eigensolvers, svds, expm_multiply ---------------------------------------------------

@pytest.mark.parametrize("vectors", [True, False])
def test_eigsh(vectors):
    A, params, of = _spd()
    def f(p):
        out = tsla.eigsh(of(p), k=3, which="LA", tol=1e-14, return_eigenvectors=vectors)
        return out[0] if vectors else out
    _gradcheck(f, params)


def test_lobpcg():
    A, params, of = _spd()
    X = torch.from_numpy(np.random.default_rng(2).standard_normal((N, 2)))
    _gradcheck(lambda p: tsla.lobpcg(of(p), X, tol=1e-12, maxiter=500)[0], params)


def test_eigenvector_gradient_raises():
    A, params, of = _spd()
    w, v = tsla.eigsh(of(params), k=2, which="LA", tol=1e-14)
    with pytest.raises(NotImplementedError, match="eigenvectors"):
        (v[0] * 1).sum().backward()


@pytest.mark.parametrize("vectors", [True, False])
def test_svds(vectors):
    A = _nonsymmetric()
    def f(d):
        out = tsla.svds(_with_values(A, d), k=3, tol=1e-14, return_singular_vectors=vectors)
        return out[1] if vectors else out
    _gradcheck(f, _values(A))


def test_expm_multiply():
    A = _nonsymmetric()
    A = _with_values(A, A.data * 0.1)
    _gradcheck(lambda b: tsla.expm_multiply(A, b), _vec(2))
    with pytest.raises(NotImplementedError, match="respect to A"):
        tsla.expm_multiply(_with_values(A, _values(A)), _vec())


# ---- XLA: float32 gradient against float64, backward cost ---------------------------------------

def _poisson(m):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return (sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).tocsr()


def _cg_gradient(A_host, b_host, w_host, device, dtype, rtol):
    from trnscipy._metrics import xla_counts

    A = trnscipy.to_device(A_host.astype(dtype), device)
    A.data.requires_grad_(True)
    b = trnscipy.to_device(b_host.astype(dtype), device).requires_grad_(True)
    w = trnscipy.to_device(w_host.astype(dtype), device)
    with xla_counts() as forward:
        x, info = tsla.cg(A, b, rtol=rtol, atol=0.0)
        loss = (w * x).sum()
    with xla_counts() as backward:  # (the block's end computes the gradients)
        loss.backward()
    grads = (trnscipy.to_host(A.data.grad), trnscipy.to_host(b.grad))
    with xla_counts() as plain:  # one more solve without gradients: its cost
        with torch.no_grad():
            tsla.cg(A, b.detach() * 2, rtol=rtol, atol=0.0)
    return info, grads, forward, backward, plain


def _check_xla_cg(m, rtol):
    A = _poisson(m)
    rng = np.random.default_rng(0)
    b, w = rng.standard_normal(A.shape[0]), rng.standard_normal(A.shape[0])
    info64, (gA64, gb64), *_ = _cg_gradient(A, b, w, "cpu", np.float64, 1e-12)
    info, (gA, gb), forward, backward, plain = _cg_gradient(
        A, b, w, trnscipy.resolve_device("xla"), np.float32, rtol)
    assert info == 0 and info64 == 0
    err_A = np.linalg.norm(gA - gA64) / np.linalg.norm(gA64)
    err_b = np.linalg.norm(gb - gb64) / np.linalg.norm(gb64)
    print(f"\nn={A.shape[0]}: relative gradient error A.data {err_A:.2e}, b {err_b:.2e}; "
          f"executions forward {forward.executions}, backward {backward.executions}, "
          f"a plain solve {plain.executions}; compilations backward {backward.compilations}")
    assert err_A < 1e-4 and err_b < 1e-4, (err_A, err_b)
    # the backward pass: one adjoint cg solve plus the gradient's own graph
    assert backward.executions <= plain.executions + 1, (backward, plain)
    return err_A, err_b


@pytest.mark.xla
def test_xla_cg_gradient_float32(xla_device):
    _check_xla_cg(8, 1e-6)


@pytest.mark.xla
@pytest.mark.slow
def test_xla_cg_gradient_poisson_10k(xla_device):
    """Must show (issue 30): 2-D Poisson with 10^4 unknowns."""
    _check_xla_cg(100, 1e-6)


# ---- XLA: float32 gradients of the other solvers against float64 CPU ones --------------------

M = 40  # operands of the XLA agreement tests: big enough to mean something, cheap to compile


def _diag_dominant(symmetric):
    """A sparse matrix with eigenvalues (singular values) near 1..M, well separated: the
    float32 gradients of solves and of the extreme eigenvalues are well conditioned."""
    rng = np.random.default_rng(11)
    S = sp.random(M, M, density=0.1, random_state=4, data_rvs=rng.standard_normal) * 0.1
    if symmetric:
        S = S + S.T
    S = (S + sp.diags(np.arange(1.0, M + 1))).tocsr()
    S.sort_indices()
    return S


def _sparse_leaf(S, device, dtype):
    A = trnscipy.to_device(S.astype(dtype), device)
    A.data.requires_grad_(True)
    return A, A.data


def _dense_leaf(a, device, dtype):
    a = trnscipy.to_device(a.astype(dtype), device).requires_grad_(True)
    return a, a


def _rhs(device, dtype, seed=1):
    b = np.random.default_rng(seed).standard_normal(M)
    return trnscipy.to_device(b.astype(dtype), device).requires_grad_(True)


def _krylov(name, symmetric):
    def call(device, dtype):
        A, leaf = _sparse_leaf(_diag_dominant(symmetric), device, dtype)
        b = _rhs(device, dtype)
        tol = {"rtol": 1e-6 if dtype == np.float32 else 1e-13}
        if name != "minres":  # (minres has no atol)
            tol["atol"] = 0.0
        return [leaf, b], lambda: getattr(tsla, name)(A, b, **tol)[0]
    return call


def _spsolve(device, dtype):
    A, leaf = _sparse_leaf(_diag_dominant(False), device, dtype)
    b = _rhs(device, dtype)
    return [leaf, b], lambda: tsla.spsolve(A, b)


def _splu(device, dtype):
    A, leaf = _sparse_leaf(_diag_dominant(False).tocsc(), device, dtype)
    b = _rhs(device, dtype)
    lu = tsla.splu(A)  # the factorization outside the counts: backward reuses it
    return [leaf, b], lambda: lu.solve(b)


def _dense_matrix(spd):
    """Nonsymmetric: well conditioned; SPD: eigenvalues 1..M (separated by 1, so that the
    float32 eigenvectors, and eigh's gradient V diag(g) V^T, are accurate to ~M eps)."""
    m = np.random.default_rng(5).standard_normal((M, M))
    if not spd:
        return m / np.sqrt(M) + 2 * np.eye(M)
    q = np.linalg.qr(m)[0]
    return (q * np.arange(1.0, M + 1)) @ q.T


def _solve(device, dtype):
    a, leaf = _dense_leaf(_dense_matrix(False), device, dtype)
    b = _rhs(device, dtype)
    return [leaf, b], lambda: tla.solve(a, b)


def _lu_solve(device, dtype):
    lu, piv = tla.lu_factor(trnscipy.to_device(_dense_matrix(False).astype(dtype), device))
    lu = lu.detach().requires_grad_(True)
    b = _rhs(device, dtype)
    return [lu, b], lambda: tla.lu_solve((lu, piv), b)


def _cho_solve(device, dtype):
    c = tla.cholesky(trnscipy.to_device(_dense_matrix(True).astype(dtype), device))
    c = c.detach().requires_grad_(True)
    b = _rhs(device, dtype)
    return [c, b], lambda: tla.cho_solve((c, False), b)


def _cholesky(device, dtype):
    a, leaf = _dense_leaf(_dense_matrix(True), device, dtype)
    return [leaf], lambda: tla.cholesky(a)


def _eigh(device, dtype):
    a, leaf = _dense_leaf(_dense_matrix(True), device, dtype)
    return [leaf], lambda: tla.eigh(a, eigvals_only=True)


def _eigsh(device, dtype):
    A, leaf = _sparse_leaf(_diag_dominant(True), device, dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    return [leaf], lambda: tsla.eigsh(A, k=3, which="LA", tol=tol, return_eigenvectors=False)


def _lobpcg(device, dtype):
    A, leaf = _sparse_leaf(_diag_dominant(True), device, dtype)
    X = np.random.default_rng(2).standard_normal((M, 2)).astype(dtype)
    X = trnscipy.to_device(X, device)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    return [leaf], lambda: tsla.lobpcg(A, X, tol=tol, maxiter=500)[0]


def _svds(device, dtype):
    A, leaf = _sparse_leaf(_diag_dominant(False), device, dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    return [leaf], lambda: tsla.svds(A, k=3, tol=tol, return_singular_vectors=False)


_AGREEMENT = {
    "spsolve": _spsolve, "splu.solve": _splu, "gmres": _krylov("gmres", False),
    "bicgstab": _krylov("bicgstab", False), "minres": _krylov("minres", True),
    "solve": _solve, "lu_solve": _lu_solve, "cho_solve": _cho_solve, "cholesky": _cholesky,
    "eigh": _eigh, "eigsh": _eigsh, "lobpcg": _lobpcg, "svds": _svds,
}
# the CI share (about a minute on the XLA lane): a sparse direct solve, a Krylov solve
# with A^H, a dense solve and a dense eigenvalue problem; the rest is slow
_AGREEMENT_CI = ("spsolve", "gmres", "solve", "eigh")


def _gradients(case, device, dtype):
    """The case's gradients (host arrays) of a fixed weighting of its output, with the XLA
    counts of the backward pass and of one more forward call without gradients."""
    from trnscipy._metrics import xla_counts

    leaves, call = _AGREEMENT[case](device, dtype)
    out = call()
    w = np.random.default_rng(3).standard_normal(tuple(out.shape)).astype(dtype)
    loss = (trnscipy.to_device(w, device) * out).sum()
    with xla_counts() as backward:
        loss.backward()
    grads = [trnscipy.to_host(leaf.grad) for leaf in leaves]
    with xla_counts() as plain, torch.no_grad():
        trnscipy.to_host(call())
    return grads, backward, plain


@pytest.mark.xla
@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c in _AGREEMENT_CI else
                                               pytest.mark.slow) for c in _AGREEMENT])
def test_xla_gradient_float32_agrees(case, xla_device):
    """The float32 gradient on XLA is the float64 CPU gradient to float32 accuracy, and
    its backward pass costs one solve more than the forward call (the adjoint solve)."""
    grads64, _, _ = _gradients(case, "cpu", np.float64)
    grads, backward, plain = _gradients(case, xla_device, np.float32)
    for g, g64 in zip(grads, grads64, strict=True):
        err = np.linalg.norm(g - g64) / np.linalg.norm(g64)
        assert err < 1e-4, (case, err)
    # the adjoint solve (a plain call's executions), the gradient's own graph, and for
    # the solvers with A^H one execution the first time A^H's structure is used
    assert backward.executions <= plain.executions + 2, (case, backward, plain)
