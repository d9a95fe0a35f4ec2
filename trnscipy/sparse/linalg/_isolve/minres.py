"""minres on device data: SciPy 1.17's MINRES (Paige-Saunders), its tests and istop codes.

The scalar recurrences run as 0-d device tensors; the stop test is read on the
host as the other solvers' (``utils.run``).  Differs from SciPy: complex input
raises TypeError (SciPy's minres fails on it with an arbitrary error); with
``show=True`` the host reads every iteration to print SciPy's table.
"""

import math
from typing import NamedTuple

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.utils import (
    Local,
    host_value,
    make_system,
    norm,
    run,
    solver_kernel,
    sync,
)

__all__ = ["minres"]

_MESSAGES = [" beta2 = 0.  If M = I, b and x are eigenvectors    ",
             " beta1 = 0.  The exact solution is x0          ",
             " A solution to Ax = b was found, given rtol        ",
             " A least-squares solution was found, given rtol    ",
             " Reasonable accuracy achieved, given eps           ",
             " x has converged to an eigenvector                 ",
             " acond has exceeded 0.1/eps                        ",
             " The iteration limit was reached                   ",
             " A  does not define a symmetric matrix             ",
             " M  does not define a symmetric matrix             ",
             " M  does not define a pos-def preconditioner       "]


@dispatch(_scipy.minres, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.minres)
def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None, callback=None,
           show=False, check=False):
    system = make_system(A, M, x0, b)
    if system.b.is_complex():
        raise TypeError("minres supports real data only (SciPy's minres fails on complex "
                        "input)")
    matvec = system.matvec
    psolve = system.M.matvec if system.M is not None else (lambda v: v)
    x, bvec, device, eps = system.x, system.b, system.device, system.eps
    n = system.n
    maxiter = 5 * n if maxiter is None else int(maxiter)
    first, last = "Enter minres.   ", "Exit  minres.   "
    if show:
        print(first + "Solution of symmetric Ax = b")
        print(first + f"n      =  {n:3g}     shift  =  {shift:23.14e}")
        print(first + f"itnlim =  {maxiter:3g}     rtol   =  {rtol:11.2e}")
        print()

    # minres's inner products stay torch.dot (XLA: one dot op), not the ``inner`` kernel
    V = Local(matvec, psolve, device, dot=torch.dot)
    r1 = bvec.clone() if x0 is None else bvec - matvec(x)
    y = psolve(r1)
    beta1_t = V.dot(r1, y)
    bnorm_t = norm(bvec)
    sync(device)
    beta1 = float(beta1_t)
    if beta1 < 0:
        raise ValueError("indefinite preconditioner")
    if beta1 == 0:  # early returns keep the system dtype, as SciPy's
        return x, 0
    if float(bnorm_t) == 0:
        return bvec, 0
    beta1 = math.sqrt(beta1)
    if check:
        minres_check(V, r1, y, eps)

    if show:
        print()
        print()
        print("   Itn     x(1)     Compatible    LS       norm(A)  cond(A) gbar/|A|")
    real = bnorm_t.dtype
    zero = torch.zeros((), dtype=real, device=device)
    maxiter_t = torch.tensor(maxiter, device=device)
    host = show or callback is not None
    itn_host = [0]

    def step(state, s, first_it):
        itn_host[0] += 1
        state, e = minres_iteration(V, s, state, first_it, beta1, shift, rtol, maxiter_t, eps)
        x = state[0]
        if show:
            _show_line(itn_host[0], x, e.test1, e.test2, e.Anorm, e.Acond, e.gbar, e.rnorm,
                       e.epsx, e.Anorm * e.ynorm * rtol, e.istop, n, maxiter, eps)
            state_out[0] = (int(e.istop), itn_host[0], e.Anorm, e.Acond, e.rnorm, e.ynorm,
                            e.Arnorm)
        if callback is not None:
            callback(host_value(x))
        return state

    state_out = [None]
    beta1_d = torch.tensor(beta1, dtype=real, device=device)
    zvec = torch.zeros_like(bvec)
    state = (x, r1, r1, y, zvec, zvec, beta1_d, zero, zero, zero, beta1_d, beta1_d, zero, zero,
             zero, torch.tensor(np.finfo(system.np_dtype).max, dtype=real, device=device),
             zero - 1, zero, torch.zeros((), dtype=torch.int64, device=device))
    # iteration 0 peeled: with the replayed blocks (their inputs copied to device data)
    # the block after it traces as the later ones, so one block graph, not two
    state, info = run(step, state, maxiter, device, None, None, block=1 if host else None,
                      host_effects=host or not system.traceable, loop=True)
    if info == MINRES_NONSYMMETRIC:
        raise ValueError("non-symmetric matrix")
    if show and state_out[0] is not None:
        istop, itn, Anorm, Acond, rnorm, ynorm, Arnorm = state_out[0]
        print()
        print(last + f" istop   =  {istop:3g}               itn   ={itn:5g}")
        print(last + f" Anorm   =  {float(Anorm):12.4e}      Acond =  {float(Acond):12.4e}")
        print(last + f" rnorm   =  {float(rnorm):12.4e}      ynorm =  {float(ynorm):12.4e}")
        print(last + f" Arnorm  =  {float(Arnorm):12.4e}")
        print(last + _MESSAGES[istop + 1])
    return _as_scipy_dtype(state[0]), info


def _as_scipy_dtype(x):
    """SciPy 1.17's minres returns float64 for float32 input (its scalars are Python
    floats; 1.18 keeps float32); the iteration here stays in float32, the result is
    promoted where float64 exists and SciPy promotes."""
    from trnscipy._capabilities import capability
    from trnscipy._device import device_kind
    from trnscipy._scipy_version import scipy_at_least

    if (x.dtype == torch.float32 and not scipy_at_least(1, 18)
            and capability(device_kind(x.device)).float64):
        return x.to(torch.float64)
    return x


def _show_line(itn, x, test1, test2, Anorm, Acond, gbar, qrnorm, epsx, epsr, istop, n,
               maxiter, eps):
    Anorm, Acond, qrnorm = float(Anorm), float(Acond), float(qrnorm)
    if not (n <= 40 or itn <= 10 or itn >= maxiter - 10 or itn % 10 == 0
            or qrnorm <= 10 * float(epsx) or qrnorm <= 10 * float(epsr)
            or Acond <= 1e-2 / eps or int(istop) != 0):
        return
    print(f"{itn:6g} {float(x[0]):12.5e} {float(test1):10.3e}" + f" {float(test2):10.3e}"
          + f" {Anorm:8.1e} {Acond:8.1e} {float(gbar) / Anorm:8.1e}")
    if itn % 10 == 0:
        print()


MINRES_NONSYMMETRIC = -999  # info of a lazy step that met beta < 0: the caller raises


class MinresNorms(NamedTuple):
    """The estimates one minres iteration ends with (SciPy's ``show`` table)."""

    istop: object
    test1: object
    test2: object
    Anorm: object
    Acond: object
    gbar: object
    rnorm: object
    ynorm: object
    epsx: object
    Arnorm: object


def minres_iteration(V, s, state, first, beta1, shift, rtol, maxiter, eps):
    """One iteration of SciPy's minres (Paige and Saunders): a Lanczos step on
    A - shift I preconditioned by M, the Givens update of the QR factorization of the
    tridiagonal matrix, the x update, then SciPy's estimates and stop tests in its order
    (istop 1..6, or -1 when beta2 = 0 on the first iteration).  Scalars are the space's
    (``V.scalars``: 0-d tensors selected by ``where``, or host numbers).  ``beta1``, ``eps``:
    host numbers; ``maxiter``: a scalar of the space.  ``state``: (x, r1, r2, y, w, w2,
    beta, oldb, dbar, epsln, phibar, rhs1, rhs2, tnorm2, gmax, gmin, cs, sn, itn).
    Returns (state, ``MinresNorms``); beta < 0 (A or M not symmetric) is a ValueError, or
    on a lazy step info ``MINRES_NONSYMMETRIC``."""
    F = V.scalars
    (x, r1, r2, y, w, w2, beta, oldb, dbar, epsln, phibar, rhs1, rhs2, tnorm2, gmax, gmin,
     cs, sn, itn) = state
    itn = itn + 1
    v = (1.0 / beta) * y
    y = V.matvec(v)
    y = y - shift * v
    if not first:
        y = y - (beta / oldb) * r1
    alfa = V.dot(v, y)
    y = y - (alfa / beta) * r2
    r1, r2 = r2, y
    y = V.psolve(r2)
    oldb, beta = beta, V.dot(r2, y)
    s.stop_if(beta < 0, MINRES_NONSYMMETRIC)
    if s.stopped:
        raise ValueError("non-symmetric matrix")
    beta = F.sqrt(beta)
    tnorm2 = tnorm2 + (alfa ** 2 + oldb ** 2 + beta ** 2)
    oldeps = epsln
    delta = cs * dbar + sn * alfa
    gbar = sn * dbar - cs * alfa
    epsln = sn * beta
    dbar = -cs * beta
    root = F.sqrt(gbar ** 2 + dbar ** 2)
    Arnorm = phibar * root
    gamma = F.clamp_min(F.sqrt(gbar ** 2 + beta ** 2), eps)
    cs = gbar / gamma
    sn = beta / gamma
    phi = cs * phibar
    phibar = sn * phibar
    w1, w2 = w2, w
    w = (v - oldeps * w1 - delta * w2) * (1.0 / gamma)
    x = s.keep(x + phi * w, x)
    gmax = F.maximum(gmax, gamma)
    gmin = F.minimum(gmin, gamma)
    z = rhs1 / gamma
    rhs1 = rhs2 - delta * z
    rhs2 = -epsln * z
    Anorm = F.sqrt(tnorm2)
    ynorm = V.norm(x)
    epsx = Anorm * ynorm * eps
    rnorm = phibar
    test1 = F.where((ynorm == 0) | (Anorm == 0), math.inf,
                    rnorm / F.where(Anorm * ynorm == 0, 1.0, Anorm * ynorm))
    test2 = F.where(Anorm == 0, math.inf, root / F.where(Anorm == 0, 1.0, Anorm))
    Acond = gmax / gmin
    istop = 0  # SciPy's tests in its order: the last one met wins
    for cond, value in ((1 + test2 <= 1, 2), (1 + test1 <= 1, 1), (itn >= maxiter, 6),
                        (Acond >= 0.1 / eps, 4), (epsx >= beta1, 3), (test2 <= rtol, 2),
                        (test1 <= rtol, 1)):
        istop = F.where(cond, value, istop)
    if first:  # beta2 = 0: b and x are eigenvectors (istop -1 before the tests)
        istop = F.where(beta / beta1 <= 10 * eps, -1, istop)
    s.stop_if(istop != 0, F.where(istop == 6, maxiter, 0))
    return ((x, r1, r2, y, w, w2, beta, oldb, dbar, epsln, phibar, rhs1, rhs2, tnorm2, gmax,
             gmin, cs, sn, itn),
            MinresNorms(istop, test1, test2, Anorm, Acond, gbar, rnorm, ynorm, epsx, Arnorm))


def minres_check(V, r1, y, eps):
    """SciPy's ``check=True`` tests of minres: A and M symmetric to eps**(1/3), with
    y = M r1 (two products of A, one of M, two pairs of inner products)."""
    w = V.matvec(y)
    r2 = V.matvec(w)
    ss, t = (float(d) for d in V.dots((w, w), (y, r2)))
    if abs(ss - t) > (ss + eps) * eps ** (1.0 / 3.0):
        raise ValueError("non-symmetric matrix")
    r2 = V.psolve(y)
    ss, t = (float(d) for d in V.dots((y, y), (r1, r2)))
    if abs(ss - t) > (ss + eps) * eps ** (1.0 / 3.0):
        raise ValueError("non-symmetric preconditioner")
