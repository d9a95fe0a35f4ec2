"""CUDA kernels: torch's cuSPARSE-backed CSR layout for CSR/CSC products.

Used when no gradient is needed; with autograd (or other formats) the generic
kernels run, whose gradients torch derives itself.
"""

import torch

from trnscipy._kernels import register
from trnscipy._kernels._generic import spmm as _generic_spmm

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


@register("spmv", "cuda")
@register("spmm", "cuda")
def spmm(A, x):
    usable = (A.format in ("csr", "csc") and A.data.dtype in _DTYPES
              and not (A.data.requires_grad or x.requires_grad))
    if not usable:
        return _generic_spmm(A, x)
    if A.format == "csc":
        A = A.tocsr()
    mat = torch.sparse_csr_tensor(A.indptr, A.indices, A.data, size=A.shape)
    return mat @ x
