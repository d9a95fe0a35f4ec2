"""cholesky, cho_factor, cho_solve on device tensors (SciPy's conventions: upper by default)."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy.linalg import _kernels  # noqa: F401  (registers the linalg kernels)
from trnscipy.linalg._validate import as_rhs, as_square, device_of
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["cholesky", "cho_factor", "cho_solve"]


@dispatch(_sl.cholesky)
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    a = as_square(a, device_of(a), check_finite)
    if a.numel() == 0:
        return a.clone()
    return kernel("linalg.cholesky", a.device)(a, lower=lower)


@dispatch(_sl.cho_factor)
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """As SciPy, but the triangle SciPy leaves as garbage holds zeros."""
    return cholesky(a, lower=lower, check_finite=check_finite), lower


@dispatch(_sl.cho_solve)
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    device = device_of(c, b)
    c = as_square(c, device, False, name="c")
    b, vec, dtype = as_rhs(b, c, device, False)
    if check_finite:
        check_finite_(c, b)
    if c.numel() == 0 or b.numel() == 0:
        return b[..., 0].clone() if vec else b.clone()
    x = kernel("linalg.cho_solve", device)((c.to(dtype), lower), b)
    return x[..., 0] if vec else x
