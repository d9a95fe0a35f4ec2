"""polar on device tensors, through trnscipy's svd."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy.linalg._decomp_svd import svd
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["polar"]


@dispatch(_sl.polar)
def polar(a, side="right"):
    if side not in ("right", "left"):
        raise ValueError("`side` must be either 'right' or 'left'")
    a = as_tensor(a, device_of(a), False)
    if a.ndim != 2:
        raise ValueError("`a` must be a 2-D array.")
    w, s, vh = svd(a, full_matrices=False)
    s = s.to(a.dtype)
    if side == "right":
        return w @ vh, (vh.mH * s) @ vh
    return w @ vh, (w * s) @ w.mH
