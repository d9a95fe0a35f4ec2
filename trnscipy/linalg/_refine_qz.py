"""float64 qz on a Neuron device (see ``_refine``): float32 arithmetic only.

The float32 device QZ form of the pencil's float32 rounding (``_qz.qz``) refined by Newton
steps on A = Q S Z^T, B = Q T Z^T in double-float, as ``_refine_schur`` refines the real
Schur form, keeping the float32 form's pattern of 1x1 and 2x2 diagonal blocks of S.  One
step (``_newton_step``):

- Q <- Q (I + R/2), R = I - Q^T Q, and Z likewise (Newton-Schulz);
- S = Q^T A Z, T = Q^T B Z in double-float (Ozaki GEMMs); S below the block pattern, T
  below its diagonal and T's entry above the diagonal in each 2x2 block (dlagv2's form:
  T's 2x2 blocks diagonal) are the residual;
- the corrections Q <- Q (I + X + X^2/2), Z <- Z (I + Y + Y^2/2), X = Lq - Lq^T + Phi,
  Y = Lz - Lz^T + Psi: Lq, Lz block strictly lower with low(S Lz - Lq S) = -low(S),
  low(T Lz - Lq T) = -low(T) (the generalized Sylvester equation), solved in float32 by
  block anti-diagonals (``_sylvester``): each tile's pair of equations reduced, with T's
  blocks taken diagonal, to P_I Y - Y P_J = C (P = T^-1 S blockwise), solved in closed
  form by Cayley-Hamilton, all tiles of a front at once; Phi, Psi rotate each 2x2 block
  so that T's block becomes diagonal (first order, with the L's change of it).

T's diagonal entries keep the float32 form's signs (positive) and a 2x2 block's order of
them.  Each step is one graph, traced once per order and replayed; its flags are read
after the third step and after each further one.  Close eigenvalues (an ill-conditioned
Sylvester equation), a 2x2 block of T with nearly equal diagonal entries (its rotation
undetermined), nearly infinite eigenvalues (T's diagonal near zero, a singular pencil
among them), or a 2x2 block whose eigenvalues are real run SciPy on the exact values,
announced, rather than returning a wrong form.  ``ordqz``: the float32 form reordered
(``_qz.ordered``) before the refinement, alpha and beta from the refined blocks.
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._dtypes import abs_max
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _qz
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._refine_schur import (
    _DONE,
    _FLOOR,
    _MORE,
    _ORTHO,
    _STEPS,
    _orthogonalize,
    _pattern,
)

_GAP = 2.0 ** -12  # least relative gap of a 2x2 block's T diagonal entries (its rotation)
_FINITE = 2.0 ** -20  # least T diagonal entry relative to T's largest (the T^-1 S reduction)
_UNREFINED = ("the refinement of the float32 QZ form did not converge (close or infinite "
              "eigenvalues, or a 2x2 block of B's form near a multiple of I)")


def _sylvester(s, t, pattern, loop):
    """(Lq, Lz), block strictly lower, with low(S Lz - Lq S) = -low(S) and
    low(T Lz - Lq T) = -low(T) (float32; ``low``: the block strictly lower part).  Tile
    (I, J) needs the tiles below it in column J and left of it in row I (farther from the
    diagonal): fronts of equal block distance from the corner in.  Per tile, T_I, T_J taken
    diagonal: X = (T_I Y - R2) T_J^-1 and P_I Y - Y P_J = T_I^-1 (R1 - R2 P_J), P = T^-1 S
    blockwise; for a 2x2 P_J with trace t_J and determinant d_J, q(x) = x^2 - t_J x + d_J
    (Cayley-Hamilton) gives q(P_I) Y = P_I C + C P_J - t_J C, and q(P_I) = a P_I + b I
    (a = t_I - t_J, b = d_J - d_I) has adj(q(P_I)) = a (t_I I - P_I) + b I."""
    first, second, partner, block = pattern
    n = s.shape[-1]
    dt = t.diagonal()
    same = block[:, None] == block[None, :]
    below = block[:, None] > block[None, :]
    upper = block[:, None] < block[None, :]
    p = torch.where(same, s, 0) / dt[:, None]
    # scaled by a power of two near its largest entry (exact; the Sylvester equation's
    # solution is unchanged with C scaled alike): float32 room for det below
    scale = _df._pow2_ceil(p.abs().max().clamp(min=torch.finfo(s.dtype).tiny))
    p = p / scale
    pd = p.diagonal()
    pair = first | second
    tr = torch.where(pair, pd + pd[partner], pd)  # a 2x2 block's trace (1x1: the entry)
    off = torch.where(pair, p.gather(1, partner[:, None])[:, 0], 0)  # P[i, partner(i)]
    det = torch.where(pair, pd * pd[partner] - off * off[partner], 0)
    ti, tj = tr[:, None], tr[None, :]
    di, dj = det[:, None], det[None, :]
    two_i, two_j = pair[:, None], pair[None, :]
    a, b = ti - tj, dj - di
    # the divisor of each case: (2x2, 2x2), (1x1, 2x2), (2x2, 1x1), (1x1, 1x1)
    den = torch.where(two_j, torch.where(two_i, a * a * di + a * b * ti + b * b,
                                         ti * ti - tj * ti + dj),
                      torch.where(two_i, tj * tj - ti * tj + di, ti - tj))
    solvable = below & (den != 0)
    den = torch.where(solvable, den, 1)
    su, tu = torch.where(upper, s, 0), torch.where(upper, t, 0)
    r1, r2 = torch.where(below, -s, 0), torch.where(below, -t, 0)
    dist = block[:, None] - block[None, :]

    def tile(c):
        pc = p @ c
        y2 = pc + c @ p - tj * c  # (J 2x2: q(P_I) Y)
        y2 = torch.where(two_i, (a * ti + b) * y2 - a * (p @ y2), y2)
        y1 = torch.where(two_i, (ti - tj) * c - pc, c)  # (J 1x1: adj(P_I - p_J) C)
        return torch.where(solvable, torch.where(two_j, y2, y1) / den, 0)

    def front(carry, k):
        lq, lz = carry
        rest1 = r1 - (su @ lz - lq @ su)
        rest2 = r2 - (tu @ lz - lq @ tu)
        c = (rest1 - rest2 @ (p * scale)) / (dt[:, None] * scale)
        y = tile(c)
        x = (dt[:, None] * y - rest2) / dt[None, :]
        at = dist == n - 1 - k
        return torch.where(at, x, lq), torch.where(at, y, lz)

    zero = torch.zeros_like(s)
    return loop(front, (zero, zero.clone()), 0, max(n - 1, 0))


def _entries(x, first):
    """Per row i starting a 2x2 block: x[i, i], x[i + 1, i + 1], x[i, i + 1], x[i + 1, i]
    (0 elsewhere)."""
    n = x.shape[-1]
    r = torch.arange(n, device=x.device)
    nxt = (r + 1).clamp(max=n - 1)
    flat = x.reshape(-1)
    return tuple(torch.where(first, flat.gather(0, i * n + j), 0) for i, j in
                 ((r, r), (nxt, nxt), (r, nxt), (nxt, r)))


def _newton_step(A, B, Q, Z, pattern, eye, loop):
    """One refinement step from Q, Z (double-float pairs): (Qo, Zo, S, T, the flags
    [residual, orthogonality, well-posed], the next Q and Z).  Qo, Zo are Q, Z
    orthogonalized; the residual is the largest of S below the pattern (relative to S's
    largest entry) and of T below its diagonal and above it in a 2x2 block (relative to
    T's); well-posed: every 2x2 block's eigenvalues complex, its T diagonal entries
    apart, T's diagonal away from zero."""
    first, second, partner, block = pattern
    n = eye.shape[-1]
    Qo, oq = _orthogonalize(Q, eye)
    Zo, oz = _orthogonalize(Z, eye)
    S = _df.gemm(_r._t(Qo), _df.gemm(A, Zo))
    T = _df.gemm(_r._t(Qo), _df.gemm(B, Zo))
    s, t = S[0], T[0]
    r = torch.arange(n, device=s.device)
    below = block[:, None] > block[None, :]
    tlow = (r[:, None] > r[None, :]) | ((r[None, :] == r[:, None] + 1) & first[:, None])
    ssize, tsize = abs_max(s), abs_max(t)
    resid = torch.maximum(abs_max(torch.where(below, s, 0)) / torch.where(ssize > 0, ssize, 1),
                          abs_max(torch.where(tlow, t, 0)) / torch.where(tsize > 0, tsize, 1))
    # well-posed: complex pairs in the 2x2 blocks, T's 2x2 diagonals apart, T's diagonal
    s11, s22, s12, s21 = _entries(s, first)
    t11, t22, _, _ = _entries(t, first)
    t11, t22 = torch.where(first, t11, 1), torch.where(first, t22, 1)
    p11, p12, p21, p22 = s11 / t11, s12 / t11, s21 / t22, s22 / t22
    disc = (p11 - p22) ** 2 + 4 * p12 * p21
    gap = (t11 - t22).abs() >= _GAP * (t11.abs() + t22.abs())
    finite = t.diagonal().abs().min() >= _FINITE * tsize
    ok = ((disc < 0) & gap | ~first).all() & finite
    flags = torch.stack([resid, torch.maximum(oq, oz), ok.to(resid.dtype)])
    Lq, Lz = _sylvester(s, t, pattern, loop)
    Wq, Wz = Lq - Lq.mT, Lz - Lz.mT
    # T's 2x2 blocks after the L's (first order), made diagonal by a rotation pair:
    # b12 + phi t2 - psi t1 = 0, b21 - phi t1 + psi t2 = 0
    t1, t2, b12, b21 = _entries(t - Wq @ t + t @ Wz, first)
    den = torch.where(first, t2 * t2 - t1 * t1, 1)
    den = torch.where(den == 0, 1, den)
    phi = torch.where(first, -(t2 * b12 + t1 * b21) / den, 0)
    psi = torch.where(first, -(t1 * b12 + t2 * b21) / den, 0)
    sub = (r[:, None] == r[None, :] + 1) & first[None, :]  # W[i + 1, i] at a block's row i
    out = []
    for W, ang, X in ((Wq, phi, Qo), (Wz, psi, Zo)):
        rot = torch.where(sub, ang[None, :], 0)
        W = W + (rot - rot.mT)
        M = W + 0.5 * (W @ W)  # I + M: orthogonal to third order in W
        out.append(_df.add(X, _df.gemm(X, (M, torch.zeros_like(M)), bits_b=24)))
    return Qo, Zo, S, T, flags, out[0], out[1]


_REPLAYS = {}  # device -> the Newton step as a replayed graph (every tensor an argument)


def _step_graph(device):
    """The Newton step as one graph, traced at its first call for an order and replayed."""
    fn = _REPLAYS.get(device)
    if fn is None:
        dev = backend(device)

        def step(ah, al, bh, bl, first, second, partner, block, eye, qh, ql, zh, zl):
            Qo, Zo, S, T, flags, Q, Z = _newton_step(
                (ah, al), (bh, bl), (qh, ql), (zh, zl), (first, second, partner, block), eye,
                dev.device_loop)
            return (*Qo, *Zo, *S, *T, flags, *Q, *Z)

        fn = _REPLAYS[device] = dev.graph_function(step)
    return fn


def _finish(S, T, pattern, sa, sb):
    """(S, T) pairs: S zero below the pattern, T below its diagonal and in its 2x2
    blocks' upper corner, scaled back."""
    first, second, partner, block = pattern
    n = S[0].shape[-1]
    r = torch.arange(n, device=S[0].device)
    below = block[:, None] > block[None, :]
    tlow = (r[:, None] > r[None, :]) | ((r[None, :] == r[:, None] + 1) & first[:, None])
    S = tuple(torch.where(below, 0, x) * sa for x in S)
    T = tuple(torch.where(tlow, 0, x) * sb for x in T)
    return S, T


def refined_qz(a, b, order=None):
    """(S, T, Q, Z) double-float pairs of one real float64 pencil and the block pattern,
    or None where the refinement does not reach the form (the caller runs SciPy).
    ``order(s, t, q, z, scale)``: the float32 form reordered before the refinement (ordqz;
    ``scale``: the pencil's factors), or a str (the caller runs SciPy)."""
    A, B = _r._parts(a), _r._parts(b)
    n = A[0].shape[-1]
    tiny = torch.finfo(torch.float32).tiny
    # each scaled by a power of two near its largest entry (exact): float32 room
    sa = _df._pow2_ceil(A[0].abs().max().clamp(min=tiny))
    sb = _df._pow2_ceil(B[0].abs().max().clamp(min=tiny))
    A, B = (A[0] / sa, A[1] / sa), (B[0] / sb, B[1] / sb)
    s0, t0, q0, z0, done = _qz.qz(A[0][None], B[0][None])
    if not done:
        return None
    if order is not None:
        out = order(s0[0], t0[0], q0[0], z0[0], (sa, sb))
        if isinstance(out, str):
            return out
        s0, t0, q0, z0 = (x[None] for x in out)
    dev = backend(a.device)
    pattern = _pattern(s0[0])
    eye = torch.eye(n, dtype=torch.float32, device=a.device)
    Q, Z = (q0[0], torch.zeros_like(q0[0])), (z0[0], torch.zeros_like(z0[0]))
    dev.materialize([*A, *B, *Q, *Z, *pattern, eye, sa, sb])
    step = _step_graph(a.device)
    prev, QZ = None, (*Q, *Z)
    for k in range(_STEPS + _MORE):
        qoh, qol, zoh, zol, sh, sl, th, tl, flags, *QZ = step(*A, *B, *pattern, eye, *QZ)
        if k + 1 < _STEPS:
            continue
        resid, ortho, ok = (float(x) for x in _r._fetch(flags))
        if not ok or not resid == resid:
            return None  # (ill-posed, or NaN)
        stalled = prev is not None and resid > 0.5 * prev
        if ortho <= _ORTHO and (resid <= _DONE or stalled and resid <= _FLOOR):
            S, T = _finish((sh, sl), (th, tl), pattern, sa, sb)
            return S, T, (qoh, qol), (zoh, zol), pattern
        if stalled:
            return None
        prev = resid
    return None


def _block_eigs(S, T, top, on):
    """Per row, the entries (a11, a22, a12, a21, b1, b2) of the 2x2 block whose first row
    is ``top`` (1 where ``on`` is False: no division by zero) and the block's eigenvalue
    re + i im (im >= 0), double-float pairs; T's block diagonal."""
    nxt = (top + 1).clamp(max=S[0].shape[-1] - 1)

    def at(x, i, j):
        return tuple(torch.where(on, p[i, j], 1.0 - k) for k, p in enumerate(x))

    a11, a22, a12, a21 = (at(S, i, j) for i, j in ((top, top), (nxt, nxt), (top, nxt),
                                                    (nxt, top)))
    b1, b2 = at(T, top, top), at(T, nxt, nxt)
    bb = _df.mul(b1, b2)
    re = tuple(0.5 * x for x in _df.div(_df.add(_df.mul(a11, b2), _df.mul(a22, b1)), bb))
    det = _df.div(_df.sub(_df.mul(a11, a22), _df.mul(a12, a21)), bb)
    im = _df.sub(det, _df.mul(re, re))
    im = _df.sqrt(tuple(torch.where(im[0] > 0, x, 0) for x in im))
    return (a11, a22, a12, a21, b1, b2), re, im


def _to_complex(S, T, Q, Z, first):
    """``_qz.to_complex`` in double-float: each 2x2 block's unitary pair U = [[x1, -x2],
    [x2, conj(x1)]] (x2 real) acts on its two rows or columns only, so the products are
    elementwise with the partner row or column gathered; then T's diagonal made real and
    non-negative by column phases.  (S, T, Q, Z) as (real, imaginary) pairs."""
    n = S[0].shape[-1]
    dev = S[0].device
    r = torch.arange(n, device=dev)
    second = torch.cat([torch.zeros(1, dtype=torch.bool, device=dev), first[:-1]])
    partner = torch.where(first, r + 1, torch.where(second, r - 1, r))

    (a11, a22, a12, a21, b1, b2), re, im = _block_eigs(S, T, r, first)
    # Z's first column: the null vector (a22 - lambda b2, -a21) of A - lambda B's second
    # row; Q's: B times it
    u, v, w = _df.sub(a22, _df.mul(re, b2)), _df.mul(im, b2), a21
    v, w = tuple(-x for x in v), tuple(-x for x in w)

    def unitary(u, v, w):
        """Per row: U's diagonal entry (complex) and U[partner(c), c] (real), pairs."""
        nrm = _df.sqrt(_df.add(_df.add(_df.mul(u, u), _df.mul(v, v)), _df.mul(w, w)))
        x1r, x1i, x2 = (_df.div(x, nrm) for x in (u, v, w))
        prev = lambda x: tuple(torch.cat([p[:1], p[:-1]]) for p in x)  # noqa: E731
        dr = tuple(torch.where(first, p, torch.where(second, q, 1.0 - k))
                   for k, (p, q) in enumerate(zip(x1r, prev(x1r), strict=True)))
        di = tuple(torch.where(first, p, torch.where(second, -q, 0))
                   for p, q in zip(x1i, prev(x1i), strict=True))
        off = tuple(torch.where(first, p, torch.where(second, -q, 0))
                    for p, q in zip(x2, prev(x2), strict=True))
        return dr, di, off

    zr, zi, zo = unitary(u, v, w)
    qr, qi, qo = unitary(_df.mul(b1, u), _df.mul(b1, v), _df.mul(b2, w))
    row = lambda g: tuple(x[:, None] for x in g)  # noqa: E731
    col = lambda g: tuple(x[None, :] for x in g)  # noqa: E731
    rows = lambda x: tuple(p[partner] for p in x)  # noqa: E731
    cols = lambda x: tuple(p[:, partner] for p in x)  # noqa: E731

    def right(xr, xi, gr, gi, go):  # X U, X complex (xi None: real)
        yr = _df.add(_df.mul(xr, col(gr)), _df.mul(cols(xr), col(go)))
        yi = _df.mul(xr, col(gi))
        if xi is not None:
            yr = _df.sub(yr, _df.mul(xi, col(gi)))
            yi = _df.add(_df.add(yi, _df.mul(xi, col(gr))), _df.mul(cols(xi), col(go)))
        return yr, yi

    out = []
    for M in (S, T):
        # U^H M (M real): row i is conj(U[i, i]) M_i + U[partner(i), i] M_partner(i)
        xr = _df.add(_df.mul(row(qr), M), _df.mul(row(qo), rows(M)))
        xi = tuple(-x for x in _df.mul(row(qi), M))
        out.append(right(xr, xi, zr, zi, zo))
    (sr, si), (tr, ti) = out
    qcr, qci = right(Q, None, qr, qi, qo)
    zcr, zci = right(Z, None, zr, zi, zo)
    # T's diagonal real and non-negative: columns times conj(its phase) / its modulus
    dr, di = tuple(x.diagonal() for x in tr), tuple(x.diagonal() for x in ti)
    mag = _df.sqrt(_df.add(_df.mul(dr, dr), _df.mul(di, di)))
    nz = mag[0] != 0
    safe = tuple(torch.where(nz, x, 1.0 - k) for k, x in enumerate(mag))
    cr = tuple(torch.where(nz, x, 1.0 - k) for k, x in enumerate(_df.div(dr, safe)))
    ci = tuple(torch.where(nz, -x, 0) for x in _df.div(di, safe))
    res = []
    for xr, xi in ((sr, si), (tr, ti), (zcr, zci)):
        res += [_df.sub(_df.mul(xr, col(cr)), _df.mul(xi, col(ci))),
                _df.add(_df.mul(xr, col(ci)), _df.mul(xi, col(cr)))]
    sr, si, tr, ti, zcr, zci = res
    eye = r[:, None] == r[None, :]
    tr = tuple(torch.where(eye, m[None, :], x) for m, x in zip(mag, tr, strict=True))
    ti = tuple(torch.where(eye, 0, x) for x in ti)
    tri = lambda x: tuple(p.triu() for p in x)  # noqa: E731
    return (tri(sr), tri(si)), (tri(tr), tri(ti)), (qcr, qci), (zcr, zci)


@register("linalg.qz", "neuron")
def qz(a, b, output="real"):
    if not _r._df64(a, b) or a.is_complex() or b.is_complex() or a.shape[-1] == 0:
        return kind_kernel("linalg.qz", "generic")(a, b, output=output)
    if a.ndim > 2:
        raise PerMatrix  # (the double-float refinement takes one matrix)

    def host(x, y):
        return _sl.qz(x, y, output=output, check_finite=False)

    out = refined_qz(a, b)
    if out is None:
        return _r._on_host("scipy.linalg.qz", _UNREFINED, host, a, b)
    *out, pattern = out
    if output in ("complex", "c"):  # the refined real form's blocks made triangular
        return tuple(_transfer.df_complex(*x) for x in _to_complex(*out, pattern[0]))
    return tuple(_transfer.df_tensor(*x) for x in out)


@register("linalg.ordqz", "neuron")
def ordqz(a, b, select, output="real"):
    if not _r._df64(a, b) or a.is_complex() or b.is_complex() or a.shape[-1] == 0:
        return kind_kernel("linalg.ordqz", "generic")(a, b, select, output=output)
    cplx = output in ("complex", "c")

    def host(x, y):
        return _sl.ordqz(x, y, sort=select, output=output, check_finite=False)

    def order(s, t, q, z, scale):  # the float32 form reordered (select sees float64 values)
        return _qz.ordered(s, t, q, z, select, cplx, np.float64, scale)

    out = refined_qz(a, b, order)
    if out is None or isinstance(out, str):
        return _r._on_host("scipy.linalg.ordqz", out or _UNREFINED, host, a, b)
    S, T, Q, Z, pattern = out
    diag = lambda x: tuple(p.diagonal() for p in x)  # noqa: E731
    if cplx:
        Sc, Tc, Qc, Zc = _to_complex(S, T, Q, Z, pattern[0])
        return (_transfer.df_complex(*Sc), _transfer.df_complex(*Tc),
                _transfer.df_complex(*(diag(x) for x in Sc)),
                _transfer.df_complex(*(diag(x) for x in Tc)), _transfer.df_complex(*Qc),
                _transfer.df_complex(*Zc))
    ar, ai, beta = _eigvals(S, T, pattern[0])
    return (_transfer.df_tensor(*S), _transfer.df_tensor(*T), _transfer.df_complex(ar, ai),
            _transfer.df_tensor(*beta), _transfer.df_tensor(*Q), _transfer.df_tensor(*Z))


def _eigvals(S, T, first):
    """``_qz.eigvals_from_qz`` in double-float: (alpha re, alpha im, beta) pairs, beta T's
    diagonal and alpha its multiple by the eigenvalue (positive imaginary part first)."""
    n = S[0].shape[-1]
    r = torch.arange(n, device=S[0].device)
    second = torch.cat([torch.zeros(1, dtype=torch.bool, device=r.device), first[:-1]])
    top = torch.where(second, r - 1, r)  # the row of each row's block start
    pair = first | second
    _, re, im = _block_eigs(S, T, top, pair)
    bt, a = tuple(p.diagonal() for p in T), tuple(p.diagonal() for p in S)
    ar = tuple(torch.where(pair, x, y) for x, y in zip(_df.mul(re, bt), a, strict=True))
    sign = torch.where(first, 1.0, torch.where(second, -1.0, 0.0))
    ai = tuple(x * sign for x in _df.mul(im, bt))
    return ar, ai, bt
