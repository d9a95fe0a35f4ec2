"""expm and sqrtm on device tensors (sqrtm: SciPy on the CPU only; elsewhere the
capability table sends it to the host)."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg import _kernels  # noqa: F401  (registers the linalg kernels)
from trnscipy.linalg._validate import LinAlgError, as_matrix, as_square, device_of

__all__ = ["expm", "sqrtm"]


@dispatch(_sl.expm)
def expm(A):
    a = as_matrix(A, device_of(A), finite=False, name="A", small_ints=torch.float64)
    if a.shape[-1] != a.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if a.numel() == 0:
        return a.clone()
    return kernel("linalg.expm", a.device)(a)


@dispatch(_sl.sqrtm)
def sqrtm(A, **kwargs):
    a = as_square(A, device_of(A), finite=True, name="A")
    if a.numel() == 0:
        return a.clone()
    return kernel("linalg.sqrtm", a.device)(a, **kwargs)
