"""solve_sylvester on device tensors: Bartels-Stewart on complex Schur forms from
trnscipy.linalg.schur (the host's SciPy, announced, where the device has no schur of its
own), the triangular Sylvester equation solved on the device column by column."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy.linalg import _kernels_struct  # noqa: F401  (registers kernels)
from trnscipy.linalg._validate import as_square, as_tensor, common_dtype, device_of

__all__ = ["solve_sylvester"]


@dispatch(_sl.solve_sylvester)
def solve_sylvester(a, b, q):
    device = device_of(a, b, q)
    a, b = as_square(a, device, True), as_square(b, device, True, name="b")
    q = as_tensor(q, device, True)
    if q.ndim != 2 or q.shape != (a.shape[0], b.shape[0]):
        raise ValueError(f"q must have shape ({a.shape[0]}, {b.shape[0]}), got "
                         f"{tuple(q.shape)}")
    dtype = common_dtype(a, b, q)
    return kernel("linalg.solve_sylvester", device)(a.to(dtype), b.to(dtype), q.to(dtype))
