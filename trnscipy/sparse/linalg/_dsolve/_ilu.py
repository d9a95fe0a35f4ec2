"""Incomplete LU on the device: a level-of-fill pattern, fine-grained parallel sweeps.

Symbolic analysis (host, once per sparsity pattern and ``fill_factor``, cached on the
container): where the diagonal has structural zeros, rows are permuted by a maximum
bipartite matching (static pivoting, as ``_multifrontal``); the pattern is the level-of-fill
ILU(k) pattern of that matrix in its own column order, ``k`` the largest (at most
``KMAX``) whose strict-lower plus upper entries stay within ``fill_factor * nnz(A)``, so
that ``L.nnz + U.nnz <= fill_factor * nnz(A) + n`` as SuperLU's bound.  The analysis
also lists, for every pattern entry (i, j), the pairs (i, k), (k, j) with k < min(i, j)
of the ILU equations (LU)_ij = A_ij, and the depth of their dependency graph.

Numeric factorization (device, one graph per pattern): the matrix is scaled to a unit
diagonal (D^-1 A D^-1, D = sqrt|diag|), then Chow and Patel's fine-grained parallel
ILU: every sweep updates all entries at once from the previous sweep's values (one
gather of the pairs, a product, an ``index_add`` and a division by U's diagonal).
After ``depth + 1`` sweeps the result is the exact ILU on the pattern: that many sweeps
when the depth is below ``EXACT``, else ``SWEEPS`` (an approximate ILU, good near
diagonal dominance; sweeps that diverge raise RuntimeError).  Then ``drop_tol``:
off-diagonal factor entries smaller than ``drop_tol`` times the infinity norm of their
column of the scaled matrix (SuperLU's basic rule, applied after the sweeps) are set to
zero; the pattern stays static.  A non-finite entry or a zero pivot of the exact ILU
makes the factor exactly singular.

Solves (device, one graph per right-hand side shape): the level-scheduled triangular
solves of ``_triangular`` (device loops over padded steps) with L (unit diagonal) and U,
their transposes for 'T'/'H'; the padded coefficient tables are computed once per
factorization (``prepare``).
"""

import numpy as np
import scipy.sparse as _sp

from trnscipy._dtypes import absolute, divide, to_numpy_dtype
from trnscipy._kernels import _plan, backend, register
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._dsolve import _triangular
from trnscipy.sparse.linalg._dsolve._multifrontal import DeviceLU, _row_matching

__all__ = ["DeviceILU", "IluSymbolic", "device_ilu", "dropped", "factor", "prepare", "solve",
           "symbolic", "terms"]

KMAX = 8  # largest level of fill tried
EXACT = 100  # patterns whose equations are at most this deep get the exact ILU
SWEEPS = 10  # fine-grained sweeps for deeper patterns


class IluSymbolic:
    """The ILU(k) pattern of the row-matched matrix and the product pairs of its equations."""

    def __init__(self, n, row, col, fill_factor):
        self.n = n
        match = _row_matching(n, row, col)
        self.singular = match is None
        if self.singular:
            return
        inv_match = np.empty(n, dtype=np.int64)
        inv_match[match] = np.arange(n)
        self.match, self.inv_match = match, inv_match  # B = Pr A: B[c] = A[match[c]]
        brow = inv_match[row]
        budget = int(fill_factor * row.shape[0])
        srow, scol, self.k = _pattern(n, brow, col, budget)
        self.row, self.col = srow, scol
        keys = srow * n + scol  # row-major sorted
        self.src = np.searchsorted(keys, brow * n + col)  # A's entries in the pattern
        self.diagpos = np.searchsorted(keys, np.arange(n) * (n + 1))
        self.lower = srow > scol
        self.pivot = self.diagpos[scol]  # U's diagonal entry of each entry's column
        self.p1, self.p2, self.target = _pairs(n, srow, scol, keys, self.diagpos)
        self.device_cache = {}
        self.schedules = {}
        depth = _depth(self)
        self.exact = depth is not None
        self.sweeps = depth + 1 if self.exact else SWEEPS

    def on_device(self, name, device):
        """An index array of the analysis as a tensor on ``device`` (cached)."""
        key = (name, str(device))
        if key not in self.device_cache:
            self.device_cache[key] = torch.from_numpy(
                np.ascontiguousarray(getattr(self, name))).to(device)
        return self.device_cache[key]

    def schedule(self, which):
        """The level schedule of L ('L'), U ('U') or their transposes ('LT', 'UT')."""
        if which not in self.schedules:
            lower = which in ("L", "UT")
            r, c = (self.col, self.row) if which.endswith("T") else (self.row, self.col)
            self.schedules[which] = _triangular._Schedule(self.n, r, c, lower)
        return self.schedules[which]


def _pattern(n, row, col, budget):
    """The level-of-fill pattern (row-major sorted rows and columns) of the largest
    k <= KMAX whose entries number at most ``budget`` (k = 0 always: A's pattern and the
    diagonal).  Entry (i, j) has level min over m < min(i, j) of lev(i, m) + lev(m, j) + 1:
    the min-plus product of the strict lower and strict upper parts.  Levels up to t are
    exact after t such products, so the pattern grows one level per product (sparse
    matrix products in SciPy; no loop over rows)."""
    lev = _sp.csr_array((np.ones(row.shape[0]), (row, col)), shape=(n, n))
    lev = _sp.csr_array(lev + _sp.eye_array(n))
    lev.data[:] = 1.0  # level + 1
    K = 0
    for t in range(1, KMAX + 1):
        new = _fill(lev, t)
        if lev.nnz + new.nnz > budget:
            break
        K = t
        if new.nnz == 0:
            K = KMAX
            break
        lev = _sp.csr_array(lev + new)
    lev = _sp.csr_array(lev)
    lev.sort_indices()
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(lev.indptr))
    return rows, lev.indices.astype(np.int64), K


_BASE = 2.0 ** -50  # a level l is stored as _BASE ** l: sums of fewer than 2^25 terms


def _fill(lev, t):
    """The entries of level t (a CSR matrix, values t + 1) given all entries of levels
    below t in ``lev`` (values level + 1): lev(i, j) = min_m lev(i, m) + lev(m, j) + 1 by
    one product of the strict lower and upper parts, each level l coded as _BASE ** l
    (the smallest exponent of a sum of fewer than 2^25 terms dominates it)."""
    coded = lev.copy()
    coded.data = _BASE ** (coded.data - 1)
    prod = _sp.csr_array(_sp.tril(coded, -1, format="csr") @ _sp.triu(coded, 1, format="csr"))
    prod.data = np.floor(np.log2(prod.data) / -50.0 + 0.75) + 1  # level of the fill
    known = _sp.csr_array(lev.astype(bool).astype(np.float64))
    prod = _sp.csr_array(prod - prod.multiply(known))  # entries not in lev yet
    prod.data[prod.data != t] = 0
    prod.eliminate_zeros()
    prod.data[:] = t + 1
    return prod


def _ranges(starts, stops):
    """Concatenated aranges [starts[i], stops[i])."""
    lengths = stops - starts
    total = int(lengths.sum())
    offsets = np.repeat(stops - lengths.cumsum(), lengths)
    return np.arange(total) + offsets, lengths


def _pairs(n, row, col, keys, diagpos):
    """(p1, p2, target): positions of (i, k), (k, j) and (i, j) for every product
    l_ik u_kj, k < min(i, j), of the pattern's ILU equations."""
    lower = np.flatnonzero(row > col)  # entries (i, k), k < i
    k = col[lower]
    ends = np.searchsorted(keys, (k + 1) * n)  # end of row k
    p2, lengths = _ranges(diagpos[k] + 1, ends)  # (k, j), j > k
    p1 = np.repeat(lower, lengths)
    want = row[p1] * n + col[p2]
    t = np.minimum(np.searchsorted(keys, want), keys.shape[0] - 1)
    hit = keys[t] == want
    return p1[hit], p2[hit], t[hit]


def _depth(sym):
    """The depth of the dependency graph of the pattern's ILU equations when it is below
    EXACT, else None.  A symmetric pattern's depth is at least twice the depth of L's
    triangular schedule (l_ik needs u_kk, which needs l_km): deep ones stop there;
    otherwise a host relaxation of the levels, at most EXACT passes."""
    keys = sym.row * sym.n + sym.col
    mirror = np.sort(sym.col * sym.n + sym.row)
    if np.array_equal(keys, mirror):
        chain = sym.schedule("L").nlev - 1  # edges of L's longest chain
        if 2 * chain >= EXACT:
            return None
    order = np.argsort(sym.target, kind="stable")
    p1, p2, target = sym.p1[order], sym.p2[order], sym.target[order]
    starts = np.flatnonzero(np.concatenate([[target.shape[0] > 0],  # none: a diagonal
                                            target[1:] != target[:-1]]))
    targets = target[starts]
    level = np.zeros(sym.row.shape[0], dtype=np.int64)
    low = np.flatnonzero(sym.lower)
    for s in range(EXACT):  # after pass s the levels up to s are final
        new = np.zeros_like(level)
        if starts.shape[0]:
            new[targets] = np.maximum.reduceat(np.maximum(level[p1], level[p2]), starts) + 1
        new[low] = np.maximum(new[low], level[sym.pivot[low]] + 1)
        if (new == level).all():
            return s
        level = new
    return None


def symbolic(A, fill_factor):
    """The analysis of ``A``'s pattern, cached on ``A`` per ``fill_factor``."""
    return _plan.pattern_analysis(
        A, "ilu_symbolic", fill_factor,
        lambda n, row, col: IluSymbolic(n, row, col, fill_factor))


# ---- numeric factorization and solves (device) ------------------------------------------------

def factor(sym, data, drop_tol):
    """(values, scale, singular): the factors' values on the pattern (strict lower: L,
    the rest: U, of the scaled matrix), the scaling D and a 0-d flag, nonzero when the
    factor is singular."""
    dev, dtype = data.device, data.dtype
    nnz = sym.row.shape[0]
    row, col = sym.on_device("row", dev), sym.on_device("col", dev)
    a = torch.zeros(nnz, dtype=dtype, device=dev).index_add(0, sym.on_device("src", dev), data)
    diagpos = sym.on_device("diagpos", dev)
    d = absolute(a.index_select(0, diagpos)).sqrt()
    d = torch.where(d == 0, torch.ones_like(d), d)
    a = a / (d.index_select(0, row) * d.index_select(0, col))
    lower, pivot = sym.on_device("lower", dev), sym.on_device("pivot", dev)
    p1, p2, target = (sym.on_device(name, dev) for name in ("p1", "p2", "target"))

    def sweep(carry, _):  # one fine-grained sweep; ``a`` travels in the carry
        v, a = carry
        prod = v.index_select(0, p1) * v.index_select(0, p2)
        new = a - torch.zeros_like(a).index_add(0, target, prod)
        return torch.where(lower, divide(new, v.index_select(0, pivot)), new), a

    # the sweeps are one device loop: the graph does not grow with the pattern's depth
    v, _ = _triangular.loop(data)(sweep, (a, a), 0, sym.sweeps)
    if drop_tol > 0:
        v = torch.where(dropped(sym, a, v, drop_tol), torch.zeros_like(v), v)
    parts = (v.real, v.imag) if v.is_complex() else (v,)
    bad = sum((~torch.isfinite(p)).sum() for p in parts)
    bad = bad + (v.index_select(0, diagpos) == 0).sum()
    return v, d.to(dtype), bad


def dropped(sym, a, v, drop_tol):
    """The entries ``drop_tol`` sets to zero: off-diagonal factor entries ``v`` smaller
    than ``drop_tol`` times the infinity norm of their column of the scaled matrix ``a``."""
    row, col = sym.on_device("row", a.device), sym.on_device("col", a.device)
    colmax = torch.zeros(sym.n, dtype=a.real.dtype, device=a.device).scatter_reduce(
        0, col, absolute(a), "amax")
    return (absolute(v) < drop_tol * colmax.index_select(0, col)) & (row != col)


def terms(sym):
    """(t1, t2): for every pattern entry e = (i, j) a row of positions (padded with
    ``nnz + 1``) whose products v[t1] v[t2] sum to (L U)_ij, in the values extended by
    [1, 0] (positions ``nnz``, ``nnz + 1``): the pairs l_ik u_kj, k < min(i, j), and
    l_ij u_jj (i > j) or 1 u_ij (i <= j).  Host arrays, computed once per pattern."""
    if not hasattr(sym, "t1"):
        nnz = sym.row.shape[0]
        e = np.arange(nnz)
        own1 = np.where(sym.lower, e, nnz)  # l_ij, or the unit diagonal of L
        own2 = np.where(sym.lower, sym.pivot, e)
        target = np.concatenate([sym.target, e])
        order = np.argsort(target, kind="stable")
        target = target[order]
        p1 = np.concatenate([sym.p1, own1])[order]
        p2 = np.concatenate([sym.p2, own2])[order]
        counts = np.bincount(target, minlength=nnz)
        slot = np.arange(target.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        sym.t1 = np.full((nnz, int(counts.max())), nnz + 1, dtype=np.int64)
        sym.t2 = sym.t1.copy()
        sym.t1[target, slot], sym.t2[target, slot] = p1, p2
    return sym.t1, sym.t2


def prepare(sym, values, which):
    """The padded step tables (``_triangular.tables``) of factor ``which`` ('L', 'U',
    'LT', 'UT'): computed once per factorization, read by every solve."""
    sched = sym.schedule(which)
    udiag = None
    if which in ("U", "UT"):
        udiag = values.index_select(0, sym.on_device("diagpos", values.device))
    return _triangular.tables(sched, values, udiag)


def solve(sym, values, scale, b, trans, tables):
    """x with op(A) x = b, op(A) ~ the incomplete factors, for a 2-D b (n, k);
    ``tables(which)``: ``prepare(sym, values, which)``, cached by the caller."""
    if trans == "H":
        if values.is_complex():
            return solve(sym, values, scale, b.conj(), "T", tables).conj().resolve_conj()
        trans = "T"
    dev = b.device
    d = scale.unsqueeze(1)

    def tri(which, y):
        return _triangular.solve(sym.schedule(which), None, None, y, tables(which))

    if trans == "N":  # B = Pr A = D L U D
        y = divide(b.index_select(0, sym.on_device("match", dev)), d)
        return divide(tri("U", tri("L", y)), d)
    y = divide(b, d)  # B^T = D U^T L^T D, A^T = B^T Pr
    y = divide(tri("LT", tri("UT", y)), d)
    return y.index_select(0, sym.on_device("inv_match", dev))


def export(sym, values, scale):
    """(L, U, perm_r, perm_c) as SciPy objects on the host: Pr A = L U with L = D L~ D^-1,
    U = D U~ D (the scaled factors unscaled), explicit zeros removed."""
    from trnscipy._transfer import to_host

    v, d = np.asarray(to_host(values)), np.asarray(to_host(scale))
    n, row, col = sym.n, sym.row, sym.col
    low = sym.lower
    lv = v[low] * d[row[low]] / d[col[low]]
    L = _sp.csc_array((np.concatenate([lv, np.ones(n, dtype=v.dtype)]),
                       (np.concatenate([row[low], np.arange(n)]),
                        np.concatenate([col[low], np.arange(n)]))), shape=(n, n))
    up = ~low
    U = _sp.csc_array((v[up] * d[row[up]] * d[col[up]], (row[up], col[up])), shape=(n, n))
    L.eliminate_zeros()
    U.eliminate_zeros()
    U.sort_indices()
    L.sort_indices()
    return L, U, sym.inv_match.astype(np.int32), np.arange(n, dtype=np.int32)


# ---- spilu's factorization object -------------------------------------------------------------

@register("sparse.linalg.ilu", "generic")
def device_ilu(A, drop_tol, fill_factor):
    """spilu's incomplete LU of the device CSR/CSC container ``A`` on its device (on
    Neuron, float64 data gets ``_refine``'s double-float factors);
    RuntimeError("Factor is exactly singular") as SciPy's."""
    sym = symbolic(A, fill_factor)
    if sym.singular:
        raise RuntimeError("Factor is exactly singular")
    values, scale, singular = factor(sym, A.data, drop_tol)
    tables = {which: prepare(sym, values, which) for which in ("L", "U")}
    # the factors, the solves' tables and the flag in one graph: reading the flag alone
    # would compute the factorization for it and leave the factors pending, to be traced
    # again into the solve
    backend(values.device).materialize(
        [singular, values, scale] + [t for pair in tables.values() for t in pair if t is not None])
    if int(to_host(singular)):  # one read: the singularity test
        if sym.exact:
            raise RuntimeError("Factor is exactly singular")
        raise RuntimeError("spilu: the parallel ILU sweeps diverged (a non-finite or zero "
                           "pivot; the matrix is far from diagonal dominance); use splu")
    return DeviceILU(sym, values, scale, tables)


class DeviceILU(DeviceLU):
    """Incomplete LU factors on a device (``spilu``) with SciPy SuperLU's interface.

    ``L``, ``U``, ``perm_r`` and ``perm_c`` satisfy ``Pr A Pc ~ L U`` (``perm_c`` the
    identity, ``perm_r`` the static row pivoting, L with a unit diagonal); assembled on
    the host on first access (warned off the CPU kind).  ``nnz`` is ``L.nnz + U.nnz``,
    counted on the device.  ``solve`` applies the factors (no refinement)."""

    _vectors = False  # ``_solve`` takes 2-D right-hand sides
    traced_operator = None  # (its solve reads tables kept on the object)

    def __init__(self, sym, values, scale, tables=None):
        self._sym, self._values, self._scale = sym, values, scale
        self._tables = dict(tables or {})
        self.device = values.device
        self.dtype = to_numpy_dtype(values.dtype)
        self.shape = (sym.n, sym.n)
        self._factors = None

    def __repr__(self):
        return f"<DeviceILU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def _table(self, which):
        """The padded coefficient tables of one triangular solve, computed on first use
        (the transposed solves') as device data: a caller's device loop then reads them
        as inputs instead of recomputing them in every step."""
        if which not in self._tables:
            tables = prepare(self._sym, self._values, which)
            backend(self.device).materialize([t for t in tables if t is not None])
            self._tables[which] = tables
        return self._tables[which]

    def solve(self, rhs, trans="N"):
        """x with op(A) x = rhs for the incomplete factors (``DeviceLU.solve``)."""
        return super().solve(rhs, trans)

    # SciPy's checks read shapes and dtypes only, the substitutions are device loops: a
    # LinearOperator of this solve traces into a Krylov solver's device loop
    solve.pure_tensor_code = True

    def _solve(self, b, trans):
        for which in (("L", "U") if trans == "N" else ("UT", "LT")):
            self._table(which)  # outside the solve's graph
        return solve(self._sym, self._values, self._scale, b, trans, self._table)

    def _traced(self, b):
        return self._solve(b, "N")  # no graph cuts

    def to(self, device):
        return DeviceILU(self._sym, self._values.to(device), self._scale.to(device))

    def _export(self):
        return export(self._sym, self._values, self._scale)

    @property
    def nnz(self):
        return int(to_host((self._values != 0).sum())) + self.shape[0]
