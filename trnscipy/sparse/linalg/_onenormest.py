"""onenormest on device operators: SciPy 1.17's block 1-norm estimator (Higham and
Tisseur), the products and n-length work on the device.

The random +-1 columns come from NumPy's global generator exactly as SciPy draws them,
so with the same seed the estimate, v and w equal SciPy's.  The loop (at most
``itmax`` iterations) reads t column sums, the parallel-column tests (t x t dot
products) and the sorted index list on the host each iteration.  Differs from SciPy:
``est`` is a 0-d device tensor.
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import call_device, dispatch
from trnscipy._dtypes import absolute
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on

__all__ = ["onenormest"]


def _operator(A, device):
    from trnscipy.sparse.linalg._interface import _device_operator

    return _device_operator(A, device)


def _real(device):
    """SciPy's float64 for the probe vectors, float32 where the device has no float64."""
    from trnscipy._capabilities import capability
    from trnscipy._device import device_kind

    return torch.float64 if capability(device_kind(device)).float64 else torch.float32


def _elementary(n, i, device):
    v = torch.zeros(n, dtype=_real(device), device=device)
    v[i] = 1
    return v


def _sign_round_up(Y):
    Y = torch.where(Y == 0, torch.ones_like(Y), Y)
    return Y / absolute(Y)


def _random_signs(n, device, dtype):
    return torch.from_numpy(np.random.randint(0, 2, size=n) * 2 - 1).to(dtype).to(device)


def _parallel(dots, n):
    """SciPy's vectors_are_parallel for +-1 columns, from their dot products."""
    return np.asarray(dots) == n


def _resample(X, i, n, others=None):
    """SciPy's column_needs_resampling / resample_column loop for column i of X."""
    count = 0
    while True:
        v = X[:, i]
        against = X[:, :i] if others is None else torch.cat([X[:, :i], others], dim=1)
        if against.shape[1] == 0 or not _parallel((v @ against).real.tolist(), n).any():
            return count
        X[:, i] = _random_signs(n, X.device, X.dtype)
        count += 1


def _core(A, t, itmax):
    """SciPy's _onenormest_core (algorithm 2.4) on the device."""
    if itmax < 2:
        raise ValueError("at least two iterations are required")
    if t < 1:
        raise ValueError("at least one column is required")
    n = A.shape[0]
    if t >= n:
        raise ValueError("t should be smaller than the order of A")
    AH = A.H
    device = A.device
    X = torch.ones((n, t), dtype=_real(device), device=device)
    if t > 1:
        for i in range(1, t):
            X[:, i] = _random_signs(n, device, X.dtype)
        for i in range(t):
            _resample(X, i, n)
    X = X / float(n)
    ind_hist = np.zeros(0, dtype=np.intp)
    est_old = 0
    S = torch.zeros((n, t), dtype=_real(device), device=device)
    k = 1
    ind = None
    w = ind_best = est_old_t = None
    while True:
        Y = A.matmat(X)
        mags = absolute(Y).sum(dim=0)
        mags_h = np.asarray(mags.tolist())
        est_h = mags_h.max()
        best_j = int(np.argmax(mags_h))
        est = mags[best_j]
        if est_h > est_old or k == 2:
            if k >= 2:
                ind_best = ind[best_j]
            w = Y[:, best_j]
        if k >= 2 and est_h <= est_old:
            est = est_old_t
            break
        est_old, est_old_t = est_h, est
        S_old = S
        if k > itmax:
            break
        S = _sign_round_up(Y)
        S_old = S_old.to(S.dtype)
        if np.all(np.any(_parallel((S.T @ S_old).real.tolist(), n), axis=1)):
            break
        if t > 1:
            for i in range(t):
                _resample(S, i, n, S_old)
        Z = AH.matmat(S)
        h = absolute(Z).max(dim=1).values
        if k >= 2 and bool(h.max() == h[ind_best]):
            break
        order = torch.argsort(h, stable=True).flip(0)[:t + len(ind_hist)]
        ind = np.asarray(order.tolist(), dtype=np.intp)
        if t > 1:
            if np.isin(ind[:t], ind_hist).all():
                break
            seen = np.isin(ind, ind_hist)
            ind = np.concatenate((ind[~seen], ind[seen]))
        X = torch.zeros((n, t), dtype=_real(device), device=device)
        X[torch.as_tensor(ind[:t].copy()).to(device), torch.arange(t, device=device)] = 1
        new_ind = ind[:t][~np.isin(ind[:t], ind_hist)]
        ind_hist = np.concatenate((ind_hist, new_ind))
        k += 1
    return est, _elementary(n, int(ind_best), device), w


@dispatch(_scipy.onenormest, double_float=("neuron",))
def onenormest(A, t=2, itmax=5, compute_v=False, compute_w=False):
    device = call_device((A,))
    return kernel("sparse.linalg.onenormest", device)(A, t, itmax, compute_v, compute_w)


@register("sparse.linalg.onenormest", "generic")
def _onenormest(A, t=2, itmax=5, compute_v=False, compute_w=False):
    """onenormest on the device operator (on Neuron, float64 matrices: ``_refine_norm``)."""
    device = call_device((A,))
    A = _operator(A, device)
    if A.shape[0] != A.shape[1]:
        raise ValueError("expected the operator to act like a square matrix")
    n = A.shape[1]
    if t >= n:
        E = A.matmat(torch.eye(n, dtype=_real(device), device=device))
        col_abs_sums = absolute(E).sum(dim=0)
        j = int(torch.argmax(col_abs_sums))
        est, v, w = col_abs_sums[j], _elementary(n, j, device), E[:, j]
    else:
        est, v, w = _core(A, t, itmax)
    # SciPy's float64 (complex128); a device without float64 holds the float32 values
    # exactly (double-float)
    est, v, w = (tensor_on(x, device, torch.complex128 if x.is_complex() else torch.float64)
                 for x in (est, v, w))
    if compute_v or compute_w:
        result = (est,)
        if compute_v:
            result += (v,)
        if compute_w:
            result += (w,)
        return result
    return est
