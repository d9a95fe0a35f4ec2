"""ldl on device tensors: LAPACK's unblocked Bunch-Kaufman (?sytf2 / ?hetf2) in torch.

CPU tensors run SciPy on zero-copy views.  Elsewhere a matrix or a stack steps on the
device, driven by the host: each step reads every matrix's pivot test (five numbers) in
one host read, then each unfinished matrix does its own next step (its own column, 1x1 or
2x2 pivot, interchange) on whole arrays, the columns and kinds of step as device data: one
graph for every step, every n and every mix of steps, and the steps of a stack are those of
its slowest matrix, not their sum.  SciPy's own index bookkeeping (``_ldl_sanitize_ipiv``)
turns each matrix's pivots into its ``lu``, ``d``, ``perm``, gathered from the packed
factors by host-built indices.  The upper form factors the reversed matrix in the lower
form (ties between equal pivot candidates may then resolve differently from LAPACK).
"""

import math
import warnings

import numpy as np
import scipy.linalg as _sl
from scipy.linalg._decomp_ldl import _ldl_sanitize_ipiv

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _on_host, _on_views
from trnscipy.linalg._validate import as_tensor, device_of, empty

__all__ = ["ldl"]

_ALPHA = (1 + math.sqrt(17)) / 8

# kinds of step of one matrix in one round of ``sytf2``
_DONE, _STEP1, _STEP2, _SINGULAR = 0, 1, 2, 3


@dispatch(_sl.ldl, double_float=("neuron",), stacks=True)
def ldl(A, lower=True, hermitian=True, overwrite_a=False, check_finite=True):
    a = as_tensor(A, device_of(A), check_finite)
    a = a.reshape((1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a
    if a.shape[-1] != a.shape[-2]:
        raise ValueError('The input array "a" should be square.')
    if a.numel() == 0:
        return empty(a.shape, a), empty(a.shape, a), empty(a.shape[:-1], a, torch.int64)
    if a.is_complex() and hermitian and bool((a.diagonal(0, -2, -1).imag != 0).any()):
        warnings.warn('scipy.linalg.ldl():\nThe imaginary parts of the diagonalare ignored. '
                      'Use "hermitian=False" for factorization ofcomplex symmetric arrays.',
                      np.exceptions.ComplexWarning, stacklevel=3)
    return kernel("linalg.ldl", a.device)(a, lower=lower, hermitian=hermitian)


register("linalg.ldl", "cpu")(_on_views(_sl.ldl))


def _mag(x, hermitian_diag=False):
    if not x.is_complex():
        return x.abs()
    return x.real.abs() if hermitian_diag else x.real.abs() + x.imag.abs()


def pivot(k, imax, absakk, colmax, rowmax, absimax):
    """(kp, kstep): dsytf2's Bunch-Kaufman choice at column k from |a_kk|, the column's
    largest off-diagonal |a_imax,k|, row imax's largest off-diagonal and |a_imax,imax|."""
    if max(absakk, colmax) != 0 and absakk < _ALPHA * colmax:
        if absakk >= _ALPHA * colmax * (colmax / rowmax):
            return k, 1
        if absimax >= _ALPHA * rowmax:
            return imax, 1
        return imax, 2
    return k, 1


def sytf2(ops, count, n):
    """ipiv (count, n) of LAPACK's lower ?sytf2 (Bunch-Kaufman) on each matrix of a stack,
    driven on the host in rounds: ``ops`` holds the working matrices and the packed factors
    in its arithmetic (``_Steps`` here, double-float in ``_refine_decomp``); each round
    reads every matrix's pivot test at its own column k (``ops.probe``, one host read),
    then applies each matrix's interchange (``ops.swap``: orders (count, n)) and its kind of
    step (``ops.update``: _DONE, _STEP1, _STEP2 or _SINGULAR per matrix), until every
    matrix is done."""
    ipiv = np.zeros((count, n), dtype=np.int64)
    ks = np.zeros(count, dtype=np.int64)
    while (ks < n).any():
        at = np.minimum(ks, n - 1)  # (a finished matrix probes its last column, unused)
        tests = ops.probe(at)
        orders, kinds = np.tile(np.arange(n), (count, 1)), np.full(count, _DONE)
        for b in np.flatnonzero(ks < n):
            k = int(ks[b])
            absakk, colmax, imax, rowmax, absimax = tests[b]
            if k + 1 == n:  # no column below the last diagonal entry
                colmax, imax, rowmax, absimax = 0.0, k, 0.0, 0.0
            kp, kstep = pivot(k, int(imax), absakk, colmax, rowmax, absimax)
            kk = k + kstep - 1
            # symmetric interchange of kk and kp in the trailing matrix
            orders[b, kk], orders[b, kp] = kp, kk
            if max(absakk, colmax) == 0:  # singular column: D(k) = 0, no update
                kinds[b], ipiv[b, k] = _SINGULAR, k + 1
            elif kstep == 1:
                kinds[b], ipiv[b, k] = _STEP1, kp + 1
            else:
                kinds[b], ipiv[b, k], ipiv[b, k + 1] = _STEP2, -(kp + 1), -(kp + 1)
            ks[b] += kstep  # (1 for a singular column)
        ops.swap(orders)
        ops.update(at, kinds)
    return ipiv


class Masks:
    """Index masks of the full n x n arrays for column k, k a device tensor: every step works
    on whole arrays, so one graph serves every column (slices at k would compile a graph
    per column on XLA).  (One matrix: the double-float steps of ``_refine_decomp``.)"""

    def __init__(self, n, device):
        self.r = torch.arange(n, device=device)
        self.device = device

    def at(self, k):
        """k as device data of shape (1,) (a 0-d 0 or 1 would become a graph constant)."""
        return torch.tensor([k], device=self.device)

    def trailing(self, kt, width):
        """The trailing block below and right of columns k .. k + width - 1."""
        below = self.r > kt + width - 1
        return below[:, None] & below[None, :]

    def columns(self, kt, width, first_row):
        """Columns k .. k + width - 1 from row k + first_row down."""
        r = self.r
        cols = (r >= kt) & (r < kt + width)
        return (r[:, None] >= kt + first_row) & cols[None, :]

    def entry(self, i, j):
        return (self.r[:, None] == i) & (self.r[None, :] == j)


def _pick(t, i, j):
    """t[i, j] for device indices of shape (1,), as shape (1,)."""
    return t.index_select(0, i).index_select(1, j)[:, 0]


def _column(w, j):
    """Column j[b] of each matrix w[b] of a stack, (B, n) (j: (B,) device indices)."""
    return w.gather(2, j[:, None, None].expand(-1, w.shape[1], 1))[..., 0]


def _row(w, i):
    return w.gather(1, i[:, None, None].expand(-1, 1, w.shape[2]))[:, 0]


def _at(v, i):
    """v[b, i[b]] of a (B, n) stack of vectors, (B,)."""
    return v.gather(1, i[:, None])[:, 0]


class _Steps:
    """?sytf2's device work on a stack (B, n, n) in the data's own arithmetic (``sytf2``'s
    ``ops``); every array operation acts on all matrices, each at its own column k."""

    def __init__(self, w, her):
        self.w, self.her, self.out = w, her, torch.zeros_like(w)
        self.ct = (lambda t: t.conj()) if her else (lambda t: t)
        self.r = torch.arange(w.shape[-1], device=w.device)

    def _index(self, values):
        return torch.as_tensor(values, device=self.w.device)

    def probe(self, ks):
        w, r, kt = self.w, self.r, self._index(ks)
        col = torch.where(r > kt[:, None], _mag(_column(w, kt)), -1)
        cmax, imax = col.max(-1)
        # row imax's off-diagonal entries from column k on, in the lower triangle (as dsytf2
        # reads them): the row left of the diagonal, the column below it
        row = torch.where(r < imax[:, None], _row(w, imax), _column(w, imax))
        row = torch.where((r >= kt[:, None]) & (r != imax[:, None]), _mag(row), 0)
        diag = _mag(w.diagonal(0, -2, -1), self.her)
        tests = torch.stack([_at(diag, kt), cmax.to(diag.dtype), imax.to(diag.dtype),
                             row.max(-1).values, _at(diag, imax)], -1)
        return np.asarray(kernel("linalg._fetch", w.device)(tests), dtype=np.float64)

    def swap(self, orders):
        o = self._index(orders)
        n = o.shape[-1]
        w = self.w.gather(1, o[:, :, None].expand(-1, n, n))
        self.w = w.gather(2, o[:, None, :].expand(-1, n, n))

    def _real(self, t):
        return t.real if self.her else t

    def update(self, ks, kinds):
        w, out, r, kt = self.w, self.out, self.r, self._index(ks)
        kind = self._index(kinds)[:, None, None]
        rows = r[None, :, None]
        w1, out1 = self._step1(w, out, kt)
        w2, out2 = self._step2(w, out, kt)
        # singular: column k from row k down as it is
        cols = r[None, None, :] == kt[:, None, None]
        out0 = torch.where(cols & (rows >= kt[:, None, None]), w, out)
        self.w = torch.where(kind == _STEP1, w1, torch.where(kind == _STEP2, w2, w))
        self.out = torch.where(kind == _STEP1, out1, torch.where(
            kind == _STEP2, out2, torch.where(kind == _SINGULAR, out0, out)))

    def _step1(self, w, out, kt):
        r = self.r
        dkk = self._real(_at(w.diagonal(0, -2, -1), kt))[:, None]
        x = _column(w, kt)
        r1 = 1 / dkk
        below = r[None, :] > kt[:, None]
        trailing = below[:, :, None] & below[:, None, :]
        # dsyr's A(i, j) - x(i) * (r1 * x(j)) on the trailing block
        w = torch.where(trailing, w - x[:, :, None] * (r1 * self.ct(x))[:, None, :], w)
        col = (r[None, None, :] == kt[:, None, None]) & below[:, :, None]
        out = torch.where(col, (x * r1)[:, :, None], out)
        diag = (r[None, :, None] == kt[:, None, None]) & (r[None, None, :] == kt[:, None, None])
        return w, torch.where(diag, dkk[:, :, None], out)

    def _step2(self, w, out, kt):
        r, n = self.r, w.shape[-1]
        k1 = (kt + 1).clamp(max=n - 1)  # (a matrix not at a 2x2 step: any valid column)
        x0, x1 = _column(w, kt), _column(w, k1)
        wkk, wk1k1 = _at(w.diagonal(0, -2, -1), kt), _at(w.diagonal(0, -2, -1), k1)
        off = _at(x0, k1)
        if self.her:
            d = off.abs()
            d11, d22, d21 = wk1k1.real / d, wkk.real / d, off / d
            dd = ((1 / (d11 * d22 - 1)) / d)[:, None]
            wk = dd * (d11[:, None] * x0 - d21[:, None] * x1)
            wkp1 = dd * (d22[:, None] * x1 - d21.conj()[:, None] * x0)
        else:
            d11, d22 = wk1k1 / off, wkk / off
            dd = ((1 / (d11 * d22 - 1)) / off)[:, None]
            wk = dd * (d11[:, None] * x0 - x1)
            wkp1 = dd * (d22[:, None] * x1 - x0)
        below = r[None, :] > (kt + 1)[:, None]
        trailing = below[:, :, None] & below[:, None, :]
        # dsytf2's A(i, j) - A(i, k) * wk(j) - A(i, k+1) * wkp1(j)
        upd = (w - x0[:, :, None] * self.ct(wk)[:, None, :]
               - x1[:, :, None] * self.ct(wkp1)[:, None, :])
        w_new = torch.where(trailing, upd, w)
        ci, ri = r[None, None, :], r[None, :, None]
        is_k, is_k1 = ci == kt[:, None, None], ci == k1[:, None, None]
        lk = torch.where(is_k, wk[:, :, None], wkp1[:, :, None])
        out = torch.where((is_k | is_k1) & below[:, :, None], lk, out)
        row_k, row_k1 = ri == kt[:, None, None], ri == k1[:, None, None]
        diag = (row_k & is_k) | (row_k1 & is_k1)
        out = torch.where(diag, self._real(w), out)  # (Hermitian: the real diagonal)
        return w_new, torch.where(row_k1 & is_k, w, out)


def _ldl_torch(a, lower=True, hermitian=True):
    lead, n = a.shape[:-2], a.shape[-1]
    stack = a.reshape(-1, n, n)
    her = hermitian and a.is_complex()
    steps = _Steps(full_matrix(stack, lower, her), her)
    ipivs = sytf2(steps, stack.shape[0], n)
    ldu = steps.out if lower else steps.out.flip(-2, -1)
    pivots = [_unreverse_pivots(ipiv, lower) for ipiv in ipivs]
    lu, d = gather_factors(ldu, her, [_sources(swap, pivs, lower, n) for swap, pivs in pivots],
                           unit=True)
    perm = np.stack([_perm_order(swap, lower, n) for swap, _ in pivots])
    return (lu.reshape(a.shape), d.reshape(a.shape),
            torch.as_tensor(perm, device=a.device).reshape(*lead, n))


def full_matrix(a, lower, her):
    """The full symmetric (Hermitian) matrix of ``a``'s triangle (a matrix or a stack); for
    the upper form reversed (its lower form is factored).  Data movement and additions of
    zeros only."""
    tri = a.tril() if lower else a.triu()
    strict = tri - torch.diag_embed(tri.diagonal(0, -2, -1))
    diag = tri.diagonal(0, -2, -1).real.to(a.dtype) if her else tri.diagonal(0, -2, -1)
    full = strict + (strict.conj() if her else strict).mT + torch.diag_embed(diag)
    return full if lower else full.flip(-2, -1)  # the upper form: the reversed lower one


def _unreverse_pivots(ipiv, lower):
    """SciPy's (swap, pivs) of one matrix's pivots of the lower form factored, for the
    requested form."""
    n = ipiv.shape[0]
    if not lower:
        ipiv = np.where(ipiv > 0, n + 1 - ipiv, -(n + 1 + ipiv))[::-1].copy()
    return _ldl_sanitize_ipiv(ipiv, lower=lower)


def _sources(swap, pivs, lower, n):
    """SciPy's _ldl_get_d_and_l and _ldl_construct_tri_factor on indices: where each entry
    of lu and d comes from, as flat indices into the packed factors (n*n + i: entry i
    conjugated; 2 n^2: zero; 2 n^2 + 1: lu's unit diagonal)."""
    idx = np.arange(n * n).reshape(n, n)
    zero, one = 2 * n * n, 2 * n * n + 1
    d = np.where(np.eye(n, dtype=bool), idx, zero)
    lu = np.where(np.tri(n, k=-1, dtype=bool) if lower else np.tri(n, k=-1, dtype=bool).T,
                  idx, zero)
    lu[np.diag_indices(n)] = one
    x, y = (1, 0) if lower else (0, 1)
    for i in np.flatnonzero(pivs == 2):
        d[i + x, i + y] = idx[i + x, i + y]
        d[i + y, i + x] = idx[i + x, i + y] + n * n
        lu[i + x, i + y] = zero
    for ind in (range(n - 1, -1, -1) if lower else range(n)):
        s = swap[ind]
        if s != ind:
            cs, ce = (ind, n) if lower else (0, ind + 1)
            if pivs[ind] == (0 if lower else 2):
                cs, ce = (cs - 1, ce) if lower else (cs, ce + 1)
            lu[[s, ind], cs:ce] = lu[[ind, s], cs:ce]
    return lu.reshape(-1), d.reshape(-1)


def gather_factors(ldu, her, sources, unit):
    """(lu, d) of a stack of packed factors ``ldu`` (B, n, n) from each matrix's
    ``_sources`` (data movement only; ``unit``: lu's unit diagonal added, a double-float
    method calls this on each part, the low parts without it)."""
    count, n = ldu.shape[0], ldu.shape[-1]
    flat = ldu.reshape(count, n * n)
    ends = torch.tensor([0, 1 if unit else 0], dtype=ldu.dtype, device=ldu.device)
    ext = torch.cat([flat, flat.conj() if her else flat, ends.expand(count, 2)], -1)
    lu_src, d_src = (torch.as_tensor(np.stack([s[i] for s in sources]), device=ldu.device)
                     for i in (0, 1))
    return ext.gather(1, lu_src).reshape(ldu.shape), ext.gather(1, d_src).reshape(ldu.shape)


def assemble(ldu, lower, her, swap, pivs, unit):
    """(lu, d) of one matrix's packed factors ``ldu`` (``gather_factors``)."""
    n = ldu.shape[-1]
    lu, d = gather_factors(ldu[None], her, [_sources(swap, pivs, lower, n)], unit)
    return lu[0], d[0]


def _perm_order(swap, lower, n):
    perm = np.arange(n)
    for ind in (range(n - 1, -1, -1) if lower else range(n)):
        s = swap[ind]
        if s != ind:
            perm[[s, ind]] = perm[[ind, s]]
    return np.argsort(perm)


def _perm(swap, pivs, lower, n, device):
    return torch.from_numpy(_perm_order(swap, lower, n)).to(device)


register("linalg.ldl", "generic")(_ldl_torch)


@register("linalg.ldl", "xla")
def _ldl_xla(a, lower=True, hermitian=True):
    if a.is_complex():
        return _on_host("scipy.linalg.ldl", "complex arithmetic is unreliable on torch-xla 2.9",
                        lambda t: _ldl_torch(t, lower, hermitian), a)
    return _ldl_torch(a, lower, hermitian)
