"""Shared pieces of the device eigensolvers: the kernel seam entry, operators, small eigh."""

import functools

from trnscipy._dispatch import find_device
from trnscipy._kernels import kernel
from trnscipy._torch import torch

__all__ = ["eigen_kernel", "operator", "real_dtype", "small_eigh"]


def eigen_kernel(scipy_func):
    """Decorator, under ``@dispatch``: the call goes through the kernel seam's "eigen"
    entry for the operands' device.  On the CPU that is SciPy's own solver (ARPACK,
    lobpcg) on zero-copy views; elsewhere the decorated torch implementation."""
    def decorate(torch_func):
        @functools.wraps(torch_func)
        def solve(*args, **kwargs):
            device = find_device(args, kwargs)
            return kernel("eigen", device)(scipy_func, torch_func, args, kwargs)

        solve.torch_impl = torch_func
        return solve

    return decorate


def operator(A, device):
    """``A`` (sparse container, dense tensor, LinearOperator) as a device LinearOperator."""
    from trnscipy.sparse.linalg._interface import _device_operator

    return _device_operator(A, device)


def real_dtype(dtype):
    return torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype


def small_eigh(T):
    """eigh of a small Hermitian matrix, eigenvectors refined by one Ogita-Aishima step
    (matrix products only): torch-xla 2.9's float64 eigh leaves eigenvector residuals
    of 1e-8 to 1e-10 (docs/design.md).  Vectors of eigenvalues closer than
    ``eps**(1/3) * ||T||`` are only orthonormalised (their span is what is defined)."""
    w, S = torch.linalg.eigh(T)
    eps = torch.finfo(real_dtype(T.dtype)).eps
    eye = torch.eye(T.shape[0], dtype=T.dtype, device=T.device)
    R = eye - S.mH @ S
    G = S.mH @ T @ S
    lam = (G.diagonal().real / (1 - R.diagonal().real))
    gap = lam[None, :] - lam[:, None]
    delta = eps ** (1 / 3) * lam.abs().max()
    far = gap.abs() > delta
    safe = torch.where(far, gap, torch.ones_like(gap))
    E = torch.where(far, (G + R * lam[None, :]) / safe, R / 2)
    return w, S + S @ E
