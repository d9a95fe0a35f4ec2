"""ldl on device tensors: LAPACK's unblocked Bunch-Kaufman (?sytf2 / ?hetf2) in torch.

CPU tensors run SciPy on zero-copy views.  Elsewhere each step reads its pivot test
(five numbers) on the host and does the interchange and the rank-1 or rank-2 update on
the device, on the whole matrix with the column index as device data: a few graphs for
every n (one per kind of step), not one per column; SciPy's own index bookkeeping
(``_ldl_sanitize_ipiv``) turns the pivots into its ``lu``, ``d``, ``perm``.  The upper
form factors the reversed matrix in the lower form (ties between equal pivot candidates
may then resolve differently from LAPACK).
"""

import math
import warnings

import numpy as np
import scipy.linalg as _sl
from scipy.linalg._decomp_ldl import _ldl_sanitize_ipiv

from trnscipy._dispatch import dispatch
from trnscipy._kernels import backend, kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _on_host, _on_views
from trnscipy.linalg._validate import as_tensor, device_of, empty

__all__ = ["ldl"]

_ALPHA = (1 + math.sqrt(17)) / 8


@dispatch(_sl.ldl, double_float=("neuron",))
def ldl(A, lower=True, hermitian=True, overwrite_a=False, check_finite=True):
    a = as_tensor(A, device_of(A), check_finite)
    a = a.reshape((1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError('The input array "a" should be square.')
    if a.numel() == 0:
        return empty(a.shape, a), empty(a.shape, a), empty((0,), a, torch.int64)
    if a.is_complex() and hermitian and bool((a.diagonal().imag != 0).any()):
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


def sytf2(ops, n):
    """ipiv of LAPACK's lower ?sytf2 (Bunch-Kaufman), driven on the host: ``ops`` holds the
    working matrix and the packed factors in its arithmetic (``_Steps`` here, double-float
    in ``_refine_decomp``), reads each column's pivot test and applies the interchange and
    the rank-1 or rank-2 update."""
    ipiv = np.zeros(n, dtype=np.int64)
    k = 0
    while k < n:
        absakk, colmax, imax, rowmax, absimax = ops.probe(k)
        if k + 1 == n:  # no column below the last diagonal entry
            colmax, imax, rowmax, absimax = 0.0, k, 0.0, 0.0
        kp, kstep = pivot(k, int(imax), absakk, colmax, rowmax, absimax)
        kk = k + kstep - 1
        if kp != kk:  # symmetric interchange of kk and kp in the trailing matrix
            order = np.arange(n)
            order[kk], order[kp] = kp, kk
            ops.swap(order)
        if max(absakk, colmax) == 0:  # singular column: D(k) = 0, no update
            ops.singular(k)
            ipiv[k] = k + 1
        elif kstep == 1:
            ops.step1(k)
            ipiv[k] = kp + 1
        else:
            ops.step2(k)
            ipiv[k] = ipiv[k + 1] = -(kp + 1)
        ops.finish()
        k += kstep  # (1 for a singular column)
    return ipiv


class Masks:
    """Index masks of the full n x n arrays for column k, k a device tensor: every step works
    on whole arrays, so one graph serves every column (slices at k would compile a graph
    per column on XLA)."""

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


class _Steps:
    """?sytf2's device work in the data's own arithmetic (``sytf2``'s ``ops``)."""

    def __init__(self, w, her):
        self.w, self.her, self.out = w, her, torch.zeros_like(w)
        self.ct = (lambda t: t.conj()) if her else (lambda t: t)
        self.m = Masks(w.shape[0], w.device)

    def probe(self, k):
        w, r, kt = self.w, self.m.r, self.m.at(k)
        col = torch.where(r > kt, _mag(w.index_select(1, kt)[:, 0]), -1)
        cmax, imax = col.max(0)
        imax = imax.reshape(1)
        row = torch.where((r >= kt) & (r != imax), _mag(w.index_select(0, imax)[0]), 0)
        diag = _mag(w.diagonal(), self.her)
        return torch.cat([diag.index_select(0, kt), cmax.reshape(1).to(diag.dtype),
                          imax.to(diag.dtype), row.max().reshape(1).to(diag.dtype),
                          diag.index_select(0, imax)]).tolist()

    def swap(self, order):
        order = torch.as_tensor(order, device=self.w.device)
        self.w = self.w.index_select(0, order).index_select(1, order)

    def singular(self, k):
        self.out = torch.where(self.m.columns(self.m.at(k), 1, 0), self.w, self.out)

    def _real(self, t):
        return t.real if self.her else t

    def step1(self, k):
        w, m, kt = self.w, self.m, self.m.at(k)
        dkk = self._real(_pick(w, kt, kt))
        x = w.index_select(1, kt)[:, 0]
        r1 = 1 / dkk
        self.w = torch.where(m.trailing(kt, 1), w - r1 * x[:, None] * self.ct(x)[None, :], w)
        out = torch.where(m.columns(kt, 1, 1), (x * r1)[:, None], self.out)
        self.out = torch.where(m.entry(kt, kt), dkk, out)

    def step2(self, k):
        w, m, kt = self.w, self.m, self.m.at(k)
        k1 = kt + 1
        x0, x1 = w.index_select(1, kt)[:, 0], w.index_select(1, k1)[:, 0]
        if self.her:
            d = _pick(w, k1, kt).abs()
            d11, d22 = _pick(w, k1, k1).real / d, _pick(w, kt, kt).real / d
            d21 = _pick(w, k1, kt) / d
            dd = (1 / (d11 * d22 - 1)) / d
            wk = dd * (d11 * x0 - d21 * x1)
            wkp1 = dd * (d22 * x1 - d21.conj() * x0)
        else:
            d21 = _pick(w, k1, kt)
            d11, d22 = _pick(w, k1, k1) / d21, _pick(w, kt, kt) / d21
            dd = (1 / (d11 * d22 - 1)) / d21
            wk = dd * (d11 * x0 - x1)
            wkp1 = dd * (d22 * x1 - x0)
        x, lk = torch.stack([x0, x1], 1), torch.stack([wk, wkp1], 1)
        self.w = torch.where(m.trailing(kt, 2), w - x @ self.ct(lk).mT, w)
        out = torch.where(m.columns(kt, 2, 2), torch.where(m.r[None, :] == kt, wk[:, None],
                                                           wkp1[:, None]), self.out)
        block = m.entry(kt, kt) | m.entry(k1, k1) | m.entry(k1, kt)
        diag = self._real(w.diagonal())
        self.out = torch.where(block, torch.where(m.entry(k1, kt), w, torch.diag_embed(diag)),
                               out)

    def finish(self):
        backend(self.w.device).materialize([self.w, self.out])


def _ldl_torch(a, lower=True, hermitian=True):
    n = a.shape[0]
    her = hermitian and a.is_complex()
    steps = _Steps(full_matrix(a, lower, her), her)
    ipiv = sytf2(steps, n)
    ldu = steps.out
    ldu, ipiv, swap, pivs = _unreverse(ldu, ipiv, lower)
    lu, d = assemble(ldu, lower, her, swap, pivs, unit=True)
    return lu, d, _perm(swap, pivs, lower, n, a.device)


def full_matrix(a, lower, her):
    """The full symmetric (Hermitian) matrix of ``a``'s triangle; for the upper form
    reversed (its lower form is factored).  Data movement and additions of zeros only."""
    tri = a.tril() if lower else a.triu()
    strict = tri - torch.diag_embed(tri.diagonal())
    diag = tri.diagonal().real.to(a.dtype) if her else tri.diagonal()
    full = strict + (strict.conj() if her else strict).mT + torch.diag_embed(diag)
    return full if lower else full.flip(0, 1)  # the upper form: the reversed lower one


def _unreverse(ldu, ipiv, lower):
    """(ldu, ipiv) of the requested form from those of the lower form factored, and SciPy's
    (swap, pivs) of its pivots."""
    n = ldu.shape[0]
    if not lower:
        ldu = ldu.flip(0, 1)
        ipiv = np.where(ipiv > 0, n + 1 - ipiv, -(n + 1 + ipiv))[::-1].copy()
    swap, pivs = _ldl_sanitize_ipiv(ipiv, lower=lower)
    return ldu, ipiv, swap, pivs


def assemble(ldu, lower, her, swap, pivs, unit):
    """SciPy's _ldl_get_d_and_l and _ldl_construct_tri_factor as index operations: (lu, d)
    of the packed factors ``ldu`` (``unit``: lu's unit diagonal added; a double-float
    method calls this on each part, the low parts without it)."""
    n = ldu.shape[0]
    d = torch.diag_embed(ldu.diagonal())
    lu = ldu.tril(-1) if lower else ldu.triu(1)
    if unit:
        lu = lu + torch.eye(n, dtype=ldu.dtype, device=ldu.device)
    x, y = (1, 0) if lower else (0, 1)
    for i in np.flatnonzero(pivs == 2):
        off = ldu[i + x, i + y]
        d[i + x, i + y] = off
        d[i + y, i + x] = off.conj() if her else off
        lu[i + x, i + y] = 0
    for ind in (range(n - 1, -1, -1) if lower else range(n)):
        s = swap[ind]
        if s != ind:
            cs, ce = (ind, n) if lower else (0, ind + 1)
            if pivs[ind] == (0 if lower else 2):
                cs, ce = (cs - 1, ce) if lower else (cs, ce + 1)
            rows = lu[[ind, s], cs:ce]
            lu[[s, ind], cs:ce] = rows
    return lu, d


def _perm(swap, pivs, lower, n, device):
    perm = np.arange(n)
    for ind in (range(n - 1, -1, -1) if lower else range(n)):
        s = swap[ind]
        if s != ind:
            perm[[s, ind]] = perm[[ind, s]]
    return torch.from_numpy(np.argsort(perm)).to(device)


register("linalg.ldl", "generic")(_ldl_torch)


@register("linalg.ldl", "xla")
def _ldl_xla(a, lower=True, hermitian=True):
    if a.is_complex():
        return _on_host("scipy.linalg.ldl", "complex arithmetic is unreliable on torch-xla 2.9",
                        lambda t: _ldl_torch(t, lower, hermitian), a)
    return _ldl_torch(a, lower, hermitian)
