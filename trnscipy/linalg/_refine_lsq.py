"""float64 dense least squares on a Neuron device (see ``_refine``): ``lstsq`` and
``pinv`` of full-rank matrices, float32 on the device plus double-float refinement.

B is the tall one of A (m >= n) and A^T (m < n), p x q.  The minimum-norm least-squares
solution is the solution of the augmented system [I B; B^T 0] [r; y] = [f; g]: tall A,
(f, g) = (b, 0) and x = y (r the residual); wide A, (f, g) = (0, b) and x = r (then
B^T x = b and x = -B y lies in the row space of A).  Iterative refinement on it (Bjorck):
the residual of both block rows in double-float (Ozaki products of the exact pairs), the
correction from the float32 Householder QR of B (h = R^-T g, c = Q^T f, y = R^-1 (c - h),
r = f - Q (c - h)).  Its fixed point is as accurate as a float64 Householder solve
(forward error ~ eps (cond + cond^2 |r| / (|A| |x|))), which refinement of the normal
equations is not (eps cond^2 even for consistent systems); each step shrinks the error
by ~ eps32 cond.

The singular values (lstsq's ``s``, the rank decisions): the double-float eigh
(``_refine.eigh``) of the Gram matrix B^T B gives V, then s_i = ||B v_i|| in double-float:
error ~ eps_df cond + (eps_df cond^3)^2 relative to s_i, ~ 1e-14 of s_max at the
largest condition number taken here (``_COND_MAX``).  Beyond it, or short of full rank
by the caller's cutoff, SciPy's lstsq/pinv runs on the exact host values, announced.
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels as _k
from trnscipy.linalg import _refine as _r
from trnscipy.linalg import _xla_dense

_COND_MAX = 2.0 ** 10  # s_max / s_min the device path takes (s and x to ~1e-14 there)
_BLIND = 3  # refinement steps before the first host read (eps32 cond per step)
_STEPS = 20
_MARGIN = 1 + 2.0 ** -20  # s_min this close above a rank cutoff: the host decides
# the B (p x q) the device takes: XLA's CPU compiler (PJRT_DEVICE=CPU, the emulated
# Neuron) blows up on the double-float graphs of a middle band of shapes.  Measured, lstsq
# with 1-3 right-hand sides: B 30 x 10 and 20 x 20 past 3 GB in 70 s (30 x 10: 8 GB in
# 3.5 minutes, killed; its s graph alone past 4.5 GB in 100 s); B 5 x 3, 10 x 5, 10 x 10:
# under 32 s, 1.4 GB; 40 x 20, 60 x 20: 66 s, 1.4 GB; 40 x 40: 94 s, 1.3 GB
_MAX_SMALL_ROWS, _MIN_ROWS, _MIN_COLS = 10, 40, 20
_SMALL = f"least squares of a matrix with max(m, n) > {_MAX_SMALL_ROWS} and (max(m, n) " \
    f"< {_MIN_ROWS} or min(m, n) < {_MIN_COLS}): XLA's compiler takes minutes and " \
    "gigabytes on the double-float graphs of such shapes"


def _tall(A):
    """(B, wide): B = A or A^T, whichever has at least as many rows as columns."""
    m, n = A[0].shape[-2:]
    return (_r._t(A), True) if m < n else (A, False)


def _svals(B):
    """The singular values of the tall pair B, descending, as a pair (module docstring)."""
    G = _df.gemm(_r._t(B), B)
    _, v = _r.eigh(_transfer.df_tensor(*G))
    s = _df.norm(_df.gemm(B, _r._parts(v)), dim=-2)
    return s[0].flip(-1), s[1].flip(-1)


def _approx(B0):
    """The float32 solver of the augmented system: (dr, dy) from (f, g), or None where
    R's diagonal already shows cond(B) > ``_COND_MAX`` (min |r_kk| >= s_min and
    max |r_kk| <= s_max: a rank-deficient matrix goes to the host before any
    double-float work; one host read).  A stack: None where any matrix's diagonal says
    so."""
    q = B0.shape[-1]
    h, tau = _xla_dense.geqrf(B0)
    Q, R = _xla_dense.orgqr(h, tau, q), h.triu()[..., :q, :q]
    d = R.diagonal(dim1=-2, dim2=-1).abs()
    lo, hi = np.asarray(_r._fetch(torch.stack([d.amin(-1), d.amax(-1)])), dtype=np.float64)
    if not (lo * _COND_MAX >= hi).all() or not (hi > 0).all():  # (NaN too)
        return None

    def solve(f, g):
        w = Q.mT @ f - _r._trsm(R, g, upper=True, trans=1)
        return f - Q @ w, _r._trsm(R, w, upper=True)

    return solve


def _max(t):
    """max |t| over the last two axes (one value per matrix of a stack)."""
    return t.abs().amax(-1).amax(-1)


def _solve(B, F, G, wide):
    """x of the augmented system (module docstring) for pairs B (p x q), F (p x k),
    G (q x k), with the singular values of B: (x pair, s pair, s_min, s_max, why);
    ``why``: None, or why the caller goes to the host (s says the matrix is beyond
    ``_COND_MAX``, the refinement did not converge, or B's shape is in the band XLA's
    compiler blows up on).  s_min, s_max (host numbers, arrays for a stack) are read with
    the first refinement check.  A stack is one refinement: each matrix stops at its own
    rule (a converged matrix's carry is kept as it is while the others step)."""
    approx = _approx(B[0])
    if approx is None:
        return None, None, 0.0, 0.0, _HOST
    p, q = B[0].shape[-2:]
    if p > _MAX_SMALL_ROWS and (p < _MIN_ROWS or q < _MIN_COLS):  # after the QR: a
        # rank-deficient one says so first
        return None, None, 0.0, 0.0, _SMALL
    s = _svals(B)
    r, y = approx(F[0], G[0])
    zero = torch.zeros(r.shape[:-2], dtype=r.dtype, device=r.device)
    loop = backend(r.device).device_loop

    def body(c, _):
        """One refinement step on the carry (r pair, y pair, the last two sizes)."""
        r, y = (c[0], c[1]), (c[2], c[3])
        fr = _df.sub(F, _df.add(r, _r._mm(B, y)))
        gr = _df.sub(G, _r._mm(_r._t(B), r))
        dr, dy = approx(fr[0], gr[0])
        r, y = _df.add_f(r, dr), _df.add_f(y, dy)
        return (*r, *y, c[5], _max(dr if wide else dy))

    def answer(c):
        return (c[0], c[1]) if wide else (c[2], c[3])

    # the blind steps as one device loop (its body compiles once) in the graph of the QR
    # and of s; each later step is that loop once more, one host read each
    c = loop(body, (r, torch.zeros_like(r), y, torch.zeros_like(y), zero, zero), 0, _BLIND)
    prev, dn, xn, smin, smax = np.asarray(_r._fetch(torch.stack(
        [c[4], c[5], _max(answer(c)[0]), s[0][..., -1], s[0][..., 0]])), dtype=np.float64)
    if not (smin * _COND_MAX >= smax).all() or not (smax > 0).all():  # (NaN too)
        return answer(c), s, smin, smax, _HOST
    for _ in range(_STEPS):
        done = (dn <= _r._EPS_DF * xn) | ((dn > 0.5 * prev) & (dn <= _r._NOISE * xn))
        if done.all():
            return answer(c), s, smin, smax, None
        if np.isnan(dn).any() or np.isnan(xn).any():
            break
        c = _r._kept(done, loop(body, c, 0, 1), c)
        prev, dn, xn = np.asarray(_r._fetch(torch.stack(
            [c[4], c[5], _max(answer(c)[0])])), dtype=np.float64)
    return answer(c), s, smin, smax, _HOST


_HOST = "least squares beyond the double-float method's reach (rank-deficient, or " \
    f"condition number above {_COND_MAX:.0f}, where float32 factors cannot be refined)"


@register("linalg.lstsq", "neuron")
def lstsq(a, b, cond=None, lapack_driver=None):
    """A stack (the dispatcher's broadcast of a; b with or without batch dimensions) is
    one refinement; where any of its matrices needs the host, each matrix runs alone."""
    if not _r._df64(a, b):
        return _k.lstsq(a, b, cond=cond, lapack_driver=lapack_driver)

    def host(reason):
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return _r._on_host("scipy.linalg.lstsq", reason, lambda x, y: _k._sl.lstsq(
            x, y, cond=cond, lapack_driver=lapack_driver, check_finite=False), a, b)

    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    vec = b.ndim == 1
    A, Bm = _r._parts(a), _r._parts(b[:, None] if vec else b)
    Bm = tuple(p.expand(batch + p.shape[-2:]) for p in Bm)
    B, wide = _tall(A)
    # F: B's rows (p), G: its columns (q); k right-hand sides
    zero = torch.zeros(batch + (n, Bm[0].shape[-1]), dtype=Bm[0].dtype, device=Bm[0].device)
    F, G = ((zero, zero), Bm) if wide else (Bm, (zero, zero))  # (0, b) or (b, 0)
    x, s, smin, smax, why = _solve(B, F, G, wide)
    # LAPACK's rank: the singular values above cond * s_max (cond: float64's eps by
    # default; negative: the same); a margin for s's error
    rcond = 2.0 ** -52 if cond is None or cond < 0 else float(cond)
    if why or not (smin > rcond * smax * _MARGIN).all():
        return host(why or _HOST)
    rank = min(m, n)
    if batch:  # SciPy's loop's array of ranks
        rank = torch.full(batch, rank, dtype=torch.int64, device=a.device)
    if m > n and lapack_driver != "gelsy":
        # SciPy: |b - A x|^2 per column for a full-rank overdetermined solve (real here)
        res = _df.sub(Bm, _r._mm(A, x))
        res = _df.dot(res, res, dim=-2)
        if vec:
            res = (res[0][..., 0], res[1][..., 0])
    else:
        res = (torch.zeros(batch + (0,), dtype=x[0].dtype, device=x[0].device),) * 2
    if vec:
        x = (x[0][..., 0], x[1][..., 0])
    res = _transfer.df_tensor(*res)
    sv = None if lapack_driver == "gelsy" else _transfer.df_tensor(*s)
    return _transfer.df_tensor(*x), res, rank, sv


@register("linalg.pinv", "neuron")
def pinv(a, atol=None, rtol=None, return_rank=False):
    """A stack is one refinement; where any of its matrices needs the host, each matrix
    runs alone."""
    if not _r._df64(a):
        return _k.pinv(a, atol=atol, rtol=rtol, return_rank=return_rank)

    def host(reason):
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return _r._on_host("scipy.linalg.pinv", reason, lambda x: _k._sl.pinv(
            x, atol=atol, rtol=rtol, return_rank=return_rank, check_finite=False), a)

    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    A = _r._parts(a)
    B, wide = _tall(A)
    q = B[0].shape[-1]
    eye = torch.eye(m, dtype=A[0].dtype, device=A[0].device).expand(batch + (m, m))
    zero = torch.zeros(batch + (n, m), dtype=eye.dtype, device=eye.device)
    I = (eye, torch.zeros_like(eye))  # noqa: E741
    # pinv(A) = lstsq(A, I_m): (f, g) = (0, I_m) or (I_m, 0), x (n x m)
    F, G = ((zero, zero), I) if wide else (I, (zero, zero))
    x, s, smin, smax, why = _solve(B, F, G, wide)
    # SciPy's cutoff: atol + s_max rtol (rtol by default max(m, n) eps64)
    rtol = max(m, n) * 2.0 ** -52 if rtol is None else rtol
    cut = (0.0 if atol is None else atol) + smax * rtol
    if why or not (smin > cut * _MARGIN).all():
        return host(why or _HOST)
    x = _transfer.df_tensor(*x)
    if not return_rank:
        return x
    return x, (torch.full(batch, q, dtype=torch.int64, device=a.device) if batch else q)


# ---- pinvh ------------------------------------------------------------------------------

_PINVH_NOISE = 2.0 ** -50  # eigenvalues this close (relative to max |w|) to the cutoff:
# the double-float eigh's error could put them either side (measured: 1e-16 max |w| for
# the zero eigenvalues of a rank-3 5 x 5 Gram matrix, whose default cutoff is 5 eps max |w|)


@register("linalg.pinvh", "neuron")
def pinvh(a, atol=None, rtol=None, lower=True, return_rank=False):
    """V diag(1/w) V^T from the double-float eigh (``_refine.eigh``): SciPy's cutoff
    decided on the host from w (one read, float64), the product an Ozaki GEMM."""
    if not _r._df64(a) or a.is_complex() or a.numel() == 0:
        return kind_kernel("linalg.pinvh", "xla")(a, atol=atol, rtol=rtol, lower=lower,
                                                  return_rank=return_rank)

    def host(reason):
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return _r._on_host("scipy.linalg.pinvh", reason, lambda x: _k._sl.pinvh(
            x, atol=atol, rtol=rtol, lower=lower, return_rank=return_rank,
            check_finite=False), a)

    w, v = _r.eigh(a, lower=lower)  # (a stack: one refinement, a cutoff per matrix)
    wh = _transfer.to_host(w)  # exact float64 values of the double-float eigenvalues
    n = wh.shape[-1]
    top = abs(wh).max(-1, keepdims=True)
    cut = (0.0 if atol is None else atol) + top * (n * 2.0 ** -52 if rtol is None else rtol)
    if (abs(abs(wh) - cut) <= _PINVH_NOISE * top).any():
        return host("an eigenvalue lies within the double-float eigh's error of the rank "
                    "cutoff")
    keep = abs(wh) > cut
    W, V = _r._parts(w), _r._parts(v)
    mask = torch.from_numpy(keep).to(W[0].device)
    one = (torch.ones_like(W[0]), torch.zeros_like(W[0]))
    safe = tuple(torch.where(mask, p, q) for p, q in zip(W, one, strict=True))
    inv = tuple(torch.where(mask, p, torch.zeros_like(p)) for p in _df.div(one, safe))
    X = _df.gemm(_df.mul(V, (inv[0][..., None, :], inv[1][..., None, :])), _r._t(V))
    x = _transfer.df_tensor(*X)
    if not return_rank:
        return x
    rank = keep.sum(-1)
    return x, (torch.from_numpy(rank).to(W[0].device) if keep.ndim > 1 else int(rank))
