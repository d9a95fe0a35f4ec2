"""cg for many right-hand sides at once: a trnscipy extension (SciPy's cg takes one).

``cg_batched(A, B)`` solves ``A X = B`` column by column with SciPy's cg iteration: each
column keeps its own scalars and its own stop test (SciPy's, ``||r|| < max(atol, rtol
||b||)``), so each column's iterates are the ones ``cg(A, B[:, j])`` computes (to rounding:
the columns' products are one SpMM).  The k columns share one product ``A @ P`` and one
preconditioner application per iteration.  On graph devices the iterations are one
device loop that leaves when every column has stopped (XLA: one execution per solve).
This is not block CG (O'Leary), whose columns share one Krylov space: independent
columns keep SciPy's per-vector results.
"""

import numpy as np
import scipy.sparse.linalg as _scipy_linalg
from array_api_compat import is_torch_array

from trnscipy._capabilities import capability, runs_on_device
from trnscipy._device import device_kind
from trnscipy._dtypes import divide, to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy._transfer import to_device, to_host
from trnscipy.sparse.linalg._isolve import utils

__all__ = ["cg_batched"]

_NAME = "trnscipy.sparse.linalg.cg_batched"


def cg_batched(A, B, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None):
    """Solve ``A X = B`` for the k columns of ``B`` (shape (n, k)) by SciPy's cg, all
    columns in one iteration.  A must be Hermitian positive definite (as for cg).

    Returns ``(X, info)``: X of B's shape, info an int64 array of k entries, each
    SciPy's ``info`` for its column (0: converged, ``maxiter``: not).  NumPy/SciPy inputs
    run SciPy's cg column by column; device data runs on its device."""
    if not is_torch_array(B):
        return _on_host(A, B, x0, rtol, atol, maxiter, M)
    if B.ndim != 2:
        raise ValueError(f"B must be 2-D (n, k), got shape {tuple(B.shape)}")
    device = B.device
    op = utils.as_operator(A, device)
    n, k = B.shape
    if op.shape[0] != op.shape[1]:
        raise ValueError(f"expected square matrix, but got shape={(op.shape,)}")
    if op.shape[1] != n:
        raise ValueError(f"shapes of A {op.shape} and B {tuple(B.shape)} are incompatible")
    atol = utils.check_atol("cg", atol)
    bchar = to_numpy_dtype(B.dtype).char
    bchar = bchar if bchar in "fdFD" else "d"
    achar = op.dtype.char if op.dtype is not None else bchar
    dtype = np.dtype(utils._coerce(achar, bchar))
    if not runs_on_device(_NAME, device_kind(device), dtype):  # announced
        x, info = _on_host(to_host(A) if is_torch_array(A) or hasattr(A, "format") else A,
                           to_host(B), None if x0 is None else to_host(x0), rtol, atol,
                           maxiter, M)
        return to_device(x, device), to_device(info, device)
    pre = None if M is None else utils.as_operator(M, device)
    if pre is not None and pre.shape != op.shape:
        raise ValueError("matrix and preconditioner have different shapes")
    maxiter = n * 10 if maxiter is None else int(maxiter)
    tdtype = to_torch_dtype(dtype)
    B = B.to(tdtype)
    X = torch.zeros_like(B) if x0 is None else torch.as_tensor(x0, device=device).to(tdtype)
    if tuple(X.shape) != (n, k):
        raise ValueError(f"shapes of B {(n, k)} and x0 {tuple(X.shape)} are incompatible")
    return _solve(op, pre, B, X.clone(), x0 is not None, rtol, atol, maxiter)


def _cols_dot(a, b):
    """conj(a_j) . b_j for each column j."""
    return (a.conj() * b).sum(0)


def _cols_norm(a):
    return _cols_dot(a, a).real.sqrt()


def _solve(op, pre, B, X, have_x0, rtol, atol, maxiter):
    device = B.device
    bnrm = _cols_norm(B)
    tol = torch.clamp(rtol * bnrm, min=atol)
    zero_b = bnrm == 0
    # SciPy's cg returns b itself (zero) for a zero right-hand side, whatever x0 says
    X = torch.where(zero_b, torch.zeros_like(X), X)
    R = B - op.matmat(X) if have_x0 else B.clone()
    info = torch.where(zero_b, torch.zeros_like(bnrm, dtype=torch.int64),
                       torch.full_like(bnrm, maxiter, dtype=torch.int64))
    live = ~zero_b
    P = torch.zeros_like(B)
    rho_prev = torch.ones_like(bnrm).to(B.dtype)
    done = ~live.any()

    def body(carry, j):
        X, R, P, rho_prev, live, info, done = carry
        converged = _cols_norm(R) < tol
        info = torch.where(live & converged, torch.zeros_like(info), info)
        live = live & ~converged
        Z = R if pre is None else pre.matmat(R)
        rho = _cols_dot(R, Z)
        first = j == 0
        beta = torch.where(live & ~first, divide(rho, rho_prev), torch.zeros_like(rho))
        P = Z + beta * P
        Q = op.matmat(P)
        alpha = torch.where(live, divide(rho, _cols_dot(P, Q)), torch.zeros_like(rho))
        X = torch.where(live, X + alpha * P, X)
        R = torch.where(live, R - alpha * Q, R)
        rho_prev = torch.where(live, rho, rho_prev)
        return X, R, P, rho_prev, live, info, ~live.any()

    carry = (X, R, P, rho_prev, live, info, done)
    kind = device_kind(device)
    if utils.host_reads_free(device) or not utils.traceable(op, pre):
        # eager devices, or products that read on the host: a Python loop, the stop flag
        # read after every iteration
        for j in range(maxiter):
            carry = body(carry, torch.tensor(j, device=device))
            utils.sync(device)
            if bool(carry[-1]):
                break
    else:
        loop = kernel("device_loop", device)
        # XLA: one While to the last column's stop; elsewhere blocks between host reads
        block = maxiter if capability(kind).device_while else utils.CHECK_EVERY
        for start in range(0, maxiter, block):
            carry = loop(body, carry, start, min(maxiter, start + block), until=6)
            if bool(carry[-1]):
                break
    return carry[0], carry[5]


def _on_host(A, B, x0, rtol, atol, maxiter, M):
    """SciPy's cg, column by column."""
    B = np.asarray(B)
    if B.ndim != 2:
        raise ValueError(f"B must be 2-D (n, k), got shape {B.shape}")
    cols, infos = [], []
    for j in range(B.shape[1]):
        x, info = _scipy_linalg.cg(A, B[:, j], None if x0 is None else np.asarray(x0)[:, j],
                                   rtol=rtol, atol=atol, maxiter=maxiter, M=M)
        cols.append(x)
        infos.append(info)
    X = np.stack(cols, axis=1) if cols else np.zeros_like(B, dtype=np.result_type(B, 1.0))
    return X, np.asarray(infos, dtype=np.int64)
