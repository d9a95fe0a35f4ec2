"""The Krylov methods' iterations, each written once against a small vector space.

A method is one function ``method(V, s, state, first, tol, ...)`` (its other constants
after ``tol``; minres: its own): one iteration on a fixed carry, SciPy's stop tests
included (``s.stop_if``).  It touches its vectors only through

* ``V``, the space: ``V.matvec``, ``V.psolve`` (the preconditioner), ``V.dot(a, b)``
  (conj(a).b), ``V.norm(v)``, ``V.dots(*pairs)`` (several inner products in one
  reduction, where the method is written to fuse them), and ``V.scalars``, arithmetic on
  what they return (``TorchScalars``: 0-d tensors, branches as ``where``; ``HostScalars``);
* ``s``, the step: the vector updates and the stop flags.  ``s.axpy(x, a, p)`` updates
  the iterate (kept only while the solve lives), ``s.update(r, a, q)`` (r + a q) and
  ``s.xpay(z, a, p)`` (z + a p) the working vectors, ``s.carry(new, old)`` a scalar of
  the carry, ``s.keep(new, old)`` any other masked value, ``s.stop_if(cond, info)`` ends
  the solve with SciPy's ``info``.

The spaces and steps:

* local tensors: ``Local`` (the device's ``inner`` kernel); the steps are
  ``utils._EagerStep`` (CPU: Python flags, in-place updates, SciPy's control flow) and
  ``utils._LazyStep`` (graph devices: device flags, the iterate masked);
* double-float: ``Local`` on the float32 parts with ``_refine``'s step, whose ``axpy``
  adds to a double-float iterate (``_kernels._df.add_f``) and which masks every update
  (its device loop runs on after the stop, to the residual replacement);
* distributed vectors: ``trnscipy.distributed._isolve``'s space, whose inner products are
  partial sums per rank added in one all_reduce (host numbers), and ``HostStep``.

The loops around them (``utils.run``, ``_refine``'s blocks, the distributed loop) own
where the stop flag is read; refinement is an outer algorithm around them.
"""

import math
from typing import NamedTuple

from trnscipy._dtypes import divide
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve import utils

__all__ = ["Local", "HostStep", "HostScalars", "TorchScalars", "bicgstab", "cg",
           "cg_single_reduction", "gmres_cycle", "minres", "minres_check"]


class TorchScalars:
    """Arithmetic on a space's scalars where they are 0-d tensors (no host read).  Methods,
    not torch's functions as attributes: importing trnscipy must not import torch."""

    @staticmethod
    def sqrt(a):
        return torch.sqrt(a)

    @staticmethod
    def where(cond, a, b):
        return torch.where(cond, a, b)

    @staticmethod
    def maximum(a, b):
        return torch.maximum(a, b)

    @staticmethod
    def minimum(a, b):
        return torch.minimum(a, b)

    @staticmethod
    def clamp_min(a, lo):
        return torch.clamp(a, min=lo)


class HostScalars:
    """The same on host numbers (a distributed solve's all-reduced sums)."""

    sqrt = staticmethod(math.sqrt)
    maximum = clamp_min = staticmethod(max)
    minimum = staticmethod(min)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b


class Local:
    """Tensors on one device: products given as functions, inner products through the
    device's ``inner`` kernel (0-d device tensors), or ``dot`` where given."""

    scalars = TorchScalars

    def __init__(self, matvec, psolve, device=None, dot=None):
        self.matvec, self.psolve, self.device = matvec, psolve, device
        if dot is not None:
            self.dot = dot

    dot = staticmethod(utils.dot)
    norm = staticmethod(utils.norm)

    def dots(self, *pairs):
        return [self.dot(a, b) for a, b in pairs]

    def sync(self):
        """Cut the pending graph before host reads (XLA with a callback)."""
        utils.sync(self.device)

    @staticmethod
    def gram_schmidt(w, basis):
        """w orthogonalized against the rows of ``basis`` by classical Gram-Schmidt twice
        (SciPy: modified; equal in exact arithmetic): (||w|| before, the projections as
        host numbers, w after, ||w|| after)."""
        h0 = float(utils.norm(w))
        h = basis.conj() @ w
        w = w - h @ basis
        h2 = basis.conj() @ w
        w = w - h2 @ basis
        return h0, (h + h2).tolist(), w, float(utils.norm(w))


class HostStep(utils._EagerStep):
    """An eager step whose scalars are host numbers (a distributed solve's all-reduced
    sums): in-place updates with ``alpha=``."""

    def axpy(self, y, a, x):
        if self.live:
            y.add_(x, alpha=a)
        return y

    def update(self, y, a, x):
        return y.add_(x, alpha=a)

    def xpay(self, x, a, y):
        return y.mul_(a).add_(x)


def cg(V, s, state, first, tol):
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


def bicgstab(V, s, state, first, tol, rhotol, omegatol):
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


def minres(V, s, state, first, beta1, shift, rtol, maxiter, eps):
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
