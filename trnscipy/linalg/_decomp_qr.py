"""qr on device tensors: modes full/economic/r/raw; ``pivoting`` runs on the host
(with DeviceFallbackWarning) off the CPU: torch has no pivoted QR."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg import _kernels  # noqa: F401  (registers the linalg kernels)
from trnscipy.linalg._validate import as_matrix, device_of, empty

__all__ = ["qr"]


@dispatch(_sl.qr)
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    if mode not in ("full", "r", "economic", "raw"):
        raise ValueError("Mode argument should be one of ['full', 'r', 'economic', 'raw']")
    a = as_matrix(a, device_of(a), check_finite)
    m, n = a.shape[-2:]
    if a.numel() == 0:
        k = min(m, n) if mode == "economic" else m
        q, r = empty(a.shape[:-2] + (m, k), a), empty(a.shape[:-2] + (k, n), a)
        if mode == "economic" and m > 0 and n == 0:
            q = torch.zeros_like(q)
        elif m > 0:
            q = torch.eye(m, dtype=a.dtype, device=a.device).expand(q.shape).clone()
        out = {"full": (q, r), "economic": (q, r), "r": (r,),
               "raw": ((a.clone(), empty(a.shape[:-2] + (0,), a)), r)}[mode]
        if pivoting:
            out = out + (empty(a.shape[:-2] + (n,), a, torch.int32),)
        return out
    return kernel("linalg.qr", a.device)(a, mode=mode, pivoting=pivoting)
