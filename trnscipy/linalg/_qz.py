"""Real generalized Schur (QZ) form from plain torch ops that lower to XLA (no LAPACK), in
fixed-shape graph steps, written as the real Schur form of trnscipy/linalg/_francis.py.

* ``hgr``: Hessenberg-triangular reduction of (A, B) as LAPACK's dgghrd: a Householder QR
  of B (one reflector per step), then Givens rotations zeroing A below its subdiagonal, each
  followed by the column rotation that restores B's triangle; each phase one ``device_loop``.
* ``hgeqz``: the Moler-Stewart double-shift QZ iteration in real arithmetic as a state
  machine of micro-steps (as ``_francis.hseqr``).  A micro-step that finds the previous
  sweep finished sets negligible subdiagonals of A and diagonal entries of B to zero, then
  either deflates an infinite eigenvalue (a zero of B's diagonal at the top or the bottom
  of an unreduced block: one rotation zeroes A's subdiagonal there, B stays triangular) or
  starts a sweep on the lowest unreduced block of size >= 3.  Each sweep micro-step applies
  one 3x3 reflector from the left and a 3x3 and a 2x2 reflector from the right (the
  latter restore B's triangle).  Zeros of B's diagonal inside a block move to its top
  under the sweeps (Watkins, 2000).  The shifts are the bottom 2x2 pencil's eigenvalues in
  homogeneous form (no division: B may be singular).
* ``standardize``: the remaining 2x2 blocks as LAPACK's dlagv2 leaves them, all at once
  (their rotations act on disjoint rows): real eigenvalues split into two 1x1 blocks,
  complex pairs with B's block diagonal; then B's diagonal made non-negative.
"""

import numpy as np

from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._francis import (
    STEPS,
    _back_row,
    _back_start,
    _diag,
    _flat_get,
    _flat_set,
    _loop,
    _reflector,
)
from trnscipy.linalg._xla_dense import _counter, _sync

__all__ = ["hgr", "hgeqz", "qz", "eigvals_from_qz", "plan_swaps", "reorder"]


# ----------------------------------------------------------------------------------------
# Hessenberg-triangular reduction


def hgr(a, b):
    """(H, T, Q, Z) with A = Q H Z^T, B = Q T Z^T, H upper Hessenberg, T upper triangular;
    ``a``, ``b`` matrices or stacks of the same shape."""
    n = a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape)
    q, z = eye.clone(), eye.clone()
    h, t = a.clone(), b.clone()
    j = _counter(0, a.device)
    _sync(h, t, q, j)
    h, t, q, j = _loop(lambda c: _qr_step(*c), (h, t, q, j), max(n - 1, 0))
    if n >= 3:
        i = _counter(n - 1, a.device)
        j = _counter(0, a.device)
        _sync(h, t, q, z, i, j)
        h, t, q, z, i, j = _loop(lambda c: _givens_step(*c), (h, t, q, z, i, j),
                                 (n - 1) * (n - 2) // 2)
    _sync(h, t, q, z)
    return h.triu(-1), t.triu(), q, z


def _qr_step(h, t, q, j):
    """Reflector j of B's QR, applied to B, A (from the left) and Q (from the right)."""
    n = t.shape[-1]
    rows = torch.arange(n, device=t.device)
    x = torch.index_select(t, -1, j.clamp(max=n - 1)).squeeze(-1)
    alpha = x.gather(-1, j.clamp(max=n - 1).expand(*x.shape[:-1], 1))
    below = rows > j
    tail = torch.where(below, x, torch.zeros_like(x))
    beta, tau, scale = _reflector(alpha, (tail * tail).sum(-1, keepdim=True))
    v = torch.where(below, tail * scale, torch.zeros_like(x))
    v = torch.where(rows == j, torch.ones_like(v), v)
    tau, vc, vr = tau.unsqueeze(-1), v.unsqueeze(-1), v.unsqueeze(-2)
    t = t - tau * (vc * (vr @ t))
    h = h - tau * (vc * (vr @ h))
    q = q - tau * ((q @ vc) * vr)
    # column j exactly: beta on the diagonal, zeros below
    newcol = torch.where(rows == j, beta, torch.where(below, torch.zeros_like(x), x))
    t = torch.where(rows == j, newcol.unsqueeze(-1), t)
    return h, t, q, j + 1


def _rot_rows(m, i, c, s, rows):
    """Rows (i - 1, i) of ``m`` <- [[c, s], [-s, c]] @ those rows."""
    top = torch.index_select(m, -2, (i - 1).clamp(min=0))
    bot = torch.index_select(m, -2, i)
    return torch.where(rows == i - 1, c * top + s * bot,
                       torch.where(rows == i, c * bot - s * top, m))


def _rot_cols(m, i, c, s, cols):
    """Columns (i - 1, i) of ``m`` <- those columns @ [[c, s], [-s, c]]."""
    left = torch.index_select(m, -1, (i - 1).clamp(min=0))
    right = torch.index_select(m, -1, i)
    return torch.where(cols == i - 1, c * left - s * right,
                       torch.where(cols == i, s * left + c * right, m))


def _givens(f, g):
    """(c, s, r) with [[c, s], [-s, c]] @ [f, g] = [r, 0]."""
    r = torch.sqrt(f * f + g * g)
    zero = r == 0
    safe = torch.where(zero, torch.ones_like(r), r)
    return torch.where(zero, torch.ones_like(r), f / safe), torch.where(
        zero, torch.zeros_like(r), g / safe), r


def _givens_step(h, t, q, z, i, j):
    """Zero A[i, j] by rows (i - 1, i), then B[i, i - 1] by columns (i - 1, i); next (i, j)
    in dgghrd's order (each column j from the bottom up to row j + 2)."""
    n = h.shape[-1]
    r = torch.arange(n, device=h.device)
    rows, cols = r.unsqueeze(-1), r
    f = _entry(h, i - 1, j)
    g = _entry(h, i, j)
    c, s, _ = _givens(f, g)
    h = _rot_rows(h, i, c, s, rows)
    t = _rot_rows(t, i, c, s, rows)
    q = _rot_cols(q, i, c, -s, cols)  # Q <- Q G^T
    h = torch.where((rows == i) & (cols == j), torch.zeros_like(h), h)
    c, s, _ = _givens(_entry(t, i, i), _entry(t, i, i - 1))
    # columns (i - 1, i) @ [[c, s], [-s, c]] zeroes B[i, i - 1] (B[i, i] <- r)
    h = _rot_cols(h, i, c, s, cols)
    t = _rot_cols(t, i, c, s, cols)
    z = _rot_cols(z, i, c, s, cols)
    t = torch.where((rows == i) & (cols == i - 1), torch.zeros_like(t), t)
    last = i <= j + 2
    return h, t, q, z, torch.where(last, torch.full_like(i, n - 1), i - 1), torch.where(
        last, j + 1, j)


def _entry(m, i, j):
    """m[..., i, j] for (1,) index tensors, shaped (..., 1, 1)."""
    return torch.index_select(torch.index_select(m, -2, i), -1, j)


# ----------------------------------------------------------------------------------------
# the QZ iteration


def hgeqz(h, t, q, z, max_sweeps=None):
    """Real generalized Schur form of the Hessenberg-triangular pencil (h, t):
    (S, P, Q', Z', converged) with Q' = Q @ Ql, Z' = Z @ Zr, standardized."""
    n = h.shape[-1]
    dev, dtype = h.device, h.dtype
    eps = torch.finfo(dtype).eps
    stack = h.shape[:-2]
    h, t, q, z = (x.reshape(-1, n, n) for x in (h, t, q, z))
    count = h.shape[0]
    # negligible entries: relative to the norms (LAPACK's dhgeqz: ulp times the norm)
    tiny = torch.finfo(dtype).tiny
    atol = (eps * torch.linalg.vector_norm(h, dim=(-2, -1))).clamp(min=tiny).reshape(-1, 1)
    btol = (eps * torch.linalg.vector_norm(t, dim=(-2, -1))).clamp(min=tiny).reshape(-1, 1)
    pad = (0, 1, 0, 1)  # a zero row/column: reflectors at the bottom touch it, leave it zero
    hp, tp, qp, zp = (torch.nn.functional.pad(x, pad) for x in (h, t, q, z))
    state = [torch.zeros((count, 1), dtype=torch.int64, device=dev) for _ in range(5)]
    _sync(hp, tp, qp, zp, atol, btol, *state)
    from trnscipy._kernels import kernel

    fetch = kernel("linalg._fetch", dev)
    limit = max_sweeps if max_sweeps is not None else 30 * max(10, n) * max(n, 1)
    steps, done = 0, False
    chunk = STEPS * max(n, 1)
    while not done and steps < limit:
        hp, tp, qp, zp, *state = _loop(lambda c: _flat(_qz_step(*c[:4], list(c[4:]), atol,
                                                                btol)), (hp, tp, qp, zp, *state),
                                       chunk)
        _sync(hp, tp, qp, zp, *state)
        steps += chunk
        done = max(x for (x,) in fetch(state[2])) < 0
    h, t, q, z = (x[:, :n, :n] for x in (hp, tp, qp, zp))
    h, t, q, z = standardize(h, t, q, z)
    return (*(x.reshape(*stack, n, n) for x in (h, t, q, z)), done)


def _flat(out):
    return (*out[:4], *out[4])


def _apply_left(m, idx, tau, v):
    """Rows ``idx`` (b, 3) of ``m`` (b, r, c) <- (I - tau v v^T) @ those rows."""
    at = idx.unsqueeze(-1).expand(-1, 3, m.shape[-1])
    rows = m.gather(1, at)
    return m.scatter(1, at, rows - tau * (v.unsqueeze(-1) * (v.unsqueeze(-2) @ rows)))


def _apply_right(m, idx, tau, v):
    """Columns ``idx`` (b, 3) of ``m`` <- those columns @ (I - tau v v^T)."""
    at = idx.unsqueeze(-2).expand(-1, m.shape[-2], 3)
    cols = m.gather(2, at)
    return m.scatter(2, at, cols - tau * ((cols @ v.unsqueeze(-1)) * v.unsqueeze(-2)))


def _house(x0, x1, x2, live):
    """(beta, tau (b, 1, 1), v (b, 3)) of the reflector mapping (x0, x1, x2) to (beta, 0,
    0); tau = 0 where not ``live``."""
    beta, tau, scale = _reflector(x0, x1 * x1 + x2 * x2)
    tau = torch.where(live, tau, torch.zeros_like(tau)).unsqueeze(-1)
    return beta, tau, torch.cat([torch.ones_like(x0), x1 * scale, x2 * scale], -1)


def _qz_step(h, t, q, z, state, atol, btol):
    """One micro-step on each pencil of the stack (h, t) (b, n + 1, n + 1); the state
    tensors (sweep row k, block lo and hi, sweeps without deflation, kind: 0 sweep, 1 an
    infinite eigenvalue deflated at the top of a block, 2 at its bottom) have shape (b, 1)."""
    k, lo, hi, its, kind = state
    n1 = h.shape[-1]
    n = n1 - 1
    dev = h.device
    r = torch.arange(n1, device=dev)
    start = k >= hi
    # --- at the start of a sweep: zero negligible entries, pick the next action
    sub = h.diagonal(-1, -2, -1)  # h[i + 1, i], i < n (the last: the zero padding)
    split = (sub.abs() <= atol) | (r[:-1] >= n - 1)
    h = _flat_set(h, r[:-1] + 1, r[:-1], torch.where(start & split, torch.zeros_like(sub), sub))
    bd = t.diagonal(0, -2, -1)
    bzero = (bd.abs() <= btol) & (r < n)
    t = _flat_set(t, r, r, torch.where(start & bzero, torch.zeros_like(bd), bd))
    block = torch.cat([torch.zeros_like(k), split.to(torch.int64).cumsum(-1)], -1)
    size = torch.zeros_like(block).scatter_add(-1, block, torch.ones_like(block))
    bsize = size.gather(-1, block)
    inside = r < n
    prev = torch.cat([torch.ones_like(split[:, :1]), split], -1)  # row i starts a block
    top = bzero & prev & (bsize >= 2) & inside
    bottom = bzero & torch.cat([split, torch.ones_like(split[:, :1])], -1) & (
        bsize >= 2) & inside & ~top
    infinite = torch.where(top | bottom, r, -1).amax(-1, keepdim=True)
    kind_new = torch.where(infinite < 0, torch.zeros_like(kind), torch.where(
        top.gather(-1, infinite.clamp(min=0)), torch.ones_like(kind), 2 * torch.ones_like(kind)))
    active = (bsize >= 3) & inside
    hi_sw = torch.where(active, r, -1).amax(-1, keepdim=True)
    lo_sw = torch.where(block == block.gather(-1, hi_sw.clamp(min=0)), r, n1).amin(
        -1, keepdim=True)
    lo_sw = torch.where(hi_sw < 0, hi_sw, lo_sw)
    # an infinite eigenvalue first: (lo, hi) = (its row, its row) marks the action
    defl = infinite >= 0
    lo_new = torch.where(defl, infinite, lo_sw)
    hi_new = torch.where(defl, infinite, hi_sw)
    its_new = torch.where(defl, its, torch.where(hi_new == hi, its + 1, torch.zeros_like(its)))
    k = torch.where(start, lo_new, k)
    lo = torch.where(start, lo_new, lo)
    hi = torch.where(start, hi_new, hi)
    its = torch.where(start, its_new, its)
    kind = torch.where(start, kind_new, kind)
    sweep = (kind == 0) & (hi >= 0) & (k < hi)
    first = sweep & (k == lo)
    # --- the shift vector: (c2 M^2 + c1 M + c0) e1 times b11^2 b22 for M = A B^{-1} at
    # the top, c2 x^2 + c1 x + c0 the bottom 2x2 pencil's characteristic polynomial
    a11, a12 = _flat_get(h, hi - 1, hi - 1), _flat_get(h, hi - 1, hi)
    a21, a22 = _flat_get(h, hi, hi - 1), _flat_get(h, hi, hi)
    b11, b12, b22 = _flat_get(t, hi - 1, hi - 1), _flat_get(t, hi - 1, hi), _flat_get(t, hi, hi)
    sa = a11.abs() + a12.abs() + a21.abs() + a22.abs()
    sb = b11.abs() + b12.abs() + b22.abs()
    sa = torch.where(sa == 0, torch.ones_like(sa), sa)
    sb = torch.where(sb == 0, torch.ones_like(sb), sb)
    a11, a12, a21, a22 = a11 / sa, a12 / sa, a21 / sa, a22 / sa
    b11, b12, b22 = b11 / sb, b12 / sb, b22 / sb
    c2 = b11 * b22
    c1 = -(a11 * b22 + a22 * b11 - a21 * b12)
    c0 = a11 * a22 - a12 * a21
    # exceptional shifts every 10 sweeps without deflation (break a cycle)
    exceptional = (its % 10) == 9
    sx = a21.abs() + (_flat_get(h, hi - 1, hi - 2) / sa).abs()
    c1 = torch.where(exceptional, -(1.5 * sx + a22) * 2 * b22.abs(), c1)
    c0 = torch.where(exceptional, ((0.75 * sx + a22) ** 2 + 0.4375 * sx * sx), c0)
    c2 = torch.where(exceptional, b22 * b22, c2)
    # the top of the block
    p00, p10, p01 = _flat_get(h, lo, lo), _flat_get(h, lo + 1, lo), _flat_get(h, lo, lo + 1)
    p11, p21 = _flat_get(h, lo + 1, lo + 1), _flat_get(h, lo + 2, lo + 1)
    q00, q01, q11 = _flat_get(t, lo, lo), _flat_get(t, lo, lo + 1), _flat_get(t, lo + 1, lo + 1)
    # (the bottom's scales: the polynomial is in M's units)
    p00, p10, p01, p11, p21 = p00 / sa, p10 / sa, p01 / sa, p11 / sa, p21 / sa
    q00, q01, q11 = q00 / sb, q01 / sb, q11 / sb
    # b11^2 b22 M^2 e1 = a11 b22 A e1 + a21 (b11 A e2 - b12 A e1)
    m0 = p00 * q11 * p00 + p10 * (q00 * p01 - q01 * p00)
    m1 = p00 * q11 * p10 + p10 * (q00 * p11 - q01 * p10)
    m2 = p10 * q00 * p21
    f0 = c2 * m0 + c1 * q00 * q11 * p00 + c0 * q00 * q00 * q11
    f1 = c2 * m1 + c1 * q00 * q11 * p10
    f2 = c2 * m2
    # --- the left reflector: the sweep's rows (k, k + 1, k + 2), or at the top of a block
    # with an infinite eigenvalue rows (lo, lo + 1) zeroing A[lo + 1, lo]
    topk = (kind == 1) & (hi >= 0)
    km = (k - 1).clamp(min=0)
    b0, b1, b2 = (_flat_get(h, k + i, km) for i in range(3))
    x0 = torch.where(first, f0, torch.where(topk, _flat_get(h, k, k), b0))
    x1 = torch.where(first, f1, torch.where(topk, _flat_get(h, k + 1, k), b1))
    x2 = torch.where(first, f2, b2)
    x2 = torch.where(sweep & (k + 2 <= hi), x2, torch.zeros_like(x2))
    beta, tau, v = _house(x0, x1, x2, sweep | topk)
    idx = (k + torch.arange(3, device=dev)).clamp(0, n)  # (b, 3)
    h, t, q = _apply_left(h, idx, tau, v), _apply_left(t, idx, tau, v), _apply_right(
        q, idx, tau, v)
    # the column exactly: beta, then zeros
    later = sweep & ~first
    kk = torch.cat([k, k + 1, k + 2], -1)
    old = _flat_get(h, kk, km.expand(-1, 3))
    zero = torch.zeros_like(beta)
    new = torch.cat([beta, zero, torch.where(k + 2 <= hi, zero, old[:, 2:])], -1)
    h = _flat_set(h, kk, km.expand(-1, 3), torch.where(later, new, old))
    old = _flat_get(h, kk[:, :2], k.expand(-1, 2))
    h = _flat_set(h, kk[:, :2], k.expand(-1, 2), torch.where(topk, torch.cat([beta, zero], -1),
                                                            old))
    # --- from the right: B's row k + 2 to (0, 0, *) over columns (k + 2, k + 1, k)
    live3 = sweep & (k + 2 <= hi)
    ridx = torch.cat([k + 2, k + 1, k], -1).clamp(0, n)
    y0, y1, y2 = (_flat_get(t, k + 2, ridx[:, i:i + 1]) for i in range(3))
    beta, tau, v = _house(y0, y1, y2, live3)
    h, t, z = (_apply_right(x, ridx, tau, v) for x in (h, t, z))
    old = _flat_get(t, (k + 2).expand(-1, 3), ridx)
    t = _flat_set(t, (k + 2).expand(-1, 3), ridx, torch.where(
        live3, torch.cat([beta, zero, zero], -1), old))
    # --- then B's row k + 1 to (0, *) over columns (k + 1, k); or at the bottom of a block
    # with an infinite eigenvalue A's row hi over columns (hi, hi - 1)
    botk = (kind == 2) & (hi >= 0)
    p = torch.where(botk, hi - 1, k)
    ridx = torch.cat([p + 1, p, p + 2], -1).clamp(0, n)
    src = torch.where(botk.unsqueeze(-1), h, t)
    y0, y1 = _flat_get(src, p + 1, p + 1), _flat_get(src, p + 1, p)
    beta, tau, v = _house(y0, y1, torch.zeros_like(y1), sweep | botk)
    h, t, z = (_apply_right(x, ridx, tau, v) for x in (h, t, z))
    pair = torch.cat([p + 1, p + 1], -1), torch.cat([p + 1, p], -1)
    old = _flat_get(t, *pair)
    t = _flat_set(t, *pair, torch.where(sweep, torch.cat([beta, zero], -1), torch.where(
        botk, torch.cat([old[:, :1], zero], -1), old)))
    old = _flat_get(h, *pair)
    h = _flat_set(h, *pair, torch.where(botk, torch.cat([beta, zero], -1), old))
    # next: the sweep's next row; after a deflation, a new start
    k = torch.where(sweep, k + 1, torch.where(topk | botk, hi, k))
    return h, t, q, z, [k, lo, hi, its, kind]


# ----------------------------------------------------------------------------------------
# 2x2 blocks


def _sgn(x):
    return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))


def standardize(h, t, q, z):
    """dlagv2's form for every 2x2 block of (h, t) at once, then B's diagonal >= 0."""
    n = h.shape[-1]
    if n >= 2:
        h, t, q, z = _blocks(h, t, q, z)
    s = _sgn(_diag(t)).unsqueeze(-2)
    return h * s, t * s, q, z * s


def _blocks(h, t, q, z):
    a11, a22 = _diag(h)[..., :-1], _diag(h)[..., 1:]
    a12, a21 = _diag(h, 1), _diag(h, -1)
    b11, b22, b12 = _diag(t)[..., :-1], _diag(t)[..., 1:], _diag(t, 1)
    blk = a21 != 0
    one, zero = torch.ones_like(a11), torch.zeros_like(a11)
    sa = a11.abs() + a12.abs() + a21.abs() + a22.abs()
    sb = b11.abs() + b12.abs() + b22.abs()
    sa, sb = torch.where(sa == 0, one, sa), torch.where(sb == 0, one, sb)
    e11, e12, e21, e22 = a11 / sa, a12 / sa, a21 / sa, a22 / sa
    f11, f12, f22 = b11 / sb, b12 / sb, b22 / sb
    c2 = f11 * f22
    c1 = -(e11 * f22 + e22 * f11 - e21 * f12)
    c0 = e11 * e22 - e12 * e21
    disc = c1 * c1 - 4 * c2 * c0
    real = disc >= 0
    # real eigenvalues: (alpha, beta) one of them, homogeneous
    qd = -0.5 * (c1 + _sgn(c1) * torch.sqrt(disc.clamp(min=0)))
    big = qd.abs() + c2.abs() >= c0.abs() + qd.abs()
    al, be = torch.where(big, qd, c0), torch.where(big, c2, qd)
    # the right rotation's first column: the null vector of beta A - alpha B
    m11, m12 = be * e11 - al * f11, be * e12 - al * f12
    m21, m22 = be * e21, be * e22 - al * f22
    row1 = m11.abs() + m12.abs() >= m21.abs() + m22.abs()
    u0 = torch.where(row1, -m12, -m22)
    u1 = torch.where(row1, m11, m21)
    cr, sr, rn = _givens(u0, u1)
    # the left rotation's first column: B v (or A v, the larger)
    wa0, wa1 = e11 * cr + e12 * sr, e21 * cr + e22 * sr
    wb0, wb1 = f11 * cr + f12 * sr, f22 * sr
    usea = wa0.abs() + wa1.abs() > wb0.abs() + wb1.abs()
    cl, sl, _ = _givens(torch.where(usea, wa0, wb0), torch.where(usea, wa1, wb1))
    # complex eigenvalues: B's block diagonal by its SVD (the 2x2 closed form)
    ang1 = torch.atan2(0.5 * f12, 0.5 * (f11 - f22))
    ang2 = torch.atan2(-0.5 * f12, 0.5 * (f11 + f22))
    th, ph = 0.5 * (ang2 - ang1), 0.5 * (ang2 + ang1)
    # B = R(ph) diag R(th), R(x) = [[cos, -sin], [sin, cos]]: left R(ph), right R(-th)
    cl = torch.where(real, cl, torch.cos(ph))
    sl = torch.where(real, sl, torch.sin(ph))
    cr = torch.where(real, cr, torch.cos(th))
    sr = torch.where(real, sr, -torch.sin(th))
    cl, sl = torch.where(blk, cl, one), torch.where(blk, sl, zero)
    cr, sr = torch.where(blk, cr, one), torch.where(blk, sr, zero)
    gl, gr = _block_rotations(cl, sl, blk), _block_rotations(cr, sr, blk)
    h, t = gl.mT @ h @ gr, gl.mT @ t @ gr
    q, z = q @ gl, z @ gr
    # exact structure: real blocks split, complex blocks' B diagonal, triangles
    n = h.shape[-1]
    r = torch.arange(n, device=h.device)
    h = h.triu(-1)
    t = t.triu()
    h = _flat_set(h, r[:-1] + 1, r[:-1], torch.where(blk & ~real, _diag(h, -1), zero))
    t = _flat_set(t, r[:-1], r[:-1] + 1, torch.where(blk & ~real, zero, _diag(t, 1)))
    return h, t, q, z


def _block_rotations(c, s, blk):
    """I with [[c, -s], [s, c]] at each block (blocks at disjoint rows)."""
    one = torch.ones_like(c[..., :1])
    fal = torch.zeros_like(blk[..., :1])
    first, second = torch.cat([blk, fal], -1), torch.cat([fal, blk], -1)
    dg = torch.where(first, torch.cat([c, one], -1), torch.where(
        second, torch.cat([one, c], -1), torch.ones_like(torch.cat([c, one], -1))))
    return torch.diag_embed(dg) + torch.diag_embed(-s, 1) + torch.diag_embed(s, -1)


# ----------------------------------------------------------------------------------------


def qz(a, b):
    """(AA, BB, Q, Z, converged): the real generalized Schur form of real (a, b)."""
    h, t, q, z = hgr(a, b)
    if a.shape[-1] < 2:
        s = torch.where(t >= 0, torch.ones_like(t), -torch.ones_like(t))
        return h * s, t * s, q, z * s, True
    return hgeqz(h, t, q, z)


def eigvals_from_qz(s, p):
    """(alpha_re, alpha_im, beta) of a standardized real generalized Schur form (positive
    imaginary part first, LAPACK's order; beta: B's diagonal)."""
    a, bt = _diag(s), _diag(p)
    zero = torch.zeros_like(a[..., :1])
    sub = torch.cat([_diag(s, -1), zero], -1)  # sub[i] = s[i + 1, i]
    first = sub != 0
    second = torch.cat([zero != 0, first[..., :-1]], -1)
    a12 = torch.cat([_diag(s, 1), zero], -1)
    # the pair's eigenvalues from the block (a11, a12; a21, a22), B diagonal (b1, b2)
    nxt = lambda x: torch.cat([x[..., 1:], zero], -1)  # noqa: E731
    prv = lambda x: torch.cat([zero, x[..., :-1]], -1)  # noqa: E731
    a11 = torch.where(first, a, prv(a))
    a22 = torch.where(first, nxt(a), a)
    b1 = torch.where(first, bt, prv(bt))
    b2 = torch.where(first, nxt(bt), bt)
    a21 = torch.where(first, sub, prv(sub))
    a12 = torch.where(first, a12, prv(a12))
    cplx = first | second
    one = torch.ones_like(a)
    den = torch.where(cplx, b1 * b2, one)
    re = 0.5 * (a11 * b2 + a22 * b1) / den
    det = (a11 * a22 - a12 * a21) / den
    im = torch.sqrt((det - re * re).clamp(min=0))
    ar = torch.where(cplx, re * bt, a)
    ai = torch.where(first, im * bt, torch.where(second, -im * bt, torch.zeros_like(a)))
    return ar, ai, bt


def to_complex(s, p, q, z):
    """The complex generalized Schur form (both triangular, P's diagonal real and
    non-negative, as LAPACK's zhgeqz leaves it) from the standardized real one: each 2x2
    block's unitary pair at once (disjoint rows), as (real, imaginary) parts:
    (Sr, Si, Pr, Pi, Qr, Qi, Zr, Zi)."""
    if s.shape[-1] < 2:  # (no blocks; P's diagonal is non-negative already)
        return tuple(x for m in (s, p, q, z) for x in (m, torch.zeros_like(m)))
    ar, ai, bt = eigvals_from_qz(s, p)
    a11, a22 = _diag(s)[..., :-1], _diag(s)[..., 1:]
    a21 = _diag(s, -1)
    b1, b2 = bt[..., :-1], bt[..., 1:]
    blk = a21 != 0
    one = torch.ones_like(a11)
    safe = torch.where(blk, b1, one)
    re, im = ar[..., :-1] / safe, ai[..., :-1] / safe  # the block's first eigenvalue
    # Z's first column: the null vector (a22 - lambda b2, -a21) of A - lambda B's 2nd row;
    # Q's: B times it
    u, v, w = a22 - re * b2, -im * b2, -a21
    nx = torch.where(blk, torch.sqrt(u * u + v * v + w * w), one)
    ny = torch.where(blk, torch.sqrt(b1 * b1 * (u * u + v * v) + b2 * b2 * w * w), one)
    zr, zi = _unitary(u / nx, v / nx, w / nx, blk)
    qr, qi = _unitary(b1 * u / ny, b1 * v / ny, b2 * w / ny, blk)
    # S <- Q^H S Z, P likewise (in parts), Q <- Q Qc, Z <- Z Zc
    out = []
    for m in (s, p):
        mr, mi = qr.mT @ m @ zr + qi.mT @ m @ zi, qr.mT @ m @ zi - qi.mT @ m @ zr
        out += [mr.triu(), mi.triu()]
    sr, si, pr, pi = out
    qcr, qci, zcr, zci = q @ qr, q @ qi, z @ zr, z @ zi
    # P's diagonal real and non-negative: columns times conj(its phase)
    dr, di = _diag(pr), _diag(pi)
    mag = torch.sqrt(dr * dr + di * di)
    nz = mag != 0
    safe = torch.where(nz, mag, torch.ones_like(mag))
    cr = torch.where(nz, dr / safe, torch.ones_like(dr)).unsqueeze(-2)
    ci = torch.where(nz, -di / safe, torch.zeros_like(di)).unsqueeze(-2)
    res = []
    for xr, xi in ((sr, si), (pr, pi), (zcr, zci)):
        res += [xr * cr - xi * ci, xr * ci + xi * cr]
    sr, si, pr, pi, zcr, zci = res
    n = s.shape[-1]
    r = torch.arange(n, device=s.device)
    pr = _flat_set(pr, r, r, mag)
    pi = _flat_set(pi, r, r, torch.zeros_like(mag))
    return sr, si, pr, pi, qcr, qci, zcr, zci


def _unitary(u, v, w, blk):
    """Real and imaginary parts of I with [[x1, -conj(x2)], [x2, conj(x1)]] at each block,
    x1 = u + i v, x2 = w real (|x| = 1)."""
    fal = torch.zeros_like(blk[..., :1])
    first, second = torch.cat([blk, fal], -1), torch.cat([fal, blk], -1)
    zero = torch.zeros_like(u[..., :1])
    u, v, w = (torch.where(blk, x, 0 * x) for x in (u, v, w))
    dr = torch.where(first, torch.cat([u, zero], -1), torch.where(
        second, torch.cat([zero, u], -1), torch.ones_like(torch.cat([u, zero], -1))))
    di = torch.cat([v, zero], -1) - torch.cat([zero, v], -1)
    return (torch.diag_embed(dr) + torch.diag_embed(-w, 1) + torch.diag_embed(w, -1),
            torch.diag_embed(di))


def tgevc(sr, si, pr, pi):
    """Unit upper triangular X with beta_j S x_j = alpha_j P x_j (alpha_j = S[j, j], beta_j
    = P[j, j]: the complex triangular form, P's diagonal real), as (real, imaginary) parts:
    back substitution one row per micro-step (dtgevc's right vectors)."""
    n = sr.shape[-1]
    xr, xi, i, eps, tiny = _back_start(sr)
    # (the norms of S and P, for the perturbation of a singular denominator)
    snorm = torch.sqrt((sr * sr + si * si).sum((-2, -1))).unsqueeze(-1)
    pnorm = torch.sqrt((pr * pr + pi * pi).sum((-2, -1))).unsqueeze(-1)
    xr, xi, i = _loop(lambda c: _tgevc_step(sr, si, pr, pi, *c, eps, tiny, snorm, pnorm),
                      (xr, xi, i), n)
    _sync(xr, xi, i)
    return xr, xi


def _cmul(ar, ai, br, bi):
    return ar * br - ai * bi, ar * bi + ai * br


def _tgevc_step(sr, si, pr, pi, xr, xi, i, eps, tiny, snorm, pnorm):
    n = sr.shape[-1]
    cols = torch.arange(n, device=sr.device)
    ic = i.clamp(min=0)
    right = cols > i

    def row(m):
        return torch.where(right, torch.index_select(m, -2, ic).squeeze(-2), 0)

    def vecmat(x, m):
        return x @ m if x.ndim == 1 else (x.unsqueeze(-2) @ m).squeeze(-2)

    s_r, s_i, p_r, p_i = (row(m) for m in (sr, si, pr, pi))
    # row i of S X and P X (columns j > i)
    ssr, ssi = vecmat(s_r, xr) - vecmat(s_i, xi), vecmat(s_r, xi) + vecmat(s_i, xr)
    psr, psi = vecmat(p_r, xr) - vecmat(p_i, xi), vecmat(p_r, xi) + vecmat(p_i, xr)
    al_r, al_i, be = _diag(sr), _diag(si), _diag(pr)  # per column j
    # numerator beta_j (S X)_ij - alpha_j (P X)_ij; denominator beta_j S_ii - alpha_j P_ii
    ar_, ai_ = _cmul(al_r, al_i, psr, psi)
    nr, ni = be * ssr - ar_, be * ssi - ai_
    sii_r, sii_i = torch.index_select(al_r, -1, ic), torch.index_select(al_i, -1, ic)
    pii = torch.index_select(be, -1, ic)
    dr, di = be * sii_r - al_r * pii, be * sii_i - al_i * pii
    # a repeated eigenvalue: the denominator perturbed to rounding's size relative to the
    # norms (as dtgevc: two infinite ones give O(1) entries, not overflow)
    smin = torch.clamp(eps * (be.abs() * snorm + (al_r.abs() + al_i.abs()) * pnorm), min=tiny)
    return _back_row(nr, ni, dr, di, smin, xr, xi, i, ic, right)


def eigvecs(s, p, q, z):
    """Right eigenvectors of the pencil from its standardized real form: unit 2-norm (as
    SciPy), the second of a complex pair the first's conjugate, as (real, imaginary)."""
    sr, si, pr, pi, _, _, zr, zi = to_complex(s, p, q, z)
    xr, xi = tgevc(sr, si, pr, pi)
    vr, vi = zr @ xr - zi @ xi, zr @ xi + zi @ xr
    nrm = torch.sqrt((vr * vr + vi * vi).sum(-2, keepdim=True))
    nrm = torch.where(nrm == 0, torch.ones_like(nrm), nrm)
    vr, vi = vr / nrm, vi / nrm
    _, ai, _ = eigvals_from_qz(s, p)
    second = (ai < 0).unsqueeze(-2)
    prev = lambda x: torch.cat([x[..., :1], x[..., :-1]], -1)  # noqa: E731
    vr = torch.where(second, prev(vr), vr)
    vi = torch.where(second, -prev(vi), vi)
    return vr, vi


# ----------------------------------------------------------------------------------------
# reordering (ordqz): adjacent block swaps, as LAPACK's dtgsen / dtgexc / dtgex2 do


def plan_swaps(firsts, select):
    """The adjacent swaps (j, n1, n2) that move the selected blocks of a real generalized
    Schur form to the top, keeping both groups' order (dtgsen: a 2x2 block is selected
    when either of its eigenvalues is), and the block starts after them.  ``firsts[i]``:
    a 2x2 block starts at i (host lists)."""
    n, blocks, i = len(select), [], 0
    while i < n:
        size = 2 if i + 1 < n and firsts[i] else 1
        blocks.append([size, bool(select[i] or (size == 2 and select[i + 1]))])
        i += size
    swaps, top = [], 0  # top: the selected blocks' count so far
    for b in range(len(blocks)):
        if not blocks[b][1]:
            continue
        for c in range(b, top, -1):  # bubble block c up past the unselected block c - 1
            j = sum(x[0] for x in blocks[:c - 1])
            swaps.append((j, blocks[c - 1][0], blocks[c][0]))
            blocks[c - 1], blocks[c] = blocks[c], blocks[c - 1]
        top += 1
    starts, j = [False] * max(n - 1, 0), 0
    for size, _ in blocks:
        if size == 2:
            starts[j] = True
        j += size
    return swaps, starts


def reorder(s, p, q, z, swaps, starts):
    """(S, P, Q, Z, failed): the swaps of ``plan_swaps`` applied to one standardized real
    form (n x n) in one device loop whose body is one swap (the table of swaps is data),
    then the form restandardized; ``failed``: a 0-d tensor, True where a swap would leave
    the form too far from generalized Schur form (dtgex2's weak test)."""
    n, dev = s.shape[-1], s.device
    bad = torch.zeros((1,), dtype=s.dtype, device=dev)
    if swaps:
        # a table of fixed size per n (at most n^2 / 4 swaps): the graph is one per n
        size = n * n // 4 + 1
        table = torch.tensor(swaps + [(0, 1, 1)] * (size - len(swaps)), dtype=torch.int64)
        table = table.to(dev)
        pad = (0, 3, 0, 3)  # a window of 4 at the bottom reaches 3 rows past the end
        sp, pp, qp, zp = (torch.nn.functional.pad(x, pad) for x in (s, p, q, z))
        k = _counter(0, dev)
        _sync(sp, pp, qp, zp, k, bad, table)
        from trnscipy._kernels import backend

        # (the bounds uploaded: a count made on the device would be a graph constant)
        sp, pp, qp, zp, k, bad = backend(dev).device_loop(
            lambda c, _: _swap_step(*c, table), (sp, pp, qp, zp, k, bad),
            torch.tensor([0]).to(dev), torch.tensor([len(swaps)]).to(dev))
        s, p, q, z = (x[:n, :n] for x in (sp, pp, qp, zp))
    s, p, q, z = _tidy(s, p, q, z, torch.tensor(starts, dtype=torch.bool).to(dev))
    return s, p, q, z, bad[0] != 0


def _kron(x, y):
    """kron of 2x2 matrices (4x4)."""
    return (x[:, None, :, None] * y[None, :, None, :]).reshape(4, 4)


def _solve8(m, rhs):
    """m x = rhs (8x8) by Gaussian elimination with partial pivoting, tiny pivots raised
    to eps * max|m| (as dgetc2: a singular equation gives a bounded solution)."""
    dev, dtype = m.device, m.dtype
    rows, cols = torch.arange(8, device=dev), torch.arange(9, device=dev)
    smin = (torch.finfo(dtype).eps * m.abs().max()).clamp(min=torch.finfo(dtype).tiny)
    aug = torch.cat([m, rhs[:, None]], 1)
    for c in range(8):
        col = torch.where(rows >= c, aug[:, c].abs(), -torch.ones_like(aug[:, c]))
        piv = col.argmax().reshape(1)
        prow, crow = aug.index_select(0, piv), aug[c:c + 1]
        aug = torch.where((rows == piv)[:, None], crow, aug)
        aug = torch.where((rows == c)[:, None], prow, aug)
        d = aug[c, c]
        d = torch.where(d.abs() < smin, torch.where(d < 0, -smin, smin), d)
        f = torch.where(rows > c, aug[:, c] / d, torch.zeros_like(aug[:, c]))
        aug = aug - f[:, None] * aug[c:c + 1]
        aug = torch.where((rows == c)[:, None] & (cols == c), d, aug)
    x = torch.zeros(8, dtype=dtype, device=dev)
    for c in range(7, -1, -1):
        x = torch.where(rows == c, (aug[c, 8] - (aug[c, :8] * x).sum()) / aug[c, c], x)
    return x


def _span_basis(y, n2):
    """Orthogonal 4x4 U, identity past the swapped window, whose first ``n2`` columns span
    those of ``y`` (4x4, zero columns past n2): two Householder steps."""
    dev = y.device
    rows = torch.arange(4, device=dev)
    u = torch.eye(4, dtype=y.dtype, device=dev)
    for c in range(2):
        x = y[:, c]
        tail = torch.where(rows > c, x, torch.zeros_like(x))
        _, tau, scale = _reflector(x[c], (tail * tail).sum())
        tau = torch.where(n2[0] > c, tau, torch.zeros_like(tau))
        v = torch.where(rows == c, torch.ones_like(x), tail * scale)
        y = y - tau * v[:, None] * (v[None, :] @ y)
        u = u - tau * (u @ v[:, None]) * v[None, :]
    return u


def _swap_step(s, p, q, z, k, bad, table):
    """Swap the adjacent diagonal blocks (sizes n1 above n2) at row j of (s, p): the
    generalized Sylvester equation A11 R - L A22 = -A12, B11 R - L B22 = -B12 gives the
    deflating subspaces [R; I] (right) and [L; I] (left); orthonormal bases of them from
    the left and right swap the blocks; the entries under the new blocks are dropped."""
    dev, dtype = s.device, s.dtype
    eps, tiny = torch.finfo(dtype).eps, torch.finfo(dtype).tiny
    row = table.index_select(0, k.clamp(max=table.shape[0] - 1)).reshape(3)
    j, n1, n2 = row[0:1], row[1:2], row[2:3]
    r4, r2 = torch.arange(4, device=dev), torch.arange(2, device=dev)
    idx = j + r4
    ws = s.index_select(0, idx).index_select(1, idx)
    wp = p.index_select(0, idx).index_select(1, idx)
    m = n1 + n2
    inwin = (r4[:, None] < m) & (r4[None, :] < m)
    ws, wp = torch.where(inwin, ws, 0 * ws), torch.where(inwin, wp, 0 * wp)
    dnorm = torch.sqrt((ws * ws).sum() + (wp * wp).sum())
    # each equation scaled by its matrix's norm (the solution does not change)
    na = torch.sqrt((ws * ws).sum())
    nb = torch.sqrt((wp * wp).sum())
    sa = ws / torch.where(na == 0, torch.ones_like(na), na)
    sb = wp / torch.where(nb == 0, torch.ones_like(nb), nb)
    v1, v2 = r2 < n1, r2 < n2
    i1, i2 = r2, (n1 + r2).clamp(max=3)

    def part(w, ri, ci, rv, cv):
        b = w.index_select(0, ri).index_select(1, ci)
        return torch.where(rv[:, None] & cv[None, :], b, 0 * b)

    a11, a22, a12 = part(sa, i1, i1, v1, v1), part(sa, i2, i2, v2, v2), part(sa, i1, i2, v1, v2)
    b11, b22, b12 = part(sb, i1, i1, v1, v1), part(sb, i2, i2, v2, v2), part(sb, i1, i2, v1, v2)
    eye2 = torch.eye(2, dtype=dtype, device=dev)
    mat = torch.cat([torch.cat([_kron(a11, eye2), -_kron(eye2, a22.T)], 1),
                     torch.cat([_kron(b11, eye2), -_kron(eye2, b22.T)], 1)], 0)
    # unknowns (R, L) and equations indexed (i, k), i < n1, k < n2; the rest: identity
    r8 = torch.arange(8, device=dev) % 4
    live = (r8 // 2 < n1) & (r8 % 2 < n2)
    mat = torch.where(live[:, None] & live[None, :], mat,
                      torch.eye(8, dtype=dtype, device=dev))
    rhs = torch.where(live, -torch.cat([a12.reshape(4), b12.reshape(4)]), torch.zeros(
        8, dtype=dtype, device=dev))
    x = _solve8(mat, rhs)
    rr, ll = x[:4].reshape(2, 2), x[4:].reshape(2, 2)

    def stacked(top):  # [top; I_n2] in the window's first n1 + n2 rows, n2 columns
        t4 = torch.nn.functional.pad(top, (0, 2, 0, 2))
        t4 = torch.where((r4[:, None] < n1) & (r4[None, :] < n2), t4, 0 * t4)
        return t4 + ((r4[:, None] == n1 + r4[None, :]) & (r4[None, :] < n2)).to(dtype)

    zw, qw = _span_basis(stacked(rr), n2), _span_basis(stacked(ll), n2)
    s, p = (_rows(x, idx, qw.T @ x.index_select(0, idx)) for x in (s, p))
    s, p, q, z = (_cols(x, idx, x.index_select(1, idx) @ w) for x, w in (
        (s, zw), (p, zw), (q, qw), (z, zw)))
    # the blocks' new order: n2 rows above n1; what lies under the first is rounding
    low = (r4[:, None] >= n2) & (r4[:, None] < m) & (r4[None, :] < n2)
    ri, ci = idx[:, None].expand(4, 4).reshape(16), idx[None, :].expand(4, 4).reshape(16)
    ws, wp = _flat_get(s, ri, ci), _flat_get(p, ri, ci)
    lowf = low.reshape(16)
    drop = torch.sqrt((torch.where(lowf, ws, 0 * ws) ** 2).sum() + (torch.where(
        lowf, wp, 0 * wp) ** 2).sum())
    failed = drop > (20 * eps * dnorm).clamp(min=tiny)
    s = _flat_set(s, ri, ci, torch.where(lowf, 0 * ws, ws))
    p = _flat_set(p, ri, ci, torch.where(lowf, 0 * wp, wp))
    return s, p, q, z, k + 1, torch.where(failed, torch.ones_like(bad), bad)


def _rows(m, idx, new):
    return m.scatter(0, idx[:, None].expand(4, m.shape[1]), new)


def _cols(m, idx, new):
    return m.scatter(1, idx[None, :].expand(m.shape[0], 4), new)


def _tidy(s, p, q, z, starts):
    """The form's exact structure for the block starts ``starts`` (n - 1 bools): S's
    entries under it zero, each 2x2 block's P made triangular by one rotation from the
    left, then ``standardize``."""
    n = s.shape[-1]
    if n < 2:
        return standardize(s, p, q, z)
    r = torch.arange(n, device=s.device)
    zero = torch.zeros(n - 1, dtype=s.dtype, device=s.device)
    c, sn, _ = _givens(_diag(p)[:-1], _diag(p, -1))
    c, sn = torch.where(starts, c, zero + 1), torch.where(starts, sn, zero)
    gl = _block_rotations(c, sn, starts)
    s, p, q = gl.mT @ s, gl.mT @ p, q @ gl
    s = s.triu(-1)
    s = _flat_set(s, r[:-1] + 1, r[:-1], torch.where(starts, _diag(s, -1), zero))
    return standardize(s, p.triu(), q, z)


_REORDER_FAILED = ("Reordering of (A, B) failed because the transformed matrix pair (A, B) "
                   "would be too far from generalized Schur form; the problem is very "
                   "ill-conditioned. (A, B) may have been partially reordered.")


def ordered(s, p, q, z, select, cplx, dtype, scale=(1, 1)):
    """The standardized real form (s, p, q, z) of one pencil reordered so that the
    eigenvalues ``select`` picks lead (SciPy's ordqz).  ``select`` sees alpha and beta as
    SciPy's does (NumPy, real ``dtype``; ``cplx``: the complex form's), of the pencil
    scaled back by ``scale`` (A's, B's factor), read from the device once.  A str where the
    real form cannot give the order (the caller runs SciPy); SciPy's ValueError where a
    swap would leave the form too far from generalized Schur form."""
    n = s.shape[-1]
    ar, ai, bt = eigvals_from_qz(s, p)
    rows = [ar * scale[0], ai * scale[0], bt * scale[1],
            torch.cat([_diag(s, -1), ar[:1] * 0]).ne(0).to(ar.dtype)]
    if cplx:  # SciPy sorts the complex form's diagonals
        parts = to_complex(s, p, q, z)
        rows += [_diag(parts[i]) * scale[i // 2] for i in range(4)]
    host = np.asarray(kernel("linalg._fetch", s.device)(torch.stack(rows)), dtype=dtype)
    cd = np.complex64 if dtype == np.float32 else np.complex128
    if cplx:
        alpha, beta = host[4] + host[5] * cd(1j), host[6] + host[7] * cd(1j)
    else:
        alpha, beta = host[0] + host[1] * cd(1j), host[2]
    chosen = np.asarray(select(alpha, beta)).astype(bool).reshape(n)
    firsts = host[3, :-1] != 0
    if cplx and np.any(firsts & (chosen[:-1] != chosen[1:])):
        return "sort selects one eigenvalue of a complex pair: the real form cannot order it"
    swaps, starts = plan_swaps(firsts.tolist(), chosen.tolist())
    s, p, q, z, failed = reorder(s, p, q, z, swaps, starts)
    if swaps and kernel("linalg._fetch", s.device)(failed):
        raise ValueError(_REORDER_FAILED)
    return s, p, q, z
