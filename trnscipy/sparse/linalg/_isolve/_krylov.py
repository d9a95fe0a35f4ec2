"""The Krylov methods' iterations, each written once against a small vector space.

A method is one function ``method(V, s, state, first, tol)``: one iteration on a fixed
carry, SciPy's stop test included (``s.stop_if``).  It touches its vectors only through

* ``V``, the space: ``V.matvec``, ``V.psolve`` (the preconditioner), ``V.dot(a, b)``
  (conj(a).b), ``V.norm(v)``, and ``V.dots(*pairs)`` (several inner products in one
  reduction, where the method is written to fuse them);
* ``s``, the step: the vector updates and the stop flags.  ``s.axpy(x, a, p)`` updates
  the iterate (kept only while the solve lives), ``s.update(r, a, q)`` (r + a q) and
  ``s.xpay(z, a, p)`` (z + a p) the working vectors, ``s.carry(new, old)`` a scalar of
  the carry, ``s.stop_if(cond, info)`` ends the solve with SciPy's ``info``.

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

from trnscipy._dtypes import divide
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve import utils

__all__ = ["Local", "HostStep", "bicgstab", "cg", "cg_single_reduction", "gmres_cycle"]


class Local:
    """Tensors on one device: products given as functions, inner products through the
    device's ``inner`` kernel (0-d device tensors)."""

    def __init__(self, matvec, psolve, device=None):
        self.matvec, self.psolve, self.device = matvec, psolve, device

    dot = staticmethod(utils.dot)
    norm = staticmethod(utils.norm)

    def dots(self, *pairs):
        return [utils.dot(a, b) for a, b in pairs]

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
