"""orthogonal_procrustes on device tensors, through trnscipy's svd."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy.linalg._decomp_svd import svd
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["orthogonal_procrustes"]


@dispatch(_sl.orthogonal_procrustes)
def orthogonal_procrustes(A, B, check_finite=True):
    device = device_of(A, B)
    a, b = as_tensor(A, device, check_finite), as_tensor(B, device, check_finite)
    if a.ndim != 2:
        raise ValueError(f"expected ndim to be 2, but observed {a.ndim}")
    if a.shape != b.shape:
        raise ValueError(f"the shapes of A and B differ ({tuple(a.shape)} vs "
                         f"{tuple(b.shape)})")
    u, w, vt = svd((b.mT @ a.conj()).mT, check_finite=False)
    return u @ vt, w.sum()
