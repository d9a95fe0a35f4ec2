"""eigh, eigvalsh, eig, eigvals on device tensors.

Generalized eigh (``b``) reduces to a standard problem through the Cholesky
factor of ``b`` on the device; ``driver`` is checked and otherwise ignored there.
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _autograd
from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch, requires_grad
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._validate import as_square, as_tensor, common_dtype, device_of, empty
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["eigh", "eigvalsh", "eig", "eigvals", "eigh_tridiagonal", "eigvalsh_tridiagonal",
           "eig_banded", "eigvals_banded", "cdf2rdf"]

_DRIVERS = (None, "ev", "evd", "evr", "evx", "gv", "gvd", "gvx")


def _real_dtype(t):
    return t.real.dtype if t.is_complex() else t.dtype


@dispatch(_sl.eigh, stacks=True, double_float=("neuron",))
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False,
         overwrite_b=False, type=1, check_finite=True, subset_by_index=None,
         subset_by_value=None, driver=None):
    device = device_of(a, b)
    a = as_square(a, device, False)
    if b is not None:
        b = as_square(b, device, False, name="b")
    if check_finite:
        check_finite_(a, b)
    if b is not None:
        if b.shape != a.shape:
            raise ValueError(f"wrong b dimensions {tuple(b.shape)}, should be {tuple(a.shape)}")
        dtype = common_dtype(a, b)
        a, b = a.to(dtype), b.to(dtype)
    if driver not in _DRIVERS:
        raise ValueError(f'"{driver}" is unknown. Possible values are "None", '
                         + ", ".join(f'"{d}"' for d in _DRIVERS[1:]) + ".")
    if type not in (1, 2, 3):
        raise ValueError("'type' keyword only accepts 1, 2, and 3.")
    if subset_by_index is not None and subset_by_value is not None:
        raise ValueError("Either index or value subset can be requested.")
    n = a.shape[-1]
    if subset_by_index is not None:
        lo, hi = (int(i) for i in subset_by_index)
        if not 0 <= lo <= hi < n:
            raise ValueError("Requested eigenvalue indices are not valid. Valid range is "
                             f"[0, {n - 1}] and start <= end, but start={lo}, end={hi} is "
                             "given")
    if subset_by_value is not None:
        lo, hi = subset_by_value
        if not lo < hi:
            raise ValueError("Requested eigenvalue bounds are not valid. Valid range is "
                             f"(-inf, inf) and low < high, but low={lo}, high={hi} is given")
    if n == 0:
        w = empty(a.shape[:-1], a, _real_dtype(a))
        return w if eigvals_only else (w, a.clone())
    def run(a, eigvals_only):
        return kernel("linalg.eigh", device)(a, b, lower=lower, eigvals_only=eigvals_only,
                                              type=type, subset_by_index=subset_by_index,
                                              subset_by_value=subset_by_value, driver=driver)

    if not requires_grad(a, b):
        return run(a, eigvals_only)
    if b is not None:  # implicit differentiation (trnscipy._autograd) of A only
        raise NotImplementedError("eigh: gradients of the generalized problem (b) are not "
                                  "supported")
    return _autograd.eigh(run, a, lower, eigvals_only,
                          subset=subset_by_index is not None or subset_by_value is not None)


@dispatch(_sl.eigvalsh, stacks=True, double_float=("neuron",))
def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,
             check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    return eigh(a, b, lower=lower, eigvals_only=True, type=type, check_finite=check_finite,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)


def _complex_dtype(t):
    return {torch.float32: torch.complex64, torch.float64: torch.complex128}.get(t.dtype,
                                                                                  t.dtype)


@dispatch(_sl.eig, stacks=True, double_float=("neuron",))
def eig(a, b=None, left=False, right=True, overwrite_a=False, overwrite_b=False,
        check_finite=True, homogeneous_eigvals=False):
    device = device_of(a, b)
    a = as_square(a, device, check_finite)
    if b is not None:
        b = as_square(b, device, check_finite, name="b")
        if b.shape != a.shape:
            raise ValueError("a and b must have the same shape")
    if a.ndim > 2 and a.numel() == 0:
        raise PerMatrix  # (SciPy's loop's shapes)
    if a.numel() == 0:
        w = empty(a.shape[:-1], a, _complex_dtype(a))
        if homogeneous_eigvals:
            w = empty(a.shape[:-2] + (2, 0), a, _complex_dtype(a))
        out = (w,) + ((a.clone(),) if left else ()) + ((a.clone(),) if right else ())
        return out[0] if len(out) == 1 else out
    return kernel("linalg.eig", device)(a, b, left=left, right=right,
                                         homogeneous_eigvals=homogeneous_eigvals)


@dispatch(_sl.eigvals, stacks=True, double_float=("neuron",))
def eigvals(a, b=None, overwrite_a=False, check_finite=True, homogeneous_eigvals=False):
    return eig(a, b, left=False, right=False, check_finite=check_finite,
               homogeneous_eigvals=homogeneous_eigvals)


_TRIDIAGONAL_DRIVERS = ("auto", "stemr", "sterf", "stebz", "stev", "stevd")


@dispatch(_sl.eigh_tridiagonal, stacks=True, double_float=("neuron",))
def eigh_tridiagonal(d, e, eigvals_only=False, select="a", select_range=None,
                     check_finite=True, tol=0.0, lapack_driver="auto"):
    """Off the CPU: the eigh kernel on the dense tridiagonal matrix, then SciPy's
    selection; ``lapack_driver`` and ``tol`` are checked as SciPy does, then unused."""
    from scipy.linalg._decomp import _check_select

    device = device_of(d, e)
    d, e = as_tensor(d, device, check_finite), as_tensor(e, device, check_finite)
    for t in (d, e):
        if t.ndim < 1:
            raise ValueError("expected a 1-D array")
        if t.is_complex():
            raise TypeError("Only real arrays currently supported")
    if d.shape[-1] != e.shape[-1] + 1:
        raise ValueError(f"d ({d.shape[-1]}) must have one more element than e "
                         f"({e.shape[-1]})")
    batch = torch.broadcast_shapes(d.shape[:-1], e.shape[:-1])  # batches, as SciPy
    d, e = d.expand(*batch, d.shape[-1]), e.expand(*batch, e.shape[-1])
    rng = None if select_range is None else np.asarray(
        select_range.cpu() if hasattr(select_range, "cpu") else select_range)
    select, vl, vu, il, iu, _ = _check_select(select, rng, 0, d.shape[-1])
    if not isinstance(lapack_driver, str):
        raise TypeError("lapack_driver must be str")
    if lapack_driver not in _TRIDIAGONAL_DRIVERS:
        raise ValueError(f"lapack_driver must be one of {_TRIDIAGONAL_DRIVERS}, "
                         f"got {lapack_driver}")
    if lapack_driver in ("sterf", "stev", "stevd") and select != 0:
        raise ValueError(f'{lapack_driver} can only be used when select == "a"')
    if lapack_driver == "sterf" and not eigvals_only:
        raise ValueError("sterf can only be used when eigvals_only is True")
    dtype = torch.promote_types(d.dtype, e.dtype)
    return kernel("linalg.eigh_tridiagonal", device)(
        d.to(dtype), e.to(dtype), eigvals_only=eigvals_only, select=select,
        select_range=None if select == 0 else ((vl, vu) if select == 1 else (il - 1, iu - 1)),
        tol=tol, lapack_driver=lapack_driver)


@dispatch(_sl.eigvalsh_tridiagonal, stacks=True, double_float=("neuron",))
def eigvalsh_tridiagonal(d, e, select="a", select_range=None, check_finite=True, tol=0.0,
                         lapack_driver="auto"):
    return eigh_tridiagonal(d, e, eigvals_only=True, select=select, select_range=select_range,
                            check_finite=check_finite, tol=tol, lapack_driver=lapack_driver)


@dispatch(_sl.eig_banded, stacks=True, double_float=("neuron",))
def eig_banded(a_band, lower=False, eigvals_only=False, overwrite_a_band=False, select="a",
               select_range=None, max_ev=0, check_finite=True):
    """Off the CPU: the eigh kernel on the dense Hermitian matrix the band holds (O(n^2)
    memory and O(n^3) work, not LAPACK's band reduction), then SciPy's selection (one
    host read for ``select='v'``).  Differs from SciPy: more eigenvalues in
    ``select_range`` than a given ``max_ev`` is a ValueError (SciPy's LAPACK call
    writes past its arrays)."""
    from scipy.linalg._decomp import _check_select

    device = device_of(a_band)
    # SciPy checks finiteness whatever check_finite says unless eigvals_only/overwrite
    a = as_tensor(a_band, device, check_finite or not (eigvals_only or overwrite_a_band))
    if a.ndim < 2:
        raise ValueError("expected a 2-D array")
    n = a.shape[-1]
    rng = None if select_range is None else np.asarray(
        select_range.cpu() if hasattr(select_range, "cpu") else select_range)
    select, vl, vu, il, iu, max_ev = _check_select(select, rng, max_ev, n)
    if a.numel() == 0:
        w = empty(a.shape[:-2] + (0,), a, _real_dtype(a))
        return w if eigvals_only else (w, empty(a.shape[:-2] + (0, 0), a, a.dtype))
    out = kernel("linalg.eig_banded", device)(
        a, lower=lower, eigvals_only=eigvals_only, select=select,
        select_range=None if select == 0 else ((vl, vu) if select == 1 else (il - 1, iu - 1)))
    w = out if eigvals_only else out[0]
    if select == 1 and not eigvals_only and w.shape[-1] > max_ev:
        raise ValueError(f"select_range holds {w.shape[-1]} eigenvalues, more than "
                         f"max_ev={max_ev}")
    return out


@dispatch(_sl.eigvals_banded, stacks=True, double_float=("neuron",))
def eigvals_banded(a_band, lower=False, overwrite_a_band=False, select="a",
                   select_range=None, check_finite=True):
    return eig_banded(a_band, lower=lower, eigvals_only=True,
                      overwrite_a_band=overwrite_a_band, select=select,
                      select_range=select_range, check_finite=check_finite)


@dispatch(_sl.cdf2rdf, double_float=("neuron",), complex_parts=("neuron",))
def cdf2rdf(w, v):
    """Complex eigenpairs to the real block-diagonal form, on the device: one host read of
    which eigenvalues are complex (the pairing, as SciPy: consecutive complex ones, not
    interleaved), then the kernel (``_decomp_schur.cdf2rdf_pairs``).  As SciPy, ``vr`` is
    float64 whatever the input precision (its ``u`` is complex128)."""
    device = device_of(w, v)
    w, v = as_tensor(w, device), as_tensor(v, device)
    if w.ndim < 1:
        raise ValueError("expected w to be at least 1D")
    if v.ndim < 2:
        raise ValueError("expected v to be at least 2D")
    if v.ndim != w.ndim + 1:
        raise ValueError("expected eigenvectors array to have exactly one dimension more "
                         "than eigenvalues array")
    n = w.shape[-1]
    if v.shape[-2] != v.shape[-1]:
        raise ValueError("expected v to be a square matrix or stacked square matrices: "
                         "v.shape[-2] = v.shape[-1]")
    if v.shape[-1] != n:
        raise ValueError("expected the same number of eigenvalues as eigenvectors")
    return kernel("linalg.cdf2rdf", device)(w, v)
