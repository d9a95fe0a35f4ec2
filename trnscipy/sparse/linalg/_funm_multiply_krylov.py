"""funm_multiply_krylov on device data: SciPy 1.17's restarted Krylov method for
``f(tA) b`` (Afanasjew, Eiermann, Ernst and Guettel 2008), its restarts, stopping test and
result.

On CPU tensors SciPy's own function runs on zero-copy views (the "krylov" kernel).
Elsewhere the ``m`` Arnoldi steps of a restart cycle (Lanczos steps for
``assume_a='hermitian'``) run on the device in the ``device_loop`` kernel, the cycle one
replayed graph (``graph_function``; on XLA one ``While`` compiled once for every cycle).
The host reads the cycle's block of the projection H and its breakdown step (SciPy's
``||w|| < eps**2``) once per restart and calls ``f`` on the accumulated H as SciPy does
(``f`` is a function of NumPy matrices); the device adds ``||b|| V c`` to the result.
Arnoldi orthogonalizes by modified Gram-Schmidt once, as SciPy, unrolled over all m + 1
rows (those past the step are zero): O(m n) per step.  (Classical Gram-Schmidt twice left
residuals of order eps**2 where the Krylov space is exhausted, at times below SciPy's
breakdown threshold, where SciPy's are of order eps: the breakdowns differed.)
"""

import numpy as np
import scipy.sparse.linalg as _scipy
from scipy.linalg import norm as _host_norm
from scipy.sparse.linalg._isolve.iterative import _get_atol_rtol

from trnscipy._dispatch import dispatch
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._common import read_small
from trnscipy.sparse.linalg._isolve.utils import (
    _fast_matvec,
    as_operator,
    host_reads_free,
    inner,
    norm,
    solver_kernel,
)

__all__ = ["funm_multiply_krylov"]

_NAME = "scipy.sparse.linalg.funm_multiply_krylov"


@dispatch(_scipy.funm_multiply_krylov, double_float=("neuron",))
@solver_kernel(_scipy.funm_multiply_krylov, operators=False)
def funm_multiply_krylov(f, A, b, *, assume_a="general", t=1.0, atol=0.0, rtol=1e-6,
                         restart_every_m=None, max_restarts=20):
    hermitian, n, m, max_restarts = checked(assume_a, b, restart_every_m, max_restarts)
    b_dtype = to_numpy_dtype(b.dtype)
    bnorm = float(norm(b if b_dtype.kind in "fc" else b.to(torch.float64)))
    atol, _ = _get_atol_rtol("funm_multiply_krylov", bnorm, atol, rtol)
    if bnorm == 0:
        return b.clone()
    op, dtype = _operator(A, b)
    eps2 = float(np.finfo(b_dtype.char).eps) ** 2  # (integer b: SciPy's ValueError)
    run = _Cycle(op, m, eps2, hermitian, dtype, b.device)

    mmax = m * max_restarts
    H = np.zeros((mmax + 1, mmax), dtype=dtype)
    start = torch.zeros((m + 1, n), dtype=to_torch_dtype(dtype), device=b.device)
    start[m] = b.to(start.dtype) / bnorm
    V, j = run(start, H[:m + 1, :m])
    fH = np.asarray(f(t * H[:j, :j]))
    y = bnorm * _combine(fH[:, 0], V[:j])
    if j < m:  # breakdown: the Krylov space is invariant
        return y
    update_norm = _host_norm(bnorm * fH[:, 0])
    restart = 1
    while restart < max_restarts and update_norm > atol:
        begin, end = restart * m, (restart + 1) * m
        V, j = run(V, H[begin:end + 1, begin:end])
        if j < m:
            end = begin + j
            fH = np.asarray(f(t * H[:end, :end]))
            c = fH[begin:end, 0]
            # SciPy 1.17 multiplies all m basis vectors by these j < m coefficients here
            # and fails with NumPy's error; so does this.
            raise ValueError(f"shapes ({n},{m}) and ({c.shape[0]},) not aligned: "
                             f"{m} (dim 1) != {c.shape[0]} (dim 0)")
        fH = np.asarray(f(t * H[:end, :end]))
        c = fH[begin:end, 0]
        y = y + bnorm * _combine(c, V[:m])
        backend(y.device).materialize([y])
        update_norm = _host_norm(bnorm * c)
        restart += 1
    return y


def checked(assume_a, b, restart_every_m, max_restarts):
    """SciPy's argument checks: (hermitian, n, m, max_restarts)."""
    if assume_a not in {"hermitian", "general", "her", "gen"}:
        raise ValueError(f"{_NAME}: {assume_a} is not a recognized matrix structure")
    hermitian = assume_a in ("her", "hermitian")
    if len(b.shape) != 1:
        raise ValueError(f"{_NAME}: argument 'b' must be a 1D array.")
    n = b.shape[0]
    m = int(min(20, n) if restart_every_m is None else restart_every_m)
    max_restarts = int(max_restarts)
    if m <= 0:
        raise ValueError(f"{_NAME}: argument 'restart_every_m' must be positive.")
    if max_restarts <= 0:
        raise ValueError(f"{_NAME}: argument 'max_restarts' must be positive.")
    return hermitian, n, m, min(max_restarts, int(n / m) + 1)


def _operator(A, b):
    """``A`` as an operator on vectors of the working dtype (SciPy's
    ``np.common_type(A, b)``), and that dtype."""
    from array_api_compat import is_torch_array

    from trnscipy.sparse.linalg._interface import announce_host_operators

    A_dtype = getattr(A, "dtype", None)
    A_dtype = np.float64 if A_dtype is None else to_numpy_dtype(A_dtype)
    dtype = np.dtype(np.common_type(np.empty(0, A_dtype), np.empty(0, to_numpy_dtype(b.dtype))))
    if A_dtype != dtype and is_torch_array(A):
        A = A.to(to_torch_dtype(dtype))
    elif A_dtype != dtype and getattr(A, "_trnscipy_device_object", False) and \
            hasattr(A, "tocsr"):
        A = A.astype(dtype)
    op = as_operator(A, b.device)
    n = b.shape[0]
    if tuple(op.shape) != (n, n):
        raise ValueError(f"shapes of A {tuple(op.shape)} and b {(n,)} are incompatible")
    if not host_reads_free(b.device):  # on the CPU a host operator copies nothing
        announce_host_operators("scipy.sparse.linalg.LinearOperator", op)
    return op, dtype


def _combine(c, V):
    """``c @ V`` on V's device, in NumPy's result dtype of ``c`` and V."""
    dtype = to_torch_dtype(np.result_type(c.dtype, to_numpy_dtype(V.dtype)))
    c = torch.as_tensor(np.ascontiguousarray(c)).to(device=V.device, dtype=dtype)
    return c @ V.to(dtype)


class _Cycle:
    """A restart cycle: from the last row of the previous basis (rows ``m + 1``), ``m``
    Arnoldi or Lanczos steps as SciPy's, stopped at the first breakdown.  Returns the new
    basis and the breakdown step (``m``: none) and writes the cycle's (m + 1) x m block of
    H into the host array given."""

    def __init__(self, op, m, eps2, hermitian, dtype, device):
        from trnscipy.sparse.linalg._interface import MatrixLinearOperator

        self.m, self.dtype = m, dtype
        self.matvec = _fast_matvec(op, to_torch_dtype(dtype))
        traceable = type(op) is MatrixLinearOperator or getattr(op, "pure_tensor_code", False)
        self.loop = backend(device if traceable else torch.device("cpu")).device_loop
        self.step = self._lanczos if hermitian else self._arnoldi
        self.eps2 = eps2
        self.rows = torch.arange(m + 1, device=device)
        self.run = backend(device).graph_function(self._cycle) if traceable else self._cycle

    def __call__(self, V, H_block):
        V, packed = self.run(V)
        backend(V.device).materialize([V, packed])
        packed = read_small(packed)  # the only read of the cycle
        H_block[...] = packed[:-1].reshape(H_block.shape).astype(self.dtype)
        return V, int(packed[-1].real)

    def _cycle(self, V):
        m, rows = self.m, self.rows
        start = V.index_select(0, rows[m:])
        V = torch.where(rows[:, None] == 0, start, torch.zeros_like(V))
        H = torch.zeros((m + 1, m), dtype=V.dtype, device=V.device)
        stop = torch.full((1,), m, dtype=torch.int64, device=V.device)
        V, H, stop = self.loop(self.step, (V, H, stop), 0, m)
        return V, torch.cat([H.reshape(-1), stop.to(H.dtype)])

    def _record(self, V, stop, j, w, beta):
        """The step's new basis vector ``w / beta`` (none at a breakdown) and the
        breakdown flag; steps after a breakdown change nothing."""
        live = stop == self.m
        brk = beta < self.eps2
        at = (self.rows == j + 1)[:, None] & live & ~brk
        V = torch.where(at, (w / torch.where(brk, 1, beta)).to(V.dtype), V)
        return V, torch.where(live & brk, j, stop), live, brk

    def _arnoldi(self, carry, j):
        V, H, stop = carry
        w = self.matvec(V.index_select(0, j.reshape(1))[0]).to(V.dtype)
        h = []
        for i in range(self.m + 1):  # modified Gram-Schmidt (rows past j are zero: no-ops)
            h.append(inner(V[i], w))
            w = w - h[-1] * V[i]
        beta = norm(w)
        column = torch.stack(h) + (self.rows == j + 1).to(V.dtype) * beta.to(V.dtype)
        V, new_stop, live, _ = self._record(V, stop, j, w, beta)
        cols = self.rows[:-1]
        H = torch.where((cols == j)[None, :] & live, column[:, None], H)
        return V, H, new_stop

    def _lanczos(self, carry, j):
        V, H, stop = carry
        rows, cols = self.rows[:, None], self.rows[None, :-1]
        at = j.reshape(1)
        prev = (j - 1).clamp(min=0).reshape(1)
        v = V.index_select(0, at)[0]
        beta_prev = torch.where(j > 0, H.index_select(0, at).index_select(1, prev)[0, 0], 0)
        w = self.matvec(v).to(V.dtype) - beta_prev * V.index_select(0, prev)[0]
        alpha = inner(w, v)
        w = w - alpha * v
        beta = norm(w)
        V, new_stop, live, brk = self._record(V, stop, j, w, beta)
        beta = beta.to(V.dtype)
        H = torch.where((rows == j) & (cols == j) & live, alpha, H)
        H = torch.where((rows == j + 1) & (cols == j) & live, beta, H)
        H = torch.where((rows == j) & (cols == j + 1) & live & ~brk, beta, H)
        return V, H, new_stop
