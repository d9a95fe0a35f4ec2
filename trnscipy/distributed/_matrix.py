"""Row-partitioned sparse matrices (PETSc's MatMPIAIJ layout) and distribute/gather.

Each rank keeps its rows as two CSR blocks on its device: ``diag``, the columns this
rank owns in the vector partition, and ``off``, the other columns renumbered to a
compact "ghost" range.  The halo plan (which ghost entries come from which rank, which
local entries go to which rank) is built once, when the matrix is distributed; a
product then posts one send/receive per neighbour, multiplies the diagonal block while
the messages travel, waits, and adds the off-diagonal block's product.
"""

import numbers

import numpy as np
import scipy.sparse as sp

from trnscipy._torch import torch
from trnscipy.distributed import _comm
from trnscipy.distributed._array import DistributedArray, check_same

__all__ = ["DistributedMatrix", "distribute", "gather"]

_DTYPES = "?bhilqBHILQefdgFDG"


def _balanced(n, size, weights=None):
    """Offsets of a split of ``n`` rows into ``size`` blocks; with ``weights`` (a CSR
    indptr) each block holds about the same number of nonzeros."""
    if weights is None or weights[-1] == 0:
        counts = np.full(size, n // size)
        counts[: n % size] += 1
        return np.concatenate([[0], np.cumsum(counts)])
    targets = weights[-1] * np.arange(1, size) / size
    inner = np.searchsorted(weights, targets, side="left")
    return np.concatenate([[0], np.clip(inner, 0, n), [n]])


def _offsets_from(partition, n, where):
    """Offsets from a ``partition`` argument: rows per rank, or a distributed object."""
    if hasattr(partition, "offsets"):
        return np.asarray(partition.offsets)
    counts = np.asarray(partition)
    if (counts.ndim != 1 or counts.shape[0] != where.size or counts.dtype.kind not in "iu"
            or (counts < 0).any() or counts.sum() != n):
        raise ValueError(f"partition must give the rows of each of the {where.size} ranks "
                         f"(non-negative integers summing to {n}); got {partition!r}")
    return np.concatenate([[0], np.cumsum(counts)])


class _Halo:
    """The exchange plan for a vector partitioned by ``col_offsets``: this rank needs the
    entries ``ghost`` (sorted global indices) from their owners, and sends each peer the
    local entries that peer needs."""

    def __init__(self, ghost, col_offsets, where):
        rank, size = where.rank, where.size
        owner = np.searchsorted(col_offsets, ghost, side="right") - 1
        counts = np.bincount(owner, minlength=size)
        self.nghost = len(ghost)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self.recv = {p: (int(starts[p]), int(starts[p + 1]))
                     for p in range(size) if counts[p] and p != rank}
        need = _comm.all_gather_ints(where, counts)  # need[q, p]: entries q wants from p
        want = {p: torch.empty(int(need[p, rank]), dtype=torch.int64, device=where.device)
                for p in range(size) if need[p, rank] and p != rank}
        mine = {p: torch.as_tensor(ghost[a:b], dtype=torch.int64, device=where.device)
                for p, (a, b) in self.recv.items()}
        for req in _comm.send_recv(where, mine, want):
            req.wait()
        lo = int(col_offsets[rank])
        self.send = {p: idx - lo for p, idx in want.items()}
        self.where = where
        # one all_to_all per product instead of point-to-point messages (see _comm)
        self.collective = _comm.halo_collective(where)
        if self.collective:
            self.recv_sizes = [int(counts[p]) if p != rank else 0 for p in range(size)]
            self.send_sizes = [len(self.send.get(p, ())) for p in range(size)]
            self.send_all = (torch.cat([self.send[p] for p in sorted(self.send)])
                             if self.send else torch.zeros(0, dtype=torch.int64,
                                                           device=where.device))

    def start(self, x_local, halo):
        """Post the forward exchange: ghost rows of x arrive in ``halo``."""
        if self.collective:
            send = x_local.index_select(0, self.send_all)
            return [_comm.all_to_all(self.where, halo, send, self.recv_sizes,
                                     self.send_sizes)], send
        sends = {p: x_local.index_select(0, idx) for p, idx in self.send.items()}
        recvs = {p: halo[a:b] for p, (a, b) in self.recv.items()}
        return _comm.send_recv(self.where, sends, recvs), sends

    def start_reverse(self, contrib):
        """Post the reverse exchange (transposed product): ghost contributions go to
        their owners; returns the requests and the receive buffers."""
        shape = tuple(contrib.shape[1:])
        if self.collective:
            out = torch.empty((len(self.send_all),) + shape, dtype=contrib.dtype,
                              device=contrib.device)
            req = _comm.all_to_all(self.where, out, contrib.contiguous(), self.send_sizes,
                                   self.recv_sizes)
            return [req], {None: out}
        sends = {p: contrib[a:b].contiguous() for p, (a, b) in self.recv.items()}
        recvs = {p: torch.empty((len(idx),) + shape, dtype=contrib.dtype,
                                device=contrib.device) for p, idx in self.send.items()}
        return _comm.send_recv(self.where, sends, recvs), recvs

    def indices(self, peer):
        """Local rows that a reverse-exchange buffer adds into."""
        return self.send_all if peer is None else self.send[peer]


def _to_device_csr(a, device):
    from trnscipy._transfer import to_device

    return to_device(sp.csr_array(a), device)


class DistributedMatrix:
    """A sparse matrix split by rows over a process group (see the module docstring).

    Supports ``@`` with a DistributedArray (or a NumPy array given whole on every rank),
    ``A.T @ y``, ``+``/``-`` with a matrix of the same partitions, ``*``/``/`` by a
    scalar, ``.shape``, ``.dtype``, ``.nnz`` (global), and the trnscipy.sparse.linalg
    solvers.  ``local`` is this rank's rows as a SciPy CSR array with global columns."""

    format = "csr"

    def __init__(self, local, row_offsets, col_offsets, placement, shape, nnz=None):
        self.placement = where = placement
        self.shape = tuple(shape)
        self.offsets = tuple(int(o) for o in row_offsets)
        self.col_offsets = tuple(int(o) for o in col_offsets)
        local = sp.csr_array(local)
        local.sum_duplicates()
        self.local = local
        lo, hi = self.col_offsets[where.rank], self.col_offsets[where.rank + 1]
        coo = local.tocoo()
        inside = (coo.col >= lo) & (coo.col < hi)
        nrows = local.shape[0]
        self._diag = sp.csr_array((coo.data[inside], (coo.row[inside], coo.col[inside] - lo)),
                                  shape=(nrows, hi - lo))
        ghost, compact = np.unique(coo.col[~inside], return_inverse=True)
        self._off = sp.csr_array((coo.data[~inside], (coo.row[~inside], compact)),
                                 shape=(nrows, len(ghost)))
        dev = where.device
        self.diag = _to_device_csr(self._diag, dev) if self._diag.nnz else None
        self.off = _to_device_csr(self._off, dev) if self._off.nnz else None
        self._diag_t = self._off_t = None
        self.halo = _Halo(ghost, np.asarray(self.col_offsets), where)
        if nnz is None:
            nnz = int(_comm.allsum(where, [local.nnz], torch.float64)[0])
        self.nnz = nnz

    @property
    def _trnscipy_placement(self):
        return self.placement

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def ndim(self):
        return 2

    @property
    def counts(self):
        return tuple(np.diff(self.offsets).tolist())

    @property
    def T(self):
        return _Transposed(self)

    def __repr__(self):
        return (f"<DistributedMatrix shape={self.shape} dtype={self.dtype} nnz={self.nnz} "
                f"rows {self.counts} on {self.placement}>")

    # ---- products on local tensors (the solvers call these) ----------------------------
    def _local_rows(self):
        return self.offsets[self.placement.rank + 1] - self.offsets[self.placement.rank]

    def matvec_local(self, x):
        """This rank's rows of A @ x, from this rank's rows of x (1-D or 2-D tensor)."""
        x = x.to(self._torch_dtype(x))
        halo = torch.empty((self.halo.nghost,) + tuple(x.shape[1:]), dtype=x.dtype,
                           device=x.device)
        reqs, _ = self.halo.start(x, halo)
        y = self._product(self.diag, x, self._local_rows())
        for req in reqs:
            req.wait()
        if self.off is not None:
            y = y + self.off._product_kernel(halo.ndim)(self.off, halo)
        return y

    def rmatvec_local(self, y):
        """This rank's rows of A^H @ y, from this rank's rows of y."""
        y = y.to(self._torch_dtype(y))
        if self._diag_t is None:
            dev = self.placement.device
            self._diag_t = (_to_device_csr(self._diag.conj().T, dev)
                            if self._diag.nnz else None)
            self._off_t = _to_device_csr(self._off.conj().T, dev) if self._off.nnz else None
        ncols = self.col_offsets[self.placement.rank + 1] - self.col_offsets[self.placement.rank]
        contrib = self._product(self._off_t, y, self.halo.nghost)
        reqs, recvs = self.halo.start_reverse(contrib)
        x = self._product(self._diag_t, y, ncols)
        for req in reqs:
            req.wait()
        for p, buf in recvs.items():
            x = x.index_add(0, self.halo.indices(p), buf)
        return x

    def _torch_dtype(self, x):
        from trnscipy._dtypes import to_torch_dtype

        return to_torch_dtype(np.result_type(self.dtype, _np_dtype(x.dtype)))

    @staticmethod
    def _product(block, x, rows):
        if block is None:
            return torch.zeros((rows,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        block = block if _np_dtype(x.dtype) == block.dtype else block.astype(_np_dtype(x.dtype))
        return block._product_kernel(x.ndim)(block, x)

    # ---- SciPy-style operators ---------------------------------------------------------
    def _vector(self, x, offsets):
        if isinstance(x, DistributedArray):
            if x.placement != self.placement:
                raise ValueError(f"operands live on different process groups or devices: "
                                 f"{self.placement} and {x.placement}")
            if x.offsets != offsets:
                raise ValueError(f"the vector's row partition {x.counts} does not match the "
                                 f"matrix's {tuple(np.diff(offsets).tolist())}")
            return x.local
        if isinstance(x, np.ndarray) and x.ndim in (1, 2) and x.shape[0] == offsets[-1]:
            r = self.placement.rank
            return torch.as_tensor(x[offsets[r]:offsets[r + 1]], device=self.placement.device)
        raise ValueError(f"dimension mismatch or unsupported operand: {type(x).__name__} "
                         f"with shape {getattr(x, 'shape', None)} for a {self.shape} "
                         "DistributedMatrix")

    def __matmul__(self, x):
        local = self.matvec_local(self._vector(x, self.col_offsets))
        return DistributedArray(local, self.offsets, self.placement,
                                (self.shape[0],) + tuple(local.shape[1:]))

    def matvec(self, x):
        return self @ x

    def rmatvec(self, y):
        local = self.rmatvec_local(self._vector(y, self.offsets))
        return DistributedArray(local, self.col_offsets, self.placement,
                                (self.shape[1],) + tuple(local.shape[1:]))

    def _scaled(self, alpha):
        out = object.__new__(DistributedMatrix)
        out.__dict__.update(self.__dict__)
        out.local = self.local * alpha
        out._diag, out._off = self._diag * alpha, self._off * alpha
        out.diag = self.diag * alpha if self.diag is not None else None
        out.off = self.off * alpha if self.off is not None else None
        out._diag_t = out._off_t = None
        return out

    def __mul__(self, other):
        if isinstance(other, numbers.Number):
            return self._scaled(other)
        raise ValueError("a DistributedMatrix multiplies by a scalar only (use @ for products)")

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, numbers.Number):
            return self._scaled(1 / other)
        raise ValueError("a DistributedMatrix divides by a scalar only")

    def __neg__(self):
        return self._scaled(-1)

    def __add__(self, other):
        if not isinstance(other, DistributedMatrix):
            raise ValueError("a DistributedMatrix adds to a DistributedMatrix of the same "
                             "partitions only")
        check_same(self, other, "matrices")
        if self.shape != other.shape or self.col_offsets != other.col_offsets:
            raise ValueError(f"inconsistent shapes or column partitions: {self.shape} and "
                             f"{other.shape}")
        return DistributedMatrix(self.local + other.local, self.offsets, self.col_offsets,
                                 self.placement, self.shape)

    def __sub__(self, other):
        return self + (-other)


class _Transposed:
    """``A.T`` of a DistributedMatrix: supports ``@`` (the transposed product, with the
    halo exchange reversed), ``.shape``, ``.dtype`` and ``.nnz``."""

    def __init__(self, A):
        self.A = A
        self.shape = A.shape[::-1]
        self.dtype, self.nnz, self.placement = A.dtype, A.nnz, A.placement

    @property
    def _trnscipy_placement(self):
        return self.placement

    @property
    def T(self):
        return self.A

    def __matmul__(self, y):
        A = self.A
        y_local = A._vector(y, A.offsets)
        conj = np.iscomplexobj(np.empty(0, A.dtype))
        local = A.rmatvec_local(y_local.conj() if conj else y_local)
        local = local.conj() if conj else local
        return DistributedArray(local, A.col_offsets, A.placement,
                                (A.shape[1],) + tuple(local.shape[1:]))


def _np_dtype(torch_dtype):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(torch_dtype)


# ---- distribute / gather ---------------------------------------------------------------

def _host_object(obj):
    """A SciPy CSR array or a NumPy array from what the user passed (ValueError if neither)."""
    if sp.issparse(obj):
        return sp.csr_array(obj)
    if getattr(obj, "_trnscipy_device_object", False) or type(obj).__module__.startswith("torch"):
        from trnscipy._transfer import to_host

        return _host_object(to_host(obj))
    arr = np.asarray(obj)
    if arr.ndim not in (1, 2) or arr.dtype.kind not in "biufc":
        raise ValueError(f"distribute takes a sparse matrix or a 1-D/2-D numeric array; got "
                         f"{type(obj).__name__} with shape {arr.shape}")
    return arr


def _header(obj, where, partition):
    """The metadata every rank must agree on: kind, shape, dtype, nnz; and the offsets."""
    sparse = sp.issparse(obj)
    shape = obj.shape if obj.ndim == 2 else (obj.shape[0], 0)
    nnz = obj.nnz if sparse else 0
    if partition is None:
        offsets = _balanced(shape[0], where.size, obj.indptr if sparse else None)
    else:
        offsets = _offsets_from(partition, shape[0], where)
    head = [int(sparse), obj.ndim, shape[0], shape[1], _DTYPES.index(obj.dtype.char), nnz]
    return np.asarray(head + [int(o) for o in offsets], dtype=np.int64)


def distribute(obj, *, device=None, group=None, src=None, partition=None):
    """Split ``obj`` by rows over ``group`` (default: the world, initialised from
    torchrun's environment when no process group exists yet).

    ``obj``: a SciPy or trnscipy sparse matrix (-> DistributedMatrix) or a 1-D/2-D array
    (-> DistributedArray), given whole on every rank, or on rank ``src`` only (the
    other ranks pass None).  ``partition``: rows per rank, or a distributed object whose
    row partition to copy; default: balanced by nonzeros (sparse) or rows (dense).  A
    square matrix's vectors are split like its rows; a rectangular matrix's x is split
    evenly by rows.  Inconsistent input raises ValueError on every rank."""
    where = _comm.placement(device, group)
    error, head, host = None, None, None
    if src is None or where.rank == src:
        try:
            host = _host_object(obj)
            head = _header(host, where, partition)
        except ValueError as exc:
            error = exc
    _comm.agree(where, error)
    if src is None:
        heads = _comm.all_gather_ints(where, head)
        if (heads != heads[0]).any():
            raise ValueError("distribute got different objects on different ranks (shape, "
                             "dtype, nnz or partition differ); pass the same object "
                             "everywhere, or use src=")
    else:
        head = _comm.broadcast_ints(where, head, src, 6 + where.size + 1)
    sparse, ndim, m, n, code, nnz = (int(v) for v in head[:6])
    offsets = head[6:]
    dtype = np.dtype(_DTYPES[code])
    lo, hi = int(offsets[where.rank]), int(offsets[where.rank + 1])
    if sparse:
        local = host[lo:hi] if src is None else _scatter_csr(where, host, offsets, src, dtype,
                                                            n)
        cols = offsets if m == n else _balanced(n, where.size)
        return DistributedMatrix(local, offsets, cols, where, (m, n), nnz=nnz)
    shape = (m,) if ndim == 1 else (m, n)
    if src is None:
        block = np.array(host[lo:hi], order="C")  # a copy: the caller keeps its array
        local = torch.as_tensor(block, device=where.device)
    else:
        local = _scatter_dense(where, host, offsets, src, dtype, shape)
    return DistributedArray(local, offsets, where, shape)


def _scatter_dense(where, host, offsets, src, dtype, shape):
    from trnscipy._dtypes import to_torch_dtype

    rank = where.rank
    tdtype = to_torch_dtype(dtype)
    if rank == src:
        sends = {p: torch.as_tensor(np.ascontiguousarray(host[offsets[p]:offsets[p + 1]]),
                                    device=where.device)
                 for p in range(where.size) if p != src and offsets[p + 1] > offsets[p]}
        for req in _comm.send_recv(where, sends, {}):
            req.wait()
        return torch.as_tensor(np.array(host[offsets[rank]:offsets[rank + 1]], order="C"),
                               device=where.device)
    buf = torch.empty((int(offsets[rank + 1] - offsets[rank]),) + shape[1:], dtype=tdtype,
                      device=where.device)
    recvs = {src: buf} if buf.shape[0] else {}
    for req in _comm.send_recv(where, {}, recvs):
        req.wait()
    return buf


def _scatter_csr(where, host, offsets, src, dtype, n):
    """Rank ``src`` sends each rank its rows: row lengths, then column indices and values."""
    rank = where.rank
    lo, hi = int(offsets[rank]), int(offsets[rank + 1])
    if rank == src:
        for part in range(where.size):
            if part == src:
                continue
            block = host[int(offsets[part]):int(offsets[part + 1])]
            sends = {part: torch.as_tensor(np.diff(block.indptr).astype(np.int64),
                                           device=where.device)}
            for req in _comm.send_recv(where, sends, {}):
                req.wait()
            if block.nnz:
                sends = {part: torch.as_tensor(block.indices.astype(np.int64),
                                               device=where.device)}
                for req in _comm.send_recv(where, sends, {}):
                    req.wait()
                sends = {part: torch.as_tensor(block.data, device=where.device)}
                for req in _comm.send_recv(where, sends, {}):
                    req.wait()
        return host[lo:hi]
    lengths = torch.empty(hi - lo, dtype=torch.int64, device=where.device)
    for req in _comm.send_recv(where, {}, {src: lengths}):
        req.wait()
    lengths = lengths.cpu().numpy()
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    nnz = int(indptr[-1])
    indices = np.zeros(0, np.int64)
    data = np.zeros(0, dtype)
    if nnz:
        from trnscipy._dtypes import to_torch_dtype

        idx = torch.empty(nnz, dtype=torch.int64, device=where.device)
        for req in _comm.send_recv(where, {}, {src: idx}):
            req.wait()
        vals = torch.empty(nnz, dtype=to_torch_dtype(dtype), device=where.device)
        for req in _comm.send_recv(where, {}, {src: vals}):
            req.wait()
        indices, data = idx.cpu().numpy(), vals.cpu().numpy()
    return sp.csr_array((data, indices, indptr), shape=(hi - lo, n))


def gather(x, dst=None):
    """The whole of a distributed object: a NumPy array (DistributedArray) or a SciPy CSR
    array (DistributedMatrix) on every rank, or on rank ``dst`` only (None elsewhere).
    Collective: every rank of the group calls it."""
    import torch.distributed as dist

    if not hasattr(x, "_trnscipy_placement"):
        raise ValueError(f"gather takes a DistributedArray or DistributedMatrix, not "
                         f"{type(x).__name__}")
    where = x.placement
    if isinstance(x, DistributedMatrix):
        blocks = [None] * where.size
        if dst is None:
            dist.all_gather_object(blocks, x.local, group=where.group)
        else:
            dist.gather_object(x.local, blocks if where.rank == dst else None,
                               group_dst=dst, group=where.group)
            if where.rank != dst:
                return None
        return sp.csr_array(sp.vstack(blocks, format="csr"))
    counts = np.diff(x.offsets)
    width = int(counts.max()) if len(counts) else 0
    pad = torch.zeros((width,) + tuple(x.local.shape[1:]), dtype=x.local.dtype,
                      device=x.local.device)
    pad[: x.local.shape[0]] = x.local
    if where.size == 1:
        parts = [pad]
    elif dst is None:
        parts = [torch.empty_like(pad) for _ in range(where.size)]
        dist.all_gather(parts, pad, group=where.group)
    else:
        parts = [torch.empty_like(pad) for _ in range(where.size)] if where.rank == dst else None
        dist.gather(pad, parts, group_dst=dst, group=where.group)
        if where.rank != dst:
            return None
    from trnscipy._transfer import to_host

    return np.concatenate([to_host(p[: int(c)]) for p, c in zip(parts, counts, strict=True)])
