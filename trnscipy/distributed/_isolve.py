"""Krylov solvers on DistributedMatrix operands (SciPy 1.17's signatures, info, results).

Vectors are this rank's rows (torch tensors); every inner product is a partial sum
per rank, and the partial sums one step needs travel in one all_reduce (``System.sums``).
cg is ``iterative.cg_single_reduction`` (Chronopoulos and Gear's variant, written against
the shared vector space): z = M r and w = A z come first, then ||r||^2, (r, z) and (z, w)
in a single all_reduce, so one reduction and one halo exchange per iteration, with
SciPy's stopping test (||r|| < max(atol, rtol ||b||) at the top of each iteration) and
SciPy's iteration count.  gmres runs ``iterative.gmres_cycle`` (``System.gram_schmidt``: the
projections in two all_reduces); bicgstab runs ``iterative.bicgstab_iteration`` (||r|| with (r~, r)
and (t, r) with (t, t) fused: four all_reduces per iteration); minres follows SciPy's
loop step for step.

Callbacks run on every rank.  Those that SciPy gives the iterate ``xk`` get a
DistributedArray (``xk.local`` is this rank's rows; ``gather(xk)`` inside the callback
is collective and allowed, since every rank calls it); gmres's residual norms are
global floats, the same on every rank.  Results: ``(x, info)`` with ``x`` a
DistributedArray partitioned like A's rows.
"""

import math

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import register_distributed
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._torch import torch
from trnscipy.distributed import _comm
from trnscipy.distributed._array import DistributedArray, check_same
from trnscipy.distributed._matrix import DistributedMatrix
from trnscipy.sparse.linalg._isolve.iterative import (
    bicgstab_iteration,
    cg_single_reduction,
    gmres_cycle,
)
from trnscipy.sparse.linalg._isolve.minres import minres_check, minres_iteration
from trnscipy.sparse.linalg._isolve.utils import (
    HostScalars,
    HostStep,
    _coerce,
    check_atol,
    check_square,
    check_vector,
    gmres_callback_type,
)

__all__ = ["cg", "gmres", "bicgstab", "minres", "System"]


class System:
    """A distributed system: A and M as functions on local tensors, x, b, reductions; the
    vector space the shared iterations (``sparse.linalg._isolve.iterative``, ``minres``) run in."""

    scalars = HostScalars  # all-reduced sums are host numbers

    def __init__(self, A, b, x0=None, M=None):
        if not isinstance(A, DistributedMatrix):
            raise ValueError(f"expected a DistributedMatrix, got {type(A).__name__} (the "
                             "operands of a distributed solve are distributed together)")
        check_square(A.shape)
        self.A, self.where, self.n = A, A.placement, A.shape[0]
        b_local = self._local(b, "b")
        self.np_dtype = np.dtype(_coerce(A.dtype.char, to_numpy_dtype(b_local.dtype).char))
        self.dtype = to_torch_dtype(self.np_dtype)
        self.b = b_local.to(self.dtype).reshape(-1).clone()
        self.x0_given = x0 is not None
        self.x = (self._local(x0, "x0").to(self.dtype).reshape(-1).clone() if x0 is not None
                  else torch.zeros_like(self.b))
        self.eps = float(np.finfo(self.np_dtype).eps)
        self.psolve = self._preconditioner(M)

    def _local(self, v, name):
        if isinstance(v, DistributedArray):
            check_same(self.A, v, f"A and {name}")
            check_vector(self.A.shape, name, v.shape)
            return v.local
        if isinstance(v, np.ndarray) or isinstance(v, list):
            v = np.asarray(v)
            check_vector(self.A.shape, name, v.shape)
            return self.A._vector(v, self.A.offsets)
        raise ValueError(f"{name} must be a DistributedArray partitioned like A (or a NumPy "
                         f"array given whole on every rank), not {type(v).__name__}")

    def _preconditioner(self, M):
        if M is None:
            return lambda r: r
        if getattr(M, "_trnscipy_placement", None) != self.where:
            raise ValueError("M must be a distributed operator on A's process group "
                             "(a DistributedMatrix or trnscipy.distributed.block_jacobi)")
        if M.offsets != self.A.offsets:
            raise ValueError("M and A have different row partitions")
        return M.matvec_local

    def matvec(self, x):
        return self.A.matvec_local(x)

    def array(self, local):
        return DistributedArray(local, self.A.offsets, self.where, (self.n,))

    def sums(self, *partials):
        """Global sums of local partial results, in one all_reduce: Python numbers."""
        out = _comm.allsum(self.where, partials, self.dtype)
        return [complex(v) if out.is_complex() else float(v) for v in out]

    def norm(self, v):
        return math.sqrt(self.sums(_sq(v))[0].real)

    def dot(self, a, b):
        return self.sums(_dot(a, b))[0]

    def dots(self, *pairs):
        """conj(a).b for each pair, in one all_reduce (the iterations' vector space)."""
        return self.sums(*(_sq(a) if a is b else _dot(a, b) for a, b in pairs))

    def sync(self):
        pass

    def gram_schmidt(self, w, basis):
        """``utils.Local.gram_schmidt`` in two all_reduces (the projections) and one
        (||w|| after), ||w|| before travelling with the first."""
        first = self.sums(_sq(w), *(basis.conj() @ w))
        h0, h = math.sqrt(first[0].real), first[1:]
        w = w - torch.tensor(h, dtype=self.dtype, device=w.device) @ basis
        h2 = self.sums(*(basis.conj() @ w))
        w = w - torch.tensor(h2, dtype=self.dtype, device=w.device) @ basis
        return h0, [a + c for a, c in zip(h, h2, strict=True)], w, self.norm(w)


def _sq(v):
    return torch.vdot(v, v).real if v.is_complex() else torch.dot(v, v)


def _dot(a, b):
    return torch.vdot(a, b) if a.is_complex() else torch.dot(a, b)


def _start(name, A, b, x0, M, atol, rtol, maxiter):
    s = System(A, b, x0, M)
    s.bnrm2 = s.norm(s.b)
    s.atol = max(check_atol(name, atol), float(rtol) * s.bnrm2)
    s.maxiter = s.n * 10 if maxiter is None else int(maxiter)
    return s


def _residual(s):
    return s.b - s.matvec(s.x) if s.x0_given else s.b.clone()


def _run(method, s, state, callback, *constants):
    """Up to ``s.maxiter`` iterations of a shared ``method`` (its iterate s.x, updated in
    place), SciPy's callback after each completed one: (x, info)."""
    xk = s.array(s.x)
    for iteration in range(s.maxiter):
        step = HostStep()
        state = method(s, step, state, iteration == 0, s.atol, *constants)
        if step.stopped:
            return xk, step.info
        if callback:
            callback(xk)
    return xk, s.maxiter


@register_distributed(_scipy.cg)
def cg(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    s = _start("cg", A, b, x0, M, atol, rtol, maxiter)
    if s.bnrm2 == 0:
        return s.array(s.b), 0
    state = (s.x, _residual(s), None, None, None, None)
    return _run(cg_single_reduction, s, state, callback)


@register_distributed(_scipy.bicgstab)
def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    s = _start("bicgstab", A, b, x0, M, atol, rtol, maxiter)
    if s.bnrm2 == 0:
        return s.array(s.b), 0
    tiny = s.eps ** 2
    r = _residual(s)
    state = (s.x, r, r.clone(), None, None, None, None, None)
    return _run(bicgstab_iteration, s, state, callback, tiny, tiny)


@register_distributed(_scipy.gmres)
def gmres(A, b, x0=None, *, rtol=1e-5, atol=0., restart=None, maxiter=None, M=None,
          callback=None, callback_type=None):
    callback_type = gmres_callback_type(callback, callback_type, stacklevel=3)
    s = _start("gmres", A, b, x0, M, atol, rtol, maxiter)
    if s.bnrm2 == 0:
        return s.array(s.b), 0
    n, eps, maxiter, tol, bnrm2 = s.n, s.eps, s.maxiter, s.atol, s.bnrm2
    m = min(20 if restart is None else restart, n)
    ptol = s.norm(s.psolve(s.b)) * min(1.0, tol / bnrm2)
    pfac = 1.0
    inner = [0]
    x = s.x
    xk = s.array(x)
    r = _residual(s)
    if s.norm(r) < tol:
        return xk, 0

    def on_step(presid):
        inner[0] += 1
        if callback_type in ("legacy", "pr_norm"):
            callback(np.float64(presid / bnrm2))  # SciPy's type
        return callback_type == "legacy" and inner[0] == maxiter

    for _ in range(maxiter):
        dx, presid, brk = gmres_cycle(s, r, m, eps, s.dtype, ptol, on_step)
        x.add_(dx)
        r = s.b - s.matvec(x)
        rnorm = s.norm(r)
        if callback_type == "legacy" and inner[0] == maxiter:
            return xk, 0 if rnorm <= tol else maxiter
        if callback_type == "x":
            callback(xk)
        if rnorm <= tol or brk:
            break
        pfac = max(eps, 0.25 * pfac) if presid <= ptol else min(1.0, 1.5 * pfac)
        ptol = presid * min(pfac, tol / rnorm)
    return xk, 0 if rnorm <= tol else maxiter


@register_distributed(_scipy.minres)
def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None, callback=None,
           show=False, check=False):
    """SciPy's minres, ``minres.minres_iteration`` on host numbers: three all_reduces per
    iteration (alpha, beta and ||x||).  ``show`` prints a short line per iteration on
    rank 0 only."""
    s = System(A, b, x0, M)
    n, eps = s.n, s.eps
    maxiter = 5 * n if maxiter is None else int(maxiter)
    show = show and s.where.rank == 0
    r1 = _residual(s)
    y = s.psolve(r1)
    beta1 = s.dot(r1, y)
    if beta1 < 0:
        raise ValueError("indefinite preconditioner")
    if beta1 == 0:
        return s.array(s.x), 0
    if s.norm(s.b) == 0:
        return s.array(s.b), 0
    beta1 = math.sqrt(beta1)
    if check:
        minres_check(s, r1, y, eps)
    zero = torch.zeros_like(s.x)
    state = (s.x, r1, r1, y, zero, zero, beta1, 0.0, 0.0, 0.0, beta1, beta1, 0.0, 0.0, 0.0,
             float(np.finfo(s.np_dtype).max), -1.0, 0.0, 0)
    xk = s.array(s.x)
    for itn in range(1, maxiter + 1):
        step = HostStep()
        state, e = minres_iteration(s, step, state, itn == 1, beta1, shift, rtol, maxiter, eps)
        xk.local = state[0]
        if show:
            print(f"{itn:6g} {e.test1:10.3e} {e.test2:10.3e} {e.Anorm:8.1e} {e.Acond:8.1e}")
        if callback is not None:
            callback(xk)
        if step.stopped:
            return xk, step.info
    return xk, maxiter
