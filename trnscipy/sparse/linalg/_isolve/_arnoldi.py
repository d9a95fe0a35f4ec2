"""The Arnoldi process of gmres, lgmres and gcrotmk on fixed-shape device state, and the
small least-squares problem it builds (Givens rotations, back substitution).

The basis lives in preallocated tensors (``V`` with ``capacity + 1`` rows, rows not yet
filled are zero) and a step writes its row with a masked select, the step index ``j``
being device data.  Every step is therefore the same computation on the same shapes,
and the steps of a cycle are the ``device_loop`` kernel: on XLA one ``While`` whose body
compiles once (the step count is graph data), so neither the compile time nor the
graph depends on the restart length or on how many outer vectors are in use; on eager
devices a Python loop with no host read (capturable as a CUDA graph).

A step costs O(capacity * n) (classical Gram-Schmidt twice against all of V, zero rows
included, and the masked row writes): O(m n) per Arnoldi step, as SciPy's.
"""

from trnscipy._dtypes import divide
from trnscipy._kernels import backend, kernel
from trnscipy._torch import torch
from trnscipy.sparse.linalg._isolve.utils import inner, norm

__all__ = ["Arnoldi", "back_substitute", "givens_column", "inner_stop", "lartg"]


class Arnoldi:
    """Arnoldi steps ``w = lpsolve(A z)``, ``z = rpsolve(v)`` (``flexible``: the z are
    kept, as in flexible GMRES) against a basis of ``capacity + 1`` rows, with GCROT's C
    vectors (at most ``n_cs`` of them, given to ``start``) projected out first.

    ``breakdown`` picks SciPy's rule: "gmres" (a new vector with ||w|| <= eps ||A v||
    is a breakdown: zero subdiagonal, w kept unnormalised) or "fgmres" (not
    ||w|| > eps ||A v||: a breakdown; w normalised where 1/||w|| is finite).
    ``traceable``: the products are pure tensor code (``System.traceable``), so the steps
    can be traced into a device loop; otherwise they run as a Python loop.
    """

    def __init__(self, matvec, capacity, eps, dtype, device, *, lpsolve=None,
                 rpsolve=None, flexible=False, n_cs=0, breakdown="gmres", traceable=True):
        self.matvec, self.eps, self.dtype, self.device = matvec, eps, dtype, device
        self.lpsolve = lpsolve or _identity
        self.rpsolve = rpsolve or _identity
        self.capacity, self.flexible, self.breakdown = capacity, flexible, breakdown
        self.n_cs = n_cs
        self.graphs = {}  # graph functions of the solver's cycle (one solve)
        self.loop = backend(device if traceable else torch.device("cpu")).device_loop
        self.names = ("V", "v", "H", "R", "Q", "res", "brk", "j") + (
            ("Z",) if flexible else ()) + (("B", "C") if n_cs else ())

    def start(self, v, cs=()):
        """The state with ``v`` (unit norm) as the first basis vector and the C vectors
        ``cs`` (at most ``n_cs``; zero rows fill the others, whose projections are 0)."""
        m, dtype, device = self.capacity, self.dtype, self.device
        n = v.shape[0]
        V = torch.zeros((m + 1, n), dtype=dtype, device=device)
        V = torch.where(torch.arange(m + 1, device=device)[:, None] == 0, v, V)
        state = {
            "V": V, "v": v,
            "H": torch.zeros((m, m + 1), dtype=dtype, device=device),  # raw columns
            "R": torch.zeros((m, m + 1), dtype=dtype, device=device),  # rotated
            "Q": torch.eye(m + 1, dtype=dtype, device=device),
            "res": torch.zeros(m, dtype=v.real.dtype, device=device),
            "brk": torch.zeros(m, dtype=torch.bool, device=device),
            "j": torch.zeros((1,), dtype=torch.int64, device=device),
        }
        if self.flexible:
            state["Z"] = torch.zeros((m, n), dtype=dtype, device=device)
        if self.n_cs:
            state["B"] = torch.zeros((self.n_cs, m), dtype=dtype, device=device)
            cs = list(cs) + [torch.zeros_like(v) for _ in range(self.n_cs - len(cs))]
            state["C"] = torch.stack(cs)
        return state

    def steps(self, state, count, *, host_stop=None):
        """``count`` (a Python int) plain steps; returns (state, stopped).
        ``host_stop(state)`` (eager use, host reads free) is asked after each step: True
        stops the loop."""
        if host_stop is not None:
            for _ in range(count):
                state = self._step(state)
                if host_stop(state):
                    return state, True
            return state, False

        def body(carry, _):
            out = self._step(dict(zip(self.names, carry, strict=True)))
            return tuple(out[k] for k in self.names)

        return self._looped(body, state, count), False

    def masked_steps(self, state, count, total):
        """``total`` (a Python int) plain steps of which the first ``count`` (a device
        integer) are taken, the others leaving the state as it is: the graph is the same
        whatever the count (gcrotmk's inner steps shrinking as CU fills, on CUDA)."""
        def body(carry, i):
            old = dict(zip(self.names, carry, strict=True))
            out = self._step(old)
            live = i.reshape(1) < count
            return tuple(torch.where(live, out[k], old[k]) for k in self.names)

        return self._looped(body, state, total)

    def outer_steps(self, state, zs, ws, count):
        """Steps whose z (and A z: the rows of ``ws``; None: computed) are the first
        ``count`` (a device integer) rows of ``zs``: a loop over all rows, the steps past
        ``count`` leaving the state as it is, so that the graph is the same whatever the
        count (lgmres's outer vectors filling up)."""
        def body(carry, i):
            old = dict(zip(self.names, carry, strict=True))
            at = i.reshape(1)
            out = self._step(old, z_in=zs.index_select(0, at)[0],
                             w_in=None if ws is None else ws.index_select(0, at)[0])
            live = at < count
            return tuple(torch.where(live, out[k], old[k]) for k in self.names)

        return self._looped(body, state, zs.shape[0])

    def steps_then_outer(self, state, count, zs, ws, n_outer):
        """``count`` (a Python int) plain steps, then the outer steps of ``outer_steps``
        (``n_outer`` of the rows of ``zs``, ``ws``): one loop whose body is one step with
        its z (and A z) selected, so one loop body compiles instead of two (a step body
        is most of the compile).  The outer steps compute ``A z`` even where ``ws`` gives
        it (a select runs both sides)."""
        def body(carry, i):
            old = dict(zip(self.names, carry, strict=True))
            is_outer = i >= count
            at = (i - count).clamp(min=0).reshape(1)
            z = torch.where(is_outer, zs.index_select(0, at)[0], self.rpsolve(old["v"]))
            w = self.lpsolve(self.matvec(z))
            if ws is not None:
                w = torch.where(is_outer, ws.index_select(0, at)[0], w)
            out = self._step(old, z_in=z, w_in=w)
            live = i < count + n_outer
            return tuple(torch.where(live, out[k], old[k]) for k in self.names)

        return self._looped(body, state, count + zs.shape[0])

    def given_step(self, state, z, w=None):
        """One step whose z (and A z, when ``w`` is given) come from outside (lgmres's
        outer vectors, its first prepended step)."""
        return self._step(state, z_in=z, w_in=w)

    def _looped(self, body, state, count):
        carry = self.loop(body, tuple(state[k] for k in self.names), 0, count)
        return dict(zip(self.names, carry, strict=True))

    def _step(self, state, z_in=None, w_in=None):
        V, Q, j = state["V"], state["Q"], state["j"]
        device = V.device
        rows = torch.arange(V.shape[0], device=device)
        cols = rows[:-1]
        z = self.rpsolve(state["v"]) if z_in is None else z_in
        w = self.lpsolve(self.matvec(z)) if w_in is None else w_in
        w_norm = norm(w)
        out = dict(state)
        if self.n_cs:  # GCROT: project out C (classical Gram-Schmidt: all of C at once;
            # SciPy: one vector after the other; equal in exact arithmetic, C orthonormal)
            C = state["C"]
            alpha = inner(C, w)
            w = w - alpha @ C
            out["B"] = torch.where(cols[None, :] == j, alpha[:, None], state["B"])
        # classical Gram-Schmidt twice against all of V (SciPy: modified Gram-Schmidt;
        # equal in exact arithmetic)
        h = inner(V, w)
        w = w - h @ V
        h2 = inner(V, w)
        w = w - h2 @ V
        hlast = norm(w)
        if self.breakdown == "gmres":
            brk = hlast <= self.eps * w_norm
            v = torch.where(brk, w, w * (1 / hlast))
            sub = torch.where(brk, 0, hlast)
        else:
            inv = 1 / hlast
            v = torch.where(torch.isfinite(inv), w * inv, w)
            brk = ~(hlast > self.eps * w_norm)
            sub = hlast
        at_j1 = rows == j + 1
        hcol = torch.where(at_j1, sub.to(V.dtype), h + h2)
        rcol, Q = givens_column(hcol, j, Q)
        at_j = cols == j
        out.update(
            V=torch.where(at_j1[:, None], v, V), v=v, Q=Q,
            H=torch.where(at_j[:, None], hcol, state["H"]),
            R=torch.where(at_j[:, None], rcol, state["R"]),
            # (.real: torch-xla 2.9's abs of a complex tensor keeps the complex dtype)
            res=torch.where(at_j, _at(Q[:, 0], j + 1).abs().real, state["res"]),
            brk=torch.where(at_j, brk, state["brk"]),
            j=j + 1)
        if self.flexible:
            out["Z"] = torch.where(at_j[:, None], z, state["Z"])
        return out


def _identity(x):
    return x


def lartg(f, g):
    """LAPACK's ?lartg on 0-d tensors: c (real), s, r with [c s; -conj(s) c] @ [f; g] = [r; 0]."""
    af, ag = f.abs(), g.abs()
    d = torch.sqrt(af * af + ag * ag)
    f0, g0 = af == 0, ag == 0
    safe_af = torch.where(f0, torch.ones_like(af), af)
    safe_d = torch.where(d == 0, torch.ones_like(d), d)
    safe_ag = torch.where(g0, torch.ones_like(ag), ag)
    phase = divide(f, safe_af)  # (complex by real labelled complex: abs on torch-xla)
    gc = g.conj() if g.is_complex() else g
    c = torch.where(g0, torch.ones_like(af), torch.where(f0, torch.zeros_like(af), af / safe_d))
    s = torch.where(g0, torch.zeros_like(g),
                    torch.where(f0, divide(gc, safe_ag), divide(phase * gc, safe_d)))
    r = torch.where(g0, f, torch.where(f0, ag.to(f.dtype), phase * d))
    return c.to(f.dtype), s, r


def givens_column(hcol, j, Q):
    """Rotate a new Hessenberg column: apply the rotations so far (accumulated in the
    unitary Q) and the one that zeroes ``hcol[j + 1]``.  Returns the rotated column and
    the new Q; the residual vector of the small least-squares problem is
    ``beta * Q[:, 0]`` (|entry j + 1|: the residual estimate after step j).  ``j`` may be
    a device integer: every op is a whole-array select, reduction or product."""
    rows = torch.arange(Q.shape[0], device=Q.device)
    at_j, at_j1 = rows == j, rows == j + 1
    hcol = Q @ hcol
    c, s, r = lartg(_at(hcol, j), _at(hcol, j + 1))
    hcol = torch.where(at_j, r, torch.where(at_j1, 0, hcol))
    rows_j, rows_j1 = at_j[:, None], at_j1[:, None]
    cols_j, cols_j1 = at_j[None, :], at_j1[None, :]
    eye = torch.eye(Q.shape[0], dtype=Q.dtype, device=Q.device)
    G = torch.where(rows_j | rows_j1, 0, eye)
    G = G + torch.where((rows_j & cols_j) | (rows_j1 & cols_j1), c, 0)
    G = G + torch.where(rows_j & cols_j1, s, 0) + torch.where(rows_j1 & cols_j, -_conj(s), 0)
    return hcol, G @ Q


def _conj(t):
    return t.conj() if t.is_complex() else t


def _at(v, i):
    """v[i] for a device index ``i`` (one element) without a host read: a gather, which
    XLA fuses into its users (a masked sum was a reduction: two kernels to compile)."""
    return v.index_select(0, i.reshape(1)).reshape(())


def inner_stop(done, brk, *values):
    """Steps of a masked inner loop that stops after the first step where ``done | brk``
    (all steps if none), and each of ``values`` (one entry per step) at its last step.
    A reduction, so the graph has no chain of per-step flags (nor a cumsum: XLA CPU
    splits one into about 18 reduce-window kernels, each compiled on its own)."""
    stop = done | brk
    idx = torch.arange(stop.shape[0], device=stop.device)
    steps = torch.where(stop, idx + 1, stop.shape[0]).min()
    return steps, tuple(_at(v, steps - 1) for v in values)


def back_substitute(R, rhs):
    """Solve the small upper-triangular R y = rhs (rhs a vector or a matrix) with the
    device's triangular-solve kernel (one op; on XLA ``torch.triangular_solve``, which
    lowers, unlike ``torch.linalg.solve_triangular``)."""
    b = rhs[:, None] if rhs.dim() == 1 else rhs
    y = kernel("linalg._trsm", R.device)(R, b, upper=True)
    return y[:, 0] if rhs.dim() == 1 else y
