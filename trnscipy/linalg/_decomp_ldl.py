"""ldl on device tensors: LAPACK's unblocked Bunch-Kaufman (?sytf2 / ?hetf2) in torch.

CPU tensors run SciPy on zero-copy views.  Elsewhere each step reads its pivot test
(five numbers) on the host and does the interchange and the rank-1 or rank-2 update on
the device; SciPy's own index bookkeeping (``_ldl_sanitize_ipiv``) turns the pivots into
its ``lu``, ``d``, ``perm``.  The upper form factors the reversed matrix in the lower
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


def _sytf2(w, her):
    """(ldu, ipiv) of LAPACK's lower ?sytf2/?hetf2 for the full symmetric/Hermitian w."""
    n = w.shape[0]
    ct = (lambda t: t.conj()) if her else (lambda t: t)
    out = torch.zeros_like(w)
    ipiv = np.zeros(n, dtype=np.int64)
    rows = torch.arange(n, device=w.device)
    k = 0
    while k < n:
        col = _mag(w[k + 1:, k])
        diag = _mag(w.diagonal(), her)
        if k + 1 < n:
            cmax, cidx = col.max(0)
            imax = k + 1 + cidx
            row = _mag(torch.where(rows[k:] == imax, 0, w[imax, k:]))
            probe = torch.stack([diag[k], cmax.to(diag.dtype), imax.to(diag.dtype),
                                 row.max().to(diag.dtype), diag[imax]]).tolist()
        else:
            probe = [float(diag[k]), 0.0, k, 0.0, 0.0]
        absakk, colmax, imax, rowmax, absimax = probe
        kp, kstep = pivot(k, int(imax), absakk, colmax, rowmax, absimax)
        kk = k + kstep - 1
        if kp != kk:  # symmetric interchange of kk and kp in the trailing matrix
            order = torch.arange(n, device=w.device)
            order[kk], order[kp] = kp, kk
            w = w[order][:, order]
        if max(absakk, colmax) == 0:  # singular column: D(k) = 0, no update
            out[k:, k] = w[k:, k]
            ipiv[k] = k + 1
            k += 1
            continue
        if kstep == 1:
            dkk = w[k, k].real if her else w[k, k]
            x = w[k + 1:, k]
            r1 = 1 / dkk
            w = w.clone()
            w[k + 1:, k + 1:] = w[k + 1:, k + 1:] - r1 * x[:, None] * ct(x)[None, :]
            out[k, k] = dkk
            out[k + 1:, k] = x * r1
            ipiv[k] = kp + 1
        else:
            x = w[k + 2:, k:k + 2]
            if her:
                d = w[k + 1, k].abs()
                d11, d22 = w[k + 1, k + 1].real / d, w[k, k].real / d
                d21 = w[k + 1, k] / d
                dd = (1 / (d11 * d22 - 1)) / d
                wk = dd * (d11 * x[:, 0] - d21 * x[:, 1])
                wkp1 = dd * (d22 * x[:, 1] - d21.conj() * x[:, 0])
            else:
                d21 = w[k + 1, k]
                d11, d22 = w[k + 1, k + 1] / d21, w[k, k] / d21
                dd = (1 / (d11 * d22 - 1)) / d21
                wk = dd * (d11 * x[:, 0] - x[:, 1])
                wkp1 = dd * (d22 * x[:, 1] - x[:, 0])
            lk = torch.stack([wk, wkp1], 1)
            w = w.clone()
            w[k + 2:, k + 2:] = w[k + 2:, k + 2:] - x @ ct(lk).mT
            out[k, k] = w[k, k].real if her else w[k, k]
            out[k + 1, k + 1] = w[k + 1, k + 1].real if her else w[k + 1, k + 1]
            out[k + 1, k] = w[k + 1, k]
            out[k + 2:, k:k + 2] = lk
            ipiv[k] = ipiv[k + 1] = -(kp + 1)
        k += kstep
    return out, ipiv


def _ldl_torch(a, lower=True, hermitian=True):
    n = a.shape[0]
    her = hermitian and a.is_complex()
    ldu, ipiv = _sytf2(full_matrix(a, lower, her), her)
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
