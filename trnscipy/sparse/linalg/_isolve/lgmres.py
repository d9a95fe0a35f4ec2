"""lgmres on device data: SciPy 1.17's LGMRES (flexible inner GMRES augmented with
the last ``outer_k`` corrections), its options and return codes.

One graph execution per outer iteration: the inner Arnoldi steps run masked on
graph devices (host checks on the CPU) and the host reads the outer flags once
per outer iteration.  On graph devices the outer vectors take ``outer_k`` fixed
slots (the inner loop stops before the empty ones), so one graph serves every
outer iteration as ``outer_v`` fills up (with the default ``prepend_outer_v``
and ``store_outer_Av``).  Differs from SciPy: the Arnoldi basis is orthogonalised by
classical Gram-Schmidt applied twice (SciPy: modified Gram-Schmidt) and the
small least-squares problem is solved by Givens rotations and a triangular solve
(SciPy: qr_insert and lstsq); equal in exact arithmetic.  ``outer_v`` receives
device tensors.
"""

import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import dispatch
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.iterative import (
    _back_substitute,
    _givens_column,
    _inner_stop,
)
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

__all__ = ["lgmres"]


@dispatch(_scipy.lgmres)
@solver_kernel(_scipy.lgmres)
def lgmres(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=1000, M=None, callback=None,
           inner_m=30, outer_k=3, outer_v=None, store_outer_Av=True, prepend_outer_v=False):
    system = make_system(A, M, x0, b)
    bvec, device, eps, dtype = system.b, system.device, system.eps, system.dtype
    matvec = system.matvec
    psolve = system.M.matvec if system.M is not None else (lambda v: v)
    finite, b_norm = torch.isfinite(bvec).all(), norm(bvec)
    sync(device)
    if not bool(finite):
        raise ValueError("RHS must contain only finite numbers")
    tol = stop_tolerance(check_atol("lgmres", atol), rtol, b_norm)
    if float(b_norm) == 0:
        return bvec, 0
    if outer_v is None:
        outer_v = []
    host = host_reads_free(device)
    x = system.x
    pfac = torch.ones((), dtype=b_norm.dtype, device=device)
    # graph devices: the outer vectors take ``outer_k`` fixed slots (distinct zero vectors
    # fill the empty ones, the inner loop stops before them), so every outer iteration
    # runs one graph whatever len(outer_v) is
    fillers = [torch.zeros_like(bvec) for _ in range(2 * outer_k)]
    pending = None  # (bad y, nx > 0, new outer vector) of the previous outer iteration

    for k_outer in range(maxiter):
        r_outer = matvec(x) - bvec
        r_norm = norm(r_outer)
        v0 = -psolve(r_outer)
        inner_res_0 = norm(v0)
        converged = r_norm <= tol
        sync(device)
        if pending is not None:
            bad, nx_pos, new = pending
            if bool(bad):
                return x, k_outer
            if bool(nx_pos):
                outer_v.append(new)
            while len(outer_v) > outer_k:
                del outer_v[0]
        if callback is not None:
            callback(host_value(x))
        if bool(converged):
            return x, 0
        if float(inner_res_0) == 0:
            raise RuntimeError("Preconditioner returned a zero vector; "
                               f"|v| ~ {float(r_norm):.1g}, |M v| = 0")
        v0 = v0 * (1.0 / inner_res_0)
        ptol = torch.minimum(pfac, tol / r_norm)
        slots = None
        if (not host and not prepend_outer_v and store_outer_Av and len(outer_v) <= outer_k
                and all(w is not None for _, w in outer_v)):
            slots = fillers
        y, zs, vs, H, _, _, _, pres, bad = _fgmres(matvec, v0, inner_m, ptol, host, eps, dtype,
                                                   lpsolve=psolve, outer_v=outer_v,
                                                   prepend=prepend_outer_v, fillers=slots)
        y = y * inner_res_0
        bad = bad | ~torch.isfinite(y).all()
        pfac = torch.where(pres > ptol, torch.clamp(1.5 * pfac, max=1.0),
                           torch.clamp(0.25 * pfac, min=1e-16))
        dx = y @ zs
        nx = norm(dx)
        safe_nx = torch.where(nx > 0, nx, torch.ones_like(nx))
        if store_outer_Av:
            new = (dx / safe_nx, ((y @ H) @ vs) / safe_nx)  # A dx = V H y
        else:
            new = (dx / safe_nx, None)
        x = torch.where(bad, x, x + dx)
        pending = (bad, nx > 0, new)
    sync(device)
    if pending is not None and not bool(pending[0]) and bool(pending[1]):
        outer_v.append(pending[2])
        while len(outer_v) > outer_k:
            del outer_v[0]
    return x, maxiter


def _fgmres(matvec, v0, inner_m, ptol, host, eps, dtype, lpsolve=None, rpsolve=None, cs=(),
            outer_v=(), prepend=False, fillers=None):
    """SciPy's _fgmres.  Returns y, Z (used rows), V, the unrotated Hessenberg columns,
    B (projections on ``cs``), the triangular factor R of the Hessenberg matrix, the
    number of steps, the residual estimate and a 'not finite' flag; rows past the last
    step are masked (graph devices; R gets a unit diagonal there).  ``fillers`` (graph
    devices, appended outer vectors): pairs of them fill the outer slots past
    ``len(outer_v)`` and the loop stops before the first filled one."""
    lpsolve = lpsolve or _identity
    rpsolve = rpsolve or _identity
    n_outer = len(outer_v)
    if fillers is not None:
        pairs = list(zip(fillers[::2], fillers[1::2], strict=True))
        outer_v = list(outer_v) + pairs[n_outer:]
        n_real = torch.tensor([inner_m + n_outer], dtype=torch.int64, device=v0.device)
        n_outer = len(outer_v)
    m = inner_m + n_outer
    device = v0.device
    V = torch.zeros((m + 1, v0.shape[0]), dtype=dtype, device=device)
    V[0] = v = v0
    zs = []
    B = torch.zeros((len(cs), m), dtype=dtype, device=device)
    Hraw = torch.zeros((m, m + 1), dtype=dtype, device=device)
    R = torch.zeros((m, m + 1), dtype=dtype, device=device)
    Q = torch.eye(m + 1, dtype=dtype, device=device)
    res_all, brk_all = [], []
    for j in range(m):
        w = None
        if prepend and j < n_outer:
            z, w = outer_v[j]
        elif prepend and j == n_outer:
            z = rpsolve(v0)
        elif not prepend and j >= m - n_outer:
            z, w = outer_v[j - (m - n_outer)]
        else:
            z = rpsolve(v)
        w = lpsolve(matvec(z)) if w is None else w.clone()
        w_norm = norm(w)
        for i, c in enumerate(cs):  # GCROT: project out the C space
            alpha = dot(c, w)
            B[i, j] = alpha
            w = w - alpha * c
        # classical Gram-Schmidt twice against all of V (rows not yet filled are zero:
        # the same shapes at every step)
        h = V.conj() @ w
        w = w - h @ V
        h2 = V.conj() @ w
        w = w - h2 @ V
        h = h + h2
        hlast = norm(w)
        alpha = 1 / hlast
        v = torch.where(torch.isfinite(alpha), w * alpha, w)
        brk = ~(hlast > eps * w_norm)
        V[j + 1] = v
        zs.append(z)
        hcur = torch.where(torch.arange(m + 1, device=device) == j + 1, hlast.to(dtype), h)
        Hraw[j] = hcur
        R[j], Q = _givens_column(hcur, j, Q)
        res_j = Q[j + 1, 0].abs()
        if host:
            steps, res = j + 1, res_j
            if bool((res_j < ptol) | brk):
                break
        else:
            res_all.append(res_j)
            brk_all.append(brk)
    S = Q[:, 0]
    if not host:
        res_all = torch.stack(res_all)
        done = res_all < ptol
        if fillers is not None:
            done = done | (torch.arange(m, device=device) + 1 == n_real)
        steps, (res,) = _inner_stop(done, torch.stack(brk_all), res_all)
    Z = torch.stack(zs)
    if host:
        k = steps
        y = _back_substitute(R[:k, :k].T, S[:k])
        bad = ~torch.isfinite(R[k - 1, k - 1])
        return y, Z[:k], V[:k + 1], Hraw[:k, :k + 1], B[:, :k], R[:k, :k].T, steps, res, bad
    idx = torch.arange(m, device=device)
    active = idx < steps
    both = active[:, None] & active[None, :]
    Rm = torch.where(both, R[:, :m].T, 0) + torch.diag(torch.where(active, 0, 1).to(dtype))
    y = _back_substitute(Rm, torch.where(active, S[:m], 0))
    bad = (~torch.isfinite(torch.diagonal(R[:, :m])) & (idx == steps - 1)).any()
    rows = torch.arange(m + 1, device=device) <= steps
    Hm = torch.where(active[:, None] & (torch.arange(m + 1, device=device) <= steps)[None, :],
                     Hraw, 0)
    return (y, torch.where(active[:, None], Z, 0), torch.where(rows[:, None], V, 0), Hm,
            torch.where(active[None, :], B, 0), Rm, steps, res, bad)


def _identity(x):
    return x
