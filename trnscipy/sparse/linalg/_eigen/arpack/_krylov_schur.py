"""eigs' body on device data: restarted Arnoldi in Krylov-Schur form (Stewart).

The basis is a fixed ``(ncv + 1, n)`` tensor (classical Gram-Schmidt twice per step, as
eigsh's Lanczos); ``H`` the ``(ncv + 1, ncv)`` projection with A V = V_{+1} H.  At a
restart the small eigenproblem of ``H[:ncv]`` runs on the device (trnscipy's eig: the
Francis QR on XLA), the host reads its ``ncv`` Ritz values and residual estimates once per
cycle, keeps the ``p`` most wanted (complex pairs whole), and the basis shrinks to an
orthonormal basis of their invariant subspace (real for real problems: real and imaginary
parts of the Ritz vectors, orthonormalized by the device QR):
A (V Q) = (V Q)(Q^H H Q) + v_{ncv+1} (h_{ncv}^T Q), the Krylov-Schur decomposition.
ARPACK's convergence test: ``|h_{ncv}^T y| <= tol * max(eps**(2/3), |theta|)``.
"""

import numpy as np

from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._eigen._common import pseudo_random, real_dtype

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


def krylov_schur(op, n, k, ncv, which, v0, maxiter, tol, real, traceable=False):
    """(theta, X, nconv, cycles): the k wanted Ritz values of ``op`` (host complex array,
    most wanted first, converged first), their unit Ritz vectors (device, complex columns),
    the number converged and the restart cycles.  The Arnoldi steps of a cycle run in the
    ``device_loop`` kernel (on XLA one ``While``, compiled once for every cycle) when
    ``op`` is pure tensor code (``traceable``), else in a Python loop."""
    device, dtype = v0.device, v0.dtype
    eps = torch.finfo(real_dtype(dtype)).eps
    tol = eps if tol == 0 else float(tol)
    materialize = kernel("materialize", device)
    eig_pairs = kernel("linalg._eig_pairs", device)
    qr = kernel("linalg.qr", device)
    loop = kernel("device_loop", device if traceable else torch.device("cpu"))
    V = torch.zeros((ncv + 1, n), dtype=dtype, device=device)
    V[0] = v0 / torch.sqrt((v0.conj() * v0).real.sum())
    H = torch.zeros((ncv + 1, ncv), dtype=dtype, device=device)
    p0 = k + (ncv - k) // 2

    def norm(w):
        return torch.sqrt((w.conj() * w).real.sum())

    def step(state, j):
        """Arnoldi step ``j`` (a device integer): row j + 1 of V, column j of H."""
        V, H = state
        rows = torch.arange(ncv + 1, device=device)
        w = op(V.index_select(0, j.reshape(1))[0])
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

    step_at = {}  # step indices as device integers (data: one graph for every start)

    def at(i):
        if i not in step_at:
            step_at[i] = torch.tensor(i, dtype=torch.int64, device=device)
        return step_at[i]

    start, cycles = 0, 0
    while True:
        V, H = loop(step, (V, H), at(start), at(ncv))
        materialize([V, H])
        # the small eigenproblem as real (re, im) pairs: complex XLA tensors did not survive
        # a later transfer to the host (torch-xla 2.9)
        wr, wi, yr, yi = eig_pairs(H[:ncv].contiguous())
        h = H[ncv]
        if real:
            res = torch.sqrt((h @ yr) ** 2 + (h @ yi) ** 2)
        else:
            res = (h @ (yr + 1j * yi)).abs()
        materialize([wr, wi, yr, yi, res])
        cycles += 1
        th = np.asarray(to_host(wr)) + 1j * np.asarray(to_host(wi))
        bounds = np.asarray(to_host(res))
        order = wanted_order(th, which, real)
        conv = bounds <= tol * np.maximum(eps ** (2 / 3), np.abs(th))
        wanted = order[:k]
        nconv = int(conv[wanted].sum())
        if nconv >= k or cycles >= maxiter:
            break
        keep = _keep(th, order, p0, real)
        p = len(keep)
        index = torch.as_tensor(keep, device=device)
        Sr, Si = yr.index_select(1, index), yi.index_select(1, index)
        if real:
            cols = []
            for i, idx in enumerate(keep):
                if th[idx].imag == 0:
                    cols.append(Sr[:, i])
                elif th[idx].imag > 0:
                    cols += [Sr[:, i], Si[:, i]]
            S = torch.stack(cols, 1)
        else:
            S = Sr + 1j * Si
        Q = qr(S.contiguous(), mode="economic")[0]
        V[:p] = Q.mT @ V[:ncv]  # the rows of (V^T Q)^T
        V[p] = V[ncv]
        Hp = Q.mH @ H[:ncv] @ Q
        row = H[ncv] @ Q
        H.zero_()
        H[:p, :p] = Hp
        H[p, :p] = row
        start = p
        materialize([V, H])
    # the k wanted, converged first
    sel = sorted(wanted, key=lambda i: not conv[i])
    index = torch.as_tensor(np.asarray(sel), device=device)
    Yr, Yi = yr.index_select(1, index), yi.index_select(1, index)
    if real:
        Xr, Xi = V[:ncv].mT @ Yr, V[:ncv].mT @ Yi
    else:
        X = V[:ncv].mT @ (Yr + 1j * Yi)
        Xr, Xi = X.real, X.imag
    nrm = torch.sqrt((Xr * Xr + Xi * Xi).sum(0))
    cdtype = (Xr[:1, :1] + 1j * Xi[:1, :1]).dtype
    X = (Xr / nrm).to(cdtype) + 1j * (Xi / nrm).to(cdtype)
    materialize([X])
    return th[sel], X, nconv, cycles
