"""Index building blocks of the sparse formats, below the containers: index dtypes, host
reads of index counts, sorting, duplicate summing, compression.  The backends build
their plans from them and the containers (``trnscipy.sparse._sputils`` re-exports them)
their structure.

Every helper works on any device with static shapes; where the result size depends on
the data, it is read to the host once (one scalar) and the result is sliced to it, so an
XLA graph stays shape-static until that single read.
"""

import numpy as np
from array_api_compat import is_torch_array

from trnscipy._capabilities import runs_on_device
from trnscipy._device import device_kind
from trnscipy._double_float import is_exact
from trnscipy._dtypes import to_numpy_dtype
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy._transfer import _tensor_to_host, df_tensor, df_triple, tensor_on

__all__ = ["INT32_MAX", "index_dtype", "as_tensor", "from_host", "as_index", "host_ints",
           "sort", "argsort", "compact", "expand_ptr", "compress", "segment_sum",
           "divmod_index", "coalesce"]

INT32_MAX = int(np.iinfo(np.int32).max)


def index_dtype(maxval=0, tensors=(), values_max=None, keep_int64=True):
    """SciPy's index dtype rule: int32 unless ``maxval`` or the index values need int64.

    ``tensors`` are the given index tensors; an int64 one keeps int64 when
    ``keep_int64`` (sparse arrays) or when ``values_max`` (their largest
    absolute value, read at validation) does not fit int32 (sparse matrices).
    """
    if maxval > INT32_MAX:
        return torch.int64
    if any(t.dtype == torch.int64 for t in tensors):
        if keep_int64 or values_max is None or values_max > INT32_MAX:
            return torch.int64
    return torch.int32


def as_tensor(x, device, dtype=None):
    """A tensor on ``device`` from a tensor, ndarray, list or scalar (no copy if possible),
    through the transfer layer (float64 stays exact on devices without it)."""
    if is_torch_array(x):
        t = x.resolve_conj() if x.is_conj() else x
    else:
        t = np.asarray(x)
        if t.dtype == object:
            raise ValueError("scipy.sparse does not support dtype object")
    return tensor_on(t, device, dtype)


def from_host(a, device):
    """A tensor on ``device`` holding a copy of host array ``a``.

    Never shares memory with the SciPy object: SciPy's in-place methods
    (sort_indices, sum_duplicates) would otherwise rewrite a device container.
    """
    return as_tensor(np.array(a, copy=True), device)


def as_index(x, device):
    """An index tensor (int32 or int64; other dtypes are cast, as SciPy does)."""
    t = as_tensor(x, device)
    if t.dtype not in (torch.int32, torch.int64):
        t = t.to(torch.int64)
    return t


def host_ints(*values, also=()):
    """Read several integer scalars (0-d tensors) to the host in one transfer.

    Tensors in ``also`` are computed in the same graph execution (lazy devices)."""
    if not values:
        return []
    stacked = torch.stack([v.reshape(()).to(torch.int64) for v in values])
    if also:
        backend(stacked.device).materialize([stacked, *also])
    return [int(v) for v in stacked.cpu().tolist()]


def sort(t, stable=False):
    """``torch.sort(t, stable=stable)`` through the device's ``sort`` kernel (on XLA its
    outputs must pass through an op before they index a product)."""
    return backend(t.device).sort(t, stable)


def argsort(t, stable=False):
    return sort(t, stable)[1]


def compact(mask, *tensors):
    """The entries of ``tensors`` where ``mask`` holds, keeping their order.

    One host read (the count); the gather itself has a static shape.
    """
    (count,) = host_ints(mask.sum())
    if count == mask.numel():
        return tensors
    order = argsort((~mask).to(torch.int8), stable=True)[:count]
    return tuple(t[order] for t in tensors)


def expand_ptr(indptr, nnz):
    """Major index of each stored entry of a compressed structure.

    Counts the row boundaries at or before each entry (scatter-add + cumsum): static
    shapes that lower on XLA, where torch.searchsorted runs on the host."""
    if nnz == 0:  # XLA cannot lower a cumsum over nothing
        return torch.zeros(0, dtype=indptr.dtype, device=indptr.device)
    inner = indptr[1:-1].to(torch.int64)
    marks = torch.zeros(nnz + 1, dtype=torch.int64, device=indptr.device)
    marks.index_add_(0, inner, torch.ones_like(inner))
    return torch.cumsum(marks[:nnz], 0).to(indptr.dtype)


def compress(major_sorted, n_major, dtype):
    """indptr of entries whose major indices are ``major_sorted`` (counts + cumsum)."""
    major = major_sorted.to(torch.int64)
    counts = torch.zeros(n_major + 1, dtype=torch.int64, device=major.device)
    counts.index_add_(0, major + 1, torch.ones_like(major))
    return torch.cumsum(counts, 0).to(dtype)


def segment_sum(data, seg, n):
    """Sum ``data`` over segment ids ``seg`` into ``n`` slots (bool: logical or).

    Where the capability table refuses the dtype on the device (float64 on Neuron) the
    sum runs on the host, with its DeviceFallbackWarning."""
    if data.dtype == torch.bool:
        acc = torch.zeros(n, dtype=torch.int32, device=data.device)
        return acc.index_add(0, seg, data.to(torch.int32)) > 0
    dtype = to_numpy_dtype(data.dtype)
    if data.dtype == torch.float64 and is_exact(data) and data.ndim == 1:
        return _df_segment_sum(data, seg, n)
    if not runs_on_device("trnscipy.sparse.segment_sum", device_kind(data.device), dtype):
        out = np.zeros((n,) + tuple(data.shape[1:]), dtype=dtype)
        np.add.at(out, _tensor_to_host(seg), _tensor_to_host(data))
        return tensor_on(out, data.device)
    out = torch.zeros((n,) + tuple(data.shape[1:]), dtype=data.dtype, device=data.device)
    return out.index_add(0, seg, data)


def _df_segment_sum(data, seg, n):
    """segment_sum of exactly held float64 data on a device without float64: the k-th
    entries of every segment scattered as a layer (distinct slots, no arithmetic, every
    stored part kept), the layers added in triple-float (``_df.add3``: two duplicates sum
    to SciPy's float64 value, more within a unit of its rounding; single entries stay
    exact).  The ranks come from the
    host's copy of ``seg`` (an index read, no values)."""
    ids = _tensor_to_host(seg).astype(np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    first = np.searchsorted(sorted_ids, sorted_ids, side="left")
    rank = np.empty_like(ids)
    rank[order] = np.arange(ids.shape[0]) - first
    layers = []
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        pick = torch.from_numpy(np.flatnonzero(rank == r)).to(data.device)
        where = seg.index_select(0, pick).to(torch.int64)
        layers.append(torch.zeros(n, dtype=data.dtype, device=data.device).index_put(
            (where,), data.index_select(0, pick)))
    if len(layers) <= 1:
        return layers[0] if layers else torch.zeros(n, dtype=data.dtype, device=data.device)
    total = df_triple(layers[0])
    for layer in layers[1:]:
        total = _df.add3(total, df_triple(layer))
    # the sums replace only the slots with duplicates: the others keep every bit
    dup = torch.from_numpy(np.unique(ids[rank > 0])).to(data.device)
    return layers[0].index_put((dup,), df_tensor(*total).index_select(0, dup))


def divmod_index(key, n):
    """(key // n, key % n) for non-negative integer tensors ``key`` and an int ``n``, exact
    on every device: torch-xla 2.9 divides int64 tensors through float32 (99999998 // 10000
    gave 10000), so the quotient is corrected from the exact integer remainder."""
    q = torch.div(key, n, rounding_mode="floor")
    for _ in range(2):  # float32 quotients of indices below 2**24 are off by at most 1
        r = key - q * n
        q = q - (r < 0).to(q.dtype) + (r >= n).to(q.dtype)
    return q, key - q * n


def coalesce(major, minor, data, n_minor):
    """Sort entries by (major, minor) and sum duplicates (explicit zeros are kept).

    Returns (major, minor, data), sorted, without duplicates.
    """
    nnz = data.shape[0]
    if nnz == 0:
        return major, minor, data
    key = major.to(torch.int64) * n_minor + minor.to(torch.int64)
    key, order = sort(key, stable=True)
    data = data[order]
    new = torch.ones(nnz, dtype=torch.bool, device=key.device)
    new[1:] = key[1:] != key[:-1]
    seg = torch.cumsum(new.to(torch.int64), 0) - 1
    (count,) = host_ints(seg[-1] + 1)
    if count == nnz:
        return major[order], minor[order], data
    summed = segment_sum(data, seg, nnz)[:count]
    keys = torch.zeros(nnz, dtype=torch.int64, device=key.device).scatter(0, seg, key)[:count]
    major_, minor_ = divmod_index(keys, n_minor)
    return major_.to(major.dtype), minor_.to(minor.dtype), summed
