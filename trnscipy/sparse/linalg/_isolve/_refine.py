"""float64 Krylov solves on a Neuron device: mixed-precision iterative refinement.

The 'neuron' registration of the ``krylov`` kernel.  The device has no float64
arithmetic; a float64 system there is held exactly as double-float pairs
(``trnscipy._transfer.df_parts``).  Every solver runs the same scheme:

1. r = b - A x in double-float (``trnscipy._kernels._df``), x kept in double-float;
2. SciPy's test on that true residual: ||r|| < max(atol, rtol ||b||) -> info 0
   (minres, which has no atol: rtol ||b||);
3. otherwise the float32 solver (the same method, its device torch loop, with the
   float32 parts of A and M) solves A d = r / ||r|| to ``_INNER_RTOL``, and
   x += ||r|| d in double-float;
4. when a step reduces ||r|| by less than ``_STAGNATION``, the inner solver becomes
   GMRES on the double-float product (rounded to float32) with M as preconditioner
   (GMRES-based refinement, Carson & Higham 2017); if that stagnates too, the solve
   stops with info > 0, as SciPy reports non-convergence.

Differs from SciPy: ``maxiter`` bounds the iterations of each inner solve, and the
total where inner solves stop on it; info on non-convergence is ``maxiter``.
``callback`` sees the double-float iterate (a float64 tensor, ``df_tensor``) once per
refinement step, not per Krylov iteration.  User-function operators (``M`` included)
see float32 tensors.  A ``LinearOperator`` given by user functions as ``A`` has no
double-float product: it runs on SciPy on the host, announced.
"""

import inspect

import numpy as np

from trnscipy import _transfer
from trnscipy._errors import fallback
from trnscipy._kernels import _df, kernel, register
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.utils import check_atol, check_x0, host_value

_INNER_RTOL = 1e-5
_STAGNATION = 0.5
_MAX_STEPS = 40


def _parts(t):
    """(hi, lo) float32 parts of a float64 (df) or float32 device tensor."""
    if t.dtype == torch.float32:
        return t, torch.zeros_like(t)
    return _transfer.df_parts(t)


class _DFOperator:
    """A float64 matrix on the device as double-float products and a float32 copy."""

    def __init__(self, A):
        from trnscipy.sparse.linalg._interface import MatrixLinearOperator

        if type(A) is MatrixLinearOperator:
            A = A.A
        self.shape = tuple(A.shape)
        if isinstance(A, torch.Tensor) and A.ndim == 2:
            self.parts = _parts(A)
            self.float32 = self.parts[0]
            self.product = lambda x: _df.gemv(self.parts, x)
        elif getattr(A, "format", None) in ("csr", "csc", "coo", "bsr", "dia"):
            layout = _layout(A)
            self.parts = _parts(A.data)
            flat = (self.parts[0].reshape(-1), self.parts[1].reshape(-1))
            self.float32 = A._with_data(self.parts[0], copy=False)
            self.product = lambda x: _df.spmv(layout, flat, x)
        else:
            raise TypeError(type(A).__name__)

    def residual(self, b, x, shift=0.0):
        """b - (A - shift I) x in double-float."""
        ax = self.product(x)
        if shift:
            ax = _df.sub(ax, _df.mul_f(x, torch.full_like(x[0], float(shift))))
        return _df.sub(b, ax)


def _layout(A):
    """The row-padded layout of a sparse container, cached on it (indices read once)."""
    cached = A.__dict__.get("_cache_df_layout")
    if cached is None:
        host = _transfer.to_host
        if A.format in ("csr", "csc"):
            index = (host(A.indptr), host(A.indices))
        elif A.format == "coo":
            index = (host(A.row), host(A.col))
        elif A.format == "bsr":
            index = (host(A.indptr), host(A.indices), A.blocksize)
        else:
            index = (A._offsets_host, A.data.shape[1])
        cached = _df.row_padded(A.shape, A.format, index, A.data.device)
        A.__dict__["_cache_df_layout"] = cached
    return cached


def _float32_operator(M):
    """A preconditioner for the float32 inner solve."""
    if M is None:
        return None
    try:
        return _DFOperator(M).float32
    except TypeError:
        pass
    from trnscipy.sparse.linalg._interface import LinearOperator

    return LinearOperator(M.shape, matvec=M.matvec, rmatvec=M.rmatvec, dtype=np.float32)


def _is_float64(t):
    return getattr(t, "dtype", None) == torch.float64


# The solvers refined here (the capability table lets their float64 through on Neuron).
_REFINED = frozenset({"cg", "bicg", "bicgstab", "cgs", "gmres", "lgmres", "gcrotmk", "minres",
                      "qmr", "tfqmr"})


@register("krylov", "neuron")
def krylov(scipy_solver, device_solver, args, kwargs, host_operand=None):
    """float64 systems: refinement around the float32 device solver (module docstring);
    float32 systems: the device solver itself."""
    try:
        params = inspect.signature(scipy_solver).bind(*args, **kwargs).arguments
    except TypeError:  # e.g. tol=: the solver raises SciPy's TypeError
        return device_solver(*args, **kwargs)
    name = scipy_solver.__name__
    if name not in _REFINED:  # lsqr, lsmr, expm_multiply: float64 is not let through here
        return device_solver(*args, **kwargs)
    A, b = params["A"], params["b"]
    if not (_is_float64(b) or getattr(A, "dtype", None) in (torch.float64, np.float64)):
        return device_solver(*args, **kwargs)
    try:
        op = _DFOperator(A)
    except TypeError:
        return _on_host(scipy_solver, name, params,
                        f"a {type(A).__name__} operator has no double-float product")
    return _refine(name, device_solver, op, params)


def _on_host(scipy_solver, name, params, reason):
    fallback(f"scipy.sparse.linalg.{name}", reason, stacklevel=6)
    device = params["b"].device if isinstance(params["b"], torch.Tensor) else None
    host = {k: _transfer.to_host(v) if isinstance(v, torch.Tensor) or getattr(
        v, "_trnscipy_device_object", False) else v for k, v in params.items()}
    x, info = scipy_solver(**host)
    return _transfer.to_device(x, device), info


def _refine(name, device_solver, op, params):
    n = op.shape[0]
    b = params["b"]
    if not isinstance(b, torch.Tensor):
        b = torch.as_tensor(np.asarray(b), device=op.parts[0].device)
    if tuple(b.shape) not in ((n,), (n, 1)) or op.shape[0] != op.shape[1]:
        return device_solver(**params)  # the solver's own shape errors
    bp = tuple(p.reshape(-1) for p in _parts(b))
    rtol = float(params.get("rtol", 1e-5))
    atol = 0.0 if name == "minres" else check_atol(name, params.get("atol", 0.0))
    shift = float(params.get("shift", 0.0) or 0.0)
    maxiter = params.get("maxiter")
    maxiter = n * 10 if maxiter is None else int(maxiter)
    callback = params.get("callback")
    precond = {k: _float32_operator(params.get(k)) for k in ("M", "M1", "M2")
               if params.get(k) is not None}
    extra = {k: v for k, v in params.items()
             if k not in ("A", "b", "x0", "rtol", "atol", "maxiter", "callback", "M", "M1",
                          "M2", "outer_v", "CU", "callback_type", "show", "check")}
    if name == "gmres" and params.get("callback_type") is not None:
        extra["callback_type"] = params["callback_type"]

    materialize = kernel("materialize", bp[0].device)
    x0 = params.get("x0")
    check_x0(x0)
    def zeros(size=n):  # data, not a graph constant; distinct tensors, distinct inputs
        return torch.zeros(size, dtype=bp[0].dtype).to(bp[0].device)

    if x0 is None:
        x = (zeros(), zeros())
    elif isinstance(x0, str):  # 'Mb'
        m32 = precond.get("M")
        x = ((m32 @ bp[0] if m32 is not None else bp[0]).reshape(-1), zeros())
    else:
        x = tuple(p.reshape(-1) for p in _parts(x0))
    # the pending correction x += s d opens each step's graph; zero (as data: a 0-d zero
    # would be a graph constant) before the first, so that every step traces one graph
    d, s = zeros(), zeros(2)[1:]  # s: as later, a slice of the norms

    inner, solver = device_solver, name
    budget = maxiter
    prev = tol = None
    for _ in range(_MAX_STEPS):
        x = _df.add_f(x, d * s)
        r = op.residual(bp, x, shift)
        norms = torch.stack([_df.norm(bp)[0], _df.norm(r)[0]])  # ||b|| too: one graph
        rhs = r[0] / norms[1]
        # one graph per step: the inner solve starts from device data, not from this graph
        materialize([norms, rhs, *x])
        bnrm, rnorm = (float(v) for v in norms.cpu())
        if tol is None:
            if bnrm == 0:
                return _transfer.df_tensor(*bp), 0
            tol = max(atol, rtol * bnrm)
        if rnorm < tol or (rnorm <= tol and tol == 0):
            return _transfer.df_tensor(*x), 0
        if budget <= 0 or not np.isfinite(rnorm):
            break
        if prev is not None and rnorm > _STAGNATION * prev:
            if solver == "gmres-ir":
                break
            inner, solver = _gmres_ir(op), "gmres-ir"
        prev = rnorm
        steps = budget
        if solver == "gmres-ir":
            d, info = inner(rhs, precond.get("M"), steps)
        else:
            d, info = inner(op.float32, rhs,
                            rtol=_INNER_RTOL, maxiter=steps, **_inner_kw(name), **precond,
                            **extra)
        if info > 0:
            budget -= steps
        d, s = d.reshape(-1), norms[1:]
        if callback is not None:
            x, d = _df.add_f(x, d * s), zeros()
            callback(host_value(_transfer.df_tensor(*x)))
    else:  # out of steps: the last correction is still pending
        x = _df.add_f(x, d * s)
    return _transfer.df_tensor(*x), maxiter


def _inner_kw(name):
    return {} if name == "minres" else {"atol": 0.0}


def _gmres_ir(op):
    """GMRES on the double-float product (rounded to float32), M as preconditioner."""
    from trnscipy.sparse.linalg._interface import LinearOperator
    from trnscipy.sparse.linalg._isolve.iterative import gmres

    def matvec(v):
        v = v.reshape(-1)
        return op.product((v, torch.zeros_like(v)))[0]

    A = LinearOperator(op.shape, matvec=matvec, dtype=np.float32)
    loop = gmres._trnscipy_device_impl.torch_loop

    def solve(rhs, M, maxiter):
        return loop(A, rhs, rtol=_INNER_RTOL, atol=0.0, maxiter=maxiter, M=M)

    return solve
