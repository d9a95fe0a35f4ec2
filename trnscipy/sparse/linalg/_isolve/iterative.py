"""cg, bicg, bicgstab, cgs, gmres, qmr on device data (SciPy 1.17's algorithms and contract).

Loop structure and host reads: see ``utils``.  Each function is the device
implementation of SciPy's; host inputs go to SciPy itself.
"""

import warnings

import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import dispatch
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.utils import (check_atol, dot, host_value, make_system,
                                                   norm, run, stop_tolerance, sync)

__all__ = ["bicg", "bicgstab", "cg", "cgs", "gmres", "qmr"]


def _setup(name, A, b, x0, atol, rtol, M, maxiter):
    """make_system, atol check, ||b||, tolerance and the initial residual (no host read)."""
    system = make_system(A, M, x0, b)
    atol = check_atol(name, atol)
    bnrm2 = norm(system.b)
    system.tol = stop_tolerance(atol, rtol, bnrm2)
    system.bnrm2 = bnrm2
    system.maxiter = system.n * 10 if maxiter is None else int(maxiter)
    system.psolve = system.M.matvec if system.M is not None else _identity
    system.rpsolve = system.M.rmatvec if system.M is not None else _identity
    return system


def _identity(x):
    return x


def _zero_rhs(system):
    """Run the setup graph; True when ||b|| == 0 (SciPy then returns (b, 0))."""
    sync(system.device)
    return float(system.bnrm2) == 0


def _residual(system, x0_given):
    """b - A x, or a copy of b when x is zero (as SciPy's ``if x.any()``)."""
    b, x = system.b, system.x
    if not x0_given:
        return b.clone()
    return torch.where(x.any(), b - system.A.matvec(x), b)


def _x(state):
    return state[0]


@dispatch(_scipy.cg)
def cg(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    system = _setup("cg", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    matvec, psolve, tol = system.A.matvec, system.psolve, system.tol

    def step(state, s, first):
        x, r, p, rho_prev = state
        s.stop_if(norm(r) < tol, 0)
        if s.stopped:
            return state
        z = psolve(r)
        rho = dot(r, z)
        p = z.clone() if first else s.xpay(z, rho / rho_prev, p)
        q = matvec(p)
        alpha = rho / dot(p, q)
        x = s.axpy(x, alpha, p)
        r = s.update(r, -alpha, q)
        return x, r, p, rho

    r = _residual(system, x0 is not None)
    state = (system.x, r, torch.zeros_like(r), torch.ones((), dtype=r.dtype, device=r.device))
    state, info = run(step, state, system.maxiter, system.device, callback, _x)
    return state[0], info
