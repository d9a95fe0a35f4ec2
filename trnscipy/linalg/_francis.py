"""Hessenberg reduction, real Schur form and eigenvectors from plain torch ops that lower to
XLA (no ``linalg.eig``, no LAPACK), in fixed-shape graph steps.

* ``gehrd``: Householder reduction to Hessenberg form, LAPACK's reflectors (dlarfg), one
  reflector per step, all steps in one ``device_loop`` (on XLA one ``While``: its body
  compiles once, the step index is device data).
* ``hseqr``: Francis double-shift QR (dlahqr's algorithm, real arithmetic) as a state
  machine: each micro-step applies one 3x3 reflector of the bulge chase; a micro-step that
  finds the previous sweep finished first deflates negligible subdiagonals, picks the
  lowest unreduced block of size >= 3 and its shifts (exceptional shifts every 10 sweeps
  without deflation).  ``STEPS * n`` micro-steps per ``device_loop`` graph, the host reads
  the "done" flag once per graph.  The remaining 2x2 blocks are standardized as dlanv2
  does, all at once (the rotations act on disjoint rows: one block-diagonal GEMM).
* ``rsf2csf``: SciPy's rsf2csf, all 2x2 blocks at once (disjoint rotations again).
* ``trevc``: eigenvectors of the complex triangular form by back substitution, one row per
  micro-step (all in one ``device_loop``), complex numbers as (real, imaginary) pairs of
  real tensors.
"""

from trnscipy._torch import torch
from trnscipy.linalg._xla_dense import _counter, _sync

__all__ = ["gehrd", "hseqr", "standardize", "rsf2csf", "eig_from_schur"]

STEPS = 4  # Francis micro-steps per graph, per row of the matrix


def _flat_index(h, i, j):
    n0, n1 = h.shape[-2:]
    idx = i.clamp(0, n0 - 1) * n1 + j.clamp(0, n1 - 1)
    return h.reshape(*h.shape[:-2], n0 * n1), idx.expand(*h.shape[:-2], idx.shape[-1])


def _flat_get(h, i, j):
    """h[..., i, j] for device index tensors i, j of shape (..., m) (clamped into range):
    one gather per matrix of the stack."""
    flat, idx = _flat_index(h, i, j)
    return flat.gather(-1, idx)


def _flat_set(h, i, j, values):
    flat, idx = _flat_index(h, i, j)
    return flat.scatter(-1, idx, values).reshape(h.shape)


def _reflector(alpha, tail_sq):
    """dlarfg for (alpha, x) with ||x||^2 = tail_sq: (beta, tau, scale of x in v)."""
    keep = tail_sq == 0
    norm = torch.sqrt(alpha * alpha + tail_sq)
    beta = torch.where(alpha >= 0, -norm, norm)
    beta = torch.where(keep, alpha, beta)
    safe_beta = torch.where(keep, torch.ones_like(beta), beta)
    tau = torch.where(keep, torch.zeros_like(beta), (beta - alpha) / safe_beta)
    denom = torch.where(keep, torch.ones_like(beta), alpha - beta)
    return beta, tau, 1 / denom


# ----------------------------------------------------------------------------------------
# Hessenberg reduction


def gehrd(a, calc_q=True):
    """(H, Q) with A = Q H Q^T, H upper Hessenberg (Q None unless ``calc_q``); ``a`` a
    matrix or a stack (one loop for the stack: the step index is the same for all)."""
    n = a.shape[-1]
    q = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape).clone()
    j = _counter(0, a.device)
    h = a.clone()
    _sync(h, q, j)
    h, q, j = _loop(lambda carry: _gehrd_step(*carry, calc_q), (h, q, j), max(n - 2, 0))
    _sync(h, q, j)
    return h, (q if calc_q else None)


def _loop(step, carry, count):
    """``count`` applications of ``step`` (carry -> carry, pure tensor code) in the
    ``device_loop`` kernel: on XLA one ``While`` whose body compiles once."""
    from trnscipy._kernels import backend

    dev = carry[0].device
    bounds = [torch.tensor(i, dtype=torch.int64, device=dev) for i in (0, count)]
    return backend(dev).device_loop(lambda c, _: tuple(step(c)), tuple(carry), *bounds)


def _gehrd_step(h, q, j, calc_q):
    n = h.shape[-1]
    rows = torch.arange(n, device=h.device)
    top = j + 1
    x = torch.index_select(h, -1, j.clamp(max=n - 1)).squeeze(-1)  # column j (..., n)
    alpha = x.gather(-1, top.clamp(max=n - 1).expand(*x.shape[:-1], 1))
    below = rows > top
    tail = torch.where(below, x, torch.zeros_like(x))
    beta, tau, scale = _reflector(alpha, (tail * tail).sum(-1, keepdim=True))
    tau = torch.where(top < n - 1, tau, torch.zeros_like(tau))  # past the last reflector
    v = torch.where(below, tail * scale, torch.zeros_like(x))
    v = torch.where(rows == top, torch.ones_like(v), v)
    tau, vc, vr = tau.unsqueeze(-1), v.unsqueeze(-1), v.unsqueeze(-2)
    h = h - tau * (vc * (vr @ h))
    h = h - tau * ((h @ vc) * vr)
    # column j exactly as LAPACK leaves it: beta on the subdiagonal, zeros below
    at_j = torch.arange(n, device=h.device) == j
    active = top < n - 1
    newcol = torch.where(rows == top, beta, torch.where(below, torch.zeros_like(x),
                                                        torch.index_select(h, -1, j.clamp(
                                                            max=n - 1)).squeeze(-1)))
    h = torch.where(at_j & active, newcol.unsqueeze(-1), h)
    if calc_q:
        q = q - tau * ((q @ vc) * vr)
    return h, q, j + 1


# ----------------------------------------------------------------------------------------
# Francis double-shift QR


def hseqr(h, z, max_sweeps=None):
    """Real Schur form of upper Hessenberg ``h``: (T, Z @ Q, converged) with T quasi upper
    triangular (2x2 blocks standardized as LAPACK's dlanv2)."""
    n = h.shape[-1]
    dev, dtype = h.device, h.dtype
    eps = torch.finfo(dtype).eps
    stack = h.shape[:-2]
    h, z = h.reshape(-1, n, n), z.reshape(-1, n, n)  # a stack: one state machine per matrix
    hp = torch.nn.functional.pad(h, (0, 1, 0, 1))  # a zero row/column: reflectors at the
    zp = torch.nn.functional.pad(z, (0, 1, 0, 1))  # bottom touch it and leave it zero
    count = h.shape[0]
    state = [torch.zeros((count, 1), dtype=torch.int64, device=dev) for _ in range(4)] + [
        torch.zeros((count, 1), dtype=dtype, device=dev) for _ in range(2)]
    _sync(hp, zp, *state)
    from trnscipy._kernels import kernel

    fetch = kernel("linalg._fetch", dev)
    limit = max_sweeps if max_sweeps is not None else 30 * max(10, n) * max(n, 1)
    steps, done = 0, n < 3
    chunk = STEPS * max(n, 1)  # micro-steps per graph (about a sweep's worth: a finished
    # iteration's extra micro-steps change nothing)
    while not done and steps < limit:
        hp, zp, *state = _loop(lambda c: (lambda h, z, st: (h, z, *st))(
            *_francis_step(c[0], c[1], list(c[2:]), eps)), (hp, zp, *state), chunk)
        _sync(hp, zp, *state)
        steps += chunk
        # hi < 0 in every matrix: no unreduced block of size >= 3 left
        done = max(x for (x,) in fetch(state[2])) < 0
    h, z = hp[:, :n, :n], zp[:, :n, :n]
    h, z = standardize(h, z)
    return h.reshape(*stack, n, n), z.reshape(*stack, n, n), done


def _francis_step(h, z, state, eps):
    """One micro-step on each matrix of the stack ``h`` (b, n + 1, n + 1); the state
    tensors have shape (b, 1)."""
    k, lo, hi, its, tr, det = state
    n1 = h.shape[-1]
    n = n1 - 1
    dev = h.device
    r = torch.arange(n1, device=dev)
    start = k >= hi
    # --- at the start of a sweep: deflate, pick the window, the shifts
    d = h.diagonal(0, -2, -1)
    sub = h.diagonal(-1, -2, -1)  # h[i + 1, i], i < n (the last: the zero padding)
    small = sub.abs() <= eps * (d[:, :-1].abs() + d[:, 1:].abs())
    split = small | (sub == 0)
    h = _flat_set(h, r[:-1] + 1, r[:-1], torch.where(start & split, torch.zeros_like(sub), sub))
    block = torch.cat([torch.zeros_like(k), split.to(torch.int64).cumsum(-1)], -1)
    size = torch.zeros_like(block).scatter_add(-1, block, torch.ones_like(block))
    active = (size.gather(-1, block) >= 3) & (r < n)
    hi_new = torch.where(active, r, -1).amax(-1, keepdim=True)
    lo_new = torch.where(block == block.gather(-1, hi_new.clamp(min=0)), r, n1).amin(
        -1, keepdim=True)
    lo_new = torch.where(hi_new < 0, hi_new, lo_new)
    its_new = torch.where(hi_new == hi, its + 1, torch.zeros_like(its))
    a11 = _flat_get(h, hi_new - 1, hi_new - 1)
    a12 = _flat_get(h, hi_new - 1, hi_new)
    a21 = _flat_get(h, hi_new, hi_new - 1)
    a22 = _flat_get(h, hi_new, hi_new)
    exceptional = (its_new % 10) == 9
    sx = a21.abs() + _flat_get(h, hi_new - 1, hi_new - 2).abs()
    e = 0.75 * sx + a22
    tr_new = torch.where(exceptional, 2 * e, a11 + a22)
    det_new = torch.where(exceptional, e * e + 0.4375 * sx * sx, a11 * a22 - a12 * a21)
    k = torch.where(start, lo_new, k)
    lo = torch.where(start, lo_new, lo)
    hi = torch.where(start, hi_new, hi)
    its = torch.where(start, its_new, its)
    tr = torch.where(start, tr_new, tr)
    det = torch.where(start, det_new, det)
    # --- one reflector of the chase at row k
    first = k == lo
    h00, h10, h01 = _flat_get(h, k, k), _flat_get(h, k + 1, k), _flat_get(h, k, k + 1)
    h11, h21 = _flat_get(h, k + 1, k + 1), _flat_get(h, k + 2, k + 1)
    s = h00.abs() + h10.abs() + h11.abs() + h21.abs() + tr.abs() + det.abs().sqrt()
    s = torch.where(s == 0, torch.ones_like(s), s)
    g00, g10, g01, g11, g21 = h00 / s, h10 / s, h01 / s, h11 / s, h21 / s
    ts, ds = tr / s, det / (s * s)
    f0 = g00 * g00 + g01 * g10 - ts * g00 + ds
    f1 = g10 * (g00 + g11 - ts)
    f2 = g10 * g21
    b0, b1, b2 = (_flat_get(h, k + i, k - 1) for i in range(3))
    x0 = torch.where(first, f0, b0)
    x1 = torch.where(first, f1, b1)
    x2 = torch.where(first, f2, b2)
    x2 = torch.where(k + 2 <= hi, x2, torch.zeros_like(x2))
    beta, tau, scale = _reflector(x0, x1 * x1 + x2 * x2)
    live = (hi >= 0) & (k < hi)
    tau = torch.where(live, tau, torch.zeros_like(tau)).unsqueeze(-1)  # (b, 1, 1)
    v = torch.cat([torch.ones_like(x0), x1 * scale, x2 * scale], -1)
    vc, vr = v.unsqueeze(-1), v.unsqueeze(-2)
    idx = (k + torch.arange(3, device=dev)).clamp(0, n)  # (b, 3)
    at_rows = idx.unsqueeze(-1).expand(-1, 3, n1)
    at_cols = idx.unsqueeze(-2).expand(-1, n1, 3)
    rows = h.gather(1, at_rows)
    rows = rows - tau * (vc * (vr @ rows))
    h = h.scatter(1, at_rows, rows)
    cols = h.gather(2, at_cols)
    cols = cols - tau * ((cols @ vc) * vr)
    h = h.scatter(2, at_cols, cols)
    zc = z.gather(2, at_cols)
    zc = zc - tau * ((zc @ vc) * vr)
    z = z.scatter(2, at_cols, zc)
    # the bulge column exactly: beta, then zeros (not at the sweep's first reflector)
    bulge = live & ~first
    kk = torch.cat([k, k + 1, k + 2], -1)
    old = _flat_get(h, kk, (k - 1).expand(-1, 3))
    new = torch.where(bulge, torch.cat([beta, torch.zeros_like(beta),
                                        torch.where(k + 2 <= hi, torch.zeros_like(beta),
                                                    old[:, 2:])], -1), old)
    h = _flat_set(h, kk, (k - 1).expand(-1, 3), new)
    k = torch.where(live, k + 1, k)
    return h, z, [k, lo, hi, its, tr, det]


def _sign(x):
    return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))


def standardize(t, z):
    """dlanv2 on every 2x2 diagonal block of quasi-triangular ``t`` at once: blocks with
    real eigenvalues become upper triangular, complex pairs [[a, b], [c, a]] with b c < 0
    (``t``, ``z``: matrices or stacks)."""
    n = t.shape[-1]
    if n < 2:
        return t, z
    eps = torch.finfo(t.dtype).eps
    a, d = _diag(t)[..., :-1], _diag(t)[..., 1:]
    b, c = _diag(t, 1), _diag(t, -1)
    blk = c != 0
    one, zero = torch.ones_like(a), torch.zeros_like(a)
    # b == 0: swap the rows and columns
    swap = blk & (b == 0)
    # (a - d) == 0 and sign(b) != sign(c): standard already
    std = blk & ~swap & (a == d) & (_sign(b) != _sign(c))
    p = 0.5 * (a - d)
    bcmax = torch.maximum(b.abs(), c.abs())
    bcmis = torch.minimum(b.abs(), c.abs()) * _sign(b) * _sign(c)
    scale = torch.maximum(p.abs(), bcmax)
    scale = torch.where(scale == 0, one, scale)
    zz = p / scale * p + bcmax / scale * bcmis
    real = zz >= 4 * eps
    # real eigenvalues
    zr = p + _sign(p) * torch.sqrt(scale) * torch.sqrt(torch.where(real, zz, one))
    zr = torch.where(zr == 0, one, zr)
    tau_r = torch.sqrt(c * c + zr * zr)  # (hypot has no XLA lowering)
    tau_r = torch.where(tau_r == 0, one, tau_r)
    cs_r, sn_r = zr / tau_r, c / tau_r
    # complex or nearly equal real eigenvalues
    sigma = b + c
    tau_c = torch.sqrt(sigma * sigma + (a - d) * (a - d))
    tau_c = torch.where(tau_c == 0, one, tau_c)
    cs_c = torch.sqrt(0.5 * (1 + sigma.abs() / tau_c))
    sn_c = -(p / (tau_c * cs_c)) * _sign(sigma)
    aa, bb = a * cs_c + b * sn_c, -a * sn_c + b * cs_c
    cc, dd = c * cs_c + d * sn_c, -c * sn_c + d * cs_c
    b2 = bb * cs_c + dd * sn_c
    c2 = -aa * sn_c + cc * cs_c
    # sign(b) == sign(c) after the rotation: real after all, one more rotation
    again = (c2 != 0) & (b2 != 0) & (_sign(b2) == _sign(c2))
    sab, sac = torch.sqrt(b2.abs()), torch.sqrt(c2.abs())
    tau2 = 1 / torch.sqrt(torch.where(again, (b2 + c2).abs(), one))
    cs1, sn1 = sab * tau2, sac * tau2
    cs_a = torch.where(again, cs_c * cs1 - sn_c * sn1, cs_c)
    sn_a = torch.where(again, cs_c * sn1 + sn_c * cs1, sn_c)
    flip = (c2 != 0) & (b2 == 0)  # b = -c: swap
    cs_a, sn_a = torch.where(flip, -sn_a, cs_a), torch.where(flip, cs_a, sn_a)
    cs = torch.where(swap, zero, torch.where(std, one, torch.where(real, cs_r, cs_a)))
    sn = torch.where(swap, one, torch.where(std, zero, torch.where(real, sn_r, sn_a)))
    cs, sn = torch.where(blk, cs, one), torch.where(blk, sn, zero)
    # G = I with [[cs, -sn], [sn, cs]] at each block: T <- G^T T G, Z <- Z G
    prev = torch.cat([zero[..., :1] > 0, blk], -1)  # row i is the second row of a block
    first = torch.cat([blk, zero[..., :1] > 0], -1)
    dg = torch.where(first, torch.cat([cs, one[..., :1]], -1), torch.where(
        prev, torch.cat([one[..., :1], cs], -1), torch.ones(n, dtype=t.dtype, device=t.device)))
    g = torch.diag_embed(dg) + torch.diag_embed(-sn, 1) + torch.diag_embed(sn, -1)
    t = g.mT @ t @ g
    z = z @ g
    # exact structure: zero below the blocks, real blocks triangular, equal diagonals
    t = t.triu(-1)
    sub = _diag(t, -1)
    a, d = _diag(t)[..., :-1], _diag(t)[..., 1:]
    cplx = std | (blk & ~swap & ~real & (c2 != 0) & (b2 != 0) & ~again)
    realblk = blk & ~cplx
    sub = torch.where(blk & ~realblk, sub, torch.zeros_like(sub))
    mean = 0.5 * (a + d)
    dgn = torch.where(first, torch.cat([torch.where(blk & ~realblk, mean, a), d[..., -1:]],
                                       -1),
                      torch.where(prev, torch.cat([a[..., :1], torch.where(
                          blk & ~realblk, mean, d)], -1), _diag(t)))
    r = torch.arange(n, device=t.device)
    t = _flat_set(t, r[:-1] + 1, r[:-1], sub)
    t = _flat_set(t, r, r, dgn)
    return t, z


def eigvals_from_schur(t):
    """(wr, wi) of a standardized real Schur form (positive imaginary part first)."""
    wr = _diag(t)
    zero = torch.zeros_like(wr[..., :1])
    sub = torch.cat([_diag(t, -1), zero], -1)  # sub[i] = t[i + 1, i]
    sup = torch.cat([_diag(t, 1), zero], -1)
    w = torch.sqrt(sub.abs()) * torch.sqrt(sup.abs())
    prev = torch.cat([zero, w[..., :-1]], -1)
    wi = torch.where(sub != 0, w, -prev)
    return wr, wi


def rsf2csf(t, z):
    """SciPy's rsf2csf on a quasi-triangular ``t``, all 2x2 blocks at once (their rotations
    act on disjoint rows), as (real, imaginary) parts: (Tr, Ti, Zr, Zi)."""
    a, d = _diag(t)[..., :-1], _diag(t)[..., 1:]
    b, c = _diag(t, 1), _diag(t, -1)
    blk = c.abs() > 2.220446049250313e-16 * (a.abs() + d.abs())  # SciPy: double's eps
    # mu = lambda_1 - d, lambda_1 the 2x2 block's first eigenvalue (LAPACK's order)
    p = 0.5 * (a - d)
    disc = p * p + b * c
    cplx = disc < 0
    mr = torch.where(cplx, p, p + _sign(p) * torch.sqrt(disc.clamp(min=0)))
    mi = torch.where(cplx, torch.sqrt((-disc).clamp(min=0)), 0)
    r = torch.sqrt(mr * mr + mi * mi + c * c)
    r = torch.where(blk, r, torch.ones_like(r))
    cr, ci, s = (torch.where(blk, x / r, 0) for x in (mr, mi, c))
    zero = torch.zeros_like(_diag(t)[..., :1])
    first, second = torch.cat([blk, zero > 0], -1), torch.cat([zero > 0, blk], -1)
    # G = Gr + i Gi = [[conj(mu), s], [-s, mu]] / r at each block, I elsewhere
    dr = torch.where(first, torch.cat([cr, zero], -1), torch.where(
        second, torch.cat([zero, cr], -1), torch.ones_like(_diag(t))))
    gr = torch.diag_embed(dr) + torch.diag_embed(s, 1) + torch.diag_embed(-s, -1)
    gi = torch.diag_embed(torch.cat([-ci, zero], -1) + torch.cat([zero, ci], -1))
    tr = gr @ t @ gr.mT + gi @ t @ gi.mT
    ti = gi @ t @ gr.mT - gr @ t @ gi.mT
    zr, zi = z @ gr.mT, -(z @ gi.mT)
    return tr.triu(), ti.triu(), zr, zi


def trevc(tr, ti):
    """Unit upper triangular X with T X = X diag(T) (T = tr + i ti upper triangular), as
    (real, imaginary) parts: back substitution one row per micro-step."""
    xr, xi, i, eps, tiny = _back_start(tr)
    n = tr.shape[-1]
    xr, xi, i = _loop(lambda c: _trevc_step(tr, ti, *c, eps, tiny), (xr, xi, i), n)
    _sync(xr, xi, i)
    return xr, xi


def _back_start(t):
    """(X = I in parts, the row counter at n - 1, eps, the smallest denominator) to start
    a back substitution on triangular ``t``."""
    n = t.shape[-1]
    eps = torch.finfo(t.dtype).eps
    xr = torch.eye(n, dtype=t.dtype, device=t.device).expand(t.shape).clone()
    xi = torch.zeros_like(xr)
    i = _counter(n - 1, t.device)
    _sync(xr, xi, i)
    return xr, xi, i, eps, torch.finfo(t.dtype).tiny / eps


def _trevc_step(tr, ti, xr, xi, i, eps, tiny):
    n = tr.shape[-1]
    cols = torch.arange(n, device=tr.device)
    ic = i.clamp(min=0)
    rr = torch.index_select(tr, -2, ic).squeeze(-2)
    ri = torch.index_select(ti, -2, ic).squeeze(-2)
    right = cols > i
    rr, ri = torch.where(right, rr, 0), torch.where(right, ri, 0)
    sr = _vecmat(rr, xr) - _vecmat(ri, xi)
    si = _vecmat(rr, xi) + _vecmat(ri, xr)
    lr, li = _diag(tr), _diag(ti)
    dr = torch.index_select(lr, -1, ic) - lr
    di = torch.index_select(li, -1, ic) - li
    smin = torch.clamp(eps * (lr.abs() + li.abs()), min=tiny)
    return _back_row(sr, si, dr, di, smin, xr, xi, i, ic, right)


def _back_row(sr, si, dr, di, smin, xr, xi, i, ic, right):
    """Row i of X <- -(sr + i si) / (dr + i di) in the columns ``right`` (a denominator
    below ``smin`` raised to it): back substitution's step, in (real, imaginary) parts."""
    cols = torch.arange(xr.shape[-1], device=xr.device)
    mag = dr.abs() + di.abs()
    dr = torch.where(mag < smin, smin, dr)
    di = torch.where(mag < smin, 0, di)
    # d scaled to about 1 first (|d|^2 of a tiny d underflows)
    big = torch.maximum(dr.abs(), di.abs())
    dr, di = dr / big, di / big
    den = (dr * dr + di * di) * big
    qr = -(sr * dr + si * di) / den
    qi = -(si * dr - sr * di) / den
    upd = right & (i >= 0)
    newr = torch.where(upd, qr, torch.index_select(xr, -2, ic).squeeze(-2))
    newi = torch.where(upd, qi, torch.index_select(xi, -2, ic).squeeze(-2))
    at = (cols == i).unsqueeze(-1) & (i >= 0)
    xr = torch.where(at, newr.unsqueeze(-2), xr)
    xi = torch.where(at, newi.unsqueeze(-2), xi)
    return xr, xi, i - 1


def _diag(t, offset=0):
    return t.diagonal(offset, -2, -1)


def _vecmat(x, m):
    """x @ m for a row vector (stack) x and a matrix (stack) m."""
    return x @ m if x.ndim == 1 else (x.unsqueeze(-2) @ m).squeeze(-2)


def normalize(vr, vi):
    """Columns to unit 2-norm with the largest component real and positive (LAPACK's geev)."""
    mag = vr * vr + vi * vi
    nrm = torch.sqrt(mag.sum(-2))
    p = mag.argmax(-2, keepdim=True)
    pr, pi = vr.gather(-2, p), vi.gather(-2, p)
    pm = torch.sqrt(pr * pr + pi * pi)
    pm = torch.where(pm == 0, torch.ones_like(pm), pm)
    cr, ci = pr / pm, -pi / pm  # conj(phase)
    nrm = torch.where(nrm == 0, torch.ones_like(nrm), nrm).unsqueeze(-2)
    im = (vr * ci + vi * cr) / nrm
    # the largest component exactly real, as LAPACK sets it (not rounding's residue)
    rows = torch.arange(vr.shape[-2], device=vr.device)[:, None]
    return (vr * cr - vi * ci) / nrm, torch.where(rows == p, torch.zeros_like(im), im)


def eig_from_schur(t, z, left=False, right=True):
    """(wr, wi, vl, vr) from a standardized real Schur form A = Z T Z^T (matrices or
    stacks); vectors as (real, imaginary) pairs, None where not asked."""
    wr, wi = eigvals_from_schur(t)
    vl = vr = None
    if left or right:
        tcr, tci, zr, zi = rsf2csf(t, z)
        if right:
            xr, xi = trevc(tcr, tci)
            vr = normalize(zr @ xr - zi @ xi, zr @ xi + zi @ xr)
        if left:
            # y^H T = lambda y^H: the eigenvectors of T^H, upper triangular when reversed
            ur, ui = tcr.mT.flip(-2, -1), -tci.mT.flip(-2, -1)
            yr, yi = trevc(ur, ui)
            yr, yi = yr.flip(-2, -1), yi.flip(-2, -1)
            vl = normalize(zr @ yr - zi @ yi, zr @ yi + zi @ yr)
    return wr, wi, vl, vr
