"""float64 Krylov solves on a Neuron device: mixed-precision iterative refinement.

The 'neuron' registration of the ``krylov`` kernel.  The device has no float64
arithmetic; a float64 system there is held exactly as double-float pairs
(``trnscipy._transfer.df_parts``).  The general scheme (every solver):

1. r = b - A x in double-float (``trnscipy._kernels._df``), x kept in double-float;
2. SciPy's test on that true residual: ||r|| < max(atol, rtol ||b||) -> info 0
   (minres, which has no atol: rtol ||b||);
3. otherwise the float32 solver (the same method, its device torch loop, with the
   float32 parts of A and M) solves A d = r / ||r|| to ``_INNER_RTOL``, and
   x += ||r|| d in double-float;
4. when a step reduces ||r|| by less than ``_STAGNATION``, the inner solver becomes
   GMRES on the double-float product (rounded to float32) with M as preconditioner
   (GMRES-based refinement, Carson & Higham 2017); if that stagnates too, the solve
   has not converged (below).

cg and gmres (no callback; M absent or a matrix) keep one Krylov space instead
(``_cg``: residual replacement every block; ``_gmres``: the true residual at every
restart), and hand over to this scheme where their true residual stops decreasing.

A solve that does not converge on the device (maxiter reached, or the GMRES-based
refinement stagnates too) is run again by SciPy on the host from the exact data,
announced (DeviceFallbackWarning; DeviceUnsupportedError under TRNSCIPY_STRICT=1): its
result is then SciPy's own iterate and info.

Differs from SciPy: ``maxiter`` bounds the iterations of each inner solve, and the
total where inner solves stop on it.  ``callback`` sees the double-float iterate (a
float64 tensor, ``df_tensor``) once per refinement step, not per Krylov iteration (and
then, for an unconverged solve, the host's iterates).  User-function operators (``M`` included)
see float32 tensors.  A ``LinearOperator`` given by user functions as ``A`` has no
double-float product: it runs on SciPy on the host, announced.
"""

import importlib
import inspect
import math

import numpy as np
from scipy.sparse.linalg import _interface as _si

from trnscipy import _transfer
from trnscipy._errors import fallback
from trnscipy._kernels import _df, _plan, backend, register
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve import utils
from trnscipy.sparse.linalg._isolve.iterative import cg_iteration
from trnscipy.sparse.linalg._isolve.utils import check_atol, check_x0, host_value

_INNER_RTOL = 1e-5
_STAGNATION = 0.5
_MAX_STEPS = 40
# Krylov iterations of one inner solve: at most max(_INNER_MIN, _INNER_PER_ROOT sqrt(n)).
# A float32 solve cannot always reach _INNER_RTOL: its attainable residual is about
# eps32 cond(A), and restarted float32 gmres on the correction equation of a 10^4
# convection-diffusion problem ran on to its maxiter (10^5 restart cycles: the must-show
# run that did not finish).  The refinement continues from what the capped solve reached.
_INNER_MIN, _INNER_PER_ROOT = 200, 5


def _parts(t):
    """(hi, lo) float32 parts of a float64 (df) or float32 device tensor."""
    if t.dtype == torch.float32:
        return t, torch.zeros_like(t)
    return _transfer.df_parts(t)


def _df_operator(A):
    """The ``_DFOperator`` of ``A``, kept in a sparse container's plan while its tensors
    are the same, unchanged (the float32 copy, its product plans and the double-float
    layout are then built once, not per call or refinement step)."""
    from trnscipy.sparse.linalg._interface import MatrixLinearOperator

    if type(A) is MatrixLinearOperator:
        A = A.A
    if getattr(A, "format", None) not in ("csr", "csc", "coo", "bsr", "dia"):
        return _DFOperator(A)
    return _plan.prepared(A, "neuron", "df_operator", lambda: _DFOperator(A))


class _DFOperator:
    """A float64 matrix on the device as double-float products and a float32 copy (its
    parts computed once, as device data)."""

    def __init__(self, A):
        self.shape = tuple(A.shape)
        self.graphs = {}  # the double-float cg's and gmres's graph functions, by kind
        if isinstance(A, torch.Tensor) and A.ndim == 2:
            self.parts = self._computed(_parts(A))
            self.float32 = self.parts[0]
            self.product = lambda x: _df.gemv(self.parts, x)
        elif getattr(A, "format", None) in ("csr", "csc", "coo", "bsr", "dia"):
            layout = _layout(A)
            flat = self._computed([p.reshape(-1) for p in _parts(A.data)])
            self.parts = flat
            if A.data.ndim > 1:  # (bsr's blocks: the views computed too)
                self.parts = tuple(p.reshape(A.data.shape) for p in flat)
                backend(flat[0].device).materialize([*flat, *self.parts])
            self.float32 = A._with_data(self.parts[0], copy=False)
            self.product = lambda x: _df.spmv(layout, flat, x)
        else:
            raise TypeError(type(A).__name__)

    @staticmethod
    def _computed(parts):
        """The parts as device data of their own, before any view of them is taken (a
        view of a pending result traced differently in the first solve's graphs than in
        later ones: two more compilations in the second solve, measured)."""
        parts = tuple(p.clone() for p in parts)
        backend(parts[0].device).materialize(list(parts))
        return parts

    def residual(self, b, x, shift=0.0):
        """b - (A - shift I) x in double-float."""
        ax = self.product(x)
        if shift:
            ax = _df.sub(ax, _df.mul_f(x, torch.full_like(x[0], float(shift))))
        return _df.sub(b, ax)


def _layout(A):
    """The row-padded layout of a sparse container, kept in its plan (indices read once)."""
    cached = _plan.get(A, "neuron", "df_layout")
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
        _plan.put(A, "neuron", "df_layout", cached, _plan.STRUCTURE)
    return cached


def _float32_operator(M):
    """A preconditioner for the float32 inner solve."""
    if M is None:
        return None
    try:
        return _df_operator(M).float32
    except TypeError:
        pass
    solve32 = _float32_solve(M)
    if solve32 is not None:
        return solve32
    from trnscipy.sparse.linalg._interface import LinearOperator, _device_operator, _HostOperator

    bridged = _device_operator(M, None) if isinstance(M, LinearOperator | _si.LinearOperator) \
        else None
    if isinstance(bridged, _HostOperator):  # the user's host code: float32 back from the host
        return _HostOperator(bridged.host, np.float32, announced=True)
    return LinearOperator(M.shape, matvec=_rounded(M.matvec, M), rmatvec=_rounded(M.rmatvec, M),
                          dtype=np.float32)


def _float32_solve(M):
    """M given as a double-float factorization's solve (``LinearOperator(A.shape,
    spilu(A).solve)``): the operator of its float32 factors' solve (``float32_solve``,
    pure tensor code), or None."""
    fns = getattr(M, "_fns", None)
    if not fns or fns[0] is None or any(fns[1:]):
        return None
    solve32 = getattr(getattr(fns[0], "__self__", None), "float32_solve", None)
    if solve32 is None:
        return None
    from trnscipy.sparse.linalg._interface import LinearOperator

    return LinearOperator(M.shape, matvec=solve32, dtype=np.float32)


def _rounded(f, M):
    """``f`` (a product of the preconditioner M) with a float64 result rounded to float32
    (a float64 ILU's solve returns double-float data, as SciPy's returns float64), marked
    pure tensor code where M is, so that the inner solve may trace it."""

    def product(v):
        y = f(v)
        return _parts(y)[0] if _is_float64(y) else y

    product.pure_tensor_code = getattr(M, "pure_tensor_code", False)
    return product


def _is_float64(t):
    return getattr(t, "dtype", None) == torch.float64


# The solvers refined here (the capability table lets their float64 through on Neuron).
_REFINED = frozenset({"cg", "bicg", "bicgstab", "cgs", "gmres", "lgmres", "gcrotmk", "minres",
                      "qmr", "tfqmr"})


# The other solvers of the krylov kernel with a double-float method, by module (imported
# on use: they import this one).
_ELSEWHERE = {
    "lsqr": ("trnscipy.sparse.linalg._isolve._refine_lsq", "least_squares"),
    "lsmr": ("trnscipy.sparse.linalg._isolve._refine_lsq", "least_squares"),
    "expm_multiply": ("trnscipy.sparse.linalg._refine_expm", "expm_multiply"),
    "funm_multiply_krylov": ("trnscipy.sparse.linalg._refine_funm", "funm_multiply_krylov")}


@register("krylov", "neuron")
def krylov(scipy_solver, device_solver, args, kwargs, host_operand=None, operators=True):
    """float64 systems: refinement around the float32 device solver (module docstring);
    float32 systems: the device solver itself."""
    try:
        params = inspect.signature(scipy_solver).bind(*args, **kwargs).arguments
    except TypeError:  # e.g. tol=: the solver raises SciPy's TypeError
        return device_solver(*args, **kwargs)
    name = scipy_solver.__name__
    if name in _ELSEWHERE:  # lsqr, lsmr, expm_multiply: their own double-float methods
        module, function = _ELSEWHERE[name]
        method = getattr(importlib.import_module(module), function)
        return method(scipy_solver, device_solver, args, kwargs)
    if name not in _REFINED:
        return device_solver(*args, **kwargs)
    A, b = params["A"], params["b"]
    if not (_is_float64(b) or getattr(A, "dtype", None) in (torch.float64, np.float64)):
        return device_solver(*args, **kwargs)
    try:
        op = _df_operator(A)
    except TypeError:
        return _on_host(scipy_solver, name, params,
                        f"a {type(A).__name__} operator has no double-float product")
    if name in _ONE_SPACE and params.get("callback") is None and _matrix_preconditioner(
            params):
        x, info = _ONE_SPACE[name](device_solver, op, params)
    else:
        x, info = _refine(name, device_solver, op, params)
    if info > 0:
        return _on_host(scipy_solver, name, params, _NOT_CONVERGED)
    return x, info


# A float64 solve that stops unconverged returns SciPy's iterate after maxiter float64
# iterations (or its own stagnation): that iterate depends on float64 rounding at every
# step, which float32 iterations (x kept in double-float) reproduce only to float32
# accuracy (2.8e-6 of 47 after 3 cg iterations, the conformance case), and a refinement
# that stagnated (condition beyond about 1e7-1e8) has a float32-accurate x at best.
_NOT_CONVERGED = ("the float64 solve did not converge on the device within maxiter (float32 "
                  "iterations with double-float refinement): SciPy's unconverged float64 "
                  "iterate is computed on the host from the exact data")


def _on_host(scipy_solver, name, params, reason):
    fallback(f"scipy.sparse.linalg.{name}", reason, stacklevel=6)
    device = params["b"].device if isinstance(params["b"], torch.Tensor) else None
    host = {k: _transfer.to_host(v) if isinstance(v, torch.Tensor) or getattr(
        v, "_trnscipy_device_object", False) else v for k, v in params.items()}
    x, info = scipy_solver(**host)
    return _transfer.to_device(x, device), info


def _refine(name, device_solver, op, params):
    from trnscipy.sparse.linalg._interface import announce_host_operators

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
    announce_host_operators(f"scipy.sparse.linalg.{name}", *precond.values(), outer=True)
    extra = {k: v for k, v in params.items()
             if k not in ("A", "b", "x0", "rtol", "atol", "maxiter", "callback", "M", "M1",
                          "M2", "outer_v", "CU", "callback_type", "show", "check")}
    if name == "gmres" and params.get("callback_type") is not None:
        extra["callback_type"] = params["callback_type"]

    materialize = backend(bp[0].device).materialize
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
    budget, cap = maxiter, _inner_cap(name, n, params)
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
            cap = _inner_cap("gmres", n, {})
        prev = rnorm
        steps = min(budget, cap)
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


def _inner_cap(name, n, params):
    """maxiter of one inner solve, in the solver's unit (restart cycles for the GMRES
    family)."""
    iterations = max(_INNER_MIN, _INNER_PER_ROOT * math.isqrt(n))
    unit = {"gmres": min(params.get("restart") or 20, n), "lgmres": params.get("inner_m", 30),
            "gcrotmk": params.get("m", 20)}.get(name, 1)
    return -(-iterations // max(1, int(unit)))


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
    A.pure_tensor_code = True  # (the Arnoldi steps trace it into a device loop)
    loop = gmres._trnscipy_device_impl.torch_loop

    def solve(rhs, M, maxiter):
        return loop(A, rhs, rtol=_INNER_RTOL, atol=0.0, maxiter=maxiter, M=M)

    return solve


# ---- cg: one Krylov space, double-float iterate, residual replacement --------------------
#
# Restarting cg at each refinement step loses its Krylov space: on 2-D Poisson 10^4 to
# rtol 1e-10, three inner solves of about 230 iterations each, where float64 cg needs 347
# (float32 cg's attainable residual there is about 1e-5, so two steps are not enough).
# Here cg runs once, in float32, with x kept in double-float (x += alpha p by TwoSum),
# and the recursive residual is replaced by the true one (b - A x in double-float,
# rounded) at the end of every block of iterations ("reliable updates", as mixed-precision
# cg in lattice QCD does): about 390 iterations, and SciPy's test on the true residual
# once per block of CHECK_EVERY iterations, a device loop: one graph execution per block,
# as the float32 cg (measured).


def _matrix_preconditioner(params):
    """True when M is absent or a matrix (its float32 copy runs in the graphs)."""
    M = params.get("M")
    return M is None or isinstance(M, torch.Tensor) or getattr(M, "format", None) in (
        "csr", "csc", "coo", "bsr", "dia") or type(M).__name__ == "MatrixLinearOperator"


def _watch(best, stalled, rnorm, left, tol):
    """The stop test of a one-space solve on the device, after each block (cycle): the
    smallest true residual so far, the blocks since it, and whether to stop (converged
    below ``tol``, rounded down to float32 so that the host's float64 test agrees; no
    iterations left; non-finite; ``_STALLED_BLOCKS`` without a new smallest)."""
    better = rnorm < best
    best = torch.where(better, rnorm, best)
    stalled = torch.where(better, 0, stalled + 1)
    done = (rnorm < tol) | (left <= 0) | ~torch.isfinite(rnorm) | (stalled >= _STALLED_BLOCKS)
    return best, stalled, done.reshape(())


def _watch_start(rnorm, tol, device):
    """``_watch``'s carry before the first block, and the tolerance it tests."""
    tol32 = np.float32(tol)
    if tol32 > tol:
        tol32 = np.nextafter(tol32, np.float32(0))
    return (_data(rnorm, torch.float32, device), _data(0, torch.int32, device),
            torch.tensor(False).to(device), _data(float(tol32), torch.float32, device))


def _status(rnorm, left, stalled):
    """What the host reads once per device loop: [||b - A x||, iterations left, stalled]."""
    return torch.cat([rnorm, left.to(rnorm.dtype), stalled.to(rnorm.dtype)])


class _CG:
    """The graph function of the double-float cg for one operator and preconditioner:
    ``blocks`` (blocks of ``CHECK_EVERY`` float32 iterations, each a device loop ending
    with the true residual in place of the recursive one, in an outer device loop that
    leaves when ``_watch`` says; ``_status``).  A replayed graph (``graph_function``):
    cached on the operator, so that repeated solves with it neither trace nor compile
    again."""

    def __init__(self, op, M, device):
        A32 = op.float32
        V = utils.Local(lambda v: A32 @ v, (lambda v: v) if M is None else (lambda v: M @ v))
        loop = backend(device).device_loop

        def iteration(carry, _):
            xh, xl, r, p, rho, left, rref, tol = carry
            s = _DFStep((left > 0) & (utils.norm(r) >= _REPLACE * rref))
            (xh, xl), r, p, rho = cg_iteration(V, s, ((xh, xl), r, p, rho), False, tol)
            return xh, xl, r, p, rho, left - s.live.to(left.dtype), rref, tol

        def blocks(xh, xl, r, p, rho, left, rref, tol, bh, bl, best, stalled, done, tol_down,
                   stop):
            def block(carry, _):
                xh, xl, r, p, rho, left, rref, best, stalled, done = carry
                xh, xl, r, p, rho, left, rref, _ = loop(
                    iteration, (xh, xl, r, p, rho, left, rref, tol), 0, utils.CHECK_EVERY)
                true = op.residual((bh, bl), (xh, xl))
                rref = _df.norm(true)[0].reshape(1)
                return (xh, xl, true[0], p, rho, left, rref,
                        *_watch(best, stalled, rref, left, tol_down))

            out = loop(block, (xh, xl, r, p, rho, left, rref, best, stalled, done), 0, stop,
                       until=9)
            return (*out, _status(out[6], out[5], out[8]))

        self.blocks = backend(device).graph_function(blocks)


class _DFStep:
    """The step (``utils``' steps) of the double-float cg's device loop: the iterate is a
    double-float pair (x += a p by TwoSum), and every update is masked, since the loop
    runs on after the stop to the block's residual replacement."""

    stopped = False

    def __init__(self, live):
        self.live = live

    def stop_if(self, cond, code):
        self.live = self.live & ~cond

    def axpy(self, x, a, p):
        return tuple(torch.where(self.live, new, old)
                     for new, old in zip(_df.add_f(x, a * p), x, strict=True))

    def update(self, y, a, x):
        return torch.where(self.live, y + a * x, y)

    def xpay(self, x, a, y):
        return torch.where(self.live, x + a * y, y)

    def carry(self, new, old):
        return torch.where(self.live, new, old)


_STALLED_BLOCKS = 10  # blocks without a new smallest true residual: hand over
# A block's iterations stop once the recursive residual is this far below the true one
# it started from: the recursive residual drifts from the true one (float32 products),
# and a replacement far below the drift breaks cg's recurrences (measured: stalls at
# 1e-8 on a 64-unknown Poisson problem that cg solves within one block).
_REPLACE = 1e-2


def _start(name, op, params, M):
    """The setup of a one-space solve: b's parts, x0's, the first true residual (one
    graph) and SciPy's tolerance; returns a finished ``(x, info)`` where the solve ends
    there (zero b, converged x0, the solver's own shape errors: None, see ``_one_space``),
    else (bh, bl, xh, xl, r (rounded to float32), rnorm, tol, maxiter)."""
    n = op.shape[0]
    b = params["b"]
    device = op.parts[0].device
    if not isinstance(b, torch.Tensor):
        b = torch.as_tensor(np.asarray(b), device=device)
    if tuple(b.shape) not in ((n,), (n, 1)) or op.shape[0] != op.shape[1]:
        return None
    bh, bl = (p.reshape(-1) for p in _parts(b))
    rtol = float(params.get("rtol", 1e-5))
    atol = check_atol(name, params.get("atol", 0.0))
    maxiter = params.get("maxiter")
    maxiter = n * 10 if maxiter is None else int(maxiter)
    x0 = params.get("x0")
    check_x0(x0)
    if x0 is None:
        xh = torch.zeros(n, dtype=bh.dtype).to(device)
        xl = torch.zeros(n, dtype=bh.dtype).to(device)
    elif isinstance(x0, str):  # 'Mb'
        xh = (bh if M is None else M @ bh).reshape(-1)
        xl = torch.zeros_like(xh)
    else:
        xh, xl = (p.reshape(-1) for p in _parts(x0))
    r = op.residual((bh, bl), (xh, xl))
    norms = torch.stack([_df.norm((bh, bl))[0], _df.norm(r)[0]])
    r = r[0]
    # b's parts too: left pending, the first block's replay computes them in a graph of
    # its own on a repeated solve (the first solve's trace computes them with its copies)
    backend(device).materialize([norms, xh, xl, r, bh, bl])
    bnrm, rnorm = (float(v) for v in norms.cpu())
    if bnrm == 0:
        return _transfer.df_tensor(bh, bl), 0
    tol = max(atol, rtol * bnrm)
    if rnorm < tol:
        return _transfer.df_tensor(xh, xl), 0
    return bh, bl, xh, xl, r, rnorm, tol, maxiter


def _data(value, dtype, device):
    """A host value as graph data, shape (1,) (torch-xla makes a 0-d 0 or 1 a graph
    constant even when uploaded): one graph whatever tol and maxiter."""
    return torch.tensor([value], dtype=dtype).to(device)


class _Progress:
    """The host's side of a one-space solve: SciPy's test on the status read after each
    device loop (``_status``), and the hand-over to the general refinement when
    ``_STALLED_BLOCKS`` blocks brought no new smallest residual (``_watch``)."""

    def __init__(self, name, device_solver, op, params, tol, maxiter):
        self.args = name, device_solver, op, params
        self.tol, self.maxiter = tol, maxiter

    def done(self, status, xh, xl):
        """(x, info) when the solve ends at this read, else None."""
        rnorm, left, stalled = (float(v) for v in status.cpu())
        x = _transfer.df_tensor(xh, xl)
        if rnorm < self.tol:
            return x, 0
        if left <= 0 or not np.isfinite(rnorm):
            return x, self.maxiter
        if stalled >= _STALLED_BLOCKS:
            name, device_solver, op, params = self.args
            return _refine(name, device_solver, op, dict(params, x0=x, maxiter=int(left)))
        return None


def _cached_graphs(op, key, M, build):
    """The graph functions ``build()``, cached on the operator when M is absent."""
    graphs = op.graphs.get(key) if M is None else None
    if graphs is None:
        graphs = build()
        if M is None:
            op.graphs[key] = graphs
    return graphs


def _cg(device_solver, op, params):
    """cg to SciPy's test on the true residual (see above).  If the true residual stops
    decreasing (float32 cg makes no progress: condition beyond about 1e7), the general
    refinement (GMRES-based where it stagnates) goes on from the iterate."""

    M = _float32_operator(params.get("M"))
    start = _start("cg", op, params, M)
    if start is None:
        return device_solver(**params)  # the solver's own shape errors
    if len(start) == 2:
        return start
    bh, bl, xh, xl, r, rnorm, tol, maxiter = start
    device = r.device
    graphs = _cached_graphs(op, "cg", M, lambda: _CG(op, M, device))
    p = torch.zeros(r.shape[0], dtype=r.dtype).to(device)
    rho = _data(1.0, r.dtype, device)  # p = 0: the first p is z
    left = _data(maxiter, torch.int32, device)
    tol_t, rref = _data(tol, r.dtype, device), _data(rnorm, r.dtype, device)
    *watch, tol_down = _watch_start(rnorm, tol, device)
    stop = _data(-(-maxiter // utils.CHECK_EVERY) + 1, torch.int64, device)
    progress = _Progress("cg", device_solver, op, params, tol, maxiter)
    while True:  # (one pass unless the loop ran to ``stop``)
        xh, xl, r, p, rho, left, rref, *watch, status = graphs.blocks(
            xh, xl, r, p, rho, left, rref, tol_t, bh, bl, *watch, tol_down, stop)
        end = progress.done(status, xh, xl)
        if end is not None:
            return end


# ---- gmres: a true residual at every restart -------------------------------------------
#
# Restarted gmres starts every cycle from the residual; the refinement above restarted
# the float32 gmres itself at each step (its own setup graphs, its own residual in
# float32, capped at 25 cycles: 5 inner solves, 148 graph executions for Poisson 10^4 to
# rtol 1e-10, SciPy's float64 gmres needs 101 cycles).  Here each cycle is one replayed
# graph: float32 Arnoldi steps on the rounded true residual, x += V y in double-float, and
# the new true residual b - A x in double-float (SciPy's test reads its norm).


class _GMRES:
    """The graph function of the double-float gmres for one operator, preconditioner and
    restart length: ``cycles`` (restart cycles, each ending with the true residual, in a
    device loop that leaves when ``_watch`` says; ``_status``)."""

    def __init__(self, op, M, m, device):
        from trnscipy.sparse.linalg._isolve._arnoldi import Arnoldi, inner_stop
        from trnscipy.sparse.linalg._isolve.iterative import gmres_correction
        from trnscipy.sparse.linalg._isolve.utils import norm

        A32 = op.float32
        psolve = None if M is None else (lambda v: M @ v)
        arnoldi = Arnoldi(lambda v: A32 @ v, m, float(np.finfo(np.float32).eps),
                          torch.float32, device, lpsolve=psolve)

        loop = backend(device).device_loop

        def cycles(xh, xl, r, rnorm, left, tol, bh, bl, best, stalled, done, tol_down, stop):
            def cycle(carry, _):
                xh, xl, r, rnorm, left, best, stalled, done = carry
                live = (left > 0) & (rnorm >= tol)
                v0 = r if M is None else M @ r
                beta = norm(v0)
                basis, _ = arnoldi.steps(arnoldi.start(v0 * (1 / beta)), m)
                brks = basis["brk"]
                steps, _ = inner_stop(torch.zeros_like(brks), brks)
                dx = gmres_correction(basis["V"], basis["R"], basis["Q"][:, 0] * beta, steps,
                                      m)
                x = _df.add_f((xh, xl), dx)
                xh, xl = torch.where(live, x[0], xh), torch.where(live, x[1], xl)
                true = op.residual((bh, bl), (xh, xl))
                rnorm = _df.norm(true)[0].reshape(1)
                left = left - live.to(left.dtype)
                return (xh, xl, true[0], rnorm, left,
                        *_watch(best, stalled, rnorm, left, tol_down))

            out = loop(cycle, (xh, xl, r, rnorm, left, best, stalled, done), 0, stop, until=7)
            return (*out, _status(out[3], out[4], out[6]))

        self.cycles = backend(device).graph_function(cycles)


def _gmres(device_solver, op, params):
    """gmres(restart) with a double-float iterate and the true residual at every restart
    (see above); ``maxiter`` counts restart cycles, as SciPy's.  Where the true residual
    stops decreasing, the general refinement (GMRES-IR) goes on from the iterate."""
    M = _float32_operator(params.get("M"))
    start = _start("gmres", op, params, M)
    if start is None:
        return device_solver(**params)
    if len(start) == 2:
        return start
    bh, bl, xh, xl, r, rnorm, tol, maxiter = start
    device = r.device
    m = min(params.get("restart") or 20, op.shape[0])
    graphs = _cached_graphs(op, ("gmres", m), M, lambda: _GMRES(op, M, m, device))
    rnorm_t = _data(rnorm, r.dtype, device)
    left, tol_t = _data(maxiter, torch.int32, device), _data(tol, r.dtype, device)
    *watch, tol_down = _watch_start(rnorm, tol, device)
    stop = _data(maxiter + 1, torch.int64, device)
    progress = _Progress("gmres", device_solver, op, params, tol, maxiter)
    while True:  # (one pass unless the loop ran to ``stop``)
        xh, xl, r, rnorm_t, left, *watch, status = graphs.cycles(
            xh, xl, r, rnorm_t, left, tol_t, bh, bl, *watch, tol_down, stop)
        end = progress.done(status, xh, xl)
        if end is not None:
            return end


_ONE_SPACE = {"cg": _cg, "gmres": _gmres}
