"""polar on device tensors: through trnscipy's svd, or a device kind's own method (the
double-float Newton-Schulz iteration for float64 on Neuron, ``_refine_funcs``)."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel, register
from trnscipy.linalg._decomp_svd import svd
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["polar"]


@dispatch(_sl.polar, stacks=True, double_float=("neuron",))
def polar(a, side="right"):
    if side not in ("right", "left"):
        raise ValueError("`side` must be either 'right' or 'left'")
    a = as_tensor(a, device_of(a), False)
    if a.ndim < 2:  # (more: a stack, the dispatcher's)
        raise ValueError("`a` must be a 2-D array.")
    return kernel("linalg.polar", a.device)(a, side)


@register("linalg.polar", "generic")
def polar_by_svd(a, side="right"):
    w, s, vh = svd(a, full_matrices=False)
    s = s.to(a.dtype).unsqueeze(-2)
    if side == "right":
        return w @ vh, (vh.mH * s) @ vh
    return w @ vh, (w * s) @ w.mH
