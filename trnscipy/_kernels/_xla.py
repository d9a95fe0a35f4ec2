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

from trnscipy._device import materialize
from trnscipy._kernels import _ell, _generic, _plan
from trnscipy._kernels import _sparsetools as su
from trnscipy._kernels._generic import expand_ptr as _generic_expand_ptr


def sync():
    """Cut the lazy graph and run it (``torch_xla.sync()``)."""
    torch_xla.sync()


def expand_ptr(indptr, nnz):
    out = _generic_expand_ptr(indptr, nnz)
    materialize([out])
    return out


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


def prepare_product(A, host=None, width=None):
    """Choose the product layout of a new container and build it with the container (in
    its plan: the slot map and padded minor index as ``("xla", "ell")``, the padded
    values as ``("xla", "ell_data")``).

    ``host`` is the SciPy object ``A`` was copied from: the layout is built on the CPU
    and sent with it (no graph).  Without it, a CSR/BSR container whose validation read
    gave its widest row (``width``) builds it on the device in one graph execution.
    Matrices padded beyond ``_ell.MAX_PADDING`` keep the generic kernel."""
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
        if fmt not in ("csr", "bsr") or width is None:
            return
        if not _ell.worth_padding(n_rows, width, stored):
            return
        parts = [_ell.slots(A.indptr, width)]
        if fmt != "bsr":
            with torch.no_grad():
                parts += [_ell.pad(A.indices, parts[0]), _ell.pad(A.data, parts[0])]
        materialize(parts)
    _plan.put(A, "xla", "ell", (parts[0], parts[1] if fmt != "bsr" else None),
              _plan.STRUCTURE)
    if fmt != "bsr":
        _plan.put(A, "xla", "ell_data", parts[2])


def _entry_product(generic):
    """The XLA product of a CSR/CSC/COO container: over the row-padded layout when
    ``prepare_product`` chose one, else ``generic``."""

    def product(A, x):
        layout = _plan.get(A, "xla", "ell")
        if layout is None or A.data.dtype == torch.bool:
            return generic(A, x)
        return _ell_product(A, x, *layout)

    return product


csr_product = _entry_product(_generic.csr_product)
csc_product = _entry_product(_generic.csc_product)
coo_product = _entry_product(_generic.coo_container_product)


def bsr_product(A, x):
    """BSR @ x over the padded block-row layout when ``prepare_product`` chose one."""
    layout = _plan.get(A, "xla", "ell")
    if layout is None or A.data.dtype == torch.bool:
        return _generic.bsr_product(A, x)
    return _block_product(A, x, layout[0])


def _ell_product(A, x, slot_map, cols):
    """y = A @ x over the row-padded layout: a gather, a multiply, a sum per row."""
    padded = None if A.data.requires_grad else _plan.get(A, "xla", "ell_data")
    if padded is None:  # new values on the same structure, or autograd: padded in the graph
        padded = _ell.pad(A.data, slot_map)
    gathered = x.index_select(0, cols.reshape(-1)).reshape(tuple(cols.shape)
                                                           + tuple(x.shape[1:]))
    return _ell.row_sum(gathered * (padded.unsqueeze(-1) if x.ndim == 2 else padded))


def _block_product(A, x, slot_map):
    """BSR @ x: dense (r x c) tile products, then each block row's products gathered by
    the padded layout and summed along the padded axis."""
    r, c = A.blocksize
    m, n = A.shape
    k = x.shape[1] if x.ndim == 2 else 1
    prod = torch.bmm(A.data, x.reshape(n // c, c, k).index_select(0, A.indices))
    out = _ell.row_sum(_ell.pad(prod, slot_map)).reshape(m, k)
    return out[:, 0].clone() if x.ndim == 1 else out


def sort(t, stable=False):
    """torch.sort whose outputs may index: torch-xla 2.9 aborts the process ("F shape.h:848
    Check failed: buffer != nullptr") when an output of a multi-output op (sort, topk, max
    along an axis) is the index of ``index_select``/``index_add`` (measured on PJRT CPU:
    ``x.index_select(0, torch.sort(i).indices)``).  One elementwise op in between avoids it;
    a view or a clone does not."""
    values, order = torch.sort(t, stable=stable)
    if not (values.is_floating_point() or values.is_complex() or values.dtype == torch.bool):
        values = values + 0  # (floats cannot index; -0.0 + 0 would be +0.0)
    return values, order + 0


def inner(a, b):
    """conj(a) . b along the last axis, as a product and a sum: XLA CPU accumulates a
    ``dot`` in order (float32 relative error 9e-7 at 10^4 entries, 3e-5 at 10^6,
    measured) and a reduction pairwise (7e-9, 4e-8), the accuracy of NumPy's dot.
    Krylov solvers lose convergence to the sequential sum."""
    return (a.conj() * b).sum(-1)


def graph_function(fn, fresh=False):
    """``fn`` (tensors -> tuple of tensors, no in-place writes to its arguments) traced
    once and replayed: see ``_Replay``.  ``fresh``: no argument ever shares its buffer
    with a tensor ``fn`` reads from its closure (the first call traces the arguments as
    they are, without copying them: no copy graph to compile per signature)."""
    return _Replay(fn, fresh)


class _Replay:
    """A function of device tensors whose lazy trace is recorded on the first call and
    replayed with the next call's arguments (the mechanism of torch-xla's dynamo bridge:
    the graph's hash, its device-data inputs, ``_run_cached_graph``).

    Tracing a Krylov block op by op in Python cost more than running it: cg on 2-D
    Poisson 10^4 spent about 70% of a warm solve tracing its 25-iteration blocks.  A
    replay is one C++ call and one graph execution.  Tensors the function reads
    without taking them as arguments (a matrix, constants) are bound at the first call;
    so a ``_Replay`` lives for one solve, whose operands do not change meanwhile.
    Arguments of other shapes or dtypes trace again, and so does a graph that torch-xla's
    compilation cache (an LRU of ``XLA_COMPILATION_CACHE_SIZE`` graphs) has dropped.
    """

    def __init__(self, fn, fresh=False):
        self.fn = fn
        self.fresh = fresh
        self.plans = {}

    def __call__(self, *args):
        signature = tuple((a.dtype, tuple(a.shape)) for a in args)
        if signature not in self.plans:
            args, self.plans[signature] = self._trace(args)
        else:
            args = _device_data(args)
        try:
            results = self._run(signature, args)
        except RuntimeError as err:  # the compiled graph left torch-xla's LRU cache
            if "Failed to get computation by hash" not in str(err):
                raise
            args, self.plans[signature] = self._trace(args)
            results = self._run(signature, args)
        outputs = self.plans[signature][2]
        if len(results) != sum(kind == "graph" for kind, _ in dict.fromkeys(outputs)):
            raise RuntimeError("a replayed graph returned an unexpected number of results")
        return tuple(results[i] if kind == "graph" else args[i] if kind == "arg" else i
                     for kind, i in outputs)

    def _run(self, signature, args):
        graph_hash, sources, _ = self.plans[signature]
        inputs = [args[s] if isinstance(s, int) else s for s in sources]
        return (torch_xla._XLAC._run_cached_graph(graph_hash, inputs)
                if graph_hash is not None else [])

    def _trace(self, args):
        """Trace ``fn``; returns the arguments to run with and the plan: graph hash, each
        graph input as an argument position or a bound tensor, each output as a graph
        result, an argument passed through, or a bound tensor.

        Graph inputs are told apart by buffer, so the arguments are first copied to
        buffers of their own (one graph execution, which also computes pending
        arguments): an argument may share its buffer with a tensor the function reads
        as a constant (a clone, the same tensor bound in a closure), and a replay must
        then feed the new argument to one use and the constant to the other.  Pending
        arguments are computed too (as a replay does), lest the caller's next graph
        compute them again and differ from later calls' graphs."""
        xlac = torch_xla._XLAC
        import torch_xla.core.xla_model as xm

        given = list(args)
        if not self.fresh:
            args = tuple(a.clone() for a in args)
        xlac._xla_sync_multi(given + list(args), devices=[], wait=True, sync_xla_data=True)
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



# Built While loops of bodies that read no closure tensors, by the caller's key and the
# carry's shapes and dtypes: a call of the same loop skips tracing and building the body
# (a trace and a wait for the device's work in flight each time).
_BUILT = {}


def device_loop(body, carry, start, stop, until=None, key=None):
    """``for j in range(start, stop): carry = body(carry, j)`` as one XLA ``While`` in the
    lazy graph (``start``, ``stop``: int64 device tensors of one element, or Python ints,
    uploaded: either way graph data, so the graph does not depend on them), leaving early
    once the 0-d bool ``carry[until]`` is True (the While's condition reads it).  ``body`` is
    traced once on placeholders and compiles once, however many steps run: an unrolled
    loop of m steps compiles m bodies.  ``body`` must be pure tensor code (no host reads,
    no graph cuts) keeping the carry's shapes and dtypes; tensors it reads from its
    closure (a matrix) become loop inputs.  The construction is torch-xla's ``scan``
    (experimental/scan.py) with the bounds as data.  ``key``: the body is the same
    function of the carry for every call with this key (the loop is built once)."""
    import torch_xla.core.xla_builder as xb
    from torch_xla.experimental.scan import Builder

    carry = list(carry)
    start, stop = (_bound(b, carry[0].device) for b in (start, stop))
    built = None if key is None else (key, until, str(carry[0].device),
                                      tuple((tuple(t.shape), t.dtype) for t in carry))
    if built in _BUILT:
        results = torch_xla._XLAC._xla_user_computation("xla::device_loop",
                                                        [start, stop, *carry], _BUILT[built])
        return tuple(results[2:2 + len(carry)])
    fakes = [xb.create_placeholder_tensor(t.shape, t.dtype) for t in carry]
    fake_j = xb.create_placeholder_tensor((), torch.int64)
    out = list(body(tuple(fakes), fake_j))
    for t, o in zip(carry, out, strict=True):
        if (tuple(t.shape), t.dtype) != (tuple(o.shape), o.dtype):
            raise ValueError("device_loop: the body changed the carry's shape or dtype")
    # The body's parameters are keyed by buffer handle, and a tensor of work still in
    # flight has a placeholder's handle until its buffer arrives: were it to arrive
    # between build and the parameter map, the map would not find it (torch-xla aborts:
    # "Check failed: param_id.has_value()").  So the build sees finished work only.
    torch_xla._XLAC._xla_wait_device_ops([])
    ctx = torch_xla._XLAC.lowering.LoweringContext("LoopBody")
    ctx.build(out)
    computation = xb.computation_from_module_proto("loop_body", ctx.hlo())

    builder = Builder("device_loop")
    to_loop = {}  # body parameter id -> While parameter index
    closure = ctx.device_parameter_id_tensor_mapping()  # body parameter id -> tensor
    for value, fake in zip([start, stop] + carry,
                           [fake_j, None] + fakes, strict=True):
        index = builder.add_param(value)
        param = ctx.tensor_parameter_id(fake) if fake is not None else -1
        if param != -1:
            to_loop[param] = index
            closure.pop(param, None)
    for param, tensor in sorted(closure.items()):  # tensors the body reads from its closure
        to_loop[param] = builder.add_param(tensor)
    if sorted(to_loop) != list(range(len(to_loop))):
        raise RuntimeError("device_loop: a parameter of the body has no input")
    n_carry = len(carry)

    def cond(j, stop, *rest):
        going = j < stop
        return going if until is None else going & rest[until].__not__()  # (xb's Not)

    def step(j, stop, *rest):
        result = xb.Op.call(computation, [(j, stop, *rest)[to_loop[i]]
                                          for i in range(len(to_loop))])
        new = [result.get_tuple_element(i) for i in range(n_carry)]
        one = xb.Op.scalar(j.builder(), 1, dtype=xb.Type.S64)
        return (j + one, stop, *new, *rest[n_carry:])

    loop = xb.Op.mkwhile(builder.params(), cond, step).build("device_loop")
    if built is not None and builder.num_params() == 2 + n_carry:  # (no closure tensors)
        _BUILT[built] = loop
    results = torch_xla._XLAC._xla_user_computation("xla::device_loop",
                                                    builder.param_tensors(), loop)
    return tuple(results[2:2 + n_carry])


def _bound(value, device):
    """A loop bound as a 0-d int64 tensor of graph data (shape (1,) when uploaded:
    torch-xla makes a 0-d 0 or 1 a graph constant)."""
    if not isinstance(value, torch.Tensor):
        value = torch.tensor([int(value)], dtype=torch.int64, device=device)
    return value.to(torch.int64).reshape(())


def unpivoted_inverse(D):
    """Inverses of a batch of square blocks (..., w, w) without pivoting: the 2 x 2 block
    inverse through the Schur complement of the leading half (matrix products), down to
    blocks of at most ``GJ_BLOCK``, which Gauss-Jordan elimination inverts in one XLA
    ``While`` loop (``_gauss_jordan``).  torch-xla lowers ``inv_ex`` to a QR custom call
    that XLA CPU compiles for 5-20 s per shape and runs slowly.  Only safe where no
    pivoting is needed (diagonally dominant, SPD): the caller checks the result.  A zero
    pivot gives non-finite entries."""
    w = D.shape[-1]
    if w <= GJ_BLOCK:
        return _gauss_jordan(D)
    h = w // 2
    A, B, C, E = D[..., :h, :h], D[..., :h, h:], D[..., h:, :h], D[..., h:, h:]
    Ai = unpivoted_inverse(A)
    AiB, CAi = Ai @ B, C @ Ai
    Si = unpivoted_inverse(E - C @ AiB)
    X12, X21 = -(AiB @ Si), -(Si @ CAi)
    return torch.cat([torch.cat([Ai - X12 @ CAi, X12], -1), torch.cat([X21, Si], -1)], -2)


GJ_BLOCK = 32  # blocks inverted by the Gauss-Jordan loop (rank-1 updates: memory-bound)


def _gauss_jordan(D):
    """Gauss-Jordan inversion without pivoting: ``w`` rank-1 updates in ``device_loop``
    (one XLA ``While``, its body compiled once)."""
    w = D.shape[-1]
    shape = D.shape

    def body(carry, k):
        (M,) = carry
        ek = (torch.arange(w, device=M.device) == k).to(M.dtype)
        keep = 1 - ek
        row = (ek[None, :, None] * M).sum(1)  # row k
        col = (M * ek[None, None, :]).sum(2)  # column k
        p = (row * ek).sum(1, keepdim=True)  # the pivot
        M = M - (col - ek)[:, :, None] * (row / p)[:, None, :]
        new_col = keep * (-col / p) + ek / p
        return (M * keep[None, None, :] + new_col[:, :, None] * ek[None, None, :],)

    bounds = [torch.tensor(i, dtype=torch.int64, device=D.device) for i in (0, w)]
    (M,) = device_loop(body, (D.reshape(-1, w, w),), *bounds, key="gauss_jordan")
    return M.reshape(shape)


def pivoted_inverse(D):
    """Inverses of a batch of square blocks (..., w, w) by Gauss-Jordan elimination with
    partial pivoting on [D | I], one row step per iteration of one XLA ``While``: cheap to
    compile where ``inv_ex``'s QR custom call is not, and an exactly zero pivot (an
    exactly singular block, as LAPACK's getrf reports it) gives non-finite entries, where
    the QR inverse returns finite garbage."""
    w = D.shape[-1]
    shape = D.shape
    eye = torch.eye(w, dtype=D.dtype, device=D.device).expand(*shape[:-2], w, w)
    rows = torch.arange(w, device=D.device)

    def body(carry, k):
        (M,) = carry
        ek = (rows == k).to(M.dtype)
        col = (M * torch.cat([ek, torch.zeros_like(ek)])[None, None, :]).sum(2)  # column k
        # the pivot row: largest |entry| of column k among rows k..w-1
        r = torch.where(rows[None, :] >= k, col.abs(), -1).argmax(1)
        er = (rows[None, :] == r[:, None]).to(M.dtype)
        row_k = (ek[None, :, None] * M).sum(1)
        row_r = (er[:, :, None] * M).sum(1)
        M = M + (ek[None, :, None] - er[:, :, None]) * (row_r - row_k)[:, None, :]  # swap
        pivot = (row_r * torch.cat([ek, torch.zeros_like(ek)])[None, :]).sum(1, keepdim=True)
        row = row_r / pivot
        col = (M * torch.cat([ek, torch.zeros_like(ek)])[None, None, :]).sum(2) * (1 - ek)
        M = M - col[:, :, None] * row[:, None, :]
        return (M * (1 - ek)[None, :, None] + ek[None, :, None] * row[:, None, :],)

    bounds = [torch.tensor(i, dtype=torch.int64, device=D.device) for i in (0, w)]
    aug = torch.cat([D, eye], -1).reshape(-1, w, 2 * w)
    (M,) = device_loop(body, (aug,), *bounds, key="pivoted_gauss_jordan")
    return M[..., w:].reshape(shape)


def memory_available(device):
    """The device's free bytes where the PJRT client reports them (Neuron, GPU); PJRT CPU
    does not (its buffers are host memory): the host's available memory."""
    import torch_xla.core.xla_model as xm

    from trnscipy._kernels._generic import memory_available as host_available

    try:
        info = xm.get_memory_info(device)
    except RuntimeError:  # "GetAllocatorStats is not supported" (PJRT CPU)
        return host_available(device)
    return int(info["bytes_limit"]) - int(info["bytes_used"])


class Xla(_generic.Generic):
    """torch-xla tensors: scatter-free padded products, graphs cut and replayed, loops as
    one XLA ``While``."""

    kind = "xla"
    csr_matvec = csr_matvecs = staticmethod(csr_product)
    csc_matvec = csc_matvecs = staticmethod(csc_product)
    coo_matvec = coo_matvecs = staticmethod(coo_product)
    bsr_matvec = bsr_matvecs = staticmethod(bsr_product)
    prepare_product = staticmethod(prepare_product)
    product_index = staticmethod(product_index)
    expand_ptr = staticmethod(expand_ptr)
    inner = staticmethod(inner)
    sort = staticmethod(sort)
    materialize = staticmethod(materialize)
    sync = staticmethod(sync)
    device_loop = staticmethod(device_loop)
    graph_function = staticmethod(graph_function)
    unpivoted_inverse = staticmethod(unpivoted_inverse)
    pivoted_inverse = staticmethod(pivoted_inverse)
    memory_available = staticmethod(memory_available)
