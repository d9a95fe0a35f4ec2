"""orthogonal_procrustes on device tensors, through trnscipy's svd (on Neuron, float64:
the product and R in double-float, the double-float svd of ``_refine_orth``)."""

import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._dispatch import dispatch
from trnscipy._kernels import _df, kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._decomp_svd import svd
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["orthogonal_procrustes"]


@dispatch(_sl.orthogonal_procrustes, stacks=True, double_float=("neuron",))
def orthogonal_procrustes(A, B, check_finite=True):
    device = device_of(A, B)
    a, b = as_tensor(A, device, check_finite), as_tensor(B, device, check_finite)
    if a.ndim < 2:  # (more: a stack, the dispatcher's)
        raise ValueError(f"expected ndim to be 2, but observed {a.ndim}")
    if a.shape != b.shape:
        raise ValueError(f"the shapes of A and B differ ({tuple(a.shape)} vs "
                         f"{tuple(b.shape)})")
    return kernel("linalg.orthogonal_procrustes", device)(a, b)


@register("linalg.orthogonal_procrustes", "generic")
def _procrustes(a, b):
    u, w, vt = svd((b.mT @ a.conj()).mT, check_finite=False)
    return u @ vt, w.sum(-1)


@register("linalg.orthogonal_procrustes", "neuron")
def _procrustes_df(a, b):
    """SciPy's svd of (B^T A)^T = A^T B, that product, u @ vt and sum(w) in double-float."""
    if not _r._df64(a, b) or a.is_complex() or b.is_complex() or a.numel() == 0:
        return _procrustes(a, b)
    # (a stack: one product and one svd, which takes stacks)
    A, B = (_r._parts(_transfer.tensor_on(t, t.device, torch.float64)) for t in (a, b))
    u, w, vt = svd(_transfer.df_tensor(*_df.gemm(_r._t(A), B)), check_finite=False)
    R = _df.gemm(_r._parts(u), _r._parts(vt))
    return _transfer.df_tensor(*R), _transfer.df_tensor(*_df.tree_sum(*_r._parts(w)))
