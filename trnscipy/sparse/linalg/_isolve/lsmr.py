"""lsmr on device data: SciPy 1.17's LSMR (Fong-Saunders), its tests, istop codes and
8-tuple.

Loop, reads and dtypes as ``lsqr`` (the same device system and rotations).  Differs
from SciPy: the norms come back as Python floats; float32 iterates in float32.
"""

import math

import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import call_device, dispatch
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.lsqr import (
    LeastSquares,
    block_length,
    read_floats,
    settle,
    sym_ortho,
)
from trnscipy.sparse.linalg._isolve.utils import run, solver_kernel, sync

__all__ = ["lsmr"]

_MSG = ("The exact solution is x = 0, or x = x0, if x0 was given  ",
        "Ax - b is small enough, given atol, btol                  ",
        "The least-squares solution is good enough, given atol     ",
        "The estimate of cond(Abar) has exceeded conlim            ",
        "Ax - b is small enough for this machine                   ",
        "The least-squares solution is good enough for this machine",
        "Cond(Abar) seems to be too large for this machine         ",
        "The iteration limit has been reached                      ")
_HEAD = ("   itn      x(1)       norm r    norm Ar", " compatible   LS      norm A   cond A")


@dispatch(_scipy.lsmr, double_float=("neuron",))
@solver_kernel(_scipy.lsmr)
def lsmr(A, b, damp=0.0, atol=1e-6, btol=1e-6, conlim=1e8, maxiter=None, show=False,
         x0=None):
    device = call_device((A, b, x0))
    system = LeastSquares(A, b, x0, device)
    m, n = system.m, system.n
    matvec, rmatvec, scalar, snorm = system.matvec, system.rmatvec, system.scalar, system.norm
    maxiter = min(m, n) if maxiter is None else int(maxiter)
    ctol = 1 / conlim if conlim > 0 else 0
    if show:
        print(" ")
        print("LSMR            Least-squares solution of  Ax = b\n")
        print(f"The matrix A has {m} rows and {n} columns")
        print(f"damp = {damp:20.14e}\n")
        print(f"atol = {atol:8.2e}                 conlim = {conlim:8.2e}\n")
        print(f"btol = {btol:8.2e}             maxiter = {maxiter:8g}\n")

    normb, x, u, beta, v, alpha = system.bidiagonalization_start()
    sync(device)
    beta_h, alpha_h, normb_h = read_floats(beta, alpha, normb)
    if not beta_h > 0:
        alpha_h = 0.0
    if alpha_h * beta_h == 0 or normb_h == 0:  # SciPy's early returns
        if show and alpha_h * beta_h == 0:
            print(_MSG[0])
        if normb_h == 0:
            x = torch.zeros_like(x)
        return (system.result(x), 0, 0, system.data_scalar(beta_h),
                system.data_scalar(alpha_h * beta_h), abs(alpha_h), 1, 0)
    if show:
        print(" ")
        print(*_HEAD)
        print("".join([f"{0:6g} {float(x[0].real):12.5e}", f" {beta_h:10.3e} "
                       f"{alpha_h * beta_h:10.3e}", f"  {1:8.1e} {alpha_h / beta_h:8.1e}"]))

    zero, one = scalar(0.0), scalar(1.0)
    dampt = scalar(damp)
    limit = torch.tensor([maxiter], device=device)
    eye = torch.eye(22, dtype=system.real).to(device)
    printed = {"count": 0, "lines": None}

    def step(state, s, first):
        (x, u, v, h, hbar, itn, alpha, alphabar, rho, rhobar, cbar, sbar, zetabar, betadd,
         betad, rhodold, tautildeold, thetatilde, zeta, d, normA2, maxrbar, minrbar,
         out) = state
        itn = itn + 1
        u = matvec(v) - alpha * u
        beta = snorm(u)
        pos = beta > 0
        # (scalar guards only: a torch.where on carried vectors is copied into every later
        # kernel of the block on XLA; beta = 0 ends the solve at this iteration, and the
        # alpha and v it leaves differ from SciPy's only where they no longer reach a result)
        u = u * torch.where(pos, 1 / beta, 1)
        v = rmatvec(u) - beta * v
        alpha = snorm(v)
        v = v * torch.where(alpha > 0, 1 / alpha, 1)

        chat, shat, alphahat = sym_ortho(alphabar, dampt)
        rhoold = rho
        c, sn, rho = sym_ortho(alphahat, beta)
        thetanew = sn * alpha
        alphabar = c * alpha
        rhobarold, zetaold = rhobar, zeta
        thetabar = sbar * rho
        rhotemp = cbar * rho
        cbar, sbar, rhobar = sym_ortho(cbar * rho, thetanew)
        zeta = cbar * zetabar
        zetabar = -sbar * zetabar

        hbar = h + hbar * (-(thetabar * rho / (rhoold * rhobarold)))
        x_new = x + (zeta / (rho * rhobar)) * hbar
        h = v + h * (-(thetanew / rho))

        betaacute = chat * betadd
        betacheck = -shat * betadd
        betahat = c * betaacute
        betadd = -sn * betaacute
        thetatildeold = thetatilde
        ctildeold, stildeold, rhotildeold = sym_ortho(rhodold, thetabar)
        thetatilde = stildeold * rhobar
        rhodold = ctildeold * rhobar
        betad = -stildeold * betad + ctildeold * betahat
        tautildeold = (zetaold - thetatildeold * tautildeold) / rhotildeold
        taud = (zeta - thetatilde * tautildeold) / rhodold
        d = d + betacheck * betacheck
        normr = torch.sqrt(d + (betad - taud) ** 2 + betadd * betadd)

        normA2 = normA2 + beta * beta
        normA = torch.sqrt(normA2)
        normA2 = normA2 + alpha * alpha
        maxrbar = torch.maximum(maxrbar, rhobarold)
        minrbar = torch.where(itn[0] > 1, torch.minimum(minrbar, rhobarold), minrbar)
        condA = torch.maximum(maxrbar, rhotemp) / torch.minimum(minrbar, rhotemp)

        normar = zetabar.abs()
        normx = snorm(x_new)
        test1 = normr / normb
        denom = normA * normr
        test2 = torch.where(denom != 0, normar / torch.where(denom != 0, denom, one),
                            math.inf)
        test3 = 1 / condA
        t1 = test1 / (1 + normA * normx / normb)
        rtol = btol + atol * normA * normx / normb
        istop = torch.zeros((1,), dtype=torch.int64, device=device)
        for cond, code in ((itn >= limit, 7), (1 + test3 <= 1, 6), (1 + test2 <= 1, 5),
                           (1 + t1 <= 1, 4), (test3 <= ctol, 3), (test2 <= atol, 2),
                           (test1 <= rtol, 1)):
            istop = torch.where(cond, code, istop)
        (alpha, alphabar, rho, rhobar, cbar, sbar, zetabar, betadd, betad, rhodold, tautildeold,
         thetatilde, zeta, d, normA2, maxrbar, minrbar, normr, normar, normA, condA,
         normx) = settle(s, (alpha, alphabar, rho, rhobar, cbar, sbar, zetabar, betadd, betad,
                             rhodold, tautildeold, thetatilde, zeta, d, normA2, maxrbar,
                             minrbar.reshape(()), normr, normar, normA, condA, normx), eye)
        out_new = (itn, normr, normar, normA, condA, normx, istop)
        out = tuple(s.keep(a, b) for a, b in zip(out_new, out, strict=True))
        x = s.keep(x_new, x)
        if show:
            _show_line(printed, itn, x, normr, normar, test1, test2, test3, normA, condA, rtol,
                       ctol, atol, istop, n, maxiter)
        s.stop_if(istop[0] != 0, istop[0])
        return (x, u, v, h, hbar, itn, alpha, alphabar, rho, rhobar, cbar, sbar, zetabar,
                betadd, betad, rhodold, tautildeold, thetatilde, zeta, d, normA2, maxrbar,
                minrbar, out)

    itn0 = torch.zeros((1,), dtype=torch.int64, device=device)
    # minrbar starts at SciPy's 1e100, float32's largest in float32 scalars (an inf would
    # make settle's product with the identity NaN: every scalar NaN, measured on Neuron)
    out = (itn0, beta, alpha * beta, alpha.abs(), one, zero, itn0)
    state = (x, u, v, v.clone(), torch.zeros_like(v), itn0, alpha, alpha.clone(), one, one, one,
             zero, alpha * beta, beta.clone(), zero, one, zero, zero, zero, zero, alpha * alpha,
             zero, scalar(min(1e100, torch.finfo(system.real).max)), out)
    state, _ = run(step, state, maxiter, device, block=block_length(show), peel=None,
                   host_effects=show or not system.traceable, loop=True)
    x, out = state[0], state[-1]
    istop, itn, normr, normar, normA, condA, normx = read_floats(out[-1], *out[:-1])
    istop, itn = int(istop), int(itn)
    if show:
        print(" ")
        print("LSMR finished")
        print(_MSG[istop])
        print(f"istop ={istop:8g}    normr ={normr:8.1e}")
        print(f"    normA ={normA:8.1e}    normAr ={normar:8.1e}")
        print(f"itn   ={itn:8g}    condA ={condA:8.1e}")
        print(f"    normx ={normx:8.1e}")
        if printed["lines"] is not None:
            str1, str2, str3, str4 = printed["lines"]
            print(str1, str2)
            print(str3, str4)
    return (system.result(x), istop, itn, normr, system.data_scalar(normar), normA,
            system.data_scalar(condA), normx)


def _show_line(printed, itn, x, normr, normar, test1, test2, test3, normA, condA, rtol, ctol,
               atol, istop, n, maxiter):
    itn, test1, test2, test3 = int(itn[0]), float(test1), float(test2), float(test3)
    if not (n <= 40 or itn <= 10 or itn >= maxiter - 10 or itn % 10 == 0
            or test3 <= 1.1 * ctol or test2 <= 1.1 * atol or test1 <= 1.1 * float(rtol)
            or int(istop[0]) != 0):
        return
    if printed["count"] >= 20:
        printed["count"] = 0
        print(" ")
        print(*_HEAD)
    printed["count"] += 1
    lines = (f"{itn:6g} {float(x[0].real):12.5e}", f" {float(normr):10.3e} "
             f"{float(normar):10.3e}", f"  {test1:8.1e} {test2:8.1e}",
             f" {float(normA):8.1e} {float(condA):8.1e}")
    printed["lines"] = lines
    print("".join(lines))
