"""gcrotmk on device data: SciPy 1.17's GCROT(m,k), its options and return codes.

Two graph executions per outer iteration: its read and the inner flexible GMRES of
``lgmres`` (C projected out; one replayed graph whatever len(CU), its Arnoldi steps a
device loop); the host reads the outer flags once per outer iteration,
so the decisions SciPy takes after an outer step (discard a failed step,
update ``CU``) are applied at the next read.  A given ``CU`` is recycled as SciPy
does (column-pivoted QR of its C vectors, here Gram-Schmidt with column pivoting
on the device: one host read for the number of columns kept); ``CU`` is filled in
place with device tensors.  ``truncate='smallest'`` uses torch.linalg.svd of a
k x k matrix.
"""

import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve._arnoldi import Arnoldi, back_substitute
from trnscipy.sparse.linalg._isolve.lgmres import _fgmres, min_norm
from trnscipy.sparse.linalg._isolve.utils import (
    check_atol,
    dot,
    host_reads_free,
    host_value,
    make_system,
    norm,
    solver_kernel,
    stop_tolerance,
    sync,
)

__all__ = ["gcrotmk"]

@dispatch(_scipy.gcrotmk, double_float=("neuron",), grad=_autograd.krylov)
@solver_kernel(_scipy.gcrotmk)
def gcrotmk(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=1000, M=None, callback=None,
            m=20, k=None, CU=None, discard_C=False, truncate="oldest"):
    system = make_system(A, M, x0, b)
    bvec, device, eps, dtype = system.b, system.device, system.eps, system.dtype
    matvec = system.matvec
    psolve = system.M.matvec if system.M is not None else None
    finite = torch.isfinite(bvec).all()
    sync(device)
    if not bool(finite):
        raise ValueError("RHS must contain only finite numbers")
    if truncate not in ("oldest", "smallest"):
        raise ValueError(f"Invalid value for 'truncate': {truncate!r}")
    if CU is None:
        CU = []
    if k is None:
        k = m
    x = system.x
    r = bvec.clone() if x0 is None else bvec - matvec(x)
    b_norm = norm(bvec)
    tol = stop_tolerance(check_atol("gcrotmk", atol), rtol, b_norm)
    sync(device)
    if float(b_norm) == 0:
        return bvec, 0
    if discard_C:
        CU[:] = [(None, u) for _, u in CU]
    if CU:
        _recycle(CU, matvec, dtype)
        for c, u in CU:
            yc = dot(c, r)
            x = x + yc * u
            r = r - yc * c
    # (a host function in M or A cannot be replayed as a graph: the host loop runs then,
    # stopping at the inner stop as SciPy, not after all m + k products)
    host = host_reads_free(device) or not system.traceable
    # a device loop's bounds are graph data (XLA's While): one inner graph whatever the
    # step count; elsewhere a graph unrolls its loops, and one step count per len(CU)
    # would be a graph per outer iteration until CU is full (none replayed)
    data_bounds = capability(device_kind(device)).device_while
    # room for the most C vectors and Arnoldi steps there will be (zero vectors fill the
    # C, U slots not in use), so that shapes and graphs stay the same as CU fills up
    n_cs = max(k, len(CU))
    arnoldi = Arnoldi(matvec, m + n_cs, eps, dtype, device, rpsolve=psolve, flexible=True,
                      n_cs=n_cs, breakdown="fgmres", traceable=system.traceable)
    # zero vectors filling the C and U slots not in use (distinct tensors, so that the
    # graph's inputs are the same in number whatever len(CU))
    fillers, c_fillers = ([torch.zeros_like(bvec) for _ in range(n_cs)] for _ in range(2))
    pending = None  # (failed, step_ok, (cx, ux), truncated CU) of the last outer step
    j_outer = -1
    converged = False
    redo = None  # (rank deficient, min_norm's arguments, _advance's) of a graph inner solve

    def start(r, x, first):
        beta = norm(r)
        small = beta <= tol  # (flags computed in the graph: the host reads data only)
        true = None
        if not first:
            r_true = bvec - matvec(x)
            beta_true = norm(r_true)
            true = (r_true, beta_true, beta_true <= tol)
        # (computed before the read: the inner solve's inputs are then device data)
        return beta, small, true, r / beta, tol / beta

    for j_outer in range(maxiter):
        beta, small, true, v0, ptol = start(r, x, not (j_outer > 0 or CU))
        sync(device)
        if redo is not None and bool(redo[0]):  # SciPy's lstsq of a rank-deficient R
            r, x, pending = _advance(min_norm(*redo[1]), *redo[2])
            beta, small, true, v0, ptol = start(r, x, False)
            sync(device)
        redo = None
        if pending is not None:
            if _apply_pending(pending, CU, k, truncate):
                j_outer -= 1  # SciPy leaves the loop in the failed iteration
                break
        if callback is not None:
            callback(host_value(x))
        if bool(small) and true is not None:
            r, beta, small = true
            v0, ptol = r / beta, tol / beta
        if bool(small):
            converged = True
            break
        ml = m + max(k - len(CU), 0)
        # (graph devices: zero fillers for the C and U not in use, so that the graph is
        # the same whatever len(CU); the step count is device-loop data)
        cs = [c for c, _ in CU] + ([] if host else c_fillers[len(CU):])
        inner, extra = ml, None
        if not (host or data_bounds):  # (CUDA) m steps, then k masked to ml - m
            inner, extra = m, (torch.tensor([ml - m], device=device), k) if ml > m else None
        y, zs, vs, H, B, R, steps, _, bad, check = _fgmres(arnoldi, v0, inner, ptol, host,
                                                           cs=cs, extra=extra)
        us = None
        if n_cs and (CU or not host):  # (k = 0 with no CU: no C vectors, no B)
            us = torch.stack([u for _, u in CU] + fillers[len(CU):B.shape[0]])
        smallest = None
        if truncate == "smallest" and len(CU) >= k and CU:
            smallest = _smallest(CU, R, B[:len(CU)], k)
        step = (r, x, zs, vs, H, B, us, bad, smallest)
        if check is not None:  # (deficient, min_norm's arguments, _advance's)
            redo = (check[0], (R, check[1], steps, beta), step)
        r, x, pending = _advance(y * beta, *step)
    else:
        sync(device)
        if redo is not None and bool(redo[0]):
            r, x, pending = _advance(min_norm(*redo[1]), *redo[2])
            sync(device)
        if _apply_pending(pending, CU, k, truncate):
            j_outer = maxiter - 1
    CU.append((None, x.clone()))
    if discard_C:
        CU[:] = [(None, u) for _, u in CU]
    return x, 0 if converged else j_outer + 1


def _advance(y, r, x, zs, vs, H, B, us, bad, smallest):
    """An outer step from the inner solution ``y``: the new r, x and the pending
    (failed, step ok, (c, u), truncated CU) that the next host read applies."""
    ux = y @ zs
    if us is not None:
        ux = ux - (B @ y) @ us
    cx = (y @ H) @ vs
    alpha = 1 / norm(cx)
    ok = ~bad & torch.isfinite(alpha)
    cx = cx * alpha
    ux = ux * alpha
    gamma = dot(cx, r)
    return (torch.where(ok, r - gamma * cx, r), torch.where(ok, x + gamma * ux, x),
            (bad, ok, (cx, ux), smallest))


def _apply_pending(pending, CU, k, truncate):
    """Apply the last outer step's CU update; True if that step failed (SciPy: break)."""
    bad, ok, new, smallest = pending
    if bool(bad):
        return True
    if not bool(ok):
        return False  # SciPy: ``continue`` (no update)
    if truncate == "oldest":
        while len(CU) >= k and CU:
            del CU[0]
    elif smallest is not None:
        CU[:] = smallest
    CU.append(new)
    return False


def _smallest(CU, R, B, k):
    """SciPy's 'smallest' truncation: keep the k-1 directions of CU that matter most."""
    Rinv = back_substitute(R, torch.eye(R.shape[0], dtype=R.dtype, device=R.device))
    D = B @ Rinv
    W = torch.linalg.svd(D)[0]
    new_CU = []
    for w in W[:, :k - 1].T:
        c = sum((wi * ci for wi, (ci, _) in zip(w[1:], CU[1:], strict=True)), CU[0][0] * w[0])
        u = sum((wi * ui for wi, (_, ui) in zip(w[1:], CU[1:], strict=True)), CU[0][1] * w[0])
        for cp, up in new_CU:
            a = dot(cp, c)
            c = c - a * cp
            u = u - a * up
        a = norm(c)
        new_CU.append((c * (1.0 / a), u * (1.0 / a)))
    return new_CU


def _recycle(CU, matvec, dtype):
    """SciPy's preparation of a given CU, in place: C = [c, or A u where c is None]
    (the None ones first), C P = Q R by a column-pivoted QR, then c_j = Q[:, j] and
    u_j = (u_P[j] - sum_{i<j} R[i, j] u_i) / R[j, j] (so that A u_j = c_j still holds:
    what SciPy's in-place BLAS updates compute) for the leading j with
    |R[j, j]| >= 1e-12 |R[0, 0]|, in reverse order."""
    CU.sort(key=lambda cu: cu[0] is not None)
    C = torch.stack([(matvec(u) if c is None else c).to(dtype) for c, u in CU], dim=1)
    U = torch.stack([u.to(dtype) for _, u in CU])
    Q, R, P = _qr_pivoted(C)
    diag = torch.diagonal(R).abs()
    small = diag < 1e-12 * diag[0]
    kept = int(torch.where(small.any(), small.to(torch.int64).argmax(), len(CU)))
    new_us = kernel("linalg._trsm", C.device)(R, P.T @ U, upper=True, trans=1)
    CU[:] = [(Q[:, j], new_us[j]) for j in range(kept)][::-1]


def _qr_pivoted(C):
    """Column-pivoted QR of the tall C (n x p, p small): C P = Q R with P a permutation
    matrix, |R[0,0]| >= |R[1,1]| >= ... (the pivot: the column of largest norm left
    after removing the directions chosen so far, as LAPACK's geqp3), by Gram-Schmidt
    applied twice.  Fixed shapes, pivots chosen on the device."""
    n, p = C.shape
    idx = torch.arange(p, device=C.device)
    W = C
    chosen = torch.zeros(p, dtype=torch.bool, device=C.device)
    qs, picks = [], []
    for _ in range(p):
        norms = (W.conj() * W).real.sum(0)
        pick = idx == torch.where(chosen, -1, norms).argmax()
        chosen = chosen | pick
        q = W @ pick.to(C.dtype)
        if qs:
            Qj = torch.stack(qs, dim=1)
            q = q - Qj @ (Qj.conj().T @ q)
        q = q * (1 / norm(q))
        W = W - q[:, None] * (q.conj() @ W)[None, :]
        qs.append(q)
        picks.append(pick)
    Q = torch.stack(qs, dim=1)
    P = torch.stack(picks, dim=1).to(C.dtype)
    return Q, torch.triu(Q.conj().T @ (C @ P)), P
