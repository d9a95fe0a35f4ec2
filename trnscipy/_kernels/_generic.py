"""Generic kernels: plain torch ops (gather, multiply, index_add, bmm) that run on
every device with static shapes; autograd flows through them natively."""

import warnings

import torch

from trnscipy._double_float import df_tensor, df_triple, high_part, is_exact
from trnscipy._kernels import _df
from trnscipy._kernels import _sparsetools as su


def materialize(tensors):
    """Compute ``tensors`` now, together (eager devices: they already are)."""


def sync():
    """Run all pending device work (eager devices: nothing pending)."""


def product_index(indptr, nnz, device):
    """Nothing to set up with a new container: eager devices build the entry -> major
    index on first use (the CPU kernels never need it)."""


def expand_ptr(indptr, nnz):
    """Major index of each stored entry of a compressed structure."""
    return su.expand_ptr(indptr, nnz)


def torch_csr(indptr, indices, data, shape, layout=torch.sparse_csr):
    """A torch sparse CSR tensor of the parts, or BSR with ``layout=torch.sparse_bsr``
    and 3-D ``data`` (trnscipy's one builder of torch sparse tensors), without torch's
    notices: "Sparse CSR tensor support is in beta", and (torch 2.11) "Sparse invariant
    checks are implicitly disabled", which asks to opt in or out: out, since trnscipy's
    containers are validated when built."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse (CSR|BSR) tensor support", UserWarning)
        warnings.filterwarnings("ignore", "Sparse invariant checks", UserWarning)
        return torch.sparse_compressed_tensor(indptr, indices, data, size=tuple(shape),
                                              layout=layout, check_invariants=False)


def coo_product(row, col, data, x, m):
    """sum_k data[k] * x[col[k]] into row[k]: y = A @ x for 1-D or 2-D x."""
    if data.dtype == torch.bool:
        return coo_product(row, col, data.to(torch.int32), x.to(torch.int32), m) > 0
    vals = x.index_select(0, col)
    vals = vals * (data.unsqueeze(1) if x.ndim == 2 else data)
    out = torch.zeros((m,) + tuple(x.shape[1:]), dtype=vals.dtype, device=x.device)
    return out.index_add(0, row, vals)


def matmul(a, b):
    """``a @ b`` (2-D or batched ``a``; ``b`` with ndim >= 2, or 1-D).  torch's CUDA
    matmul has no integer kernels ("addmm_cuda" not implemented for 'Long'): integer
    operands there are multiplied by ``int_matmul``, exact and wrapping as NumPy's."""
    if a.device.type == "cuda" and not (a.dtype.is_floating_point or a.dtype.is_complex):
        return int_matmul(a, b)
    return a @ b


def int_matmul(a, b, chunk=1 << 24):
    """``a @ b`` for integer tensors as sums of elementwise products (every device has
    those), the broadcast product cut into row blocks of at most ``chunk`` elements."""
    vector = b.ndim == 1
    b = b.unsqueeze(-1) if vector else b
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    batch = max(1, a[..., :1, :1].numel(), b[..., :1, :1].numel())
    rows = max(1, chunk // max(1, batch * a.shape[-1] * b.shape[-1]))
    parts = [(a[..., i:i + rows, :, None] * b[..., None, :, :]).sum(-2, dtype=dtype)
             for i in range(0, a.shape[-2], rows)]
    out = torch.cat(parts, -2) if parts else a.new_zeros(a.shape[:-1] + b.shape[-1:])
    return out[..., 0] if vector else out


def bsr_product(A, x):
    """BSR @ x as batched dense block products plus a block-row index_add."""
    r, c = A.blocksize
    m, n = A.shape
    if A.data.dtype == torch.bool:
        return bsr_product(A.astype("int32"), x.to(torch.int32)) > 0
    k = x.shape[1] if x.ndim == 2 else 1
    cols = x.reshape(n // c, c, k)
    prod = matmul(A.data, cols.index_select(0, A.indices))  # (integer data on CUDA)
    out = torch.zeros((m // r, r, prod.shape[-1]), dtype=prod.dtype, device=x.device)
    out = out.index_add(0, A._block_rows(), prod).reshape(m, k)
    # A copy, not a view: on XLA a view keeps its pending base alive, and the next sync
    # runs that base's graph once more (two executions per product instead of one).
    return (out[:, 0] if x.ndim == 1 else out).clone()


def dia_product(A, x):
    """DIA @ x without a scatter: row i takes data[d, i + offsets[d]] * x[i + offsets[d]]
    from every diagonal d (a gather along each diagonal, a sum over diagonals)."""
    m, n = A.shape
    ndiag, width = A.data.shape
    w = min(width, n)
    if ndiag == 0 or w == 0 or m == 0:
        return torch.zeros((m,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    if A.data.dtype == torch.bool:
        return dia_product(A._with_data(A.data.to(torch.int32), copy=False),
                           x.to(torch.int32)) > 0
    col = (torch.arange(m, device=x.device).reshape(1, -1)
           + A.offsets.to(torch.int64).reshape(-1, 1))
    valid = (col >= 0) & (col < w)
    col = col.clamp(0, w - 1)
    vals = torch.where(valid, A.data[:, :w].gather(1, col),
                       torch.zeros((), dtype=A.data.dtype, device=x.device))
    xs = x.index_select(0, col.reshape(-1)).reshape(tuple(col.shape) + tuple(x.shape[1:]))
    return (xs * (vals.unsqueeze(-1) if x.ndim == 2 else vals)).sum(0)


# The per-format products y = A @ x (``x`` a 1-D or 2-D tensor of A's dtype): each
# format class calls its own, ``<format>_matvec`` for a vector and ``<format>_matvecs``
# for a matrix (SciPy's sparsetools names); here one function serves both.

def csr_product(A, x):
    return coo_product(A._major_index(), A.indices, A.data, x, A.shape[0])


def csc_product(A, x):
    return coo_product(A.indices, A._major_index(), A.data, x, A.shape[0])


def coo_container_product(A, x):
    return coo_product(A.row, A.col, A.data, x, A.shape[0])




def spgemm(A, B):
    """CSR @ CSR -> parts of a canonical CSR (zeros dropped, as SciPy's csr_matmat).
    float64 held as exact parts (a device without float64): the products and their sums
    in triple-float, within a unit of float64 rounding of the exact sums."""
    m, n = A.shape[0], B.shape[1]
    arow, acol = A._major_index().to(torch.int64), A.indices.to(torch.int64)
    bptr = B.indptr.to(torch.int64)
    counts = bptr[acol + 1] - bptr[acol]
    ends = torch.cumsum(counts, 0)
    (total,) = su.host_ints(ends[-1]) if A.nnz else (0,)
    pos = torch.arange(total, device=A.device)
    # the A entry of each product: the boundaries ``ends`` at or before it (searchsorted
    # runs on the host on XLA: aten fallback)
    which = su.expand_ptr(torch.cat([ends.new_zeros(1), ends]), total)
    bidx = bptr[acol[which]] + pos - (ends[which] - counts[which])
    row, col = arow[which], B.indices.to(torch.int64)[bidx]
    a, b = A.data[which], B.data[bidx]
    if is_exact(a) and is_exact(b):  # float64 held as parts: triple-float products,
        # summed in triple-float by coalesce (segment_sum); float32 ops only
        val = df_tensor(*_df.mul3(df_triple(a), df_triple(b)))
    else:
        val = a * b
    row, col, val = su.coalesce(row, col, val, n)
    row, col, val = su.compact(high_part(val) != 0, row, col, val)
    idx = su.index_dtype(max(m, n, val.shape[0]), (A.indices, B.indices))
    return {"data": val, "indices": col.to(idx), "indptr": su.compress(row.to(idx), m, idx),
            "_sorted": True, "_canonical": True}


def prepare_product(A, host=None, width=None):
    """Nothing to set up: eager devices multiply with the stored layout."""


def graph_function(fn):
    """``fn`` (tensors -> tuple of tensors) as a callable: eager devices run it as it is."""
    return fn


def device_loop(body, carry, start, stop, until=None):
    """``for j in range(start, stop): carry = body(carry, j)``, a Python loop, ``j`` a 0-d
    int64 tensor on the carry's device.  Python-int bounds read nothing on the host (the
    indices are one ``torch.arange``), so the loop can be captured in a CUDA graph; device
    bounds are read on the host (not capturable).  ``until`` is not read (that would be
    a host read per step): every step runs, and a body given ``until`` leaves a finished
    carry as it is."""
    carry = tuple(carry)
    start, stop = int(start), int(stop)
    indices = torch.arange(start, max(start, stop), device=carry[0].device)
    for k in range(indices.shape[0]):
        carry = tuple(body(carry, indices[k]))
    return carry


def sort(t, stable=False):
    """torch.sort along the last axis: (values, order)."""
    return torch.sort(t, stable=stable)


def inner(a, b):
    """conj(a) . b along the last axis (``a`` a vector or a stack of them, ``b`` a vector)."""
    return a.conj() @ b if a.is_complex() else a @ b


def memory_available(device):
    """Bytes a new allocation on ``device`` can take: the host's available memory (devices
    whose tensors live in host memory)."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):  # not Linux: what the OS reports as free
        import os

        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def unpivoted_inverse(D):
    """Inverses of a batch of square blocks (..., w, w): torch's (pivoted) inverse."""
    return torch.linalg.inv_ex(D).inverse


def pivoted_inverse(D):
    """Inverses of a batch of square blocks (..., w, w) with partial pivoting (LAPACK's
    getrf/getri: an exactly singular block gives non-finite entries)."""
    return torch.linalg.inv_ex(D).inverse


class Generic:
    """Plain torch ops on any device: the primitives every backend inherits."""

    kind = "generic"
    csr_matvec = csr_matvecs = staticmethod(csr_product)
    csc_matvec = csc_matvecs = staticmethod(csc_product)
    coo_matvec = coo_matvecs = staticmethod(coo_container_product)
    bsr_matvec = bsr_matvecs = staticmethod(bsr_product)
    dia_matvec = dia_matvecs = staticmethod(dia_product)
    spgemm = staticmethod(spgemm)
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

    def __repr__(self):
        return f"<trnscipy backend {self.kind!r}>"
