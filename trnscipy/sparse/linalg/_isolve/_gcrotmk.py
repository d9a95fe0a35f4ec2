"""gcrotmk on device data: SciPy 1.17's GCROT(m,k), its options and return codes.

One graph per outer iteration (the inner flexible GMRES of ``lgmres`` with the C
space projected out); the host reads the outer flags once per outer iteration,
so the decisions SciPy takes after an outer step (discard a failed step,
update ``CU``) are applied at the next read.  Differs from SciPy: a call given a
non-empty ``CU`` runs on SciPy (host copies, DeviceFallbackWarning): recycling
needs a column-pivoted QR, which torch lacks; ``truncate='smallest'`` uses
torch.linalg.svd of a k x k matrix.
"""

import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import dispatch, offloading
from trnscipy._errors import fallback
from trnscipy._torch import torch
from trnscipy._transfer import _to_device, _to_host
from trnscipy.sparse.linalg._isolve.iterative import _back_substitute
from trnscipy.sparse.linalg._isolve.lgmres import _fgmres
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

_NAME = "scipy.sparse.linalg._isolve._gcrotmk.gcrotmk"


@dispatch(_scipy.gcrotmk)
@solver_kernel(_scipy.gcrotmk)
def gcrotmk(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=1000, M=None, callback=None,
            m=20, k=None, CU=None, discard_C=False, truncate="oldest"):
    if CU:
        return _on_host(A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                        m=m, k=k, CU=CU, discard_C=discard_C, truncate=truncate)
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
    host = host_reads_free(device)
    pending = None  # (failed, step_ok, (cx, ux), truncated CU) of the last outer step
    j_outer = -1
    converged = False
    for j_outer in range(maxiter):
        beta = norm(r)
        if j_outer > 0:
            r_true = bvec - matvec(x)
            beta_true = norm(r_true)
        sync(device)
        if pending is not None:
            if _apply_pending(pending, CU, k, truncate):
                j_outer -= 1  # SciPy leaves the loop in the failed iteration
                break
        if callback is not None:
            callback(host_value(x))
        if bool(beta <= tol) and j_outer > 0:
            r, beta = r_true, beta_true
        if bool(beta <= tol):
            converged = True
            break
        ml = m + max(k - len(CU), 0)
        cs = [c for c, _ in CU]
        y, zs, vs, H, B, R, steps, _, bad = _fgmres(matvec, r / beta, ml, tol / beta, host, eps,
                                                    dtype, rpsolve=psolve, cs=cs)
        y = y * beta
        ux = y @ zs
        if CU:
            ux = ux - (B @ y) @ torch.stack([u for _, u in CU])
        cx = (y @ H) @ vs
        alpha = 1 / norm(cx)
        ok = ~bad & torch.isfinite(alpha)
        cx = cx * alpha
        ux = ux * alpha
        gamma = dot(cx, r)
        r = torch.where(ok, r - gamma * cx, r)
        x = torch.where(ok, x + gamma * ux, x)
        smallest = None
        if truncate == "smallest" and len(CU) >= k and CU:
            smallest = _smallest(CU, R, B, k)
        pending = (bad, ok, (cx, ux), smallest)
    else:
        sync(device)
        if _apply_pending(pending, CU, k, truncate):
            j_outer = maxiter - 1
    CU.append((None, x.clone()))
    if discard_C:
        CU[:] = [(None, u) for _, u in CU]
    return x, 0 if converged else j_outer + 1


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
    Rinv = _back_substitute(R, torch.eye(R.shape[0], dtype=R.dtype, device=R.device))
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


def _on_host(A, b, x0, **kwargs):
    """A call that recycles a given CU runs on SciPy with host copies (announced)."""
    device = next(t.device for t in (b, A) if hasattr(t, "device") and t.device is not None)
    fallback(_NAME, "recycling a given CU needs a column-pivoted QR (none in torch)",
             stacklevel=5)
    kwargs = {key: _to_host(v, strict=False) for key, v in kwargs.items()}
    CU = kwargs["CU"]
    kwargs["CU"] = [tuple(_to_host(t, strict=False) for t in cu) for cu in CU]
    x, info = _scipy.gcrotmk(_to_host(A, strict=False), _to_host(b, strict=False),
                             _to_host(x0, strict=False), **kwargs)
    return (x if offloading() else _to_device(x, device, strict=False)), info
