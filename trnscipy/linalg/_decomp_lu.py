"""lu, lu_factor, lu_solve on device tensors (0-based int32 pivots, as SciPy)."""

import scipy.linalg as _sl

from trnscipy import _autograd
from trnscipy._dispatch import dispatch, requires_grad
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._inplace import result_in, solved_in
from trnscipy.linalg._validate import as_matrix, as_rhs, as_square, as_tensor, device_of, empty
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["lu", "lu_factor", "lu_solve"]


@dispatch(_sl.lu, double_float=("neuron",))
def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    a = as_tensor(a, device_of(a), check_finite)
    if a.ndim < 2:  # SciPy's message (its tests match it)
        raise ValueError("The input array must be at least two-dimensional.")
    if a.numel() == 0:
        m, n = a.shape[-2:]
        k = min(m, n)
        lo, up = empty(a.shape[:-2] + (m, k), a), empty(a.shape[:-2] + (k, n), a)
        if permute_l:
            return lo, up
        # SciPy's empty P has no rows whatever m is: (..., 0) indices or (..., 0, 0)
        p = empty(a.shape[:-2] + (0,), a, torch.int32) if p_indices else \
            empty(a.shape[:-2] + (0, 0), a, a.real.dtype if a.is_complex() else a.dtype)
        return p, lo, up
    return kernel("linalg.lu", a.device)(a, permute_l=permute_l, p_indices=p_indices)


@dispatch(_sl.lu_factor, stacks=True, double_float=("neuron",))
def lu_factor(a, overwrite_a=False, check_finite=True):
    given = a
    a = as_matrix(a, device_of(a), check_finite)
    if a.numel() == 0:
        return a.clone(), empty(a.shape[:-2] + (min(a.shape[-2:]),), a, torch.int32)
    lu, piv = kernel("linalg.lu_factor", a.device)(a)
    return result_in(overwrite_a, given, lu), piv


@dispatch(_sl.lu_solve, double_float=("neuron",))
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    lu, piv = lu_and_piv
    given = b
    device = device_of(lu, piv, b)
    lu = as_square(lu, device, False, name="lu")
    piv = as_tensor(piv, device, False, dtype=torch.int32)
    b, vec, dtype = as_rhs(b, lu, device, False)
    if check_finite:
        check_finite_(lu, b)
    if trans not in (0, 1, 2):
        raise ValueError("trans must be 0, 1 or 2")
    if lu.numel() == 0 or b.numel() == 0:
        return b[..., 0].clone() if vec else b.clone()
    def run(lu, b, trans):
        return kernel("linalg.lu_solve", device)((lu, piv), b, trans=trans)

    lu = lu.to(dtype)
    if requires_grad(lu, b):  # implicit differentiation (trnscipy._autograd)
        x = _autograd.lu_solve(run, lu, piv, b, trans)
    else:
        x = run(lu, b, trans)
    return solved_in(overwrite_b, given, x[..., 0] if vec else x)
