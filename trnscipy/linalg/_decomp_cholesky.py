"""cholesky, cho_factor, cho_solve on device tensors (SciPy's conventions: upper by default)."""

import numpy as np
import scipy.linalg as _sl
from array_api_compat import is_torch_array

from trnscipy import _autograd
from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch, requires_grad
from trnscipy._kernels import kernel
from trnscipy._scipy_version import scipy_at_least
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.linalg._inplace import result_in, solved_in
from trnscipy.linalg._validate import as_matrix, as_rhs, as_square, as_tensor, device_of
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["cholesky", "cho_factor", "cho_solve", "cholesky_banded", "cho_solve_banded"]


@dispatch(_sl.cholesky, stacks=True, double_float=("neuron",))
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    if not is_torch_array(a) and np.ndim(a) < 2:  # SciPy: atleast_2d (a scalar is 1 x 1)
        a = np.atleast_2d(a)
    given = a
    a = as_square(a, device_of(a), check_finite)
    if a.numel() == 0:
        return a.clone()
    def run(a):
        return kernel("linalg.cholesky", a.device)(a, lower=lower)

    if requires_grad(a):  # implicit differentiation (trnscipy._autograd)
        c = _autograd.cholesky(run, lambda L, B, trans: kernel("linalg._trsm", L.device)(
            L, B, upper=False, trans=trans), a, lower)
    else:
        c = run(a)
    return result_in(overwrite_a, given, c)


@dispatch(_sl.cho_factor, stacks=True, double_float=("neuron",))
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """As SciPy, but the triangle SciPy leaves as garbage holds zeros.  ``lower`` comes
    back as given (SciPy 1.17, one matrix) or as an array of the batch's shape (1.18:
    np.tile; 1.17's batch loop stacks the flags too)."""
    c = cholesky(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)
    if scipy_at_least(1, 18) or c.ndim > 2:
        return c, np.tile(lower, reps=tuple(c.shape[:-2]))
    return c, lower


@dispatch(_sl.cho_solve, double_float=("neuron",))
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    given = b
    if isinstance(lower, np.ndarray) or is_torch_array(lower):
        # a batched cho_factor's flags, one per matrix (offload moves them to the device)
        flags = np.asarray(to_host(lower) if is_torch_array(lower) else lower).reshape(-1)
        lower = bool(flags[0]) if flags.size else False
    device = device_of(c, b)
    c = as_square(c, device, False, name="c")
    b, vec, dtype = as_rhs(b, c, device, False)
    if check_finite:
        check_finite_(c, b)
    if c.numel() == 0 or b.numel() == 0:
        return b[..., 0].clone() if vec else b.clone()
    def run(c, b):
        return kernel("linalg.cho_solve", device)((c, lower), b)

    c = c.to(dtype)
    if requires_grad(c, b):  # implicit differentiation (trnscipy._autograd)
        x = _autograd.cho_solve(run, c, lower, b)
    else:
        x = run(c, b)
    return solved_in(overwrite_b, given, x[..., 0] if vec else x)


@dispatch(_sl.cholesky_banded, stacks=True, double_float=("neuron",))
def cholesky_banded(ab, overwrite_ab=False, lower=False, check_finite=True):
    """A dense Cholesky factorization off the CPU, returned in band storage (the entries
    outside the matrix keep the input's values, as LAPACK's pbtrf leaves them)."""
    ab = as_matrix(ab, device_of(ab), check_finite, name="ab")
    if ab.numel() == 0:
        return ab.clone()
    return kernel("linalg.cholesky_banded", ab.device)(ab, lower=lower)


@dispatch(_sl.cho_solve_banded, stacks=True, double_float=("neuron",),
          batch=((("cb_and_lower", 0), 2), ("b", "1|2")))
def cho_solve_banded(cb_and_lower, b, overwrite_b=False, check_finite=True):
    cb, lower = cb_and_lower
    device = device_of(cb, b)
    cb = as_matrix(cb, device, False, name="cb")
    b = as_tensor(b, device, False)
    if check_finite:
        check_finite_(cb, b)
    vec = b.ndim == 1  # (SciPy's "1|2" core: a stack's b of 2 dimensions is a matrix)
    if b.ndim == 0 or (b.shape[-1] if vec else b.shape[-2]) != cb.shape[-1]:
        raise ValueError("shapes of cb and b are not compatible.")
    dtype = torch.promote_types(cb.dtype, b.dtype)
    if b.numel() == 0 and max(cb.ndim, b.ndim) > 2:
        raise PerMatrix  # (SciPy's loop's shape)
    if b.numel() == 0:
        return b.to(dtype).clone()
    x = kernel("linalg.cho_solve_banded", device)((cb.to(dtype), lower),
                                                   (b.unsqueeze(-1) if vec else b).to(dtype))
    return x[..., 0] if vec else x
