"""norm on device tensors (returns a 0-d tensor where SciPy returns a NumPy scalar)."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["norm"]


@dispatch(_sl.norm, double_float=("neuron",))
def norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    half = getattr(a, "dtype", None) == torch.float16  # NumPy's norm keeps float16
    a = as_tensor(a, device_of(a), check_finite, dtype=torch.float16 if half else None,
                  small_ints=torch.float64)
    return kernel("linalg.norm", a.device)(a, ord=ord, axis=axis, keepdims=keepdims)
