"""qr on device tensors: modes full/economic/r/raw; ``pivoting`` runs on the host
(with DeviceFallbackWarning) off the CPU: torch has no pivoted QR."""

import importlib
import operator

import scipy.linalg as _sl

from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._validate import as_matrix, as_tensor, device_of, empty

__all__ = ["qr", "qr_multiply", "rq"]

# the exception SciPy's LAPACK wrappers (f2py) raise for a work size too small
_LapackError = getattr(importlib.import_module("scipy.linalg._flapack"), "__flapack_error",
                       ValueError)


@dispatch(_sl.qr, stacks=True, double_float=("neuron",))
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    if mode not in ("full", "r", "economic", "raw"):
        raise ValueError("Mode argument should be one of ['full', 'r', 'economic', 'raw']")
    a = as_matrix(a, device_of(a), check_finite)
    m, n = a.shape[-2:]
    _check_lwork(lwork, m, n, mode, pivoting)
    if overwrite_a:  # SciPy hands a true overwrite_a to LAPACK as an int (TypeError)
        operator.index(overwrite_a)
    if a.numel() == 0:  # SciPy's shapes: Q the identity (full) , R and tau of min(m, n)
        k = min(m, n) if mode in ("economic", "raw") else m
        q, r = empty(a.shape[:-2] + (m, k), a), empty(a.shape[:-2] + (k, n), a)
        if mode in ("economic", "raw") and m > 0 and n == 0:
            q = torch.zeros_like(q)
        elif m > 0:
            q = torch.eye(m, dtype=a.dtype, device=a.device).expand(q.shape).clone()
        tau = torch.zeros(a.shape[:-2] + (min(m, n),), dtype=a.dtype, device=a.device)
        out = {"full": (q, r), "economic": (q, r), "r": (r,),
               "raw": ((a.clone(), tau), r)}[mode]
        if pivoting:
            p = torch.arange(n, dtype=torch.int32, device=a.device)
            out = out + (p.expand(a.shape[:-2] + (n,)).clone(),)
        return out
    return kernel("linalg.qr", a.device)(a, mode=mode, pivoting=pivoting)


def _check_lwork(lwork, m, n, mode, pivoting):
    """SciPy's LAPACK work-size rule (its error type): geqrf needs lwork >= n, orgqr the
    columns of the Q it forms.  trnscipy has no use for lwork beyond that check."""
    if lwork is None or lwork == -1:
        return
    need = [] if pivoting else [("geqrf", n)]
    if mode in ("full", "economic"):
        need.append(("orgqr", n if mode == "economic" and m >= n else m))
    for routine, least in need:
        if lwork < least:
            raise _LapackError(f"(lwork>=n||lwork==-1) failed for 1st keyword lwork: "
                               f"{routine}:lwork={lwork}")


@dispatch(_sl.qr_multiply, stacks=True, double_float=("neuron",))
def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False,
                overwrite_c=False):
    """Q from trnscipy's qr, then one matrix product (SciPy applies the reflectors).  A
    stack (the dispatcher's broadcast: an operand without batch dimensions stays as it
    is) runs at once but for column pivoting."""
    if mode not in ("left", "right"):
        raise ValueError(f"Mode argument can only be 'left' or 'right' but not '{mode}'")
    device = device_of(a, c)
    c = as_tensor(c, device, True)
    onedim = c.ndim < 2
    if onedim:
        c = c.reshape(1, -1) if mode == "right" else c.reshape(-1, 1)
    a = as_tensor(a, device, False)
    a = a.reshape((1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a
    batch = torch.broadcast_shapes(a.shape[:-2], c.shape[:-2])
    if batch and pivoting:
        raise PerMatrix
    a = a.expand(batch + a.shape[-2:])  # (c without batch dimensions: q @ c broadcasts)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "left":
        if c.shape[-2] != min(m, n + overwrite_c * (m - n)):
            raise ValueError("Array shapes are not compatible for Q @ c operation: "
                             f"{tuple(a.shape)} vs {tuple(c.shape)}")
    elif m != c.shape[-1]:
        raise ValueError("Array shapes are not compatible for c @ Q operation: "
                         f"{tuple(c.shape)} vs {tuple(a.shape)}")
    full = mode == "left" and c.shape[-2] > k  # overwrite_c with m > n: the full Q
    q, *rest = qr(a, mode="full" if full else "economic", pivoting=pivoting)
    r = rest[0][..., :k, :] if full else rest[0]
    dtype = torch.promote_types(q.dtype, c.dtype)
    q = (q.conj() if conjugate else q).to(dtype)
    c = c.to(dtype)
    if c.numel() == 0:
        return (torch.empty_like(c), r) + tuple(rest[1:])
    # (the matmul kernel: double-float products for float64 on Neuron)
    matmul = kernel("linalg._matmul", device)
    out = matmul(q, c) if mode == "left" else matmul(c, q)
    if onedim:  # (one column or row: of each matrix of a stack)
        out = out[..., 0] if mode == "left" else out[..., 0, :]
    return (out, r) + tuple(rest[1:])


@dispatch(_sl.rq, stacks=True, double_float=("neuron",))
def rq(a, overwrite_a=False, lwork=None, mode="full", check_finite=True):
    """From trnscipy's qr of the reversed conjugate transpose: (J A J)^H = Q1 R1 (J the
    reversals) gives R = J R1^H J and Q = J Q1^H J."""
    if mode not in ("full", "r", "economic"):
        raise ValueError("Mode argument should be one of ['full', 'r', 'economic']")
    a = as_matrix(a, device_of(a), check_finite)  # (a stack: the dispatcher's)
    m, n = a.shape[-2:]
    if a.numel() == 0:
        k = min(m, n) if mode == "economic" else n
        r = empty(a.shape[:-2] + (m, k), a)
        q = torch.eye(n, dtype=a.dtype, device=a.device)[:k].expand(
            a.shape[:-2] + (k, n)).clone()
        return r if mode == "r" else (r, q)
    q1, r1 = qr(a.flip(-2, -1).mH, mode="economic" if mode == "economic" else "full",
                check_finite=False)
    r = r1.mH.flip(-2, -1)
    if mode == "r":
        return r
    return r, q1.mH.flip(-2, -1)
