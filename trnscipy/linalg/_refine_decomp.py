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
of the pivots on each part.  One matrix at a time (a stack: ``PerMatrix``, SciPy's loop).
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
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
    if a.ndim > 2:
        raise PerMatrix  # (the double-float reduction takes one matrix)
    H, Q = gehrd_df(_transfer.df_parts(a), calc_q)
    h = _transfer.df_tensor(H[0].triu(-1), H[1].triu(-1))
    return (h, _transfer.df_tensor(*Q)) if calc_q else h


# ---- ldl ---------------------------------------------------------------------------------


def _mags(x):
    """|x| of a pair (exact: a sign change of both parts)."""
    sign = torch.where(x[0] < 0, -1.0, 1.0)
    return x[0] * sign, x[1] * sign


def _largest(x, valid):
    """(max |x| over the ``valid`` entries as a pair, the first index of it) of a 1-D pair:
    idamax's choice, the magnitudes compared exactly (by the high parts, ties by the low)."""
    m = tuple(torch.where(valid, p, -1.0) for p in _mags(x))
    top = _extreme(m, True, -1)
    at = (m[0] == top[0]) & (m[1] == top[1])
    return top, at.to(torch.int32).argmax()


class _DfSteps:
    """?sytf2's device work (``_decomp_ldl.sytf2``'s ``ops``) on a symmetric pair in
    double-float: each column's pivot test reads its five numbers (exact maxima of
    magnitudes) on the host once, for dsytf2's float64 decision."""

    def __init__(self, w):
        self.w = tuple(p.clone() for p in w)
        self.out = (torch.zeros_like(w[0]), torch.zeros_like(w[0]))
        self.m = _ldl.Masks(w[0].shape[0], w[0].device)

    def _where(self, mask, new, old):
        return tuple(torch.where(mask, a, b) for a, b in zip(new, old, strict=True))

    def _column(self, kt):
        return tuple(p.index_select(1, kt)[:, 0] for p in self.w)

    def _entry(self, i, j):
        return tuple(_ldl._pick(p, i, j) for p in self.w)

    def probe(self, ks):
        """The pivot test of the one matrix (``sytf2`` takes a stack's: a list of one)."""
        return [self._probe(int(ks[0]))]

    def _probe(self, k):
        r, kt = self.m.r, self.m.at(k)
        diag = _mags(tuple(p.diagonal() for p in self.w))
        colmax, imax = _largest(self._column(kt), r > kt)
        imax = imax.reshape(1)
        row = tuple(p.index_select(0, imax)[0] for p in self.w)
        rowmax, _ = _largest(row, (r >= kt) & (r != imax))
        probe = torch.cat([*(p.index_select(0, kt) for p in diag),
                           *(p.reshape(1) for p in colmax), imax.to(torch.float32),
                           *(p.reshape(1) for p in rowmax),
                           *(p.index_select(0, imax) for p in diag)])
        v = [float(x) for x in _r._fetch(probe)]
        return v[0] + v[1], v[2] + v[3], int(v[4]), v[5] + v[6], v[7] + v[8]

    def swap(self, orders):
        if (orders[0] == np.arange(orders.shape[1])).all():
            return
        order = torch.as_tensor(orders[0], device=self.w[0].device)
        self.w = tuple(p.index_select(0, order).index_select(1, order) for p in self.w)

    def update(self, ks, kinds):
        step = {_ldl._STEP1: self.step1, _ldl._STEP2: self.step2,
                _ldl._SINGULAR: self.singular}[int(kinds[0])]
        step(int(ks[0]))
        backend(self.w[0].device).materialize([*self.w, *self.out])

    def singular(self, k):
        self.out = self._where(self.m.columns(self.m.at(k), 1, 0), self.w, self.out)

    def step1(self, k):
        m, kt = self.m, self.m.at(k)
        dkk, x = self._entry(kt, kt), self._column(kt)
        r1 = _df.div((torch.ones_like(dkk[0]), torch.zeros_like(dkk[0])), dkk)
        rx = _df.mul(x, r1)
        upd = _df.sub(self.w, _df.mul(_col(x), _row(rx)))
        out = self._where(m.columns(kt, 1, 1), _col(rx), self.out)
        self.out = self._where(m.entry(kt, kt), self.w, out)
        self.w = self._where(m.trailing(kt, 1), upd, self.w)

    def step2(self, k):
        m, kt = self.m, self.m.at(k)
        k1 = kt + 1
        x0, x1 = self._column(kt), self._column(k1)
        d21 = self._entry(k1, kt)
        d11 = _df.div(self._entry(k1, k1), d21)
        d22 = _df.div(self._entry(kt, kt), d21)
        one = (torch.ones_like(d21[0]), torch.zeros_like(d21[0]))
        t = _df.div(one, _df.sub(_df.mul(d11, d22), one))
        dd = _df.div(t, d21)
        wk = _df.mul(dd, _df.sub(_df.mul(d11, x0), x1))
        wkp1 = _df.mul(dd, _df.sub(_df.mul(d22, x1), x0))
        upd = _df.sub(self.w, _df.add(_df.mul(_col(x0), _row(wk)),
                                      _df.mul(_col(x1), _row(wkp1))))
        lk = self._where(m.r[None, :] == kt, _col(wk), _col(wkp1))
        out = self._where(m.columns(kt, 2, 2), lk, self.out)
        block = m.entry(kt, kt) | m.entry(k1, k1) | m.entry(k1, kt)
        self.out = self._where(block, self.w, out)
        self.w = self._where(m.trailing(kt, 2), upd, self.w)


@register("linalg.ldl", "neuron")
def ldl(a, lower=True, hermitian=True):
    if not _r._df64(a) or a.is_complex():
        return kind_kernel("linalg.ldl", "xla")(a, lower=lower, hermitian=hermitian)
    if a.ndim > 2:
        raise PerMatrix  # (the double-float steps take one matrix: SciPy's loop)
    n = a.shape[0]
    W = tuple(full_matrix(p, lower, False) for p in _transfer.df_parts(a))
    steps = _DfSteps(W)
    swap, pivs = _ldl._unreverse_pivots(_ldl.sytf2(steps, 1, n)[0], lower)
    (lh, dh), (ll, dl) = (assemble(p if lower else p.flip(-2, -1), lower, False, swap, pivs,
                                   unit=i == 0) for i, p in enumerate(steps.out))
    return (_transfer.df_tensor(lh, ll), _transfer.df_tensor(dh, dl),
            _ldl._perm(swap, pivs, lower, n, a.device))
