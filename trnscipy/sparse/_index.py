"""Indexing of device CSR/CSC/COO containers: integer, slice, and integer-array
(fancy) selection of rows and columns.

An integer index on a 2-D sparse *array* gives a 1-D ``coo_array``, as SciPy;
paired index arrays ``A[[i0, i1], [j0, j1]]`` give SciPy's kinds of result (a dense
tensor; a 1-D coo_array for COO arrays); indexing of 1-D arrays is in ``_oned``.

Differs from SciPy: ``None``, ``Ellipsis`` and 2-D index arrays raise IndexError.
"""

import numpy as np
from array_api_compat import is_torch_array

from trnscipy._torch import torch
from trnscipy.sparse import _sputils as su


def _normalize(key, n, device):
    """(index tensor, was_int) for one axis."""
    if isinstance(key, (int, np.integer)):
        k = int(key)
        if not -n <= k < n:
            raise IndexError(f"index ({k}) out of range")
        return torch.tensor([k % n], dtype=torch.int64, device=device), True
    if isinstance(key, slice):
        return torch.arange(*key.indices(n), dtype=torch.int64, device=device), False
    if key is None or key is Ellipsis:
        raise IndexError("None and Ellipsis indices are not supported on device containers")
    t = key if is_torch_array(key) else torch.as_tensor(np.asarray(key))
    t = t.to(device)
    if t.dtype == torch.bool:
        if t.ndim != 1 or t.shape[0] != n:
            raise IndexError("boolean index did not match the indexed dimension")
        t = torch.nonzero(t).reshape(-1)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        raise IndexError("only integers, slices and integer or boolean arrays are valid "
                         "indices")
    if t.ndim != 1:
        raise IndexError("only 1-D index arrays are supported on device containers")
    t = t.to(torch.int64)
    if t.numel():
        lo, hi = su.host_ints(t.min(), t.max())
        if lo < -n or hi >= n:
            raise IndexError(f"index ({hi if hi >= n else lo}) out of range")
    return torch.where(t < 0, t + n, t), False


def _select_major(A, idx):
    """Rows ``idx`` of CSR ``A`` (columns of CSC ``A``), as the same format."""
    ptr = A.indptr.to(torch.int64)
    counts = ptr[idx + 1] - ptr[idx]
    ends = torch.cumsum(counts, 0)
    (total,) = su.host_ints(ends[-1]) if idx.numel() else (0,)
    pos = torch.arange(total, device=A.device)
    which = torch.searchsorted(ends, pos, right=True)
    src = ptr[idx[which]] + pos - (ends[which] - counts[which])
    n_minor = A._swap(A.shape)[1]
    shape = A._swap((idx.shape[0], n_minor))
    dt = su.index_dtype(max(max(shape), total), (A.indices,))
    indptr = torch.zeros(idx.shape[0] + 1, dtype=torch.int64, device=A.device)
    indptr[1:] = ends
    return type(A)._construct(shape, data=A.data[src], indices=A.indices[src].to(dt),
                              indptr=indptr.to(dt), _sorted=A._sorted,
                              _canonical=None)


def _paired(A, rows, cols):
    """A[rows[k], cols[k]] (index arrays of one length, or of length 1: broadcast)."""
    if rows.shape[0] != cols.shape[0] and 1 not in (rows.shape[0], cols.shape[0]):
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together "
                         f"with shapes ({rows.shape[0]},) ({cols.shape[0]},)")
    rows, cols = torch.broadcast_tensors(rows, cols)
    picked = _select_major(A.tocsr(copy=False), rows).tocoo(copy=False)  # row k: A[rows[k]]
    line = picked.row.to(torch.int64)
    hit = picked.col.to(torch.int64) == cols[line]
    values = su.segment_sum(torch.where(hit, picked.data, torch.zeros_like(picked.data)),
                            line, rows.shape[0])
    if not A._is_array:  # SciPy: a 1 x k np.matrix
        return values.reshape(1, -1)
    if A.format == "coo":
        return type(A)._from_dense(values, None, None, None)
    return values


def getitem(A, key):
    if A.format == "bsr":
        raise NotImplementedError("BSR indexing is not supported (as SciPy)")
    if A.format == "dia" or (A.format == "coo" and not A._is_array):
        raise TypeError(f"'{type(A).__name__}' object is not subscriptable")
    if not isinstance(key, tuple):
        key = (key, slice(None))
    if len(key) != 2:
        raise IndexError("too many indices for a 2-D sparse container")
    m, n = A.shape
    rows, rint = _normalize(key[0], m, A.device)
    cols, cint = _normalize(key[1], n, A.device)
    if rint and cint:
        coo = A.tocoo(copy=False)
        hit = (coo.row.to(torch.int64) == rows[0]) & (coo.col.to(torch.int64) == cols[0])
        return torch.where(hit, coo.data, torch.zeros_like(coo.data)).sum()
    if not (isinstance(key[0], (slice, int, np.integer))
            or isinstance(key[1], (slice, int, np.integer))):
        return _paired(A, rows, cols)
    fmt = A.format
    out = A.tocsr(copy=False)
    if not (isinstance(key[0], slice) and key[0] == slice(None)):
        out = _select_major(out, rows)
    if not (isinstance(key[1], slice) and key[1] == slice(None)):
        out = _select_major(out.tocsc().transpose(), cols).transpose()
    if A._is_array and (rint or cint):  # one integer index: a 1-D coo_array
        from trnscipy.sparse._oned import as_1d

        return as_1d(out.tocoo(copy=False))
    return out.asformat(fmt)
