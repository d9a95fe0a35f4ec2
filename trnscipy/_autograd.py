"""Gradients through solvers by implicit differentiation (torch.autograd.Function).

Only calls that want a gradient come here (grad mode on and an operand that requires
it): the dispatcher sends them to the differentiable implementation their ``@dispatch``
declares (``grad=krylov``, ``eigen``, ``spsolve``, ``splu``, ``expm_multiply``), the
dense functions and the factorizations' ``solve`` test ``_dispatch.requires_grad``
themselves; calls without gradients never run code here.
The forward pass is the ordinary call on detached operands; the backward pass never
differentiates the solver's iterations, it solves the adjoint problem:

* x = A^-1 b, g = dL/dx: solve A^H y = g; dL/db = y; dL/dA = -y x^H, for a sparse A on
  its stored pattern only (``_product_vjp``: the vector-Jacobian product of A @ x with
  respect to A's values, the SpMV's own backward).
* eigenvalues of Hermitian A: dlambda_i = v_i^H dA v_i; singular values: ds_i =
  Re(u_i^H dA v_i) (both again through ``_product_vjp``).
* dense eigh eigenvectors, cholesky, cho_solve and lu_solve have closed forms below.

Gradients follow torch's convention for complex numbers (the conjugate Wirtinger
derivative), as the SpMV's backward does.  Backward passes are not differentiable
again (``once_differentiable``).
"""

import inspect

from array_api_compat import is_torch_array

from trnscipy._dispatch import requires_grad
from trnscipy._torch import torch

__all__ = ["krylov", "spsolve", "splu", "factorization_solve", "dense_solve", "cho_solve",
           "lu_solve", "cholesky", "eigh", "eigen", "expm_multiply"]

# Krylov solvers whose adjoint solve is the same solver with A itself (A Hermitian), and
# those that solve with A^H (same solver, tolerances and maxiter).
_SELF_ADJOINT = ("cg", "minres")
_ADJOINT = ("gmres", "bicgstab", "bicg", "cgs", "qmr", "tfqmr", "lgmres", "gcrotmk")
# Arguments of a solver that the adjoint solve does not take over.
_NOT_ADJOINT = ("A", "b", "x0", "M", "M1", "M2", "callback", "callback_type", "outer_v",
                "CU", "discard_C", "store_outer_Av")


def _values(obj):
    """The tensor through which gradients reach ``obj``: a tensor itself, a sparse
    container's ``data``; None for anything else (operators, scalars)."""
    if is_torch_array(obj):
        return obj
    if getattr(obj, "_trnscipy_device_object", False) and hasattr(obj, "format"):
        return obj.data
    return None


def _detached(obj):
    """``obj`` without its autograd history: a tensor detached, a sparse container as a
    shallow copy holding the detached values (its structure caches stay valid)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    values = _values(obj)
    if values is not None and values.requires_grad:
        return _with_values(obj, values.detach())
    return obj


def _with_values(A, values):
    """A shallow copy of the sparse container ``A`` holding ``values`` as its data."""
    out = object.__new__(type(A))
    out.__dict__.update(A.__dict__)
    out.data = values
    return out


def _adjoint_operator(A):
    """A^H of a tensor, a sparse container, a LinearOperator or None."""
    if A is None:
        return None
    if isinstance(A, torch.Tensor):
        return A.mH
    if getattr(A, "_trnscipy_device_object", False) and hasattr(A, "format"):
        return A.conj(copy=False).transpose()
    return A.H


def _match(grad, like):
    """``grad`` in the dtype and shape of ``like`` (real part for a real input)."""
    if grad is None or like is None:
        return None
    if grad.is_complex() and not like.is_complex():
        grad = grad.real
    return grad.to(like.dtype).reshape(like.shape)


def _outer(u, v):
    """sum over columns of u v^H (vectors or (n, k) matrices; leading batch axes)."""
    if u.ndim == 1:
        return u[:, None] * v.conj()[None, :]
    return u @ v.mH


def _product_vjp(A, values, gz, x):
    """Gradient with respect to A's ``values`` of Re <gz, A x> (gz x^H on A's pattern):
    a dense A directly, a sparse one through its SpMV's backward."""
    if isinstance(A, torch.Tensor):
        return _match(_outer(gz, x), values)
    with torch.enable_grad():
        leaf = values.detach().requires_grad_(True)
        x = x.detach()
        if x.is_complex() == leaf.is_complex():
            x = x.to(leaf.dtype)
        z = _with_values(A, leaf) @ x
        (grad,) = torch.autograd.grad(z, leaf, gz.to(z.dtype))
    return _match(grad, values)


def _linear_solve_function():
    """torch.autograd.Function for x = op(A)^-1 b, built on first use (importing
    trnscipy never imports torch)."""
    global _LinearSolve
    if _LinearSolve is not None:
        return _LinearSolve

    class LinearSolve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, b, problem):
            x = problem.solve()
            if x is problem.b or x is b:
                x = x.clone()  # (a zero right-hand side comes back as b itself)
            ctx.problem = problem
            ctx.save_for_backward(x)
            return x

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, gx):
            problem = ctx.problem
            (x,) = ctx.saved_tensors
            problem.check()
            y = problem.adjoint(gx.reshape(x.shape))
            grad_values = grad_b = None
            if ctx.needs_input_grad[1]:
                b = problem.b
                grad_b = _match_batch(y.reshape(b.shape) if y.numel() == b.numel() else y, b)
            if ctx.needs_input_grad[0]:
                grad_values = problem.grad_values(y, x)
            return grad_values, grad_b, None

    _LinearSolve = LinearSolve
    return LinearSolve


_LinearSolve = None


class _Solve:
    """One linear solve as the Function sees it: ``solve()`` the forward call on detached
    operands, ``adjoint(g)`` the solve with op(A)^H, ``grad_values(y, x)`` dL/dvalues
    from the adjoint solution and the solution, ``check()`` raises when the forward
    result has no gradient (a solve that did not converge)."""

    def __init__(self, b, solve, adjoint, grad_values):
        self.b = b
        self.solve = solve
        self.adjoint = adjoint
        self.grad_values = grad_values

    def check(self):
        pass


def _apply(values, b, problem):
    return _linear_solve_function().apply(values, b, problem)


# ---- sparse direct solvers -----------------------------------------------------------------

def spsolve(scipy_func, solve, args, kwargs):
    """spsolve(A, b, ...) = ``solve(A, b, ...)`` with gradients to A's stored values and to
    a dense b.  The adjoint solve is ``solve(A^H, g, ...)`` (a factorization of A^H)."""
    params = _bind(scipy_func, args, kwargs)
    if params is None:
        return solve(*args, **kwargs)  # the function's own TypeError
    A, b = params.pop("A"), params.pop("b")
    if not requires_grad(A, b):
        return solve(*args, **kwargs)

    def run(A, b):
        return solve(A, b, **params)

    if not isinstance(b, torch.Tensor):
        raise NotImplementedError("spsolve: gradients need a dense right-hand side tensor "
                                  "(not a sparse b)")
    A0, b0 = _detached(A), b.detach()
    AH = _adjoint_operator(A0)
    problem = _Solve(b0, lambda: run(A0, b0), lambda g: run(AH, g),
                     lambda y, x: _product_vjp(A0, _values(A), -_cols(y, x), _cols(x, y)))
    return _apply(_values(A) if requires_grad(A) else None, b, problem)


def _cols(v, like):
    """A solution or adjoint solution as (n, k) columns when the other one is 2-D."""
    return v.reshape(v.shape[0], -1) if (v.ndim == 2 or like.ndim == 2) else v


_ADJOINT_TRANS = {"N": "H", "T": "N", "H": "N"}


class Factorization:
    """splu(A) / factorized(A) of a sparse A whose values require a gradient: the
    factorization of the detached A, whose ``solve`` lets gradients reach A's stored
    values and the right-hand side.  Everything else is the factorization's own."""

    def __init__(self, lu, A):
        self._lu = lu
        self._A = A

    def __getattr__(self, name):
        return getattr(self._lu, name)

    def __repr__(self):
        return repr(self._lu)

    def solve(self, rhs, trans="N"):
        return factorization_solve(self._lu, self._A, rhs, trans)


def splu(scipy_func, factor, args, kwargs):
    """splu(A, ...) = ``factor(A, ...)`` of the detached A: a ``Factorization`` where A's
    values require a gradient, else the factorization itself."""
    params = _bind(scipy_func, args, kwargs)
    if params is None:
        return factor(*args, **kwargs)  # the function's own TypeError
    A = params["A"]
    lu = factor(**{**params, "A": _detached(A)})
    return Factorization(lu, A) if requires_grad(A) else lu


def factorization_solve(lu, A, rhs, trans="N"):
    """``lu.solve(rhs, trans)`` with gradients to ``rhs`` and, where ``A`` (the factored
    matrix) is given, to its stored values; the adjoint solve reuses the factorization
    (trans 'N' <-> 'H'; 'T' through conjugates)."""
    if trans not in ("N", "T", "H") or not isinstance(rhs, torch.Tensor):
        return lu.solve(rhs, trans)  # the factorization's own errors
    b0 = rhs.detach()
    A0 = _detached(A) if A is not None else None

    def adjoint(g):
        if trans == "T" and g.is_complex():  # (A^T)^H = conj(A)
            return lu.solve(g.conj(), "N").conj()
        return lu.solve(g, _ADJOINT_TRANS[trans])

    def grad_values(y, x):
        y, x = _cols(y, x), _cols(x, y)
        if trans == "N":
            return _product_vjp(A0, _values(A), -y, x)
        if trans == "T":  # d(A^T) = (dA)^T: the gradient of A is -conj(x) y^T
            return _product_vjp(A0, _values(A), -x.conj(), y.conj())
        return _product_vjp(A0, _values(A), -x, y).conj()  # A^H: -(y x^H)^H

    values = _values(A) if A is not None and requires_grad(A) else None
    if values is None and not requires_grad(rhs):
        return lu.solve(rhs, trans)
    return _apply(values, rhs, _Solve(b0, lambda: lu.solve(b0, trans), adjoint, grad_values))


def _bind(func, args, kwargs):
    """The call's arguments by name (None where they do not fit ``func``)."""
    try:
        return inspect.signature(func).bind(*args, **kwargs).arguments
    except TypeError:
        return None


# ---- Krylov solvers ------------------------------------------------------------------------

class _Unconverged(_Solve):
    def __init__(self, name, *args):
        super().__init__(*args)
        self.name = name
        self.info = 0

    def check(self):
        if self.info != 0:
            raise RuntimeError(
                f"{self.name} did not converge (info={self.info}): its solution has no "
                "implicit gradient; converge the solve (maxiter, rtol, a preconditioner) "
                "before calling backward")


def krylov(scipy_solver, solve, args, kwargs):
    """``solve(*args, **kwargs)`` (a Krylov solver's routed call, returning (x, info)) with
    gradients to b and to A's values (sparse data or a dense A): implicit differentiation
    of the converged solution.  cg and minres solve the adjoint system with A itself
    (Hermitian), the others with A^H and M^H; both with the caller's tolerances."""
    name = scipy_solver.__name__
    if name not in _SELF_ADJOINT + _ADJOINT:
        return solve(*args, **kwargs)
    params = _bind(scipy_solver, args, kwargs)
    if params is None:
        return solve(*args, **kwargs)  # the solver's own TypeError
    A, b = params["A"], params["b"]
    if not requires_grad(A, b):
        return solve(*args, **kwargs)
    if not isinstance(b, torch.Tensor):
        b = torch.as_tensor(b, device=getattr(A, "device", None))
    detached = {key: _detached(value) for key, value in params.items()}
    A0, b0 = detached["A"], b.detach()
    options = {key: value for key, value in detached.items() if key not in _NOT_ADJOINT}
    if name in _SELF_ADJOINT:
        adjoint_ops = {"A": A0, **{k: detached[k] for k in ("M",) if k in detached}}
    elif name == "qmr":  # (M1 A M2)^H: M2^H A^H M1^H
        adjoint_ops = {"A": _adjoint_operator(A0)}
        if "M1" in detached:
            adjoint_ops["M2"] = _adjoint_operator(detached["M1"])
        if "M2" in detached:
            adjoint_ops["M1"] = _adjoint_operator(detached["M2"])
    else:
        adjoint_ops = {"A": _adjoint_operator(A0)}
        if "M" in detached:
            adjoint_ops["M"] = _adjoint_operator(detached["M"])

    def forward():
        x, problem.info = solve(**detached)
        return x

    def adjoint(g):
        y, info = solve(b=g, **adjoint_ops, **options)
        if info != 0:
            raise RuntimeError(f"{name}: the adjoint solve for the gradient did not converge "
                               f"(info={info})")
        return y

    values = _values(A) if requires_grad(A) else None
    problem = _Unconverged(name, b0, forward, adjoint,
                           lambda y, x: _product_vjp(A0, values, -y, x))
    detached["b"] = b0
    x = _apply(values, b, problem)
    return x, problem.info


# ---- expm_multiply ----------------------------------------------------------------------------

def expm_multiply(scipy_func, solve, args, kwargs):
    """expm_multiply(A, B) with the gradient to B: expm(A)^H g = expm_multiply(A^H, g).
    The gradient with respect to A and the sampled form (start/stop/num) raise
    NotImplementedError."""
    params = _bind(scipy_func, args, kwargs)
    if params is None:
        return solve(*args, **kwargs)
    A, B = params["A"], params["B"]
    if not requires_grad(A, B):
        return solve(*args, **kwargs)
    if requires_grad(A):
        raise NotImplementedError("expm_multiply: gradients with respect to A are not "
                                  "supported (only with respect to B)")
    if any(params.get(k) is not None for k in ("start", "stop", "num", "endpoint")):
        raise NotImplementedError("expm_multiply: gradients of the sampled form "
                                  "(start/stop/num) are not supported")
    detached = {key: _detached(value) for key, value in params.items()}
    AH = _adjoint_operator(detached["A"])
    problem = _Solve(B.detach(), lambda: solve(**detached), lambda g: solve(AH, g), None)
    return _apply(None, B, problem)


# ---- dense solves ------------------------------------------------------------------------

def _fold(G, lower, kind):
    """Gradient with respect to the triangle a structured routine reads, from the
    gradient ``G`` with respect to the full matrix it builds from that triangle."""
    if kind in ("upper", "lower"):
        return G.tril() if kind == "lower" else G.triu()
    if kind == "diagonal":
        return torch.diag_embed(G.diagonal(dim1=-2, dim2=-1))
    if kind == "tridiagonal":
        return G.triu(-1).tril(1)
    if kind in ("sym", "her", "pos"):
        hermitian = kind != "sym" and G.is_complex()
        other = G.mH if hermitian else G.mT
        diag = G.diagonal(dim1=-2, dim2=-1)
        diag = torch.diag_embed(diag.real.to(G.dtype) if hermitian else diag)
        return ((G + other).tril(-1) if lower else (G + other).triu(1)) + diag
    return G


def dense_solve(run, a, b, lower, kind, transposed):
    """linalg.solve: ``run(a, b, transposed)`` (the kernel call on validated (..., n, n)
    and (..., n, k) tensors) with gradients to a (on the entries the structure ``kind``
    reads) and b."""
    a0, b0 = a.detach(), b.detach()

    def adjoint(g):
        if not a0.is_complex():
            return run(a0, g, not transposed)
        if kind in ("her", "pos"):
            return run(a0, g, False)
        if kind == "sym":
            return run(a0, g.conj(), False).conj()
        swapped = {"upper": "lower triangular", "lower": "upper triangular"}.get(kind)
        return run(a0.mH, g, False, swapped)

    def grad_values(y, x):
        G = -(y @ x.mH)
        return _match_batch(_fold(G.mT if transposed else G, lower, kind), a)

    return _apply(a if requires_grad(a) else None, b, _Solve(b0, lambda: run(a0, b0, transposed),
                                                          adjoint, grad_values))


def _match_batch(G, like):
    """``G`` summed over broadcast batch axes to ``like``'s shape."""
    if G.shape != like.shape:
        G = G.sum_to_size(like.shape)
    return _match(G, like)


def cho_solve(run, c, lower, b):
    """cho_solve((c, lower), b) = ``run(c, b)`` with gradients to b and to the triangle
    of c that is read: A = L L^H (U^H U), dL/dL = tril((G + G^H) L), G = -y x^H."""
    c0, b0 = c.detach(), b.detach()

    def grad_values(y, x):
        G = -(y @ x.mH)
        S = G + G.mH
        return _match_batch((S @ c0).tril() if lower else (c0 @ S).triu(), c)

    return _apply(c if requires_grad(c) else None, b,
                  _Solve(b0, lambda: run(c0, b0), lambda g: run(c0, g), grad_values))


def _permutation(piv):
    """Row order ``perm`` with A[perm] = L U from LAPACK's row interchanges."""
    perm = list(range(piv.shape[-1]))
    for i, p in enumerate(piv.tolist()):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


def lu_solve(run, lu, piv, b, trans):
    """lu_solve((lu, piv), b, trans) = ``run(lu, b, trans)`` with gradients to b and to the
    packed factors (A[perm] = L U: dL/dL strictly lower, dL/dU upper)."""
    if lu.ndim != 2:
        raise NotImplementedError("lu_solve: gradients of batched factors are not supported")
    lu0, b0 = lu.detach(), b.detach()

    def adjoint(g):
        if trans == 1 and g.is_complex():  # (A^T)^H = conj(A)
            return run(lu0, g.conj(), 0).conj()
        return run(lu0, g, {0: 2, 1: 0, 2: 0}[trans] if lu0.is_complex() else 1 - min(trans, 1))

    def grad_values(y, x):
        G = -(y @ x.mH)  # with respect to op(A)
        G = {0: G, 1: G.mT, 2: G.mH}[trans]
        GM = G[_permutation(piv)]  # with respect to M = L U = A[perm]
        L = lu0.tril(-1) + torch.eye(lu0.shape[0], dtype=lu0.dtype, device=lu0.device)
        U = lu0.triu()
        return _match((GM @ U.mH).tril(-1) + (L.mH @ GM).triu(), lu)

    return _apply(lu if requires_grad(lu) else None, b,
                  _Solve(b0, lambda: run(lu0, b0, trans), adjoint, grad_values))


def _factor_function():
    global _Factor
    if _Factor is not None:
        return _Factor

    class Factor(torch.autograd.Function):
        """An output computed from a matrix by ``problem.forward()``, with
        ``problem.backward(grads...)`` its vector-Jacobian product."""

        @staticmethod
        def forward(ctx, a, problem):
            outputs = problem.forward()
            ctx.problem = problem
            return outputs

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            return ctx.problem.backward(*grads), None

    _Factor = Factor
    return Factor


_Factor = None


def cholesky(run, trsm, a, lower):
    """cholesky(a, lower) = ``run(a)`` with the gradient to the triangle read:
    for A = L L^H, dL/dA = sym(L^-H Phi(L^H Lbar) L^-1) (Phi: lower triangle, halved
    diagonal); ``trsm(L, B, trans)`` solves op(L) X = B for the factor L (lower; trans 2:
    L^H), the triangular-solve kernel without the routed call's checks: a Cholesky
    factor is finite with a positive diagonal, and on XLA each check costs an execution."""
    if a.ndim != 2:
        raise NotImplementedError("cholesky: gradients of batched matrices are not supported")
    a0 = a.detach()

    class Problem:
        def forward(self):
            self.c = run(a0)
            return self.c.clone() if self.c is a0 else self.c

        def backward(self, gc):
            L = self.c if lower else self.c.mH
            gL = gc if lower else gc.mH
            P = (L.mH @ gL).tril()
            P = P - 0.5 * torch.diag_embed(P.diagonal())
            Z = trsm(L, P.mH, 2).mH  # P L^-1
            S = trsm(L, Z, 2)        # L^-H P L^-1
            S = 0.5 * (S + S.mH)
            return _match(_fold(S, lower, "her" if a0.is_complex() else "sym"), a)

    return _factor_function().apply(a, Problem())


def eigh(run, a, lower, eigvals_only, subset=False):
    """eigh(a) = ``run(a, eigvals_only)`` (standard problem) with gradients to the
    triangle read.  Eigenvalues: dlambda_i = v_i^H dA v_i.  Eigenvectors:
    dA += V (F o skew(V^H gV)) V^H with F_ij = 1 / (lambda_j - lambda_i); where two
    eigenvalues coincide (to 1e3 eps ||A||) the eigenvectors are not unique and their
    gradient exists only for a loss that does not depend on the choice of basis of the
    eigenspace (skew(V^H gV) zero there): those pairs contribute nothing, and a loss that
    does depend on the choice raises ValueError in backward."""
    if a.ndim != 2:
        raise NotImplementedError("eigh: gradients of batched matrices are not supported")
    a0 = a.detach()

    class Problem:
        def forward(self):
            self.w, self.V = run(a0, False)
            return self.w if eigvals_only else (self.w, self.V)

        def backward(self, gw, gV=None):
            w, V = self.w, self.V
            inner = torch.zeros((V.shape[1], V.shape[1]), dtype=V.dtype, device=V.device)
            if gw is not None:
                inner = inner + torch.diag_embed(gw.to(V.dtype))
            if gV is not None and subset and bool((gV != 0).any()):
                raise NotImplementedError("eigh: eigenvector gradients of a subset of the "
                                          "spectrum are not supported")
            if gV is not None:
                M = V.mH @ gV
                K = 0.5 * (M - M.mH)
                gap = w[None, :] - w[:, None]
                eps = torch.finfo(w.dtype).eps
                close = gap.abs() <= 1e3 * eps * w.abs().max().clamp(min=1)
                close.fill_diagonal_(False)
                if bool((close & (K.abs() > 1e3 * eps * K.abs().max().clamp(min=1))).any()):
                    raise ValueError(
                        "eigh: the loss depends on the choice of eigenvectors of a repeated "
                        "eigenvalue, which has no gradient; use a loss invariant to the "
                        "basis of each eigenspace (e.g. projectors) or separated eigenvalues")
                F = torch.where(close | torch.eye(len(w), dtype=torch.bool, device=w.device),
                                0, 1 / torch.where(close, 1, gap).to(V.dtype))
                inner = inner + F * K
            G = V @ inner @ V.mH
            return _match(_fold(G, lower, "her" if a0.is_complex() else "sym"), a)

    return _factor_function().apply(a, Problem())


# ---- sparse eigensolvers ---------------------------------------------------------------------

_EIGEN = {"eigsh": ("A", "M", "return_eigenvectors"), "lobpcg": ("A", "B", None),
          "svds": ("A", None, "return_singular_vectors")}


def eigen(scipy_func, solve, args, kwargs):
    """eigsh / lobpcg eigenvalues and svds singular values with gradients to A's values
    (dlambda = v^H dA v, ds = Re(u^H dA v), on A's stored pattern).  Gradients through
    eigenvectors / singular vectors, and through M / B (generalized problems), raise
    NotImplementedError."""
    name = scipy_func.__name__
    if name not in _EIGEN:
        return solve(*args, **kwargs)
    params = _bind(scipy_func, args, kwargs)
    if params is None:
        return solve(*args, **kwargs)
    a_name, m_name, vectors_name = _EIGEN[name]
    A = params[a_name]
    if not requires_grad(*params.values()):
        return solve(*args, **kwargs)
    if m_name is not None and requires_grad(params.get(m_name)):
        raise NotImplementedError(f"{name}: gradients with respect to {m_name} "
                                  "(generalized problems) are not supported")
    if _values(A) is None or not requires_grad(A):
        return solve(**{k: _detached(v) for k, v in params.items()})
    detached = {key: _detached(value) for key, value in params.items()}
    A0 = detached[a_name]
    want_vectors = True
    if vectors_name is not None:
        want_vectors = params.get(vectors_name, True)
        if want_vectors not in (True, False):
            raise NotImplementedError(f"{name}: gradients need {vectors_name}=True or False")
        detached[vectors_name] = True
    values = _values(A)

    class Problem:
        def forward(self):
            out = solve(**detached)
            if name == "svds":
                self.u, s, self.vh = out
                if want_vectors is True:
                    return out
                return s  # (SciPy's ascending order either way)
            w, V = out[0], out[1]
            self.V = V
            if name == "lobpcg" or want_vectors:
                return out
            return w

        def backward(self, *grads):
            if name == "svds":
                gs = grads[1] if want_vectors is True else grads[0]
                _no_vector_grad(name, grads if want_vectors is True else (), skip=1)
                U, Vh = self.u, self.vh
                return _product_vjp(A0, values, U * gs.to(U.dtype), Vh.mH)
            gw = grads[0]
            _no_vector_grad(name, grads, skip=0)
            V = self.V
            return _product_vjp(A0, values, V * gw.to(V.dtype), V)

    out = _factor_function().apply(values, Problem())
    return out


def _no_vector_grad(name, grads, skip):
    for i, g in enumerate(grads):
        if i != skip and g is not None and bool((g != 0).any()):
            raise NotImplementedError(f"{name}: gradients through eigenvectors / singular "
                                      "vectors are not supported (only through the "
                                      "eigenvalues / singular values)")
