"""cg for many right-hand sides at once: a trnscipy extension (SciPy's cg takes one).

``cg_batched(A, B)`` solves ``A X = B`` column by column with SciPy's cg iteration: each
column keeps its own scalars and its own stop test (SciPy's, ``||r|| < max(atol, rtol
||b||)``), so each column's iterates are the ones ``cg(A, B[:, j])`` computes (to rounding:
the columns' products are one SpMM): the iteration is ``iterative.cg_iteration``'s, over a space of
n x k blocks whose inner products are per column.  The k columns share one product
``A @ P`` and one preconditioner application per iteration.  On graph devices the iterations are one
device loop that leaves when every column has stopped (XLA: one execution per solve).
This is not block CG (O'Leary), whose columns share one Krylov space: independent
columns keep SciPy's per-vector results.
"""

import numpy as np
import scipy.sparse.linalg as _scipy_linalg
from array_api_compat import is_torch_array

from trnscipy._capabilities import capability, runs_on_device
from trnscipy._device import device_kind
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import backend
from trnscipy._torch import torch
from trnscipy._transfer import to_device, to_host
from trnscipy.sparse.linalg._isolve import utils
from trnscipy.sparse.linalg._isolve.iterative import cg_iteration

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


class _Columns:
    """The iterations' vector space (``utils.Local``'s interface) for n x k blocks: inner
    products and norms per column (k numbers), products as one SpMM."""

    def __init__(self, matvec, psolve):
        self.matvec, self.psolve = matvec, psolve

    @staticmethod
    def dot(a, b):
        return (a.conj() * b).sum(0)

    def norm(self, a):
        return self.dot(a, a).real.sqrt()


def _solve(op, pre, B, X, have_x0, rtol, atol, maxiter):
    device = B.device
    V = _Columns(op.matmat, (lambda R: R) if pre is None else pre.matmat)
    bnrm = V.norm(B)
    tol = torch.clamp(rtol * bnrm, min=atol)
    zero_b = bnrm == 0
    # SciPy's cg returns b itself (zero) for a zero right-hand side, whatever x0 says
    X = torch.where(zero_b, torch.zeros_like(X), X)
    R = B - op.matmat(X) if have_x0 else B.clone()
    info = torch.where(zero_b, torch.zeros_like(bnrm, dtype=torch.int64),
                       torch.full_like(bnrm, maxiter, dtype=torch.int64))
    live = ~zero_b

    def iterate(carry, first):
        # cg_iteration with the stop flags and the iterate's mask per column (LazyStep's
        # operations broadcast over the columns); a stopped column's working vectors may
        # go to nan (0/0), which its mask and the column-wise products keep to itself
        *state, live, info, _ = carry
        s = utils.LazyStep(live, info)
        state = cg_iteration(V, s, tuple(state), first, tol)
        return (*state, s.live, s.info, ~s.live.any())

    carry = (X, R, torch.zeros_like(B), torch.ones_like(bnrm).to(B.dtype), live, info,
             ~live.any())
    if maxiter > 0:
        carry = iterate(carry, True)
    kind = device_kind(device)
    rest = max(maxiter - 1, 0)
    if utils.host_reads_free(device) or not utils.traceable(op, pre):
        # eager devices, or products that read on the host: a Python loop, the stop flag
        # read after every iteration
        for _ in range(rest):
            utils.sync(device)
            if bool(carry[-1]):
                break
            carry = iterate(carry, False)
    else:
        loop = backend(device).device_loop
        # XLA: one While to the last column's stop; elsewhere blocks between host reads
        block = max(rest if capability(kind).device_while else utils.CHECK_EVERY, 1)
        for start in range(0, rest, block):
            carry = loop(lambda c, _: iterate(c, False), carry, start,
                         min(rest, start + block), until=6)
            if start + block < rest and bool(carry[-1]):
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
