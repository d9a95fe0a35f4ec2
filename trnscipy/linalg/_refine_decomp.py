"""float64 hessenberg and ldl on a Neuron device (see ``_refine``): float32 arithmetic
only.

``hessenberg``: LAPACK's Householder reduction (dgehrd's reflectors as dlarfg makes them,
dorghr's Q) as ``_francis.gehrd`` runs it in float32, in double-float arithmetic: one
reflector per step, every step one fixed-shape body of a ``device_loop`` (on XLA one
``While``, compiled once per order), the column sums of the rank-one updates as
pairwise TwoSum trees.  The reflectors' signs are LAPACK's (beta = -sign(alpha) ||x||),
so H and Q are SciPy's up to double-float rounding (no refinement: Householder reduction
is backward stable, and the reduction of A's exact double-float value in 2**-48
arithmetic leaves errors near SciPy's own).

``ldl``: LAPACK's dsytf2 (Bunch-Kaufman) as ``_decomp_ldl`` runs it, in double-float: each
column's pivot test reads five numbers (exact maxima of magnitudes) on the host and
decides in float64 as dsytf2 does, so the pivots are SciPy's unless a test sits within
double-float rounding of its threshold; the updates in double-float; SciPy's bookkeeping
of the pivots on each part.
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _decomp_ldl as _ldl
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._decomp_ldl import assemble, full_matrix
from trnscipy.linalg._refine_funcs import _extreme


def _where(mask, a, b):
    return tuple(torch.where(mask, x, y) for x, y in zip(a, b, strict=True))


def _col(p):
    return p[0][:, None], p[1][:, None]


def _row(p):
    return p[0][None, :], p[1][None, :]


def _gehrd_step(hh, hl, qh, ql, j, calc_q):
    """One reflector: column j of H reduced below its subdiagonal, H <- P H P, Q <- Q P."""
    n = hh.shape[-1]
    rows = torch.arange(n, device=hh.device)
    top = j + 1
    col = j.clamp(max=n - 1)
    x = (hh.index_select(1, col).squeeze(-1), hl.index_select(1, col).squeeze(-1))
    alpha = tuple(p.gather(0, top.clamp(max=n - 1)) for p in x)  # (1,) pairs
    below = rows > top
    zero, one = torch.zeros_like(x[0]), torch.ones_like(x[0])
    tail = _where(below, x, (zero, zero))
    tail_sq = _df.dot(tail, tail)
    keep = tail_sq[0] == 0  # (dlarfg: H = I)
    norm = _df.sqrt(_df.add(_df.mul(alpha, alpha), tail_sq))
    beta = _where(alpha[0] >= 0, (-norm[0], -norm[1]), norm)
    beta = _where(keep, alpha, beta)
    ones1, zeros1 = torch.ones_like(alpha[0]), torch.zeros_like(alpha[0])
    tau = _df.div(_df.sub(beta, alpha), _where(keep, (ones1, zeros1), beta))
    tau = _where(keep | (top >= n - 1), (zeros1, zeros1), tau)  # (past the last: none)
    v = _df.div(tail, _where(keep, (ones1, zeros1), _df.sub(alpha, beta)))
    v = _where(rows == top, (one, zero), v)
    tv = _df.mul(tau, v)
    H = (hh, hl)
    w = _df.dot(_col(v), H, dim=0)  # v^T H
    H = _df.sub(H, _df.mul(_col(tv), _row(w)))
    hv = _df.dot(H, _row(v), dim=-1)  # H v
    H = _df.sub(H, _df.mul(_col(hv), _row(tv)))
    # column j exactly as LAPACK leaves it: beta on the subdiagonal, zeros below
    newcol = _where(rows == top, (beta[0].expand(n), beta[1].expand(n)),
                    _where(below, (zero, zero), x))
    at_j = (rows == j) & (top < n - 1)
    H = _where(at_j[None, :], _col(newcol), H)
    if calc_q:
        Q = (qh, ql)
        qv = _df.dot(Q, _row(v), dim=-1)  # Q v
        qh, ql = _df.sub(Q, _df.mul(_col(qv), _row(tv)))
    return (*H, qh, ql, j + 1)


def gehrd_df(A, calc_q):
    """(H, Q) pairs with A = Q H Q^T for a square pair A (Q None unless ``calc_q``)."""
    n = A[0].shape[-1]
    eye = torch.eye(n, dtype=A[0].dtype, device=A[0].device)
    j = torch.zeros(1, dtype=torch.int64, device=A[0].device)
    carry = (A[0].clone(), A[1].clone(), eye, torch.zeros_like(eye), j)
    loop = backend(A[0].device)
    loop.materialize(list(carry))  # the loop's inputs: finished work
    hh, hl, qh, ql, _ = loop.device_loop(
        lambda c, _: _gehrd_step(*c, calc_q), carry, 0, max(n - 2, 0))
    return (hh, hl), ((qh, ql) if calc_q else None)


@register("linalg.hessenberg", "neuron")
def hessenberg(a, calc_q=False):
    if not _r._df64(a) or a.is_complex():
        return kind_kernel("linalg.hessenberg", "xla")(a, calc_q=calc_q)
    H, Q = gehrd_df(_transfer.df_parts(a), calc_q)
    h = _transfer.df_tensor(H[0].triu(-1), H[1].triu(-1))
    return (h, _transfer.df_tensor(*Q)) if calc_q else h


# ---- ldl ---------------------------------------------------------------------------------


def _mags(x):
    """|x| of a pair (exact: a sign change of both parts)."""
    sign = torch.where(x[0] < 0, -1.0, 1.0)
    return x[0] * sign, x[1] * sign


def _largest(x):
    """(max |x| as a pair, the first index of it) of a 1-D pair: idamax's choice, the
    magnitudes compared exactly (by the high parts, ties by the low parts)."""
    m = _mags(x)
    top = _extreme(m, True, -1)
    at = (m[0] == top[0]) & (m[1] == top[1])
    return top, at.to(torch.int32).argmax()


def _sytf2_df(w):
    """(ldu pair, ipiv) of LAPACK's lower dsytf2 (Bunch-Kaufman) for the full symmetric
    pair ``w``, in double-float: each column's pivot test reads its five numbers (exact
    maxima of magnitudes) on the host once and decides in float64 as dsytf2 does."""
    n = w[0].shape[0]
    dev = w[0].device
    out = [torch.zeros_like(w[0]), torch.zeros_like(w[0])]
    ipiv = np.zeros(n, dtype=np.int64)
    w = [p.clone() for p in w]
    k = 0
    while k < n:
        diag = _mags(tuple(p.diagonal() for p in w))
        if k + 1 < n:
            colmax, cidx = _largest(tuple(p[k + 1:, k] for p in w))
            imax = (k + 1 + cidx).reshape(1)
            row = tuple(p.index_select(0, imax)[0, k:] for p in w)
            row = tuple(torch.where(torch.arange(k, n, device=dev) == imax, 0, p)
                        for p in row)
            rowmax, _ = _largest(row)
            probe = torch.stack([diag[0][k], diag[1][k], *colmax,
                                 imax[0].to(torch.float32), *rowmax,
                                 *(p.index_select(0, imax)[0] for p in diag)])
            v = [float(x) for x in _r._fetch(probe)]
            absakk, colmax, imax = v[0] + v[1], v[2] + v[3], int(v[4])
            rowmax, absimax = v[5] + v[6], v[7] + v[8]
        else:
            v = [float(x) for x in _r._fetch(torch.stack([diag[0][k], diag[1][k]]))]
            absakk, colmax, imax, rowmax, absimax = v[0] + v[1], 0.0, k, 0.0, 0.0
        kp, kstep = _ldl.pivot(k, imax, absakk, colmax, rowmax, absimax)
        kk = k + kstep - 1
        if kp != kk:  # symmetric interchange of kk and kp in the trailing matrix
            order = np.arange(n)
            order[kk], order[kp] = kp, kk
            order = torch.as_tensor(order, device=dev)
            w = [p.index_select(0, order).index_select(1, order) for p in w]
        if max(absakk, colmax) == 0:  # singular column: D(k) = 0, no update
            for o, p in zip(out, w, strict=True):
                o[k:, k] = p[k:, k]
            ipiv[k] = k + 1
            k += 1
            continue
        if kstep == 1:
            dkk = tuple(p[k, k] for p in w)
            x = tuple(p[k + 1:, k] for p in w)
            r1 = _df.div((torch.ones_like(dkk[0]), torch.zeros_like(dkk[0])), dkk)
            rx = _df.mul(x, r1)
            upd = _df.sub(tuple(p[k + 1:, k + 1:] for p in w), _df.mul(_col(x), _row(rx)))
            col = rx
            ipiv[k] = kp + 1
        else:
            x = tuple(p[k + 2:, k:k + 2] for p in w)
            x0, x1 = tuple(p[:, 0] for p in x), tuple(p[:, 1] for p in x)
            d21 = tuple(p[k + 1, k] for p in w)
            d11 = _df.div(tuple(p[k + 1, k + 1] for p in w), d21)
            d22 = _df.div(tuple(p[k, k] for p in w), d21)
            one = (torch.ones_like(d21[0]), torch.zeros_like(d21[0]))
            t = _df.div(one, _df.sub(_df.mul(d11, d22), one))
            dd = _df.div(t, d21)
            wk = _df.mul(dd, _df.sub(_df.mul(d11, x0), x1))
            wkp1 = _df.mul(dd, _df.sub(_df.mul(d22, x1), x0))
            upd = _df.sub(tuple(p[k + 2:, k + 2:] for p in w),
                          _df.add(_df.mul(_col(x0), _row(wk)), _df.mul(_col(x1), _row(wkp1))))
            col = (torch.stack([wk[0], wkp1[0]], 1), torch.stack([wk[1], wkp1[1]], 1))
            ipiv[k] = ipiv[k + 1] = -(kp + 1)
        for o, p, u, c in zip(out, w, upd, col, strict=True):
            if kstep == 1:
                o[k, k] = p[k, k]
                o[k + 1:, k] = c
                p[k + 1:, k + 1:] = u
            else:
                o[k, k], o[k + 1, k + 1], o[k + 1, k] = p[k, k], p[k + 1, k + 1], p[k + 1, k]
                o[k + 2:, k:k + 2] = c
                p[k + 2:, k + 2:] = u
        k += kstep
    return tuple(out), ipiv


@register("linalg.ldl", "neuron")
def ldl(a, lower=True, hermitian=True):
    if not _r._df64(a) or a.is_complex():
        return kind_kernel("linalg.ldl", "xla")(a, lower=lower, hermitian=hermitian)
    n = a.shape[0]
    W = tuple(full_matrix(p, lower, False) for p in _transfer.df_parts(a))
    ldu, ipiv = _sytf2_df(W)
    parts = [_ldl._unreverse(p, ipiv, lower) for p in ldu]
    swap, pivs = parts[0][2], parts[0][3]
    (lh, dh), (ll, dl) = (assemble(p[0], lower, False, swap, pivs, unit=i == 0)
                          for i, p in enumerate(parts))
    return (_transfer.df_tensor(lh, ll), _transfer.df_tensor(dh, dl),
            _ldl._perm(swap, pivs, lower, n, a.device))
