"""tfqmr on device data (SciPy 1.17's algorithm, codes and convergence test).

One driver step is an even/odd pair of SciPy's iterations (the algorithm
alternates between them), so the graph of a block is the same for every block.
"""

import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._dtypes import divide
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.utils import (
    check_atol,
    dot,
    host_value,
    make_system,
    norm,
    run,
    solver_kernel,
    stop_tolerance,
    sync,
)

__all__ = ["tfqmr"]


@dispatch(_scipy.tfqmr, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.tfqmr)
def tfqmr(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None,
          show=False):
    system = make_system(A, M, x0, b)
    matvec = system.matvec
    psolve = system.M.matvec if system.M is not None else (lambda v: v)
    x, bvec, device = system.x, system.b, system.device
    bnorm = norm(bvec)
    maxiter = min(10000, system.n * 10) if maxiter is None else int(maxiter)
    r = bvec.clone() if x0 is None else bvec - matvec(x)
    rho = dot(r, r).real.to(r.dtype)
    r0norm = torch.sqrt(rho.real)
    sync(device)
    if float(bnorm) == 0:
        return bvec.clone(), 0
    if float(r0norm) == 0:
        return x, 0
    tol = stop_tolerance(check_atol("tfqmr", atol), rtol, r0norm)
    rstar = r
    maxiter_t = torch.tensor(maxiter, device=device)

    def step(state, s, first):
        x, u, w, v, uhat, d, theta, eta, tau, rho, rho_last, alpha, itn = state
        for even in (True, False):
            s.stop_if(itn >= maxiter_t, maxiter)
            if even:
                vtrstar = dot(rstar, v)
                s.stop_if(vtrstar == 0, -1)
                alpha = divide(rho, vtrstar)
                u_next = u - alpha * v
            if s.stopped:
                return (x,) + state[1:-1] + (itn,)
            w = w - alpha * uhat
            d = u + divide(theta ** 2, alpha) * eta * d
            theta = norm(w) / tau
            c = torch.sqrt(1.0 / (1 + theta ** 2))
            tau = tau * theta * c
            eta = (c ** 2) * alpha
            x = s.keep(x + eta * psolve(d), x)
            if callback is not None and (not s.lazy or _host_live(s, device)):
                callback(host_value(x))
            s.stop_if(tau * torch.sqrt(itn.to(tau.dtype) + 1) < tol, 0)
            itn = itn + 1
            if s.stopped:
                return (x,) + state[1:-1] + (itn,)
            if not even:
                rho = dot(rstar, w)
                beta = divide(rho, rho_last)
                u = w + beta * u
                v = beta * uhat + (beta ** 2) * v
                uhat = psolve(matvec(u))
                v = v + uhat
            else:
                uhat = psolve(matvec(u_next))
                u = u_next
                rho_last = rho
        return x, u, w, v, uhat, d, theta, eta, tau, rho, rho_last, alpha, itn

    v = psolve(matvec(r))
    real0 = torch.zeros((), dtype=r0norm.dtype, device=device)
    zero = torch.zeros((), dtype=r.dtype, device=device)
    state = (x, r, r.clone(), v, v, torch.zeros_like(r), real0, zero, r0norm, rho, rho, zero + 1,
             torch.zeros((), dtype=torch.int64, device=device))
    # one pair more than needed: its first half reports maxiter (SciPy's loop exhausted)
    state, info = run(step, state, -(-maxiter // 2) + 1, device, None, None,
                      block=1 if callback is not None else None,
                      host_effects=callback is not None or not system.traceable, loop=True)
    if show:
        iters = int(state[-1])
        if info == 0:
            print(f"TFQMR: Linear solve converged due to reach TOL iterations {iters}")
        elif info == maxiter:
            print(f"TFQMR: Linear solve not converged due to reach MAXIT iterations {iters}")
    return state[0], info


def _host_live(s, device):
    """With a callback on a graph device: is this half-step still part of the solve?"""
    sync(device)
    return bool(s.live)

