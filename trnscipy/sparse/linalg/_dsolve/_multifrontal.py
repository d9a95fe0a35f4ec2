"""Sparse LU on the device: multifrontal over a nested dissection, fronts batched by height.

Symbolic analysis (host, once per sparsity pattern, kept in the container's plan): where
the diagonal has structural zeros, a maximum bipartite matching of the pattern permutes
rows so that it has none (static pivoting; a pattern without a perfect matching is
exactly singular).  Then a nested dissection of the symmetrized pattern: a connected part
is split by its middle breadth-first level from a pseudo-peripheral node (a vertex
separator: the levels before and after it are not coupled), recursively, down to
``LEAF`` unknowns.  Each tree node eliminates its pivots (its separator, or a whole
leaf) after its children; its front holds the pivots and the later unknowns coupled to
them or to its children's fronts (the update set).  With ``natural`` (SciPy's
``permc_spec="NATURAL"``) the tree is the natural order's elimination tree instead
(``_natural_tree``: runs of consecutive unknowns as nodes, perm_c the identity).
Nodes are grouped by height (leaves 0, a node one above its highest child), and every
front of a group is padded to the group's largest pivot and update counts (identity
pivots): one batched stack per group.

Numeric factorization (device, one graph per ``SEGMENT`` groups, replayed on XLA): all
fronts live in one flat buffer, where ``A``'s entries are added first, and each graph
passes on the part of it still to come.  Group by group, bottom-up, the pivot
blocks are inverted together (``checked_inverse``: without pivoting where the device has
a cheaper inverse for that, each checked on two probe columns; where a check fails the
whole factorization runs again with partial pivoting inside each block), and the update
blocks' Schur complements ``F22 - F21 F11^-1 F12`` are added into their parents' fronts
(extend-add: one ``index_add`` with an index map of the analysis).  About n^1.5 work in
2-D and n^2 in 3-D, as the supernodal and multifrontal codes do (decision 0007).

Solves (device): forward through the groups (gather the pivots' right-hand sides, apply
the pivot block's inverse, subtract their coupling from the update unknowns'), back in
reverse (gather the update unknowns' solution, subtract its product with the stored
``F11^-1 F12``, the Schur complement's factor; transposed: the other way round): ``bmm``
with gathers and scatters, batched over fronts and right-hand sides, plus ``REFINE``
steps of iterative refinement with the original entries (SuperLU_DIST's static pivoting
plus refinement), one graph (replayed on XLA).

``device_factor`` runs the three for splu and spsolve and returns a ``DeviceLU``, the
factors with SciPy SuperLU's interface (end of this module).
"""

import math

import numpy as np
import scipy.sparse as _sp
from array_api_compat import is_torch_array
from scipy.sparse import csgraph as _csgraph

from trnscipy import _autograd
from trnscipy._capabilities import declare, runs_on_device
from trnscipy._device import device_kind
from trnscipy._dispatch import find_device, requires_grad
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import _plan, backend, kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import _to_device, to_host

__all__ = ["DeviceLU", "Symbolic", "device_factor", "export", "factor", "solve",
           "solve_operator", "symbolic"]

LEAF = 16  # unknowns below which a part is not dissected further
REFINE = 1  # steps of iterative refinement in every solve


# ---- symbolic analysis (host) ---------------------------------------------------------------

class Symbolic:
    """The pattern's nested dissection: ``groups`` of fronts (per height: their count,
    padded pivot and update sizes ``p``, ``u``, offset in the flat buffer, pivot and
    update unknowns padded with ``n``, the extend-add map into the parents' fronts) and
    the map of the stored entries into the flat buffer (``value_index``)."""

    def __init__(self, n, row, col, natural=False):
        self.n, self.row, self.col = n, row, col
        self.singular = False
        self.device_cache = {}
        match = _row_matching(n, row, col)
        if match is None:
            self.singular = True
            return
        inv_match = np.empty(n, dtype=np.int64)
        inv_match[match] = np.arange(n)
        self.match, self.inv_match = match, inv_match
        mrow = inv_match[row]  # equation r of A is equation inv_match[r] of B = P A
        off = mrow != col
        g = _sp.csr_array((np.ones(int(off.sum()), dtype=np.int8), (mrow[off], col[off])),
                          shape=(n, n))
        g = (g + g.T).tocsr()
        self.nodes = nodes = _natural_tree(g, n) if natural else _dissect(g, n)
        pos = np.empty(n, dtype=np.int64)
        pos[np.concatenate([nd["pivots"] for nd in nodes] or [pos])] = np.arange(n)
        _update_sets(g, nodes, pos)
        self._layout(nodes)
        # entry (r, c) of B belongs to the front of the one of r, c eliminated first
        first = np.where(pos[mrow] <= pos[col], mrow, col)
        owner = np.empty(n, dtype=np.int64)
        for i, nd in enumerate(nodes):
            owner[nd["pivots"]] = i
        node = owner[first]
        f = self._front[node]
        self.value_index = (self._base[node] + self._local(node, mrow) * f
                            + self._local(node, col))

    def _layout(self, nodes):
        """Groups by height, each front's place in the flat buffer, the padding and the
        extend-add maps."""
        n = self.n
        height = np.array([nd["height"] for nd in nodes], dtype=np.int64)
        self.groups = []
        self.where = np.zeros((len(nodes), 2), dtype=np.int64)  # node -> (group, index)
        self._base = np.zeros(len(nodes), dtype=np.int64)  # node -> flat offset of front
        self._front = np.zeros(len(nodes), dtype=np.int64)  # node -> padded front size
        pads = np.zeros(len(nodes), dtype=np.int64)  # node -> its group's padded p
        offset = 0
        for h in range(int(height.max(initial=-1)) + 1):
            members = np.flatnonzero(height == h)
            p = max(len(nodes[i]["pivots"]) for i in members)
            u = max(len(nodes[i]["update"]) for i in members)
            f = p + u
            piv = np.full((len(members), p), n, dtype=np.int64)
            upd = np.full((len(members), u), n, dtype=np.int64)
            for j, i in enumerate(members):
                piv[j, :len(nodes[i]["pivots"])] = nodes[i]["pivots"]
                upd[j, :len(nodes[i]["update"])] = nodes[i]["update"]
            self.where[members] = np.stack([np.full(len(members), h), np.arange(len(members))], 1)
            self._base[members] = offset + np.arange(len(members)) * f * f
            self._front[members], pads[members] = f, p
            j, k = np.nonzero(piv == n)  # padded pivots: a unit diagonal
            # the probe in float32: a float64 one would be a rounding graph on a device
            # holding float64 as float32, left pending in the cache after the first call
            self.groups.append({"count": len(members), "p": p, "u": u, "offset": offset,
                                "members": members, "pivots": piv, "update": upd,
                                "pad_index": offset + (j * f + k) * f + k,
                                "probe": np.random.default_rng(0).uniform(-1, 1, (p, 2)).astype(
                                    np.float32)})
            offset += len(members) * f * f
        self.size = offset  # the trash slot of the flat buffer: padded entries go there
        # every (node, unknown of its front) with the unknown's padded local position
        keys, local = [], []
        for i, nd in enumerate(nodes):
            npiv, nupd = len(nd["pivots"]), len(nd["update"])
            keys.append(i * (n + 1) + np.concatenate([nd["pivots"], nd["update"]]))
            local.append(np.concatenate([np.arange(npiv), pads[i] + np.arange(nupd)]))
        keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        order = np.argsort(keys)
        self._keys = keys[order]
        self._locals = (np.concatenate(local) if local else keys)[order]
        for grp in self.groups:
            ext = np.full((grp["count"], grp["u"], grp["u"]), self.size, dtype=np.int64)
            for j, i in enumerate(grp["members"]):
                par, upd = nodes[i]["parent"], nodes[i]["update"]
                if par is None or not len(upd):
                    continue
                loc = self._local(np.full(len(upd), par), upd)
                m = len(upd)
                ext[j, :m, :m] = self._base[par] + loc[:, None] * self._front[par] + loc[None, :]
            # relative to the next group's offset: the steps carry the live fronts only
            nxt = grp["offset"] + grp["count"] * (grp["p"] + grp["u"]) ** 2
            grp["extend"] = ext.reshape(-1) - nxt

    def _local(self, node, unknowns):
        """Padded local positions of ``unknowns`` in the fronts of ``node`` (arrays)."""
        return self._locals[np.searchsorted(self._keys, node * (self.n + 1) + unknowns)]

    def factor_bytes(self, itemsize):
        """An upper estimate of a numeric factorization's peak memory in bytes: the flat
        buffer, the stored factors (about as large) and one group's temporaries."""
        big = max((g["count"] * (g["p"] + g["u"]) ** 2 for g in self.groups), default=0)
        return (2 * self.size + 4 * big) * itemsize

    def on_device(self, name, device, group=None):
        """An index array of the analysis (of one group) as a tensor on ``device``
        (cached)."""
        key = (name, group, str(device))
        if key not in self.device_cache:
            value = getattr(self, name) if group is None else self.groups[group][name]
            self.device_cache[key] = torch.from_numpy(np.ascontiguousarray(value)).to(device)
        return self.device_cache[key]


def symbolic(A, natural=False):
    """The analysis of ``A``'s pattern (a device CSR/CSC container), kept in ``A``'s plan
    per ordering (``natural``: the columns in their own order, SciPy's
    ``permc_spec="NATURAL"``; else a nested dissection) while it holds the same index
    tensors."""
    return _plan.pattern_analysis(A, "lu_symbolic", natural,
                                  lambda n, row, col: Symbolic(n, row, col, natural))


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


def _dissect(g, n):
    """Nested dissection of graph ``g``: a postorder list of nodes (dicts with
    ``pivots``, ``children``, ``parent``, ``height``).  Level-synchronous: every part of
    one depth is split at once (its connected components, then breadth-first searches of
    the graph restricted to the parts, from one start per part: a few searches of the
    whole graph per depth)."""
    row = np.repeat(np.arange(n), np.diff(g.indptr))
    col = g.indices
    nodes = []
    part = np.zeros(n, dtype=np.int64)  # part of each unknown (-1: in a node)
    parents = [None]  # per part: the node its subtree hangs under
    while (part >= 0).any():
        same = (part[row] == part[col]) & (part[row] >= 0)
        r, c = row[same], col[same]
        # the parts' connected components are the parts from here on (same parents)
        alive = np.flatnonzero(part >= 0)
        graph = _sp.csr_array((np.ones(r.shape[0], dtype=np.int8), (r, c)), shape=(n, n))
        comp = _csgraph.connected_components(graph, directed=False)[1][alive]
        labels, first, comp = np.unique(comp, return_index=True, return_inverse=True)
        parents = [parents[part[alive[i]]] for i in first]
        part[alive] = comp
        size = np.bincount(comp, minlength=labels.shape[0])
        members = _members(part, labels.shape[0])
        for p in np.flatnonzero(size <= LEAF):
            nodes.append({"pivots": members[p], "parent": parents[p]})
            part[members[p]] = -1
        alive = np.flatnonzero(part >= 0)
        if not alive.shape[0]:
            break
        degree = np.bincount(r, minlength=n)
        levels = _distances(n, r, c, _best(part, alive, -degree[alive]))
        for _ in range(2):  # a pseudo-peripheral start: twice the farthest node
            levels = _distances(n, r, c, _best(part, alive, levels[alive]))
        new_part = np.full(n, -1, dtype=np.int64)
        new_parents = []
        for p in np.unique(part[alive]):
            mem = members[p]
            lv = levels[mem]
            k = int(np.searchsorted(np.cumsum(np.bincount(lv)), mem.shape[0] / 2))
            left, sep = lv < k, lv == k
            if not left.any() or (left | sep).all():
                nodes.append({"pivots": mem, "parent": parents[p]})
                continue
            nodes.append({"pivots": mem[sep], "parent": parents[p]})
            for half in (left, lv > k):
                new_part[mem[half]] = len(new_parents)
                new_parents.append(len(nodes) - 1)
        part, parents = new_part, new_parents
    return _postorder(nodes)


def _natural_tree(g, n):
    """The elimination tree of the natural order of the symmetric graph ``g`` as nodes
    (``pivots``, ``children``, ``parent``, ``height``) in that order: the unknowns are
    eliminated as they come (the analysis' perm_c is the identity), each node's pivots a
    run of consecutive unknowns, a column joined to its parent, the next column, where
    that adds no zero to the front (a fundamental supernode) or keeps the run shorter
    than ``LEAF`` and than the column's update set (a banded matrix's chain as fronts of
    about twice its bandwidth, at most 8 times a band LU's work, not one group, one
    more graph step, per unknown).  The tree, not one dense front over all unknowns: a
    sparse matrix's natural order then costs its fill, and fronts stay batched by
    height."""
    parent = np.full(n, -1, dtype=np.int64)
    ancestor = np.full(n, -1, dtype=np.int64)
    for j in range(n):  # Liu's algorithm, with path compression
        for i in g.indices[g.indptr[j]:g.indptr[j + 1]].tolist():
            while 0 <= i < j:
                up = ancestor[i]
                ancestor[i] = j
                if up < 0:
                    parent[i] = j
                i = up
    # the columns' structures (pos: the identity), to tell fundamental supernodes
    single = [{"pivots": np.array([j]), "children": []} for j in range(n)]
    for j in np.flatnonzero(parent >= 0):
        single[parent[j]]["children"].append(j)
    _update_sets(g, single, np.arange(n))
    count = np.array([len(nd["update"]) for nd in single], dtype=np.int64)
    start = [0]  # the runs' first unknowns
    for j in range(1, n):
        joins = parent[j - 1] == j and (count[j - 1] == count[j] + 1
                                        or j - start[-1] < max(LEAF, count[j]))
        if not joins:
            start.append(j)
    bounds = np.append(np.array(start[:n], dtype=np.int64), n)
    node_of = np.repeat(np.arange(bounds.shape[0] - 1), np.diff(bounds))
    nodes = []
    for k in range(bounds.shape[0] - 1):
        last = parent[bounds[k + 1] - 1]
        nodes.append({"pivots": np.arange(bounds[k], bounds[k + 1]), "children": [],
                      "parent": None if last < 0 else int(node_of[last]), "height": 0})
    for k, nd in enumerate(nodes):  # children come first: heights are final in order
        if nd["parent"] is not None:
            up = nodes[nd["parent"]]
            up["children"].append(k)
            up["height"] = max(up["height"], nd["height"] + 1)
    return nodes


def _members(part, count):
    """The unknowns of each part (a list of arrays)."""
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(count + 1))
    return [order[bounds[p]:bounds[p + 1]] for p in range(count)]


def _best(part, nodes, score):
    """Of ``nodes``, the one of largest ``score`` in each part."""
    order = np.lexsort((-score, part[nodes]))
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = part[nodes][order[1:]] != part[nodes][order[:-1]]
    return nodes[order[first]]


def _distances(n, row, col, starts):
    """Breadth-first distance of every node from the start of its part (the graph's edges
    row-col stay inside parts; -1: not reached): one search from a virtual node joined
    to all starts."""
    k = starts.shape[0]
    r = np.concatenate([row, np.full(k, n)])
    c = np.concatenate([col, starts])
    big = _sp.csr_array((np.ones(r.shape[0], dtype=np.int8), (r, c)), shape=(n + 1, n + 1))
    dist = _csgraph.shortest_path(big, directed=False, unweighted=True, indices=n)[:n]
    return np.where(np.isfinite(dist), dist - 1, -1).astype(np.int64)


def _postorder(nodes):
    """The nodes (each with ``parent``) in postorder, with ``children`` and ``height``."""
    children = [[] for _ in nodes]
    roots = []
    for i, nd in enumerate(nodes):
        (roots if nd["parent"] is None else children[nd["parent"]]).append(i)
    order, stack = [], [(r, False) for r in reversed(roots)]
    while stack:
        i, done = stack.pop()
        if done:
            order.append(i)
            continue
        stack.append((i, True))
        stack.extend((c, False) for c in reversed(children[i]))
    new = {old: k for k, old in enumerate(order)}
    out = []
    for old in order:
        kids = [new[c] for c in children[old]]
        out.append({"pivots": nodes[old]["pivots"], "children": kids,
                    "parent": None if nodes[old]["parent"] is None else new[nodes[old]["parent"]],
                    "height": 1 + max((out[c]["height"] for c in kids), default=-1)})
    return out


def _update_sets(g, nodes, pos):
    """Each node's update unknowns (later unknowns coupled to its pivots or to its
    children's updates), in elimination order."""
    for nd in nodes:
        piv = nd["pivots"]
        last = pos[piv].max() if len(piv) else -1
        cand = [g.indices[g.indptr[v]:g.indptr[v + 1]] for v in piv.tolist()]
        cand += [nodes[c]["update"] for c in nd["children"]]
        cand = np.unique(np.concatenate(cand)) if cand else np.zeros(0, np.int64)
        upd = cand[pos[cand] > last]
        nd["update"] = upd[np.argsort(pos[upd])]


# ---- numeric factorization and solves (device) -----------------------------------------------

@register("sparse.linalg.block_inverse", "generic")
def block_inverse(D, pivoting):
    """(inverses, pivoted) of a batch of blocks: LU with partial pivoting inside each
    block whatever ``pivoting`` says."""
    return backend(D.device).pivoted_inverse(D), True


@register("sparse.linalg.block_inverse", "xla")
def block_inverse_xla(D, pivoting):
    """Without ``pivoting``: Gauss-Jordan without pivoting in one device loop (the
    ``unpivoted_inverse`` kernel: cheap to compile and to run), which the caller checks;
    with it, Gauss-Jordan with partial pivoting in one device loop (``pivoted_inverse``;
    torch's ``inv_ex`` is a QR custom call on XLA, slow to compile and to run, and finite
    for an exactly singular block).
    torch-xla 2.9's complex inverse is wrong (docs/design.md): a complex block A + iB
    is inverted through its real form [[A, -B], [B, A]]."""
    if D.is_complex():
        w = D.shape[-1]
        a, b = D.real, D.imag
        big = torch.cat([torch.cat([a, -b], -1), torch.cat([b, a], -1)], -2)
        inv, pivoted = block_inverse_xla(big, pivoting)
        return torch.complex(inv[..., :w, :w], inv[..., w:, :w]), pivoted
    if pivoting:
        return backend(D.device).pivoted_inverse(D), True
    return backend(D.device).unpivoted_inverse(D), False


@register("sparse.linalg.solve_columns", "generic")
def solve_columns(k):
    """Right-hand sides the substitution works on for ``k`` given: ``k``."""
    return k


@register("sparse.linalg.solve_columns", "xla")
def solve_columns_xla(k):
    """``k``: one column's products are row sums (``front_matmul_xla``), no ``dot``.
    (XLA CPU emits a batched matrix-vector ``dot`` as LLVM loops, slow to compile: 10 s
    for the substitution of 10^4 unknowns; a padded second column cost twice the time.)"""
    return k


@register("sparse.linalg.front_matmul", "generic")
def front_matmul(a, b):
    """Batched ``a @ b`` of the fronts' blocks."""
    return a @ b


@register("sparse.linalg.front_matmul", "xla")
def front_matmul_xla(a, b):
    """Batched ``a @ b``; for a short inner dimension a product and a sum: XLA CPU runs a
    batched ``dot`` of many small blocks block by block (745 products of 20x16 by 16x2:
    0.55 ms, the product and sum 0.15 ms)."""
    m, w, k = a.shape[-2], a.shape[-1], b.shape[-1]
    if k == 1:  # a matrix-vector product as row sums (a batched dot: slow to compile)
        return (a * b.mT).sum(-1, keepdim=True)
    if w > MATMUL_SUM or a[..., 0, 0].numel() * m * w * k > 1 << 22:
        return a @ b
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


MATMUL_SUM = 32  # inner dimensions up to which front_matmul_xla multiplies and sums


def _mm(a, b):
    return kernel("sparse.linalg.front_matmul", a.device)(a, b)


def checked_inverse(D, pivoting, probe):
    """Inverses of the stack ``D`` and a 2-element count: [non-finite entries of pivoted
    inverses (a singular factor), non-finite entries or failed checks of unpivoted ones
    (factorize again with pivoting)].  An inverse computed without pivoting is checked
    on the ``probe`` columns V: max |D X V - V| <= sqrt(eps) max |D| |X| |V| (a stable
    inverse has a residual of about w eps |D| |X|, however ill-conditioned D is; a block
    that needed pivoting, a tiny or zero pivot, or non-finite entries fail)."""
    inv, pivoted = kernel("sparse.linalg.block_inverse", D.device)(D, pivoting)
    parts = (inv.real, inv.imag) if inv.is_complex() else (inv,)
    bad = sum((~torch.isfinite(p)).sum() for p in parts).reshape(1)
    if pivoted:
        return inv, torch.cat([bad, torch.zeros_like(bad)])
    tol = float(np.sqrt(torch.finfo(D.dtype).eps))
    v = probe.to(inv.dtype)
    # (.real: torch-xla 2.9's abs of a complex tensor keeps the complex dtype)
    r = (_mm(D, _mm(inv, v)) - v).abs().real.amax((1, 2))
    scale = _mm(D.abs().real, _mm(inv.abs().real, probe.to(r.dtype).abs())).amax((1, 2))
    failed = (~(r <= tol * scale)).sum().reshape(1)
    return inv, torch.cat([torch.zeros_like(bad), bad + failed])


@register("sparse.linalg.front_graph", "generic")
def front_graph(fn, device, fresh):
    """``fn`` (tensors -> tuple of tensors) as the factorization's and solve's steps run
    it: eagerly, op by op."""
    return fn


@register("sparse.linalg.front_graph", "xla")
def front_graph_xla(fn, device, fresh):
    """``fn`` traced once and replayed (``graph_function``): tracing the groups op by op
    in Python each call cost as much as running them (warm spsolve at 10^4 unknowns)."""
    return backend(device).graph_function(fn, fresh=fresh)


def _graph(sym, key, device, make, fresh=False):
    """The step ``make()`` as ``front_graph`` runs it, kept in the analysis per ``key``
    and device: the index tensors it reads are the analysis's, bound at its first trace.
    ``fresh``: its arguments are never tensors of the analysis (``graph_function``)."""
    key = ("graph", key, str(device))
    if key not in sym.device_cache:
        sym.device_cache[key] = kernel("sparse.linalg.front_graph", device)(
            make(), device, fresh)
    return sym.device_cache[key]


def _segment_step(sym, groups, pivoting, dev):
    """The factorization's step over the consecutive ``groups`` (a range): (live, flags)
    -> (live, flags, then Xinv, U12 = Xinv F12, F21 of each group), ``live`` the flat buffer
    from the first group's fronts on (the next segment's after the step: a step copies
    the buffer it writes, so it carries only the fronts still to come); the first
    segment's takes the values instead and builds it."""

    def step(live, flags=None):
        if groups.start == 0:
            data = live
            idx = torch.cat([sym.on_device("value_index", dev)]
                            + [sym.on_device("pad_index", dev, j) for j in range(len(sym.groups))])
            pads = sum(gr["pad_index"].shape[0] for gr in sym.groups)
            vals = torch.cat([data, torch.ones(pads, dtype=data.dtype, device=dev)])
            live = torch.zeros(sym.size + 1, dtype=data.dtype, device=dev).index_add(0, idx, vals)
            flags = torch.zeros(2, dtype=torch.int64, device=dev)
        blocks = []
        for h in groups:
            g = sym.groups[h]
            count, p, u = g["count"], g["p"], g["u"]
            f = p + u
            F = live[:count * f * f].reshape(count, f, f)
            F11, F12, F21, F22 = F[:, :p, :p], F[:, :p, p:], F[:, p:, :p], F[:, p:, p:]
            Xinv, flag = checked_inverse(F11, pivoting, sym.on_device("probe", dev, h))
            U12 = _mm(Xinv, F12) if u else F12.clone()
            blocks += [Xinv, U12, F21.clone()]
            live = live[count * f * f:]
            if u:  # extend-add: the update matrices into their parents' fronts
                S = F22 - _mm(F21, U12)
                live = live.index_add(0, sym.on_device("extend", dev, h), S.reshape(-1))
            flags = flags + flag
        return (live, flags, *blocks)

    return step


SEGMENT = 4  # groups factorized by one graph (a bound on its size whatever the depth)


def factor(sym, data, pivoting=True):
    """Numeric factorization with values ``data`` (the pattern's storage order) on data's
    device: (levels, flags); levels per group the inverses of the Schur-updated pivot
    blocks, the upper coupling blocks times them and the lower coupling blocks (Xinv,
    U12 = Xinv F12, F21: the solve's products; U12 is the Schur complement's too);
    flags [nonzero when a pivot
    block was singular, nonzero when an inverse computed without ``pivoting`` failed its
    check (factorize again with pivoting)].  One graph per ``SEGMENT`` groups."""
    dev = data.device
    materialize = backend(dev).materialize
    levels, state = [], (data,)
    flags = torch.zeros(2, dtype=torch.int64, device=dev)  # (no groups: an empty matrix)
    for h0 in range(0, len(sym.groups), SEGMENT):
        groups = range(h0, min(h0 + SEGMENT, len(sym.groups)))
        step = _graph(sym, ("factor", h0, pivoting), dev,
                      lambda groups=groups: _segment_step(sym, groups, pivoting, dev),
                      fresh=True)
        live, flags, *blocks = step(*state)
        materialize([live, flags, *blocks])
        levels += _unflat(blocks)
        state = (live, flags)
    return levels, flags


def _solve_permuted(sym, levels, z, trans):
    """op(B) y = z for B = P A in unknown order; z (n, k), returns y (n, k)."""
    dev = z.device
    n, k = z.shape
    pad = torch.zeros((2, k), dtype=z.dtype, device=dev)  # n: reads zero, n + 1: trash
    z = torch.cat([z, pad])
    # three products per group (each inverse applied once): a block row of B is
    # F11 [I U12], the rows below it couple through F21
    ys = []
    for h, (Xinv, U12, F21) in enumerate(levels):
        g = sym.groups[h]
        piv = sym.on_device("pivots", dev, h)
        upd = sym.on_device("update", dev, h)
        zp = z.index_select(0, piv.reshape(-1)).reshape(g["count"], g["p"], k)
        yp = zp if trans else _mm(Xinv, zp)
        ys.append(yp)
        if g["u"]:
            c = _mm(U12.mT, yp) if trans else _mm(F21, yp)
            dest = torch.where(upd == n, n + 1, upd).reshape(-1)
            z = z.index_add(0, dest, -c.reshape(-1, k))
    x = torch.zeros((n + 2, k), dtype=z.dtype, device=dev)
    for h in reversed(range(len(levels))):
        Xinv, U12, F21 = levels[h]
        g = sym.groups[h]
        piv = sym.on_device("pivots", dev, h)
        upd = sym.on_device("update", dev, h)
        xp = ys[h]
        if g["u"]:
            xu = x.index_select(0, upd.reshape(-1)).reshape(g["count"], g["u"], k)
            xp = xp - _mm(F21.mT if trans else U12, xu)
        if trans:
            xp = _mm(Xinv.mT, xp)
        dest = torch.where(piv == n, n + 1, piv).reshape(-1)
        x = x.index_put((dest,), xp.reshape(-1, k))
    return x[:n]


def _product(sym, data, x, trans, device):
    """op(A) x with the stored entries (duplicates summed), 2-D x."""
    row, col = sym.on_device("row", device), sym.on_device("col", device)
    if trans:
        row, col = col, row
    return torch.zeros_like(x).index_add(0, row, data.unsqueeze(1) * x.index_select(0, col))


def solve(sym, levels, data, b, trans, refine=REFINE, cut=True):
    """x with op(A) x = b for a 2-D b (n, k) (``cut``: or a 1-D b); ``trans`` in 'N',
    'T', 'H'; ``refine`` steps of iterative refinement with the original entries."""
    if trans == "H":
        if data.is_complex():
            return solve(sym, levels, data, b.conj(), "T", refine, cut).conj().resolve_conj()
        trans = "T"
    t = trans == "T"
    if cut:  # one graph for the whole solve, replayed
        graph = _graph(sym, ("solve", t, refine), b.device, lambda: (
            lambda b, data, *blocks: (_solve(sym, _unflat(blocks), data, b.reshape(
                b.shape[0], math.prod(b.shape[1:])), t, refine).reshape(b.shape),)))
        return graph(b, data, *[x for level in levels for x in level])[0]
    return _solve(sym, levels, data, b, t, refine)


def solve_operator(sym, levels, data):
    """(tensors, apply): ``solve`` of one vector without graph cuts as ``apply(tensors,
    b)``, pure tensor code of the factors ``tensors`` (the values and the blocks): a
    caller's replayed graph taking them as arguments serves every factorization of the
    analysis ``sym``, whose index tensors it binds."""
    def apply(tensors, b):
        return _solve(sym, _unflat(tensors[1:]), tensors[0], b.reshape(-1, 1), False,
                      REFINE).reshape(-1)

    return [data, *[x for level in levels for x in level]], apply


def _unflat(blocks):
    return [tuple(blocks[i:i + 3]) for i in range(0, len(blocks), 3)]


def _solve(sym, levels, data, b, t, refine):
    """The substitutions and refinement of ``solve`` as tensor code (no graph cuts)."""
    dev = b.device
    n, k = b.shape
    width = kernel("sparse.linalg.solve_columns", dev)(k)
    if width > k:
        b = torch.cat([b, torch.zeros((n, width - k), dtype=b.dtype, device=dev)], 1)
        return _solve(sym, levels, data, b, t, refine)[:, :k]
    match = sym.on_device("match", dev)
    inv_match = sym.on_device("inv_match", dev)

    def apply(r):
        if t:  # B^T (P x) = r: x = y[inv_match]
            return _solve_permuted(sym, levels, r, True).index_select(0, inv_match)
        # B x = P r, (P r)[c] = r[match[c]]
        return _solve_permuted(sym, levels, r.index_select(0, match), False)

    x = apply(b)
    for _ in range(refine):
        x = x + apply(b - _product(sym, data, x, t, dev))
    return x


# ---- the factors as sparse matrices (SciPy SuperLU's L, U, perm_r, perm_c) ------------------

def export(sym, data):
    """(L, U, perm_r, perm_c) as NumPy/SciPy objects: Pr A Pc = L U in this factorization's
    elimination order (node after node, each node's rows permuted by the partial pivoting
    of its pivot block's LU, padding removed).  Host work: the fronts are factorized
    again from ``data`` with the factors' own Schur complements, so that L U reproduces
    A to the rounding of one LU (the device's complements, made with explicit inverses,
    differ from the host blocks' L21 U12 by more than that)."""
    import scipy.linalg as _sla

    n, nodes = sym.n, sym.nodes
    values = to_numpy(data)
    live = np.zeros(sym.size + 1, dtype=values.dtype)
    np.add.at(live, sym.value_index, values)
    pos = np.empty(n, dtype=np.int64)
    start = np.cumsum([0] + [len(nd["pivots"]) for nd in nodes])
    pos[np.concatenate([nd["pivots"] for nd in nodes] or [pos])] = np.arange(n)
    row_final = np.empty(n, dtype=np.int64)
    blocks = {"L": [], "U": []}
    for i, nd in enumerate(nodes):  # children first: a node's front is complete here
        piv, upd = nd["pivots"], nd["update"]
        ps, us = len(piv), len(upd)
        if not ps:
            continue
        p, f = sym.groups[sym.where[i][0]]["p"], sym._front[i]
        F = live[sym._base[i]:sym._base[i] + f * f].reshape(f, f)
        perm, lower, upper = _sla.lu(F[:ps, :ps])  # F11 = perm @ lower @ upper
        order = np.argmax(perm, axis=0)  # row order[k] of F11 is row k of perm^T F11
        row_final[piv[order]] = start[i] + np.arange(ps)
        cols = start[i] + np.arange(ps)
        blocks["L"].append((cols, cols, np.tril(lower), False))
        blocks["U"].append((cols, cols, np.triu(upper), False))
        if us:
            u12 = _sla.solve_triangular(lower, F[:ps, p:p + us][order], lower=True,
                                        unit_diagonal=True)
            l21 = _sla.solve_triangular(upper.T, F[p:p + us, :ps].T, lower=True).T
            blocks["U"].append((cols, pos[upd], u12, False))
            # rows of the update unknowns: their final rows are known once their own
            # node is done (True: map them at assembly)
            blocks["L"].append((upd, cols, l21, True))
            par = nd["parent"]  # extend-add of the Schur complement
            loc = sym._local(np.full(us, par), upd)
            live[sym._base[par] + loc[:, None] * sym._front[par] + loc[None, :]] += (
                F[p:p + us, p:p + us] - l21 @ u12)

    def assemble(kind):
        rows, cols, vals = [], [], []
        for r, c, v, unknowns in blocks[kind]:
            rr, cc = np.meshgrid(row_final[r] if unknowns else r, c, indexing="ij")
            rows.append(rr.ravel())
            cols.append(cc.ravel())
            vals.append(v.ravel())
        cat = (np.concatenate(x) if x else np.zeros(0) for x in (rows, cols, vals))
        r, c, v = cat
        return _sp.csc_array((v, (r.astype(np.int64), c.astype(np.int64))), shape=(n, n))

    perm_r = row_final[sym.inv_match]
    perm_c = pos
    return assemble("L"), assemble("U"), perm_r.astype(np.int32), perm_c.astype(np.int32)


def to_numpy(t):
    from trnscipy._transfer import to_host

    return np.asarray(to_host(t))


# ---- the factorization object (splu's and spsolve's) ----------------------------------------
#
# ``DeviceLU``: SciPy SuperLU's interface over these factors.  ``L``, ``U``, ``perm_r`` and
# ``perm_c`` satisfy ``Pr A Pc = L U`` as SciPy's do, with this factorization's
# permutations (not SuperLU's), and ``L``/``U`` hold the dense blocks' explicit zeros;
# they are assembled on the host on first access (warned off the CPU kind).  ``solve``
# runs on the device and adds ``REFINE`` steps of iterative refinement with the matrix.
# ``spilu``'s ``DeviceILU`` (``_ilu``) has the same interface over incomplete factors.

FACTORS = "scipy.sparse.linalg.SuperLU.L"  # the capability table's name for the export
declare(FACTORS, host=("cuda", "xla", "neuron"),
        why="L, U, perm_r and perm_c are assembled from the blocks on the host")


@register("sparse.linalg.factor", "generic")
def device_factor(A, natural=False):
    """Factorize the device CSR/CSC container ``A`` (square, floating dtype) on its device
    (``natural``: in the columns' own order, SciPy's ``permc_spec="NATURAL"``): splu's and
    spsolve's factorization (``kernel("sparse.linalg.factor")``; on Neuron, float64 data
    gets ``_refine``'s refined float32 factors).
    RuntimeError("Factor is exactly singular") as SciPy's."""
    sym = symbolic(A, natural)
    if sym.singular:
        raise RuntimeError("Factor is exactly singular")
    data = A.data
    _check_memory(sym, data)
    # without pivoting inside the blocks where the device has a cheaper inverse for that
    # (checked; once more with pivoting where the check fails)
    levels, flags = factor(sym, data, pivoting=False)  # computed group by group
    singular, unstable = to_host(flags).tolist()  # one read
    if unstable:
        levels, flags = factor(sym, data, pivoting=True)
        singular = to_host(flags)[0]
    if singular:
        raise RuntimeError("Factor is exactly singular")
    return DeviceLU(sym, levels, data)


def _check_memory(sym, data):
    """MemoryError, with the estimate, before a factorization that cannot fit in the
    device's free memory (never an out-of-memory kill halfway through)."""
    need = sym.factor_bytes(data.element_size())
    have = backend(data.device).memory_available(data.device)
    if need > have:
        gib = 2.0 ** 30
        raise MemoryError(
            f"the sparse LU of this {sym.n}x{sym.n} matrix on {data.device} needs about "
            f"{need / gib:.1f} GiB (the dense fronts of its elimination order) and "
            f"{have / gib:.1f} GiB is free there; SciPy's splu on "
            "the host (NumPy/SciPy inputs) or an iterative solver needs less")


class DeviceLU:
    """LU factors on a device with SciPy SuperLU's interface."""

    _trnscipy_device_object = True

    def __init__(self, sym, levels, data):
        self._sym, self._levels, self._data = sym, levels, data
        self.device = data.device
        self.dtype = to_numpy_dtype(data.dtype)
        self.shape = (sym.n, sym.n)
        self._factors = None

    def __repr__(self):
        return f"<DeviceLU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def solve(self, rhs, trans="N"):
        """x with op(A) x = rhs (op per ``trans``: 'N', 'T', 'H') on the factors' device;
        SciPy's errors for a wrong shape, dtype or ``trans``."""
        find_device((self, rhs))  # ValueError for a right-hand side on another device
        if requires_grad(rhs):  # implicit differentiation (trnscipy._autograd)
            return _autograd.factorization_solve(self, None, rhs, trans)
        if isinstance(rhs, np.ndarray):
            rhs = _to_device(rhs, self.device, strict=True)
        if not is_torch_array(rhs):
            raise TypeError(f"argument 1 must be numpy.ndarray, not {type(rhs).__name__}")
        if trans not in ("N", "T", "H"):
            raise ValueError("trans must be N, T, or H")
        if rhs.ndim > 2:
            raise ValueError("object too deep for desired array")
        rdtype = to_numpy_dtype(rhs.dtype)
        if not np.can_cast(rdtype, self.dtype, "safe"):  # before the size, as SciPy
            raise TypeError(f"Cannot cast array data from dtype('{rdtype}') to "
                            f"dtype('{self.dtype}') according to the rule 'safe'")
        if rhs.ndim == 0 or rhs.shape[0] != self.shape[0]:
            raise ValueError("b is of incompatible size")
        b = self._cast(rhs)
        if self._vectors:  # (a reshape here would be one more graph execution)
            return self._solve(b, trans)
        return self._solve(b.reshape(b.shape[0], math.prod(b.shape[1:])), trans).reshape(rhs.shape)

    _vectors = True  # ``_solve`` takes 1-D and 2-D right-hand sides

    def _cast(self, rhs):
        """``rhs`` as ``_solve`` takes it: in the factors' dtype (SciPy's cast)."""
        return rhs.to(to_torch_dtype(self.dtype))

    def _solve(self, b, trans):
        return solve(self._sym, self._levels, self._data, b, trans)

    def traced_solve(self, b):
        """A^-1 b for a vector ``b`` of the factors' dtype and device as pure tensor code
        (no checks, no graph cuts, no host reads): a step of a caller's graph."""
        return self._traced(b.reshape(-1, 1)).reshape(-1)

    def _traced(self, b, trans="N"):
        """op(A)^-1 b for a 2-D ``b`` as pure tensor code (a caller's graph or loop)."""
        return solve(self._sym, self._levels, self._data, b, trans, cut=False)

    def traced_operator(self):
        """(tensors, apply, cache): ``traced_solve`` as ``apply(tensors, b)``, pure in the
        factors ``tensors``; a caller's graph taking them as arguments serves every
        factorization of this pattern, kept in ``cache`` (the analysis')."""
        return (*solve_operator(self._sym, self._levels, self._data), self._sym.device_cache)

    def to(self, device):
        return DeviceLU(self._sym, [tuple(t.to(device) for t in lvl) for lvl in self._levels],
                        self._data.to(device))

    def to_scipy(self):
        """A SciPy-like host object: solve takes and returns NumPy arrays."""
        return _HostLU(self)

    # -- SciPy SuperLU's attributes ------------------------------------------------------------

    def _lu(self):
        """L, U, perm_r, perm_c: the LU of each pivot block and the products with the
        couplings are computed on the host (SciPy), warned where the capability table
        says so, and moved to the device."""
        if self._factors is None:
            runs_on_device(FACTORS, device_kind(self.device), self.dtype)
            L, U, perm_r, perm_c = self._export()
            self._factors = tuple(_to_device(x, self.device, strict=True)
                                  for x in (L.astype(self.dtype), U.astype(self.dtype),
                                            perm_r, perm_c))
        return self._factors

    def _export(self):
        return export(self._sym, self._data)

    @property
    def perm_r(self):
        return self._lu()[2]

    @property
    def perm_c(self):
        return self._lu()[3]

    @property
    def L(self):
        return self._lu()[0]

    @property
    def U(self):
        return self._lu()[1]

    @property
    def nnz(self):
        return int(self.L.nnz + self.U.nnz)


class _HostLU:
    """``DeviceLU.to_scipy()``: NumPy in, NumPy out (offload mode), device arithmetic.
    Device tensors in give device tensors out: a LinearOperator of ``solve`` (a pure
    tensor function) is given the device solver's vectors in an offloaded call."""

    _ATTRIBUTES = ("L", "U", "perm_r", "perm_c", "nnz")  # SciPy SuperLU's, read back

    def __init__(self, lu):
        self._lu = lu
        self.shape = lu.shape
        # a double-float factorization's float32 solve (a float32 Krylov solve's M)
        self.float32_solve = getattr(lu, "float32_solve", None)

    def solve(self, rhs, trans="N"):
        """SciPy's ``SuperLU.solve``: NumPy results for host right-hand sides."""
        x = self._lu.solve(rhs, trans)
        return x if is_torch_array(rhs) else to_host(x)

    solve.pure_tensor_code = True  # on tensors: the device object's solve

    def __getattr__(self, name):
        if name not in _HostLU._ATTRIBUTES:
            raise AttributeError(f"'SuperLU' object has no attribute {name!r}")
        return to_host(getattr(self._lu, name))
