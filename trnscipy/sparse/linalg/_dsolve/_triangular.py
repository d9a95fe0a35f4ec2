"""spsolve_triangular on the device: level-scheduled substitution.

The level schedule of the triangle's pattern (an unknown's level is one more than the
highest level it depends on) is computed on the host once per pattern and cached on
the container.  On the device each level is one gather, multiply, ``index_add`` and
division for all of its rows and all right-hand sides; all levels are one graph.
Only the chosen triangle and the diagonal are read (entries of the other triangle
are ignored).
"""

import numpy as np

from trnscipy._torch import torch
from trnscipy._transfer import to_host

__all__ = ["schedule", "solve"]


class _Schedule:
    def __init__(self, n, row, col, lower):
        strict = (row > col) if lower else (row < col)
        self.n = n
        self.diag = np.flatnonzero(row == col)
        self.diag_row = row[self.diag]
        ent = np.flatnonzero(strict)
        order = np.argsort(row[ent], kind="stable")
        ent = ent[order]
        erow, ecol = row[ent], col[ent]
        level = _levels(n, erow, ecol)
        nlev = int(level.max()) + 1 if n else 0
        by_level = np.argsort(level, kind="stable")
        self.rows = by_level  # unknowns, level by level
        self.row_ptr = np.concatenate([[0], np.cumsum(np.bincount(level, minlength=nlev))])
        elevel = level[erow]
        eorder = np.argsort(elevel, kind="stable")
        self.ent = ent[eorder]
        self.ent_col = ecol[eorder]
        # the row of each entry as its position within its level's rows
        local = np.empty(n, dtype=np.int64)
        local[by_level] = np.arange(n) - self.row_ptr[level[by_level]]
        self.ent_local = local[erow[eorder]]
        self.ent_ptr = np.concatenate([[0], np.cumsum(np.bincount(elevel, minlength=nlev))])
        self.cache = {}

    def on_device(self, name, device):
        key = (name, str(device))
        if key not in self.cache:
            self.cache[key] = torch.from_numpy(np.ascontiguousarray(getattr(self, name))).to(device)
        return self.cache[key]


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


def pattern_analysis(A, name, key, analyse):
    """``analyse(n, row, col)`` of the pattern of ``A`` (a device CSR/CSC container), read
    to the host once and cached on ``A`` under (``name``, ``key``) while it holds the same
    index tensors."""
    a, b = A.indptr, A.indices
    cache = A.__dict__.setdefault(name, {})
    hit = cache.get(key)
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    indptr = to_host(a).astype(np.int64)
    major = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    minor = to_host(b).astype(np.int64)
    row, col = (major, minor) if A.format == "csr" else (minor, major)
    result = analyse(A.shape[0], row, col)
    cache[key] = (a, b, result)
    return result


def schedule(A, lower):
    """The level schedule of ``A``'s triangle, cached on A."""
    return pattern_analysis(A, "_cache_triangular", lower,
                            lambda n, row, col: _Schedule(n, row, col, lower))


def diagonal(sched, data):
    """The diagonal (duplicates summed) on data's device."""
    dev = data.device
    out = torch.zeros(sched.n, dtype=data.dtype, device=dev)
    return out.index_add(0, sched.on_device("diag_row", dev),
                         data.index_select(0, sched.on_device("diag", dev)))


def solve(sched, data, diag, b):
    """x with T x = b for the 2-D ``b`` (n, k); ``diag`` None for a unit diagonal."""
    dev = b.device
    rows, ent = sched.on_device("rows", dev), sched.on_device("ent", dev)
    ecol, elocal = sched.on_device("ent_col", dev), sched.on_device("ent_local", dev)
    vals = data.index_select(0, ent).unsqueeze(1)
    x = torch.zeros_like(b)
    for lev in range(sched.row_ptr.shape[0] - 1):
        r0, r1 = int(sched.row_ptr[lev]), int(sched.row_ptr[lev + 1])
        e0, e1 = int(sched.ent_ptr[lev]), int(sched.ent_ptr[lev + 1])
        r = rows[r0:r1]
        y = b.index_select(0, r)
        if e1 > e0:
            s = torch.zeros_like(y).index_add(0, elocal[e0:e1],
                                              vals[e0:e1] * x.index_select(0, ecol[e0:e1]))
            y = y - s
        if diag is not None:
            y = y / diag.index_select(0, r).unsqueeze(1)
        x = x.index_copy(0, r, y)
    return x
