"""float64 hessenberg on a Neuron device (see ``_refine``): float32 arithmetic only.

``hessenberg``: LAPACK's Householder reduction (dgehrd's reflectors as dlarfg makes them,
dorghr's Q) as ``_francis.gehrd`` runs it in float32, in double-float arithmetic: one
reflector per step, every step one fixed-shape body of a ``device_loop`` (on XLA one
``While``, compiled once per order), the column sums of the rank-one updates as
pairwise TwoSum trees.  The reflectors' signs are LAPACK's (beta = -sign(alpha) ||x||),
so H and Q are SciPy's up to double-float rounding (no refinement: Householder reduction
is backward stable, and the reduction of A's exact double-float value in 2**-48
arithmetic leaves errors near SciPy's own).
"""

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r


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
