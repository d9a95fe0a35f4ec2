"""spsolve_triangular on the device: level-scheduled substitution in a device loop.

The level schedule of the triangle's pattern (an unknown's level is one more than the
highest level it depends on) is computed on the host once per pattern and cached on
the container.  Each level's unknowns are cut into chunks of at most ``width`` rows,
and the chunks, level by level, are the steps of the solve.  A step's rows and entries
are stored padded to fixed sizes (``width`` rows, ``ents`` entries; a padded slot names
the dummy unknown ``n``, whose value stays 0, and a zero coefficient), so every step is
the same computation: one gather, multiply, ``index_add`` and division for all of its
rows and all right-hand sides.  The steps run as the ``device_loop`` kernel (on XLA one
``While`` whose body compiles once): the graph's size does not depend on the number of
levels, and the solve can be traced into a caller's device loop (gmres with an ILU
preconditioner).  ``width`` minimises the padded work plus a fixed cost per step.
Only the chosen triangle and the diagonal are read (entries of the other triangle are
ignored).
"""

import numpy as np
from numpy.linalg import LinAlgError

from trnscipy._dtypes import divide
from trnscipy._kernels import _plan, backend, register
from trnscipy._torch import torch
from trnscipy._transfer import to_host

__all__ = ["schedule", "solve", "solver", "tables"]

# The cost of one step of the loop in units of one padded row or entry (on PJRT CPU a
# While iteration's overhead is some microseconds, an element a few nanoseconds); it
# decides how finely wide levels are cut.
STEP_COST = 256


class _Schedule:
    def __init__(self, n, row, col, lower):
        strict = (row > col) if lower else (row < col)
        self.n = n
        self.diag = np.flatnonzero(row == col)
        self.diag_row = row[self.diag]
        ent = np.flatnonzero(strict)
        erow, ecol = row[ent], col[ent]
        level = _levels(n, erow, ecol)
        self.nlev = int(level.max()) + 1 if n else 0
        per_row = np.bincount(erow, minlength=n)
        by_level = np.argsort(level, kind="stable")  # unknowns, level by level
        sizes = np.bincount(level, minlength=self.nlev)
        rank = np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # within the level
        self.width, chunk = _width(level[by_level], rank, per_row[by_level], sizes)
        step = np.empty(n, dtype=np.int64)
        step[by_level] = chunk
        slot = np.empty(n, dtype=np.int64)
        slot[by_level] = rank % self.width
        self.nsteps = int(chunk[-1]) + 1 if n else 0
        w = self.width
        rows = np.full((self.nsteps, w), n, dtype=np.int64)  # padded: the dummy unknown
        rows[step, slot] = np.arange(n)
        estep = step[erow]
        order = np.argsort(estep, kind="stable")
        counts = np.bincount(estep, minlength=self.nsteps)
        self.ents = max(int(counts.max()) if ent.shape[0] else 0, 1)
        epos = np.arange(ent.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        # padded entries: coefficient 0 (``ent_real`` False), column n
        self.ent = np.zeros((self.nsteps, self.ents), dtype=np.int64)
        self.ent_real = np.zeros((self.nsteps, self.ents), dtype=bool)
        self.ent_col = np.full((self.nsteps, self.ents), n, dtype=np.int64)
        self.ent_slot = np.zeros((self.nsteps, self.ents), dtype=np.int64)
        es = estep[order]
        self.ent[es, epos] = ent[order]
        self.ent_real[es, epos] = True
        self.ent_col[es, epos] = ecol[order]
        self.ent_slot[es, epos] = slot[erow[order]]
        self.rows = rows
        self.cache = {}

    def on_device(self, name, device):
        key = (name, str(device))
        if key not in self.cache:
            self.cache[key] = torch.from_numpy(np.ascontiguousarray(getattr(self, name))).to(device)
        return self.cache[key]


def _width(level, rank, per_row, sizes):
    """(width, step of each unknown) for unknowns sorted by level (``rank``: position in
    its level, ``per_row``: its entries): the width, a power of two up to the widest
    level or the widest level itself, minimising steps * (width + entries per step +
    STEP_COST)."""
    widest = int(sizes.max()) if sizes.shape[0] else 1
    candidates = sorted({min(1 << p, widest) for p in range(widest.bit_length() + 1)})
    best = None
    for w in candidates:
        per_level = -(-sizes // w)
        first = np.cumsum(per_level) - per_level  # the level's first step
        step = first[level] + rank // w
        nsteps = int(per_level.sum())
        ents = int(np.bincount(step, weights=per_row, minlength=nsteps).max()) if nsteps else 0
        cost = nsteps * (w + ents + STEP_COST)
        if best is None or cost < best[0]:
            best = (cost, w, step)
    return best[1], best[2]


def _levels(n, erow, ecol):
    """Level of every unknown: 0 without dependencies, else one more than the highest
    level of the unknowns ``ecol`` its entries depend on (Kahn's peeling, one NumPy step
    per level: the unknowns whose dependencies are all placed)."""
    waiting = np.bincount(erow, minlength=n)
    by_col = np.argsort(ecol, kind="stable")
    dependent = erow[by_col]  # the rows depending on each column, column by column
    ptr = np.concatenate([[0], np.cumsum(np.bincount(ecol, minlength=n))])
    level = np.zeros(n, dtype=np.int64)
    front, lev = np.flatnonzero(waiting == 0), 0
    while front.shape[0]:
        level[front] = lev
        lengths = ptr[front + 1] - ptr[front]
        take = np.repeat(ptr[front + 1] - lengths.cumsum(), lengths) + np.arange(lengths.sum())
        hit, count = np.unique(dependent[take], return_counts=True)
        waiting[hit] -= count
        front, lev = hit[waiting[hit] == 0], lev + 1
    return level


def schedule(A, lower):
    """The level schedule of ``A``'s triangle, cached on A."""
    return _plan.pattern_analysis(A, "triangular", lower,
                                  lambda n, row, col: _Schedule(n, row, col, lower))


def diagonal(sched, data):
    """The diagonal (duplicates summed) on data's device."""
    dev = data.device
    out = torch.zeros(sched.n, dtype=data.dtype, device=dev)
    return out.index_add(0, sched.on_device("diag_row", dev),
                         data.index_select(0, sched.on_device("diag", dev)))


def tables(sched, data, diag):
    """(coefficients, diagonal) of the steps, padded as the schedule's index tables: the
    values a solve reads, ``diag`` None for a unit diagonal.  Computed once per factor by
    callers that solve often (the ILU), else by ``solve``."""
    dev = data.device
    # (masks, not a zero or one appended to the data with ``cat``: torch-xla 2.9 left
    # tables built that way pending after materialising them, computed again by the next
    # graph: a second execution of spilu, measured)
    coef = data.index_select(0, sched.on_device("ent", dev).reshape(-1))
    coef = torch.where(sched.on_device("ent_real", dev),
                       coef.reshape(sched.nsteps, sched.ents), 0)
    if diag is None:
        return coef, None
    rows = sched.on_device("rows", dev)
    dtab = diag.index_select(0, torch.clamp(rows, max=sched.n - 1).reshape(-1))
    return coef, torch.where(rows < sched.n, dtab.reshape(rows.shape), 1)


def loop(t):
    """The ``device_loop`` kernel for a carry like ``t``, complex ones too: the step's
    division goes through ``divide``, lest torch-xla label its complex result float32
    and the While's parameters stop matching the carry ("Call parameter must match")."""
    return backend(t.device).device_loop


def solve(sched, data, diag, b, prepared=None):
    """x with T x = b for the 2-D ``b`` (n, k); ``diag`` None for a unit diagonal.
    ``prepared``: ``tables(sched, data, diag)`` computed beforehand (data, diag unused)."""
    dev = b.device
    n, k = sched.n, b.shape[1]
    if sched.nsteps == 0:
        return b.clone()
    coef, dtab = tables(sched, data, diag) if prepared is None else prepared
    rows, ecol = sched.on_device("rows", dev), sched.on_device("ent_col", dev)
    slot = sched.on_device("ent_slot", dev)
    w, e = sched.width, sched.ents

    def step(carry, j):
        x, coef = carry[0], carry[1]
        at = j.reshape(1)
        r = rows.index_select(0, at).reshape(w)
        vals = coef.index_select(0, at).reshape(e, 1)
        prod = vals * x.index_select(0, ecol.index_select(0, at).reshape(e))
        y = x.index_select(0, r) - torch.zeros((w, k), dtype=x.dtype, device=x.device).index_add(
            0, slot.index_select(0, at).reshape(e), prod)
        if len(carry) == 3:
            y = divide(y, carry[2].index_select(0, at).reshape(w, 1))
        return (x.index_copy(0, r, y),) + tuple(carry[1:])

    # x starts as b (a row's right-hand side is read before its value is written) with
    # the dummy unknown's row, 0; the tables travel in the carry, lest a caller's graph
    # recompute them in every step
    x = torch.cat([b, torch.zeros((1, k), dtype=b.dtype, device=dev)])
    carry = (x, coef) if dtab is None else (x, coef, dtab)
    out = loop(x)(step, carry, 0, sched.nsteps)
    return out[0][:n]


@register("sparse.linalg.triangular", "generic")
def solver(A, sched, lower, unit_diagonal, dtype):
    """The solve of ``spsolve_triangular`` with the triangle of the device CSR/CSC ``A``
    (``sched`` its schedule) in torch ``dtype``: a function of a 2-D b.  SciPy's
    LinAlgError for a zero diagonal entry, raised here (one host read)."""
    data = A.data
    diag = None
    if not unit_diagonal:
        diag = diagonal(sched, data)
        if bool(to_host((diag == 0).any())):
            raise LinAlgError("A is singular: zero entry on diagonal.")
        diag = diag.to(dtype)
    data = data.to(dtype)
    return lambda b: solve(sched, data, diag, b)
