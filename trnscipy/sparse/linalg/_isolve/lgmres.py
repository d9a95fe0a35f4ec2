"""lgmres on device data: SciPy 1.17's LGMRES (flexible inner GMRES augmented with
the last ``outer_k`` corrections), its options and return codes.

The host reads the outer flags once per outer iteration; on graph devices the inner
solve is one replayed graph (``graph_function``; two executions per outer iteration with
the read) whose Arnoldi steps (``_arnoldi``) are device loops, all ``inner_m +
len(outer_v)`` of them run and the steps past the inner stop are masked (host
checks on the CPU).  The basis has room for ``outer_k`` outer vectors from the start
and the outer vectors enter as rows of fixed-shape stacks with their count as device
data, so shapes and graphs stay the same as ``outer_v`` fills up.  Differs from SciPy:
the Arnoldi basis is orthogonalised by classical Gram-Schmidt applied twice (SciPy:
modified Gram-Schmidt) and the small least-squares problem is solved by Givens
rotations and a triangular solve (SciPy: qr_insert and lstsq); equal in exact
arithmetic.  Where the triangular factor may be rank deficient (a breakdown: a diagonal
entry within 1024 eps of its largest) the host solves it with SciPy's lstsq, its
minimum-norm solution; on graph devices that flag is read with the outer flags and
the outer step is redone (no read otherwise).  ``outer_v`` receives device tensors
(NumPy arrays when the call was offloaded, as SciPy's).
"""

import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._kernels import backend
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._isolve._arnoldi import Arnoldi, back_substitute, inner_stop
from trnscipy.sparse.linalg._isolve.utils import (
    check_atol,
    host_reads_free,
    host_value,
    make_system,
    norm,
    solver_kernel,
    stop_tolerance,
    sync,
)

__all__ = ["lgmres"]


@dispatch(_scipy.lgmres, double_float=("neuron",), grad=_autograd.krylov)
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
    # (a host function in M or A cannot be replayed as a graph: the host loop runs then)
    host = host_reads_free(device) or not system.traceable
    x = system.x
    # (uploaded, shape (1,): graph data from the start, not a constant of the first graph)
    pfac = torch.tensor([1.0], dtype=b_norm.dtype, device=device)
    # the basis has room for the most outer vectors there will be, so that its shapes,
    # and the graphs, stay the same as ``outer_v`` fills up
    slots = max(outer_k, len(outer_v))
    arnoldi = Arnoldi(matvec, inner_m + slots, eps, dtype, device, lpsolve=psolve,
                      flexible=True, breakdown="fgmres", traceable=system.traceable)
    # zero vectors filling the outer slots not in use, for Z and AZ (device data after the
    # first sync; distinct tensors, so that the graph's inputs are the same in number
    # whatever len(outer_v))
    fillers = [[torch.zeros_like(bvec) for _ in range(0 if host else slots)]
               for _ in range(2)]
    pending = None  # (bad y, nx > 0, new outer vector) of the previous outer iteration
    redo = None  # (rank deficient, x before, what _advance needs) of a graph inner solve

    def start(x):
        r_outer = matvec(x) - bvec
        r_norm = norm(r_outer)
        v0 = -psolve(r_outer)
        inner_res_0 = norm(v0)
        # (computed before the read: the flag and the inner solve's inputs are then data)
        return (r_norm, r_norm <= tol, v0 * (1.0 / inner_res_0), inner_res_0,
                torch.minimum(pfac, tol / r_norm))

    for k_outer in range(maxiter):
        r_norm, converged, v0, inner_res_0, ptol = start(x)
        sync(device)
        if redo is not None and bool(redo[0]):  # SciPy's lstsq of a rank-deficient R
            x, pending = _advance(redo[1], min_norm(*redo[2]), *redo[3])
            r_norm, converged, v0, inner_res_0, ptol = start(x)
            sync(device)
        redo = None
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
        given = outer_v if host else _slots(outer_v, fillers)
        y, zs, vs, H, _, R, steps, pres, bad, check = _fgmres(arnoldi, v0, inner_m, ptol,
                                                               host, given, prepend_outer_v)
        pfac = torch.where(pres > ptol, torch.clamp(1.5 * pfac, max=1.0),
                           torch.clamp(0.25 * pfac, min=1e-16))
        step = (zs, vs, H, bad, store_outer_Av)
        if check is not None:  # (deficient, x, min_norm's arguments, _advance's)
            redo = (check[0], x, (R, check[1], steps, inner_res_0), step)
        x, pending = _advance(x, y * inner_res_0, *step)
    sync(device)
    if redo is not None and bool(redo[0]):
        x, pending = _advance(redo[1], min_norm(*redo[2]), *redo[3])
        sync(device)
    if pending is not None and not bool(pending[0]) and bool(pending[1]):
        outer_v.append(pending[2])
        while len(outer_v) > outer_k:
            del outer_v[0]
    return x, maxiter


def _advance(x, y, zs, vs, H, bad, store_outer_Av):
    """An outer step from the inner solution ``y``: the new x and the pending
    (bad, nx > 0, new outer vector) that the next host read applies."""
    bad = bad | ~torch.isfinite(y).all()
    dx = y @ zs
    nx = norm(dx)
    safe_nx = torch.where(nx > 0, nx, torch.ones_like(nx))
    if store_outer_Av:
        new = (dx / safe_nx, ((y @ H) @ vs) / safe_nx)  # A dx = V H y
    else:
        new = (dx / safe_nx, None)
    return torch.where(bad, x, x + dx), (bad, nx > 0, new)


def _slots(outer_v, fillers):
    """The outer vectors as graph devices take them: (Z, AZ or None, count), Z and AZ
    lists of the vectors then zero ``fillers`` (two lists), ``count`` (device data) the
    vectors in use."""
    n = len(outer_v)
    zs = [z for z, _ in outer_v] + fillers[0][n:]
    ws = None
    if all(w is not None for _, w in outer_v):
        ws = [w for _, w in outer_v] + fillers[1][n:]
    return zs, ws, torch.tensor([n], dtype=torch.int64, device=zs[0].device)


def _fgmres(arnoldi, v0, inner, ptol, host, outer=(), prepend=False, cs=(), extra=None):
    """SciPy's _fgmres: ``inner`` new directions of the flexible ``arnoldi`` from the unit
    ``v0`` and the outer vectors ``outer`` appended (or prepended), the vectors ``cs``
    projected out.  ``outer``: on the host a list of pairs (z, A z or z, None), on graph
    devices ``_slots``.  Returns y, Z, V, the unrotated Hessenberg columns, B
    (projections on the C vectors), the triangular factor R, the number of steps, the
    residual estimate and a 'not finite' flag.  On the host (``host``) the loop stops at
    SciPy's inner stop; on graph devices all steps run and the rows past the inner stop
    are masked (R gets a unit diagonal there).  ``extra`` (graph devices): (count, bound),
    ``bound`` (a Python int) more steps after the ``inner`` ones, the first ``count`` (a
    device integer) of them taken (``Arnoldi.masked_steps``)."""
    if not host:
        return _fgmres_graph(arnoldi, v0, ptol, inner, prepend, outer, cs, extra)
    state = arnoldi.start(v0, cs)
    plan = ([("outer", z, w) for z, w in outer] + [("outer", arnoldi.rpsolve(v0), None)]
            + [("plain", inner - 1)] if prepend else
            [("plain", inner)] + [("outer", z, w) for z, w in outer])

    def host_stop(state):
        j = int(state["j"][0]) - 1
        return bool((state["res"][j] < ptol) | state["brk"][j])

    for kind, *what in plan:
        if kind == "plain":
            state, stopped = arnoldi.steps(state, what[0], host_stop=host_stop)
        else:
            state = arnoldi.given_step(state, *what)
            stopped = host_stop(state)
        if stopped:
            break
    Q, R, V, H, B, Z = (state.get(k) for k in ("Q", "R", "V", "H", "B", "Z"))
    S = Q[:, 0]
    k = int(state["j"][0])
    Rk = R[:k, :k].T
    y = back_substitute(Rk, S[:k])
    if bool(_deficient(Rk, torch.ones(k, dtype=torch.bool, device=Rk.device), arnoldi.eps)):
        y = min_norm(Rk, S[:k], k)
    bad = ~torch.isfinite(R[k - 1, k - 1])
    return (y, Z[:k], V[:k + 1], H[:k, :k + 1], None if B is None else B[:, :k],
            Rk, k, state["res"][k - 1], bad, None)


def _fgmres_graph(arnoldi, v0, ptol, inner, prepend, outer, cs, extra):
    """_fgmres on graph devices as one ``graph_function`` (replayed on XLA, a CUDA graph)
    of (v0, ptol, *Z, *AZ, count, [extra count], *cs), cached on ``arnoldi`` (one solve).
    ``inner`` is a device loop's bound: graph data on XLA, so every ``inner`` shares one
    graph; a CUDA graph unrolls it (a graph per ``inner``: ``extra`` keeps one)."""
    zs, ws, count = outer or ([], None, None)
    given = zs + (ws or []) + ([count] if outer else [])
    more, bound = extra or (None, 0)
    if bound:
        given = given + [more]
    key = ("fgmres", inner, prepend, len(zs), ws is None, len(cs), bound)
    if key not in arnoldi.graphs:
        def fgmres(v0, ptol, *rest):
            k = len(zs)
            zs_t = torch.stack(rest[:k]) if k else None
            ws_t = torch.stack(rest[k:2 * k]) if k and ws is not None else None
            count = rest[len(zs) + (k if ws is not None else 0)] if outer else None
            state = arnoldi.start(v0, rest[len(given):])
            if outer and prepend:
                state = arnoldi.outer_steps(state, zs_t, ws_t, count)
                state = arnoldi.given_step(state, arnoldi.rpsolve(v0))
                state, _ = arnoldi.steps(state, inner - 1)
            elif outer:
                state = arnoldi.steps_then_outer(state, inner, zs_t, ws_t, count)
            else:
                state, _ = arnoldi.steps(state, inner)
                if bound:
                    state = arnoldi.masked_steps(state, rest[len(given) - 1], bound)
            # the last step (steps past the outer vectors in use left j as it was)
            *out, redo = _masked(arnoldi, state, ptol, state["j"] - 1)
            return tuple(t for t in (*out, *redo) if t is not None)

        arnoldi.graphs[key] = backend(arnoldi.device).graph_function(fgmres)
    out = arnoldi.graphs[key](v0, ptol, *given, *cs)
    out = out[:4] + (None,) + out[4:] if not cs else out
    return out[:-2] + (out[-2:],)


def _masked(arnoldi, state, ptol, last):
    """_fgmres's results on graph devices: the steps up to the inner stop (or ``last``)."""
    Q, R, res_all, brk_all = state["Q"], state["R"], state["res"], state["brk"]
    V, H, B, Z = state["V"], state["H"], state.get("B"), state["Z"]
    S = Q[:, 0]
    m = arnoldi.capacity
    device = V.device
    idx = torch.arange(m, device=device)
    steps, (res,) = inner_stop((res_all < ptol) | (idx == last), brk_all, res_all)
    active = idx < steps
    both = active[:, None] & active[None, :]
    Rm = torch.where(both, R[:, :m].T, 0) + torch.diag(torch.where(active, 0, 1).to(R.dtype))
    rhs = torch.where(active, S[:m], 0)
    y = back_substitute(Rm, rhs)
    bad = (~torch.isfinite(torch.diagonal(R[:, :m])) & (idx == steps - 1)).any()
    rows = torch.arange(m + 1, device=device) <= steps
    Hm = torch.where(active[:, None] & rows[None, :], H, 0)
    # (rank deficient: the host redoes the solve, ``min_norm``, after the outer read)
    redo = (_deficient(Rm, active, arnoldi.eps), rhs)
    return (y, torch.where(active[:, None], Z, 0), torch.where(rows[:, None], V, 0), Hm,
            None if B is None else torch.where(active[None, :], B, 0), Rm, steps, res, bad,
            redo)


def _deficient(R, active, eps):
    """True where the triangular ``R`` (its ``active`` rows and columns) may be rank
    deficient as SciPy's lstsq sees it (a singular value below eps * the largest; after a
    breakdown): a diagonal entry within 1024 eps of R's largest entry.  Generous: a
    false alarm costs a host solve that gives the triangular solve's y."""
    size = torch.where(active[:, None] & active[None, :], R, 0).abs().max()
    diag = torch.where(active, torch.diagonal(R).abs(), size)
    return (diag <= 1024 * eps * size).any()


def min_norm(R, rhs, steps, scale=1):
    """SciPy's solution of the inner least-squares problem, on the host: scipy.linalg.lstsq
    of the leading ``steps`` rows and columns of the triangular ``R`` (the minimum-norm
    solution where R is rank deficient), padded with zeros to the length of ``rhs``, times
    ``scale``."""
    import scipy.linalg

    k = int(steps)
    y = scipy.linalg.lstsq(to_host(R[:k, :k]), to_host(rhs[:k]))[0]
    return torch.cat([torch.as_tensor(y, device=rhs.device).to(rhs.dtype), rhs[k:] * 0]) * scale
