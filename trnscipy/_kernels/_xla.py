"""XLA kernels (torch-xla; Trainium through torch-neuronx).

Products are scatter-free where the matrix allows: a row-padded layout (``_ell``)
chosen per matrix when it is built (``prepare_product``: on the host at ``to_device``,
after the validation read in the constructor), the product a gather, a multiply and
a sum along the padded axis.  Matrices whose padding would exceed
``_ell.MAX_PADDING`` (and those made by device-side conversions) use the generic
gather/multiply/index_add kernel.  What is XLA-specific too is when graphs are cut:
layouts and the expanded row index are computed once and materialised on the device
with the container, so the first product on a new matrix is one compilation and
every later one reuses it.
"""

import numpy as np
import torch
import torch_xla

from trnscipy._kernels import _ell, register
from trnscipy._kernels._generic import expand_ptr as _generic_expand_ptr
from trnscipy._kernels._generic import spmm as _generic_spmm
from trnscipy.sparse import _sputils as su


@register("materialize", "xla")
def materialize(tensors):
    """Compute ``tensors`` in one graph, now.

    Reading a result's tensors one by one traces one graph per tensor, and
    torch-xla 2.9 can hand two such graphs the same compiled executable when they
    differ only in which same-shaped input feeds which op (pytorch/xla#8353, open):
    ``row[order]`` then ``col[order]`` read back ``row[order]`` twice.  One graph
    for all of a result's tensors avoids that, at one graph execution.
    """
    torch_xla._XLAC._xla_sync_multi(list(tensors), devices=[], wait=False)


@register("sync", "xla")
def sync():
    """Cut the lazy graph and run it (``torch_xla.sync()``)."""
    torch_xla.sync()


@register("expand_ptr", "xla")
def expand_ptr(indptr, nnz):
    out = _generic_expand_ptr(indptr, nnz)
    materialize([out])
    return out


@register("product_index", "xla")
def product_index(indptr, nnz, device):
    """The entry -> major index the products gather by, set up with a new container.

    A host ``indptr`` (a SciPy object being moved) is expanded with NumPy and sent with
    the other arrays: no graph.  A device one is traced lazily: the constructor runs it in
    the graph of its validation read.  Either way the first product compiles one graph.
    """
    if isinstance(indptr, np.ndarray):
        counts = np.diff(indptr)
        major = np.repeat(np.arange(counts.shape[0], dtype=indptr.dtype), counts)
        return torch.from_numpy(major).to(device)
    return _generic_expand_ptr(indptr, nnz)


def _host_layout(A, host):
    """(slots, minor index of each entry, width) of SciPy object ``host``, on the CPU."""
    fmt = A.format
    if fmt in ("csr", "bsr"):
        ptr = torch.from_numpy(np.asarray(host.indptr, dtype=np.int64))
        width = int(torch.diff(ptr).max()) if ptr.shape[0] > 1 else 0
        return _ell.slots(ptr, width), host.indices[:int(ptr[-1])], width
    if fmt == "csc":
        stored = int(host.indptr[-1])
        rows = torch.from_numpy(np.asarray(host.indices[:stored], dtype=np.int64))
        counts = np.diff(host.indptr)
        minor = np.repeat(np.arange(counts.shape[0], dtype=host.indices.dtype), counts)
    else:  # coo
        rows, minor = torch.from_numpy(host.row.astype(np.int64)), host.col
    slot_map, width = _ell.row_slots(rows, A.shape[0])
    return slot_map, minor, width


@register("prepare_product", "xla")
def prepare_product(A, host=None):
    """Choose the product layout of a new container and build it with the container.

    ``host`` is the SciPy object ``A`` was copied from: the layout is built on the CPU
    and sent with it (no graph).  Without it, a CSR/BSR container whose validation read
    gave its widest row (``_cache_row_width``) builds it on the device in one graph
    execution.  Matrices padded beyond ``_ell.MAX_PADDING`` keep the generic kernel."""
    fmt = A.format
    if (fmt not in ("csr", "csc", "coo", "bsr") or len(A.shape) != 2
            or A.data.dtype == torch.bool):
        return
    n_rows = A.shape[0] // (A.blocksize[0] if fmt == "bsr" else 1)
    stored = A.data.shape[0]
    if host is not None:
        slot_map, minor, width = _host_layout(A, host)
        if not _ell.worth_padding(n_rows, width, stored):
            return
        parts = [slot_map.to(torch.int32 if stored < 2**31 - 1 else torch.int64)]
        if fmt != "bsr":
            minor = torch.from_numpy(np.ascontiguousarray(minor))
            parts += [_ell.pad(minor, slot_map),
                      _ell.pad(torch.from_numpy(np.ascontiguousarray(host.data[:stored])),
                               slot_map)]
        parts = [su.from_host(t.numpy(), A.device) for t in parts]
    else:
        width = A.__dict__.get("_cache_row_width")
        if fmt not in ("csr", "bsr") or width is None:
            return
        if not _ell.worth_padding(n_rows, width, stored):
            return
        parts = [_ell.slots(A.indptr, width)]
        if fmt != "bsr":
            with torch.no_grad():
                parts += [_ell.pad(A.indices, parts[0]), _ell.pad(A.data, parts[0])]
        materialize(parts)
    A.__dict__["_cache_ell"] = (_stamp(A, _STRUCTURE[fmt]), parts[0],
                                parts[1] if fmt != "bsr" else None)
    if fmt != "bsr":
        A.__dict__["_cache_ell_data"] = (_stamp(A, ("data",)), parts[2])


_STRUCTURE = {"csr": ("indptr", "indices"), "csc": ("indptr", "indices"),
              "bsr": ("indptr", "indices"), "coo": ("row", "col")}


def _stamp(A, names):
    """Which tensors ``A`` holds as ``names`` and their in-place version counters: a
    layout built from them is valid while the stamp is unchanged."""
    return tuple((t, t._version) for t in (getattr(A, name) for name in names))


def _valid(stamp, A, names):
    return all(a is b and v == b._version
               for (a, v), b in zip(stamp, (getattr(A, name) for name in names), strict=True))


@register("spmv", "xla")
@register("spmm", "xla")
def spmm(A, x):
    """y = A @ x: over the row-padded layout when ``prepare_product`` chose one."""
    layout = A.__dict__.get("_cache_ell")
    if (layout is None or A.data.dtype == torch.bool
            or not _valid(layout[0], A, _STRUCTURE[A.format])):
        return _generic_spmm(A, x)
    _, slot_map, cols = layout
    if A.format == "bsr":
        return _block_product(A, x, slot_map)
    cached = A.__dict__.get("_cache_ell_data")
    if cached is not None and not A.data.requires_grad and _valid(cached[0], A, ("data",)):
        padded = cached[1]
    else:  # new values on the same structure, or autograd: padded in the graph
        padded = _ell.pad(A.data, slot_map)
    gathered = x.index_select(0, cols.reshape(-1)).reshape(tuple(cols.shape)
                                                           + tuple(x.shape[1:]))
    return (gathered * (padded.unsqueeze(-1) if x.ndim == 2 else padded)).sum(1)


def _block_product(A, x, slot_map):
    """BSR @ x: dense (r x c) tile products, then each block row's products gathered by
    the padded layout and summed along the padded axis."""
    r, c = A.blocksize
    m, n = A.shape
    k = x.shape[1] if x.ndim == 2 else 1
    prod = torch.bmm(A.data, x.reshape(n // c, c, k).index_select(0, A.indices))
    out = _ell.pad(prod, slot_map).sum(1).reshape(m, k)
    return out[:, 0].clone() if x.ndim == 1 else out


@register("inner", "xla")
def inner(a, b):
    """conj(a) . b along the last axis, as a product and a sum: XLA CPU accumulates a
    ``dot`` in order (float32 relative error 9e-7 at 10^4 entries, 3e-5 at 10^6,
    measured) and a reduction pairwise (7e-9, 4e-8), the accuracy of NumPy's dot.
    Krylov solvers lose convergence to the sequential sum."""
    return (a.conj() * b).sum(-1)


@register("graph_function", "xla")
def graph_function(fn):
    """``fn`` (tensors -> tuple of tensors, no in-place writes to its arguments) traced
    once and replayed: see ``_Replay``."""
    return _Replay(fn)


class _Replay:
    """A function of device tensors whose lazy trace is recorded on the first call and
    replayed with the next call's arguments (the mechanism of torch-xla's dynamo bridge:
    the graph's hash, its device-data inputs, ``_run_cached_graph``).

    Tracing a Krylov block op by op in Python cost more than running it: cg on 2-D
    Poisson 10^4 spent about 70% of a warm solve tracing its 25-iteration blocks.  A
    replay is one C++ call and one graph execution.  Tensors the function reads
    without taking them as arguments (a matrix, constants) are bound at the first call;
    so a ``_Replay`` lives for one solve, whose operands do not change meanwhile.
    Arguments of other shapes or dtypes trace again.
    """

    def __init__(self, fn):
        self.fn = fn
        self.plans = {}

    def __call__(self, *args):
        signature = tuple((a.dtype, tuple(a.shape)) for a in args)
        if signature not in self.plans:
            args, self.plans[signature] = self._trace(args)
        else:
            args = _device_data(args)
        graph_hash, sources, outputs = self.plans[signature]
        inputs = [args[s] if isinstance(s, int) else s for s in sources]
        results = (torch_xla._XLAC._run_cached_graph(graph_hash, inputs)
                   if graph_hash is not None else [])
        if len(results) != sum(kind == "graph" for kind, _ in dict.fromkeys(outputs)):
            raise RuntimeError("a replayed graph returned an unexpected number of results")
        return tuple(results[i] if kind == "graph" else args[i] if kind == "arg" else i
                     for kind, i in outputs)

    def _trace(self, args):
        """Trace ``fn``; returns the arguments to run with and the plan: graph hash, each
        graph input as an argument position or a bound tensor, each output as a graph
        result, an argument passed through, or a bound tensor.

        Graph inputs are told apart by buffer, so the arguments are first copied to
        buffers of their own (one graph execution, which also computes pending
        arguments): an argument may share its buffer with a tensor the function reads
        as a constant (a clone, the same tensor bound in a closure), and a replay must
        then feed the new argument to one use and the constant to the other."""
        xlac = torch_xla._XLAC
        import torch_xla.core.xla_model as xm

        args = tuple(a.clone() for a in args)
        xlac._xla_sync_multi(list(args), devices=[], wait=True, sync_xla_data=True)
        out = self.fn(*args)
        if any(xlac._check_tensor_need_materialization(list(args))):
            raise RuntimeError("a replayed graph function wrote to its arguments")
        computed = xlac._check_tensor_need_materialization(list(out))
        arg_pos = {id(a): i for i, a in enumerate(args)}
        graph, at, outputs = [], {}, []
        for t, c in zip(out, computed, strict=True):
            if c:
                if id(t) not in at:
                    at[id(t)] = len(graph)
                    graph.append(t)
                outputs.append(("graph", at[id(t)]))
            elif id(t) in arg_pos:
                outputs.append(("arg", arg_pos[id(t)]))
            else:  # device data the function did not compute: the same tensor each time
                outputs.append(("const", t))
        if not graph:
            return args, (None, [], outputs)
        xm.wait_device_ops()  # device-data handles of finished work, not placeholders
        _, values = xlac._get_tensors_xla_device_data_node(graph)
        handles = xlac._get_tensors_handle(list(args))
        if len(set(handles)) < len(handles):
            raise RuntimeError("arguments of a replayed function share buffers")
        owner = {h: i for i, h in enumerate(handles)}
        sources = [owner.get(h, v)
                   for v, h in zip(values, xlac._get_tensors_handle(list(values)), strict=True)]
        graph_hash = xlac._get_graph_hash(graph)
        xlac._xla_warm_up_cache(graph, [])
        return args, (graph_hash, sources, outputs)


def _device_data(tensors):
    """``tensors`` with pending ones computed (graph inputs are device data)."""
    xlac = torch_xla._XLAC
    need = xlac._check_tensor_need_materialization(list(tensors))
    pending = [t for t, p in zip(tensors, need, strict=True) if p]
    if pending:
        xlac._xla_sync_multi(pending, devices=[], wait=True, sync_xla_data=True)
    return tensors
