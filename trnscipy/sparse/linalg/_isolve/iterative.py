"""cg, bicg, bicgstab, cgs, gmres, qmr on device data (SciPy 1.17's algorithms and contract).

Loop structure and host reads: see ``utils``.  Each function is the device
implementation of SciPy's; host inputs go to SciPy itself.
"""

import math

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._dtypes import divide
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve import utils
from trnscipy.sparse.linalg._isolve._arnoldi import Arnoldi, back_substitute, inner_stop
from trnscipy.sparse.linalg._isolve.utils import (
    check_atol,
    dot,
    host_reads_free,
    host_value,
    make_system,
    norm,
    run,
    solver_kernel,
    stop_tolerance,
    sync,
)

__all__ = ["bicg", "bicgstab", "cg", "cgs", "gmres", "qmr"]


def _setup(name, A, b, x0, atol, rtol, M, maxiter):
    """make_system, atol check, ||b|| and the stop tolerance, all on the device."""
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
    return torch.where(x.any(), b - system.matvec(x), b)


def _x(state):
    return state[0]


@dispatch(_scipy.cg, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.cg)
def cg(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    system = _setup("cg", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    V, tol = utils.Local(system.matvec, system.psolve), system.tol

    def step(state, s, first):
        return cg_iteration(V, s, state, first, tol)

    r = _residual(system, x0 is not None)
    state = (system.x, r, torch.zeros_like(r), torch.ones((), dtype=r.dtype, device=r.device))
    state, info = run(step, state, system.maxiter, system.device, callback, _x, loop=True,
                      host_effects=not system.traceable)
    return state[0], info


def _conj(t):
    return t.conj() if t.is_complex() else t


@dispatch(_scipy.gmres, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.gmres)
def gmres(A, b, x0=None, *, rtol=1e-5, atol=0., restart=None, maxiter=None, M=None,
          callback=None, callback_type=None):
    callback_type = utils.gmres_callback_type(callback, callback_type, stacklevel=4)

    system = _setup("gmres", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    matvec, psolve, tol, bnrm2 = system.matvec, system.psolve, system.tol, system.bnrm2
    n, eps, maxiter, device, dtype = (system.n, system.eps, system.maxiter, system.device,
                                      system.dtype)
    m = min(20 if restart is None else restart, n)
    host = host_reads_free(device) or callback is not None
    inner_total = [0]
    rdtype = bnrm2.dtype

    space = utils.Local(matvec, psolve, device)

    def on_step(presid):
        inner_total[0] += 1
        if callback_type in ("legacy", "pr_norm"):
            callback(np.float64(presid / bnrm2_host))  # SciPy's type (callbacks use .ndim)
        return callback_type == "legacy" and inner_total[0] == maxiter

    def arnoldi_host(x, r, ptol, s):
        """One restart cycle with the small Hessenberg work in Python numbers, as SciPy
        (CPU, or a callback): returns x, presid, breakdown."""
        dx, presid, brk = gmres_cycle(space, r, m, eps, dtype, ptol, on_step)
        return s.keep(x + dx, x), presid, brk

    arnoldi = Arnoldi(matvec, m, eps, dtype, device, lpsolve=psolve,
                      traceable=system.traceable)

    def arnoldi_lazy(x, r, ptol, s):
        """One restart cycle on fixed shapes (graph devices): all ``m`` steps run (one
        device loop), the inner stop (first step whose residual estimate meets ``ptol``,
        or a breakdown) is found by a reduction afterwards and later steps masked out."""
        v0 = psolve(r)
        beta = norm(v0)
        basis, _ = arnoldi.steps(arnoldi.start(v0 * (1 / beta)), m)
        res, brks = basis["res"] * beta, basis["brk"]
        steps, (presid, breakdown) = inner_stop(res <= ptol, brks, res, brks)
        S = basis["Q"][:, 0] * beta.to(dtype)
        dx = gmres_correction(basis["V"], basis["R"], S, steps, m)
        return s.keep(x + dx, x), presid, breakdown

    def cycle(state, s, first):
        x, r, ptol, pfac = state
        x, presid, breakdown = (arnoldi_host if host else arnoldi_lazy)(x, r, ptol, s)
        r = system.b - matvec(x)
        rnorm = norm(r)
        if callback_type == "legacy" and inner_total[0] == maxiter:
            s.stop_if(rnorm <= tol, 0)
            s.stop_if(True, maxiter)
            return x, r, ptol, pfac
        if callback_type == "x":
            callback(host_value(x))
        s.stop_if(rnorm <= tol, 0)
        s.stop_if(breakdown, maxiter)
        if host:
            pfac = max(eps, 0.25 * pfac) if presid <= ptol else min(1.0, 1.5 * pfac)
            ptol = presid * min(pfac, float(tol / rnorm))
            return x, r, ptol, pfac
        pfac = torch.where(presid <= ptol, torch.clamp(0.25 * pfac, min=eps),
                           torch.clamp(1.5 * pfac, max=1.0))
        ptol = presid * torch.minimum(pfac, tol / rnorm)
        return x, r, ptol, pfac

    Mb_nrm2 = norm(psolve(system.b))
    ptol = Mb_nrm2 * torch.clamp(tol / bnrm2, max=1.0)
    pfac = torch.ones((), dtype=rdtype, device=device)
    if host:
        ptol, pfac, bnrm2_host = float(ptol), 1.0, float(bnrm2)
    r = _residual(system, x0 is not None)
    converged = norm(r) < tol
    sync(device)
    if bool(converged):
        return system.x, 0
    state = (system.x, r, ptol, pfac)
    # a host read per CHECK_EVERY Arnoldi steps (at least one cycle); a cycle (its steps
    # one device loop) is one replayed graph
    state, info = run(cycle, state, maxiter, device, callback, None,
                      block=max(1, utils.CHECK_EVERY // m), peel=False, unroll=1,
                      host_effects=not system.traceable, loop=True)
    return state[0], info


def gmres_correction(V, H, S, steps, m):
    """V^T y with y solving the leading triangle of the rotated Hessenberg matrix; the
    size (steps) is device data, so everything is masked to fixed shapes (a zero last
    pivot means y[steps-1] = 0, as SciPy)."""
    idx = torch.arange(m, device=V.device)
    last = steps - 1
    active = idx <= last
    both = active[:, None] & active[None, :]
    R = torch.where(both, H[:, :m].T, 0)
    diag = torch.diagonal(R)
    zero_last = (idx == last) & (diag == 0)
    R = R + torch.diag(torch.where(~active | zero_last, 1, 0).to(R.dtype))
    rhs = torch.where(active & ~zero_last, S[:m], 0)
    y = back_substitute(R, rhs)
    return y @ torch.where(active[:, None], V[:m], 0)


def _tiny(system, power):
    return system.eps ** power


@dispatch(_scipy.bicgstab, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.bicgstab)
def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    system = _setup("bicgstab", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    V, tol = utils.Local(system.matvec, system.psolve), system.tol
    rhotol = omegatol = _tiny(system, 2)

    def step(state, s, first):
        return bicgstab_iteration(V, s, state, first, tol, rhotol, omegatol)

    r = _residual(system, x0 is not None)
    one = torch.ones((), dtype=r.dtype, device=r.device)
    state = (system.x, r, r.clone(), torch.zeros_like(r), torch.zeros_like(r), one, one, one)
    state, info = run(step, state, system.maxiter, system.device, callback, _x, loop=True,
                      host_effects=not system.traceable)
    return state[0], info


@dispatch(_scipy.bicg, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.bicg)
def bicg(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    system = _setup("bicg", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    matvec, rmatvec = system.matvec, system.operator.rmatvec
    psolve, rpsolve, tol = system.psolve, system.rpsolve, system.tol
    rhotol = _tiny(system, 2)

    def step(state, s, first):
        x, r, rtilde, p, ptilde, rho_prev = state
        s.stop_if(norm(r) < tol, 0)
        if s.stopped:
            return state
        z = psolve(r)
        ztilde = rpsolve(rtilde)
        rho = dot(rtilde, z)
        s.stop_if(rho.abs() < rhotol, -10)
        if s.stopped:
            return state
        if first:
            p, ptilde = z.clone(), ztilde.clone()
        else:
            beta = divide(rho, rho_prev)
            p = s.xpay(z, beta, p)
            ptilde = s.xpay(ztilde, _conj(beta), ptilde)
        q = matvec(p)
        qtilde = rmatvec(ptilde)
        rv = dot(ptilde, q)
        s.stop_if(rv == 0, -11)
        alpha = divide(rho, rv)
        x = s.axpy(x, alpha, p)
        r = s.update(r, -alpha, q)
        rtilde = s.update(rtilde, -_conj(alpha), qtilde)
        return x, r, rtilde, p, ptilde, rho

    r = _residual(system, x0 is not None)
    one = torch.ones((), dtype=r.dtype, device=r.device)
    state = (system.x, r, r.clone(), torch.zeros_like(r), torch.zeros_like(r), one)
    state, info = run(step, state, system.maxiter, system.device, callback, _x, loop=True,
                      host_effects=not system.traceable)
    return state[0], info


@dispatch(_scipy.cgs, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.cgs)
def cgs(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None):
    system = _setup("cgs", A, b, x0, atol, rtol, M, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    matvec, psolve, tol, bvec = system.matvec, system.psolve, system.tol, system.b
    rhotol = _tiny(system, 2)

    def step(state, s, first):
        x, r, rtilde, p, u, q, rho_prev = state
        s.stop_if(norm(r) < tol, 0)
        if s.stopped:
            return state
        rho = dot(rtilde, r)
        s.stop_if(rho.abs() < rhotol, -10)
        if s.stopped:
            return state
        if first:
            p, u = r.clone(), r.clone()
        else:
            beta = divide(rho, rho_prev)
            u = r + beta * q
            p = (p * beta + q) * beta + u
        phat = psolve(p)
        vhat = matvec(phat)
        rv = dot(rtilde, vhat)
        s.stop_if(rv == 0, -11)
        alpha = divide(rho, rv)
        q = u - alpha * vhat
        uhat = psolve(u + q)
        x = s.axpy(x, alpha, uhat)
        r = bvec - matvec(x)
        return x, r, rtilde, p, u, q, rho

    r = _residual(system, x0 is not None)
    one = torch.ones((), dtype=r.dtype, device=r.device)
    zero = torch.zeros_like(r)
    state = (system.x, r, r.clone(), zero, zero, zero, one)
    state, info = run(step, state, system.maxiter, system.device, callback, _x, loop=True,
                      host_effects=not system.traceable)
    return state[0], info


@dispatch(_scipy.qmr, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.qmr)
def qmr(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M1=None, M2=None, callback=None):
    from trnscipy.sparse.linalg._interface import LinearOperator
    from trnscipy.sparse.linalg._isolve.utils import as_operator

    A_ = A
    system = _setup("qmr", A, b, x0, atol, rtol, None, maxiter)
    if _zero_rhs(system):
        return system.b, 0
    Aop, tol, device = system.operator, system.tol, system.device
    if M1 is None and M2 is None:
        if hasattr(A_, "psolve"):
            M1 = LinearOperator(Aop.shape, matvec=lambda v: A_.psolve(v, "left"),
                                rmatvec=lambda v: A_.rpsolve(v, "left"))
            M2 = LinearOperator(Aop.shape, matvec=lambda v: A_.psolve(v, "right"),
                                rmatvec=lambda v: A_.rpsolve(v, "right"))
        else:
            M1 = M2 = _IDENTITY
    else:  # SciPy uses M1/M2 as given (anything with matvec/rmatvec)
        M1, M2 = (as_operator(M, device) if isinstance(M, _scipy.LinearOperator) else M
                  for M in (M1, M2))
    tiny = _tiny(system, 1)

    def step(state, s, first):
        (x, r, vtilde, wtilde, y, z, rho, xi, gamma, eta, theta, epsilon,
         p, q, d, sv) = state
        s.stop_if(norm(r) < tol, 0)
        s.stop_if(rho.abs() < tiny, -10)
        s.stop_if(xi.abs() < tiny, -15)
        if s.stopped:
            return state
        v = vtilde * (1 / rho)
        y = y * (1 / rho)
        w = wtilde * (1 / xi)
        z = z * (1 / xi)
        delta = dot(z, y)
        s.stop_if(delta.abs() < tiny, -13)
        if s.stopped:
            return state
        ytilde = M2.matvec(y)
        ztilde = M1.rmatvec(z)
        if first:
            p, q = ytilde.clone(), ztilde.clone()
        else:
            p = ytilde - divide(xi * delta, epsilon) * p
            q = ztilde - (rho * _conj(divide(delta, epsilon))) * q
        ptilde = Aop.matvec(p)
        epsilon = dot(q, ptilde)
        s.stop_if(epsilon.abs() < tiny, -14)
        beta = divide(epsilon, delta)
        s.stop_if(beta.abs() < tiny, -11)
        if s.stopped:
            return state
        vtilde = ptilde - beta * v
        y = M1.matvec(vtilde)
        rho_prev, rho = rho, norm(y)
        wtilde = w * (-_conj(beta)) + Aop.rmatvec(q)
        z = M2.rmatvec(wtilde)
        xi = norm(z)
        gamma_prev, theta_prev = gamma, theta
        theta = rho / (gamma_prev * beta.abs())
        gamma = 1 / torch.sqrt(1 + theta ** 2)
        s.stop_if(gamma.abs() < tiny, -12)
        if s.stopped:
            return state
        eta = eta * (-divide(rho_prev, beta) * (gamma / gamma_prev) ** 2)
        if first:
            d, sv = p * eta, ptilde * eta
        else:
            d = d * (theta_prev * gamma) ** 2 + eta * p
            sv = sv * (theta_prev * gamma) ** 2 + eta * ptilde
        x = s.keep(x + d, x)
        r = r - sv
        return (x, r, vtilde, wtilde, y, z, rho, xi, gamma, eta, theta, epsilon, p, q, d, sv)

    r = _residual(system, x0 is not None)
    vtilde, wtilde = r.clone(), r.clone()
    y = M1.matvec(vtilde)
    z = M2.rmatvec(wtilde)
    real = torch.zeros((), dtype=system.bnrm2.dtype, device=device)
    one = torch.ones((), dtype=r.dtype, device=device)
    zero = torch.zeros_like(r)
    state = (system.x, r, vtilde, wtilde, y, z, norm(y), norm(z), real + 1, -one, real,
             one, zero, zero, zero, zero)
    state, info = run(step, state, system.maxiter, device, callback, _x, loop=True,
                      host_effects=not utils.traceable(Aop, M1, M2))
    return state[0], info


class _Identity:
    """qmr's default M1 = M2 = I."""

    pure_tensor_code = True

    @staticmethod
    def matvec(x):
        return x

    rmatvec = matvec


_IDENTITY = _Identity()


# ---- the iterations, each written once ------------------------------------------------------
#
# ``method_iteration(V, s, state, first, tol, ...)``: one iteration on a fixed carry, SciPy's
# stop tests included (``s.stop_if``), its vectors touched only through the space ``V`` and
# the step ``s`` (``utils``).  The loops around them own where the stop flag is read:
# ``utils.run`` (the solvers below), ``_refine``'s double-float blocks, the distributed
# loop (``trnscipy.distributed._isolve``).

def cg_iteration(V, s, state, first, tol):
    """One iteration of SciPy's cg (Hestenes-Stiefel): the stop test on the recursive
    residual, then two inner products and one product.  ``state``: (x, r, p, rho)."""
    x, r, p, rho_prev = state
    s.stop_if(V.norm(r) < tol, 0)
    if s.stopped:
        return state
    z = V.psolve(r)
    rho = V.dot(r, z)
    p = z.clone() if first else s.xpay(z, divide(rho, rho_prev), p)
    q = V.matvec(p)
    alpha = divide(rho, V.dot(p, q))
    x = s.axpy(x, alpha, p)
    r = s.update(r, -alpha, q)
    return x, r, p, s.carry(rho, rho_prev)


def cg_single_reduction(V, s, state, first, tol):
    """One iteration of cg in Chronopoulos and Gear's form: z = M r and w = A z first,
    then ||r||^2, (r, z) and (z, w) in one ``V.dots`` (one all_reduce distributed), with
    SciPy's stop test and iteration count.  ``state``: (x, r, p, q, gamma, alpha)."""
    x, r, p, q, gamma_prev, alpha_prev = state
    z = V.psolve(r)
    w = V.matvec(z)
    rr, gamma, delta = V.dots((r, r), (r, z), (z, w))
    s.stop_if(_root(rr) < tol, 0)
    if s.stopped:
        return state
    if first:
        alpha, p, q = divide(gamma, delta), z.clone(), w.clone()
    else:
        beta = divide(gamma, gamma_prev)
        alpha = divide(gamma, delta - divide(beta * gamma, alpha_prev))
        p = s.xpay(z, beta, p)
        q = s.xpay(w, beta, q)
    x = s.axpy(x, alpha, p)
    r = s.update(r, -alpha, q)
    return x, r, p, q, gamma, alpha


def bicgstab_iteration(V, s, state, first, tol, rhotol, omegatol):
    """One iteration of SciPy's bicgstab (van der Vorst), its breakdown codes (-10: rho,
    -11: omega or (rtilde, v)) and its two stop tests: ||r|| with (rtilde, r) and (t, r)
    with (t, t) in one ``V.dots`` each.  ``state``: (x, r, rtilde, p, v, rho, alpha,
    omega); p, v and the scalars are unread on the first iteration."""
    x, r, rtilde, p, v, rho_prev, alpha, omega = state
    rr, rho = V.dots((r, r), (rtilde, r))
    s.stop_if(_root(rr) < tol, 0)
    s.stop_if(abs(rho) < rhotol, -10)
    if first:
        p = r.clone()
    else:
        s.stop_if(abs(omega) < omegatol, -11)
        if s.stopped:
            return state
        beta = divide(rho, rho_prev) * divide(alpha, omega)
        p = s.xpay(r, beta, s.update(p, -omega, v))
    if s.stopped:
        return state
    phat = V.psolve(p)
    v = V.matvec(phat)
    rv = V.dot(rtilde, v)
    s.stop_if(rv == 0, -11)
    alpha = divide(rho, rv)
    r = s.update(r, -alpha, v)
    x = s.axpy(x, alpha, phat)
    s.stop_if(V.norm(r) < tol, 0)
    if s.stopped:
        return (x,) + state[1:]
    shat = V.psolve(r)
    t = V.matvec(shat)
    tr, tt = V.dots((t, r), (t, t))
    omega = divide(tr, tt)
    x = s.axpy(x, omega, shat)
    r = s.update(r, -omega, t)
    return x, r, rtilde, p, v, rho, alpha, omega


def _root(ss):
    """sqrt(Re ss) of a sum of squares from ``V.dots``: a host number or a 0-d tensor
    (``utils.norm``'s rounding: no host read on a device)."""
    return ss.real.sqrt() if isinstance(ss, torch.Tensor) else math.sqrt(ss.real)


def gmres_cycle(V, r, m, eps, dtype, ptol, on_step):
    """One restart cycle of SciPy's gmres with the small Hessenberg work in host numbers
    (Givens rotations, back-substitution): up to ``m`` Arnoldi steps from ``M r``, ending
    when the residual estimate meets ``ptol``, at a breakdown, or when ``on_step(presid)``
    (the caller's callbacks and count, after each step) says so.  Returns the correction
    ``dx`` (a tensor), the last residual estimate and whether the cycle broke down."""
    basis = torch.zeros((m + 1, r.shape[0]), dtype=dtype, device=r.device)
    v0 = V.psolve(r)
    tmp = float(V.norm(v0))
    basis[0] = v0 * (1 / tmp)
    S = [tmp] + [0.0] * m
    cols, rots = [], []
    presid, brk = 0.0, False
    for col in range(m):
        V.sync()
        w = V.psolve(V.matvec(basis[col]))
        h0, hl, w, h1 = V.gram_schmidt(w, basis[:col + 1])
        brk = h1 <= eps * h0
        basis[col + 1] = w if brk else w * (1 / h1)
        hl.append(0.0 if brk else h1)
        for k, (c, sn) in enumerate(rots):
            n0, n1 = hl[k], hl[k + 1]
            hl[k], hl[k + 1] = c * n0 + sn * n1, -sn.conjugate() * n0 + c * n1
        c, sn, hl[col] = lartg(hl[col], hl[col + 1])
        hl[col + 1] = 0.0
        rots.append((c, sn))
        cols.append(hl)
        t = -sn.conjugate() * S[col]
        S[col], S[col + 1] = c * S[col], t
        presid = abs(t)
        if on_step(presid) or presid <= ptol or brk:
            break
    k = col + 1
    if cols[col][col] == 0:
        S[col] = 0
    y = S[:k]
    for j in range(k - 1, -1, -1):  # SciPy's back-substitution, zero entries skipped
        if y[j] != 0:
            y[j] /= cols[j][j]
            for i in range(j):
                y[i] -= y[j] * cols[j][i]
    return torch.tensor(y, dtype=dtype).to(r.device) @ basis[:k], presid, brk


def lartg(f, g):
    """LAPACK's ?lartg on Python numbers (``_arnoldi.lartg`` on 0-d tensors)."""
    af, ag = abs(f), abs(g)
    if ag == 0:
        return 1.0, 0.0, f
    if af == 0:
        return 0.0, g.conjugate() / ag, ag
    d = math.sqrt(af * af + ag * ag)
    phase = f / af
    return af / d, phase * g.conjugate() / d, phase * d
