"""eigs' body on device data: restarted Arnoldi in Krylov-Schur form (Stewart).

The basis is a fixed ``(ncv + 1, n)`` tensor (classical Gram-Schmidt twice per step, as
eigsh's Lanczos); ``H`` the ``(ncv + 1, ncv)`` projection with A V = V_{+1} H.  A restart
cycle is one graph (``graph_function``): the previous restart's rotation of the basis, then
the Arnoldi steps in the ``device_loop`` kernel.  The host reads ``H`` once per cycle and
solves the small eigenproblem of ``H[:ncv]`` itself, as ARPACK does (LAPACK on at most a
few hundred numbers: on XLA the device Francis QR cost about 20 graph executions per
cycle), keeps the ``p`` most wanted Ritz pairs (complex pairs whole) and sends back the
rotation to an orthonormal basis Q of their invariant subspace (real for real problems:
real and imaginary parts of the Ritz vectors) with the restarted projection:
A (V Q) = (V Q)(Q^H H Q) + v_{ncv+1} (h_{ncv}^T Q), the Krylov-Schur decomposition.
ARPACK's convergence test: ``|h_{ncv}^T y| <= tol * max(eps**(2/3), |theta|)``."""

import numpy as np

from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._double_float import complex_of
from trnscipy._kernels import backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._common import pseudo_random, read_small, real_dtype

__all__ = ["krylov_schur", "wanted_order"]


def wanted_order(theta, which, real):
    """Indices of host eigenvalues ``theta`` from most to least wanted (ARPACK's which;
    LI/SI by |imag| for real problems, as dneupd)."""
    imag = np.abs(theta.imag) if real else theta.imag
    key = {"LM": -np.abs(theta), "SM": np.abs(theta), "LR": -theta.real, "SR": theta.real,
           "LI": -imag, "SI": imag}[which]
    return np.argsort(key, kind="stable")


def _keep(theta, order, p, real):
    """The first ``p`` of ``order``, one more or less so no complex pair is split."""
    if real and 0 < p < len(order):
        last, nxt = theta[order[p - 1]], theta[order[p]]
        if last.imag != 0 and np.isclose(nxt, np.conj(last), rtol=1e-8, atol=0):
            p = p + 1 if p + 1 < len(order) else p - 1
    return order[:p]


def krylov_schur(op, n, k, ncv, which, v0, maxiter, tol, real, traceable=False,
                 parts=False):
    """(theta, X, nconv, cycles): the k wanted Ritz values of ``op`` (host complex array,
    most wanted first, converged first), their unit Ritz vectors (device, complex columns;
    on a device without complex arithmetic assembled from their parts by data movement, or with
    ``parts`` those real and imaginary parts as a pair of real tensors), the number
    converged and the restart cycles.  The Arnoldi steps of a cycle run in the
    ``device_loop`` kernel (on XLA one ``While``, compiled once for every cycle) when
    ``op`` is pure tensor code (``traceable``), else in a Python loop."""
    device, dtype = v0.device, v0.dtype
    eps = torch.finfo(real_dtype(dtype)).eps
    tol = eps if tol == 0 else float(tol)
    materialize = backend(device).materialize
    loop = backend(device if traceable else torch.device("cpu")).device_loop
    V = torch.zeros((ncv + 1, n), dtype=dtype, device=device)
    V[0] = v0 / torch.sqrt((v0.conj() * v0).real.sum())
    p0 = k + (ncv - k) // 2

    def norm(w):
        return torch.sqrt((w.conj() * w).real.sum())

    def step(state, j):
        """Arnoldi step ``j`` (a device integer): row j + 1 of V, column j of H."""
        V, H = state
        rows = torch.arange(ncv + 1, device=device)
        w = op(V.index_select(0, j.reshape(1))[0])
        w = w if w.dtype == dtype else w.to(dtype)  # (ARPACK's precision)
        upto = (rows <= j).to(dtype)
        w0 = norm(w)
        h1 = (V.conj() @ w) * upto
        w = w - h1 @ V
        tiny = norm(w) <= 10 * eps * w0
        w = torch.where(tiny, pseudo_random(n, j, dtype, device), w)
        h2 = (V.conj() @ w) * upto
        w = w - h2 @ V
        beta = norm(w)
        V = torch.where((rows == j + 1)[:, None],
                        (w / torch.where(beta > 0, beta, torch.ones_like(beta)))[None, :], V)
        column = (h1 + torch.where(tiny, torch.zeros_like(h2), h2)
                  + (rows == j + 1).to(dtype) * torch.where(tiny, 0, beta).to(dtype))
        H = torch.where(rows[None, :ncv] == j, column[:, None], H)
        return V, H

    def cycle(V, packed, start, stop):
        """A restart cycle: the restart's rotation of the basis (``packed``: the host's
        (ncv + 1) x (ncv + 1) rotation G beside the restarted H), then Arnoldi steps
        ``start`` to ``ncv - 1`` (device integers: one graph for every start)."""
        V = packed[:, :ncv + 1] @ V
        return loop(step, (V, packed[:, ncv + 1:]), start, stop)

    run = backend(device).graph_function(cycle) if traceable else cycle
    step_at = {}  # step indices as device integers (data: one graph for every start)

    def at(i):
        if i not in step_at:
            step_at[i] = torch.tensor(i, dtype=torch.int64, device=device)
        return step_at[i]

    hdtype = np.complex128 if dtype.is_complex else np.float64
    packed = np.zeros((ncv + 1, 2 * ncv + 1), dtype=hdtype)
    packed[:, :ncv + 1] = np.eye(ncv + 1)
    start, cycles = 0, 0
    while True:
        V, H = run(V, torch.as_tensor(packed).to(device=device, dtype=dtype), at(start),
                   at(ncv))
        materialize([V, H])
        cycles += 1
        Hh = read_small(H)  # the only read of the cycle: (ncv + 1) x ncv numbers
        th, Y = np.linalg.eig(Hh[:ncv])
        bounds = np.abs(Hh[ncv] @ Y)
        order = wanted_order(th, which, real)
        conv = bounds <= tol * np.maximum(eps ** (2 / 3), np.abs(th))
        wanted = order[:k]
        nconv = int(conv[wanted].sum())
        if nconv >= k or cycles >= maxiter:
            break
        keep = _keep(th, order, p0, real)
        if real:  # real and imaginary parts of the kept Ritz vectors (pairs whole)
            cols = []
            for i in keep:
                if th[i].imag == 0:
                    cols.append(Y[:, i].real)
                elif th[i].imag > 0:
                    cols += [Y[:, i].real, Y[:, i].imag]
            S = np.stack(cols, 1)
        else:
            S = Y[:, keep]
        Q = np.linalg.qr(S)[0]
        p = Q.shape[1]
        packed[:] = 0
        packed[:p, :ncv] = Q.T  # the rows of (V^T Q)^T
        packed[p, ncv] = 1  # the residual direction
        packed[:p, ncv + 1 + np.arange(p)] = Q.conj().T @ Hh[:ncv] @ Q
        packed[p, ncv + 1:ncv + 1 + p] = Hh[ncv] @ Q
        start = p
    # the k wanted, converged first
    sel = sorted(wanted, key=lambda i: not conv[i])
    rdtype = real_dtype(dtype)
    Yr, Yi = (torch.as_tensor(np.ascontiguousarray(part)).to(device=device, dtype=rdtype)
              for part in (Y[:, sel].real, Y[:, sel].imag))
    if real:
        Xr, Xi = V[:ncv].mT @ Yr, V[:ncv].mT @ Yi
    else:
        Yr, Yi = Yr.to(dtype), Yi.to(dtype)
        X = V[:ncv].mT @ (Yr + 1j * Yi)
        Xr, Xi = X.real, X.imag
    nrm = torch.sqrt((Xr * Xr + Xi * Xi).sum(0))
    Xr, Xi = Xr / nrm, Xi / nrm
    if parts:
        materialize([Xr, Xi])
        return th[sel], (Xr, Xi), nconv, cycles
    if not capability(device_kind(device)).complex:  # (Neuron: data movement only)
        X = complex_of(Xr, Xi)
    else:
        X = Xr.to(dtype) + 1j * Xi.to(dtype)
    materialize([X])
    return th[sel], X, nconv, cycles

