"""Sparse LU on the device: block cyclic reduction over a level structure.

Symbolic analysis (host, once per sparsity pattern, cached on the container): where
the diagonal has structural zeros, a maximum bipartite matching of the pattern permutes
rows so that it has none (static pivoting; a pattern without a perfect matching is
exactly singular).  The breadth-first level structure of the symmetrized pattern (from
a pseudo-peripheral node, component after component: the Cuthill-McKee levels) couples
each level only to its neighbours, so the matrix permuted level by level is block
tridiagonal.  Consecutive levels are merged into blocks no wider than the widest level
``w``, and every block is padded to ``w`` (identity).

Numeric factorization (device, one graph per pattern): block cyclic reduction, the
nested dissection of that chain of blocks.  At each of its ``log2(blocks)`` levels the
even blocks are inverted together, and their Schur complements update the odd blocks,
which form the next level's block tridiagonal matrix (``bmm``).  The inverses: first
without pivoting where the device has a cheaper inverse for that (XLA: the
``unpivoted_inverse`` kernel), each checked on two probe columns; where a check fails
the whole factorization runs again with partial pivoting inside each block
(``torch.linalg.inv_ex``; CPU and CUDA always use it).  A block whose pivoted inverse is
not finite makes the factor exactly singular.

Solves (device): forward and back through the levels with ``bmm`` only, batched over
blocks and right-hand sides (one graph per right-hand side shape, reused by each of the
``REFINE`` steps of iterative refinement with the residual of the original entries:
SuperLU_DIST's static pivoting plus refinement).
"""

import numpy as np
import scipy.sparse as _sp
from scipy.sparse import csgraph as _csgraph

from trnscipy._kernels import _plan, backend, kernel, register
from trnscipy._torch import torch

__all__ = ["Symbolic", "symbolic", "factor", "solve"]

REFINE = 1  # steps of iterative refinement in every solve
CHUNK = 16  # blocks per graph of the batched block inverses
# peak memory of a factorization in w x w blocks per block of the chain: the factors keep
# six per eliminated block, the assembly, Schur updates and inverses hold the rest
# (measured on CPU tensors, 3-D Poisson 20^3 and 30^3: 12 and 18)
PEAK_BLOCKS = 20


# ---- symbolic analysis (host) ---------------------------------------------------------------

class Symbolic:
    """The pattern's analysis: slots of rows and columns, blocks, value scatter map."""

    def __init__(self, n, row, col):
        self.n = n
        self.singular = False
        self.row = row
        self.col = col
        match = _row_matching(n, row, col)
        if match is None:
            self.singular = True
            return
        # inv_match[r]: the position of original row r (row r is matched to column
        # inv_match[r]: that column's diagonal entry becomes A[r, inv_match[r]])
        inv_match = np.empty(n, dtype=np.int64)
        inv_match[match] = np.arange(n)
        mrow = inv_match[row]
        order, level_sizes = _level_order(n, mrow, col)
        w = max(level_sizes, default=1)
        self.w = w
        # blocks: consecutive levels while they fit in w
        block_of_level = []
        nblocks, fill = 0, w
        for size in level_sizes:
            if fill + size > w:
                nblocks += 1
                fill = 0
            fill += size
            block_of_level.append(nblocks - 1)
        nblocks = max(nblocks, 1)
        self.nblocks = nblocks
        # slot of each permuted unknown: block * w + position in its block
        slot = np.empty(n, dtype=np.int64)
        starts = np.zeros(nblocks + 1, dtype=np.int64)
        counts = np.zeros(nblocks, dtype=np.int64)
        lvl_of = np.repeat(np.arange(len(level_sizes)), level_sizes)
        blk = np.asarray(block_of_level, dtype=np.int64)[lvl_of] if n else lvl_of
        np.add.at(counts, blk, 1)
        starts[1:] = np.cumsum(counts)
        pos = np.arange(n) - starts[blk]
        slot[order] = blk * w + pos
        self.colslot = slot  # slot of column c
        self.rowslot = slot[inv_match]  # slot of row r
        size = nblocks * w
        self.rowsrc = np.full(size, n, dtype=np.int64)
        self.rowsrc[self.rowslot] = np.arange(n)
        self.colsrc = np.full(size, n, dtype=np.int64)
        self.colsrc[self.colslot] = np.arange(n)
        # flat positions of the stored entries in [D blocks | R blocks | Lw blocks]
        sr, sc = self.rowslot[row], self.colslot[col]
        br, bc, lr, lc = sr // w, sc // w, sr % w, sc % w
        assert (np.abs(br - bc) <= 1).all(), "level structure is not block tridiagonal"
        ww = w * w
        region = np.where(bc == br, br, np.where(bc == br + 1, nblocks + br, 2 * nblocks + bc))
        self.value_index = region * ww + lr * w + lc
        pad = np.flatnonzero(self.rowsrc == n)
        self.pad_index = (pad // w) * ww + (pad % w) * (w + 1)
        self.schedule = _schedule(nblocks)
        # two fixed columns that check the inverses computed without pivoting
        self.probe = np.random.default_rng(0).uniform(-1, 1, (w, 2))
        self.device_cache = {}

    def factor_bytes(self, itemsize):
        """An upper estimate of a numeric factorization's peak memory in bytes."""
        return PEAK_BLOCKS * self.nblocks * self.w * self.w * itemsize

    def on_device(self, name, device):
        """An index array of the analysis as an int64 tensor on ``device`` (cached)."""
        key = (name, str(device))
        if key not in self.device_cache:
            self.device_cache[key] = torch.from_numpy(
                np.ascontiguousarray(getattr(self, name))).to(device)
        return self.device_cache[key]


def _row_matching(n, row, col):
    """match[c]: the row placed on column c's diagonal (the identity where the diagonal
    is structurally full), or None when the pattern has no perfect matching."""
    diag = np.zeros(n, dtype=bool)
    diag[row[row == col]] = True
    if diag.all():
        return np.arange(n)
    pattern = _sp.csr_array((np.ones(row.shape[0], dtype=np.int8), (row, col)), shape=(n, n))
    match = _csgraph.maximum_bipartite_matching(pattern, perm_type="row")
    if (match < 0).any():
        return None
    return match.astype(np.int64)


def _level_order(n, row, col):
    """Unknowns in breadth-first level order of the symmetrized pattern, component
    after component, from a pseudo-peripheral node of each; and the level sizes."""
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    off = row != col
    g = _sp.csr_array((np.ones(int(off.sum()), dtype=np.int8), (row[off], col[off])),
                      shape=(n, n))
    g = (g + g.T).tocsr()
    ncomp, comp = _csgraph.connected_components(g, directed=False)
    degree = np.diff(g.indptr)
    # start: a node of minimum degree per component, then twice the farthest node
    start = _argbest(comp, ncomp, -degree)
    for _ in range(2):
        dist = _distances(g, n, start)
        start = _argbest(comp, ncomp, dist * (n + 1) - degree)
    dist = _distances(g, n, start).astype(np.int64)
    depth = np.zeros(ncomp, dtype=np.int64)
    np.maximum.at(depth, comp, dist + 1)
    offset = np.concatenate([[0], np.cumsum(depth)[:-1]])
    level = offset[comp] + dist
    order = np.argsort(level, kind="stable")
    sizes = np.bincount(level, minlength=int(depth.sum())).tolist()
    return order, sizes


def _argbest(comp, ncomp, score):
    """Per component, the node of largest ``score`` (first of ties)."""
    order = np.lexsort((-score, comp))
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = comp[order[1:]] != comp[order[:-1]]
    best = order[first]
    return best[np.argsort(comp[best])][:ncomp]


def _distances(g, n, roots):
    """Breadth-first distance of every node from the root of its component (a virtual
    node joined to all roots: one search for all components)."""
    k = roots.shape[0]
    link = _sp.csr_array((np.ones(k, dtype=np.int8), (np.full(k, n), roots)), shape=(n + 1, n + 1))
    big = _sp.block_diag((g, _sp.csr_array((1, 1), dtype=np.int8)), format="csr") + link
    dist = _csgraph.shortest_path(big, directed=False, unweighted=True, indices=n)
    return (dist[:n] - 1).astype(np.int64)


def _schedule(nblocks):
    """Block counts (before padding to odd) of the cyclic reduction's levels."""
    counts = []
    m = nblocks
    while m > 0:
        counts.append(m)
        m = (m + (m % 2 == 0)) // 2  # odd blocks left after eliminating the even ones
    return counts


def symbolic(A):
    """The analysis of ``A``'s pattern (a device CSR/CSC container), kept in ``A``'s plan
    while it holds the same index tensors."""
    sym = _plan.get(A, None, "lu_symbolic")
    if sym is not None:
        return sym
    from trnscipy._transfer import to_host

    a, b = A.indptr, A.indices

    indptr = to_host(a).astype(np.int64)
    major = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    minor = to_host(b).astype(np.int64)
    row, col = (major, minor) if A.format == "csr" else (minor, major)
    sym = Symbolic(A.shape[0], row, col)
    return _plan.put(A, None, "lu_symbolic", sym, _plan.STRUCTURE)


# ---- dense batched kernels (device) -----------------------------------------------------------

@register("sparse.linalg.block_inverse", "generic")
def block_inverse(D, pivoting):
    """(inverses, pivoted) of a batch of blocks: LU with partial pivoting inside each
    block (``torch.linalg.inv_ex``) whatever ``pivoting`` says."""
    return torch.linalg.inv_ex(D).inverse, True


@register("sparse.linalg.block_inverse", "xla")
def block_inverse_xla(D, pivoting):
    """Without ``pivoting``: Gauss-Jordan without pivoting in one device loop (the
    ``unpivoted_inverse`` kernel: cheap to compile and to run), which the caller checks;
    with it, ``inv_ex`` (a QR custom call on XLA: slow to compile and to run).
    torch-xla 2.9's complex inverse is wrong (docs/design.md): a complex block A + iB
    is inverted through its real form [[A, -B], [B, A]]."""
    if D.is_complex():
        w = D.shape[-1]
        a, b = D.real, D.imag
        big = torch.cat([torch.cat([a, -b], -1), torch.cat([b, a], -1)], -2)
        inv, pivoted = block_inverse_xla(big, pivoting)
        return torch.complex(inv[..., :w, :w], inv[..., w:, :w]), pivoted
    if pivoting:
        return torch.linalg.inv_ex(D).inverse, True
    return backend(D.device).unpivoted_inverse(D), False


@register("sparse.linalg.solve_columns", "generic")
def solve_columns(k):
    """Right-hand sides the substitution works on for ``k`` given: ``k``."""
    return k


@register("sparse.linalg.solve_columns", "xla")
def solve_columns_xla(k):
    """At least 2: XLA CPU emits a batched matrix-vector product as LLVM loops, slow to
    compile (10 s for the substitution of 10^4 unknowns), and a matrix product as a
    library call (6 s with the zero column)."""
    return max(k, 2)


def _pad_odd(m, t, fill):
    """Append one block (``fill``: 'eye' or 'zero') to a stack of ``m`` blocks when ``m``
    is even, so that the even positions of the stack are one more than the odd ones."""
    if m % 2:
        return t
    return _pad(t, m + 1, fill)


def _pad(t, m, fill):
    """The stack ``t`` of blocks extended to ``m`` blocks by ``fill`` ('eye' or 'zero')."""
    extra = m - t.shape[0]
    if extra <= 0:
        return t
    block = torch.zeros((extra,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    if fill == "eye":
        block = block + torch.eye(t.shape[-1], dtype=t.dtype, device=t.device)
    return torch.cat([t, block])


def _inverses(De, materialize, also, pivoting, probe):
    """Inverses of the stack ``De`` and a 2-element count: [non-finite entries of
    pivoted inverses (a singular factor), non-finite entries or failed checks of
    unpivoted ones (factorize again with pivoting)], CHUNK blocks at a time: every
    chunk is the same graph (one compilation of the inverse per block width, however
    many blocks and levels).  The chunks are computed in one graph with the tensors
    ``also`` (the level's blocks: later graphs start from them instead of tracing the
    earlier levels again).  An inverse computed without pivoting is checked on the
    ``probe`` columns V: max |D X V - V| <= sqrt(eps) max |D| |X| |V| (a stable inverse
    has a residual of about w eps |D| |X|, however ill-conditioned D is; a block that
    needed pivoting, a tiny or zero pivot, or non-finite entries fail)."""
    chunks = [_pad(De[s:s + CHUNK], CHUNK, "eye") for s in range(0, De.shape[0], CHUNK)]
    materialize([*chunks, De, *also])
    inverses, counts = [], []
    tol = float(np.sqrt(torch.finfo(De.dtype).eps))
    for chunk in chunks:
        inv, pivoted = kernel("sparse.linalg.block_inverse", De.device)(chunk, pivoting)
        parts = (inv.real, inv.imag) if inv.is_complex() else (inv,)
        bad = sum((~torch.isfinite(p)).sum() for p in parts).reshape(1)
        if pivoted:
            count = torch.cat([bad, torch.zeros_like(bad)])
        else:  # non-finite entries or a failed check: factorize again, with pivoting
            # (.real: torch-xla 2.9's abs of a complex tensor keeps the complex dtype)
            v = probe.to(inv.dtype)
            r = (chunk @ (inv @ v) - v).abs().real.amax((1, 2))
            scale = (chunk.abs().real @ (inv.abs().real @ probe.to(r.dtype).abs())).amax((1, 2))
            failed = (~(r <= tol * scale)).sum().reshape(1)
            count = torch.cat([torch.zeros_like(bad), bad + failed])
        materialize([inv, count])
        inverses.append(inv)
        counts.append(count)
    return torch.cat(inverses)[:De.shape[0]], sum(counts)


def factor(sym, data, pivoting=True):
    """Numeric factorization of the matrix with values ``data`` (in the pattern's storage
    order) on data's device.  Returns (levels, flags): levels a list of per-level tuples
    (D, Dinv, El, Er, Cu, Cd) of the blocks eliminated there (the Schur-updated diagonal
    blocks, their inverses, the row couplings A[e, e-1], A[e, e+1] and the column
    couplings A[e-1, e], A[e+1, e]); flags a 2-element tensor: [nonzero when a diagonal
    block was singular, nonzero when an inverse computed without ``pivoting`` failed its
    check (factorize again with pivoting)].  Graphs per level: the Schur updates (bmm)
    and the inverses of the eliminated blocks, CHUNK at a time (``_inverses``)."""
    w, nb = sym.w, sym.nblocks
    dev, dtype = data.device, data.dtype
    ww = w * w
    materialize = backend(dev).materialize
    probe = sym.on_device("probe", dev)
    idx = torch.cat([sym.on_device("value_index", dev), sym.on_device("pad_index", dev)])
    vals = torch.cat([data, torch.ones(sym.pad_index.shape[0], dtype=dtype, device=dev)])
    flat = torch.zeros(3 * nb * ww, dtype=dtype, device=dev).index_add(0, idx, vals)
    D = flat[:nb * ww].reshape(nb, w, w)
    R = flat[nb * ww:(2 * nb - 1) * ww].reshape(nb - 1, w, w)
    Lw = flat[2 * nb * ww:(3 * nb - 1) * ww].reshape(nb - 1, w, w)
    flags, levels = [], []
    zero = torch.zeros((1, w, w), dtype=dtype, device=dev)
    for m in sym.schedule:
        D = _pad_odd(m, D, "eye")
        if m % 2 == 0:  # the appended identity block is coupled to nothing
            R, Lw = torch.cat([R, zero]), torch.cat([Lw, zero])
        Rp, Rq = torch.cat([R, zero]), torch.cat([zero, R])  # A[i, i+1], A[i-1, i]
        Lp, Lq = torch.cat([zero, Lw]), torch.cat([Lw, zero])  # A[i, i-1], A[i+1, i]
        El, Er, Cu, Cd = Lp[0::2], Rp[0::2], Rq[0::2], Lq[0::2]
        De, Do = D[0::2], D[1::2]
        # (only what the next level reads: fewer outputs, less for XLA to compile)
        Dinv, count = _inverses(De, materialize, (Do, El, Er, Cu, Cd), pivoting, probe)
        flags.append(count)
        X = Dinv @ torch.cat([El, Er], -1)
        Xl, Xr = X[..., :w], X[..., w:]
        # clones: as views the factors would keep their bases (the padded, concatenated
        # stacks) alive as pending graphs, computed at any later full sync
        levels.append(tuple(t.clone() for t in (De, Dinv, El, Er, Cu, Cd)))
        D = Do - Cd[:-1] @ Xr[:-1] - Cu[1:] @ Xl[1:]
        R = -(Cu[1:-1] @ Xr[1:-1])
        Lw = -(Cd[1:-1] @ Xl[1:-1])
    flags = sum(flags)
    materialize([flags, *(t for lvl in levels for t in lvl)])
    return levels, flags


def _solve_permuted(sym, levels, B, trans):
    """The block tridiagonal solve of B (blocks, w, k): op(A~) X = B."""
    fwd = []
    b = B
    for m, (_, Dinv, El, Er, Cu, Cd) in zip(sym.schedule, levels, strict=True):
        b = _pad_odd(m, b, "zero")
        be, bo = b[0::2], b[1::2]
        fwd.append(be)
        if bo.shape[0]:
            if trans:
                t = Dinv.mT @ be
                bo = bo - Er[:-1].mT @ t[:-1] - El[1:].mT @ t[1:]
            else:
                t = Dinv @ be
                bo = bo - Cd[:-1] @ t[:-1] - Cu[1:] @ t[1:]
        b = bo
    x = b  # no blocks left
    for m, (_, Dinv, El, Er, Cu, Cd), be in zip(reversed(sym.schedule), reversed(levels),
                                                reversed(fwd), strict=True):
        zero = torch.zeros((1,) + tuple(be.shape[1:]), dtype=be.dtype, device=be.device)
        xp = torch.cat([zero, x, zero])
        if trans:
            xe = Dinv.mT @ (be - Cu.mT @ xp[:-1] - Cd.mT @ xp[1:])
        else:
            xe = Dinv @ (be - El @ xp[:-1] - Er @ xp[1:])
        o = x.shape[0]
        x = torch.cat([torch.stack([xe[:o], x], 1).reshape((2 * o,) + tuple(xe.shape[1:])),
                       xe[o:]])[:m]
    return x


def _product(sym, data, x, trans, device):
    """op(A) x with the stored entries (duplicates summed), 2-D x."""
    row, col = sym.on_device("row", device), sym.on_device("col", device)
    if trans:
        row, col = col, row
    return torch.zeros_like(x).index_add(0, row, data.unsqueeze(1) * x.index_select(0, col))


def solve(sym, levels, data, b, trans, refine=REFINE, cut=True):
    """x with op(A) x = b for a 2-D b (n, k) on the factors' device; ``trans`` in
    'N', 'T', 'H'; ``refine`` steps of iterative refinement.  ``cut=False``: pure tensor
    code (no graph cuts), for a caller's graph (eigsh's Lanczos loop)."""
    if trans == "H":
        if data.is_complex():
            return solve(sym, levels, data, b.conj(), "T", refine, cut).conj().resolve_conj()
        trans = "T"
    t = trans == "T"
    dev = b.device
    n, k = b.shape
    width = kernel("sparse.linalg.solve_columns", dev)(k)
    if width > k:
        return solve(sym, levels, data, torch.cat(
            [b, torch.zeros((n, width - k), dtype=b.dtype, device=dev)], 1), trans, refine,
            cut)[:, :k]
    gather = sym.on_device("colsrc" if t else "rowsrc", dev)
    scatter = sym.on_device("rowslot" if t else "colslot", dev)
    zero_row = torch.zeros((1, k), dtype=b.dtype, device=dev)
    materialize = backend(dev).materialize if cut else (lambda tensors: None)

    def apply(r):
        # a graph of its own, from device data: the refinement steps reuse the first
        # step's compiled substitution (XLA compiles the bmm chain once, not 1 + refine)
        materialize([r])
        rb = torch.cat([r, zero_row]).index_select(0, gather).reshape(sym.nblocks, sym.w, k)
        xb = _solve_permuted(sym, levels, rb, t)
        x = xb.reshape(-1, k).index_select(0, scatter)
        materialize([x])
        return x

    x = apply(b)
    for _ in range(refine):
        x = x + apply(b - _product(sym, data, x, t, dev))
    return x


# ---- the factors as sparse matrices (SciPy SuperLU's L, U, perm_r, perm_c) ------------------

def _elimination(sym):
    """Per level: the stack of block ids (None: padding block); and each block's position
    in the elimination order."""
    ids, stacks, order = list(range(sym.nblocks)), [], []
    for m in sym.schedule:
        if m % 2 == 0:
            ids = ids + [None]
        stacks.append(ids)
        order.extend(ids[0::2])
        ids = ids[1::2]
    return stacks, {b: i for i, b in enumerate(order) if b is not None}


def export(sym, levels):
    """(L, U, perm_r, perm_c) as NumPy/SciPy objects: Pr A Pc = L U in this factorization's
    elimination order (blocks level by level, rows permuted inside each block by the
    partial pivoting of its LU, padding removed).  Host work on the blocks."""
    import scipy.linalg as _sla

    w, n = sym.w, sym.n
    stacks, position = _elimination(sym)
    host = [[to_numpy(t) for t in lvl] for lvl in levels]
    # per block id: its LU with partial pivoting (P D = L U) and row order
    lu_of, rows_of = {}, {}
    for stack, (D, _, _, _, _, _) in zip(stacks, host, strict=True):
        for j, b in enumerate(stack[0::2]):
            if b is not None:
                p, lower, upper = _sla.lu(D[j])  # D = p @ lower @ upper
                order = np.argmax(p, axis=0)  # row order[i] of D is row i of p^T D
                lu_of[b], rows_of[b] = (lower, upper), order
    real = sym.rowsrc < n
    slot_final = np.full(sym.nblocks * w, -1, dtype=np.int64)
    final = np.concatenate([position[b] * w + np.arange(w) for b in range(sym.nblocks)])
    keep = np.flatnonzero(real)
    rank = np.full(int(final.max(initial=0)) + 1, -1, dtype=np.int64)
    rank[np.sort(final[keep])] = np.arange(keep.shape[0])
    slot_final[keep] = rank[final[keep]]
    # rows: slot of local row order[i] of block b sits at final row of local i
    row_final = np.full(sym.nblocks * w, -1, dtype=np.int64)
    for b, order in rows_of.items():
        row_final[b * w + order] = slot_final[b * w + np.arange(w)]
    entries = {"L": ([], [], []), "U": ([], [], [])}

    def add(kind, block, rb, cb, rows_permuted):
        if rb is None or cb is None:
            return
        r = (row_final if rows_permuted else slot_final)[rb * w + np.arange(w)]
        c = slot_final[cb * w + np.arange(w)]
        rr, cc = np.meshgrid(r, c, indexing="ij")
        ok = (rr >= 0) & (cc >= 0)
        for lst, v in zip(entries[kind], (rr[ok], cc[ok], block[ok]), strict=True):
            lst.append(v)

    for stack, (_, _, El, Er, Cu, Cd) in zip(stacks, host, strict=True):
        elim = stack[0::2]
        for j, e in enumerate(elim):
            if e is None:
                continue
            lower, upper = lu_of[e]
            order = rows_of[e]
            # rows of the L and U factor in the pivoted order of the diagonal block
            add("L", np.tril(lower), e, e, False)
            add("U", np.triu(upper), e, e, False)
            left = stack[2 * j - 1] if j > 0 else None
            right = stack[2 * j + 1] if 2 * j + 1 < len(stack) else None
            for o, row_c, col_c in ((left, El[j], Cu[j]), (right, Er[j], Cd[j])):
                if o is None:
                    continue
                # U[e, o] = L_e^{-1} P_e A[e, o];  L[o, e] = A[o, e] U_e^{-1} (rows of o
                # in its own pivoted order, applied by row_final)
                add("U", _sla.solve_triangular(lower, row_c[order], lower=True,
                                               unit_diagonal=True), e, o, False)
                add("L", _sla.solve_triangular(upper.T, col_c.T, lower=True).T, o, e, True)

    def assemble(kind):
        rows, cols, vals = (np.concatenate(x) if x else np.zeros(0) for x in entries[kind])
        return _sp.csc_array((vals, (rows.astype(np.int64), cols.astype(np.int64))),
                             shape=(n, n))

    perm_r = row_final[sym.rowslot]
    perm_c = slot_final[sym.colslot]
    return assemble("L"), assemble("U"), perm_r.astype(np.int32), perm_c.astype(np.int32)


def to_numpy(t):
    from trnscipy._transfer import to_host

    return np.asarray(to_host(t))
