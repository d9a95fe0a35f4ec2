"""Block Sparse Row format on a device: ``data`` holds (nblocks, R, C) dense blocks."""

import numpy as np
import scipy.sparse as _sp

from trnscipy._dtypes import to_torch_dtype
from trnscipy._kernels import _plan, backend
from trnscipy._torch import torch
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _register, sparray, spmatrix
from trnscipy.sparse._compressed import _cs_matrix
from trnscipy.sparse._coo import _is_shape, validate_coo
from trnscipy.sparse._data import _data_matrix


def _check_blocksize(blocksize, shape):
    try:
        r, c = (int(b) for b in blocksize)
    except (TypeError, ValueError):
        raise ValueError(f"invalid blocksize={blocksize}") from None
    if r < 1 or c < 1 or shape[0] % r or shape[1] % c:
        raise ValueError(f"invalid blocksize {blocksize}")
    return r, c


def count_blocks(A, blocksize):
    """Number of (R, C) blocks holding a stored entry of ``A`` (one host read)."""
    r, c = blocksize
    coo = A.tocoo(copy=False)
    if coo.nnz == 0:
        return 0
    nbc = -(-A.shape[1] // c)
    key = (coo.row.to(torch.int64) // r) * nbc + coo.col.to(torch.int64) // c
    key, _ = su.sort(key)
    (distinct,) = su.host_ints((key[1:] != key[:-1]).sum() + 1)
    return distinct


def estimate_blocksize(A, efficiency=0.7):
    """SciPy's blocksize heuristic (scipy.sparse._spfuncs) on device data."""
    nnz = float(A.nnz)
    if nnz == 0:
        return (1, 1)
    m, n = A.shape
    high = (1.0 + efficiency) / 2.0

    def eff(b):
        return nnz / (b * b * count_blocks(A, (b, b))) if m % b == 0 and n % b == 0 else 0.0

    e22, e33 = eff(2), eff(3)
    if e22 > high and e33 > high:
        return (6, 6) if eff(6) > efficiency else (3, 3)
    e44 = eff(4)
    for size, e in ((4, e44), (3, e33), (2, e22)):
        if e > efficiency:
            return (size, size)
    return (1, 1)


def bsr_from_coo(coo, blocksize, cls):
    """BSR of ``coo`` (duplicates summed, blocks sorted) as ``cls``."""
    m, n = coo.shape
    r, c = _check_blocksize(blocksize, coo.shape)
    nbr, nbc = m // r, n // c
    row, col, data = su.coalesce(coo.row.to(torch.int64), coo.col.to(torch.int64),
                                 coo.data, n)
    nnz = data.shape[0]
    dev = data.device
    if nnz:
        bkey = (row // r) * nbc + col // c
        bkey, order = su.sort(bkey, stable=True)
        row, col, data = row[order], col[order], data[order]
        new = torch.ones(nnz, dtype=torch.bool, device=dev)
        new[1:] = bkey[1:] != bkey[:-1]
        seg = torch.cumsum(new.to(torch.int64), 0) - 1
        (nb,) = su.host_ints(seg[-1] + 1)
        ukey = torch.zeros(nnz, dtype=torch.int64, device=dev).scatter(0, seg, bkey)[:nb]
        blocks = torch.zeros((nb, r, c), dtype=data.dtype, device=dev)
        blocks[seg, row % r, col % c] = data
    else:
        nb = 0
        ukey = torch.zeros(0, dtype=torch.int64, device=dev)
        blocks = torch.zeros((0, r, c), dtype=data.dtype, device=dev)
    idx = su.index_dtype(max(nbc, nb, nbr), (coo.row, coo.col))
    major, minor = su.divmod_index(ukey, nbc)
    indptr = su.compress(major, nbr, idx)
    return cls._construct(coo.shape, data=blocks, indices=minor.to(idx), indptr=indptr,
                          _sorted=True, _canonical=True)


class _bsr_base(_data_matrix):
    format = "bsr"

    def _init_tuple(self, arg1, shape, dtype, copy, device, blocksize):
        if _is_shape(arg1):
            shape = su.check_shape(arg1)
            r, c = _check_blocksize(blocksize or (1, 1), shape)
            np_dtype = su.check_dtype(dtype if dtype is not None else np.float64)
            idx = su.index_dtype(max(shape))
            self.__dict__.update(
                _shape=shape, data=torch.zeros((0, r, c), dtype=to_torch_dtype(np_dtype),
                                               device=device),
                indices=torch.zeros(0, dtype=idx, device=device),
                indptr=torch.zeros(shape[0] // r + 1, dtype=idx, device=device),
                _sorted=True, _canonical=True)
            return
        if len(arg1) == 2:
            data, coords = arg1
            if not su.is_scalar(coords) and len(coords) == 1:
                raise ValueError("Cannot convert a 1d sparse array to bsr format")
            parts = validate_coo(su.as_index(coords[0], device), su.as_index(coords[1], device),
                                 su.as_tensor(data, device), shape, dtype, self._is_array,
                                 copy=False)
            coo = self._container("coo")._construct(parts.pop("_shape"), **parts)
            self.__dict__.update(bsr_from_coo(coo, blocksize or (1, 1), type(self)).__dict__)
            return
        if len(arg1) != 3:
            raise TypeError("unrecognized form for bsr constructor")
        data, indices, indptr = arg1
        parts, major, width = self._validate(su.as_tensor(data, device),
                                             su.as_index(indices, device),
                                             su.as_index(indptr, device), shape, dtype,
                                             blocksize, copy)
        self.__dict__.update(parts)
        if major is not None:
            _plan.put(self, None, "major", major, _plan.STRUCTURE)
        backend(self.device).prepare_product(self, width=width)

    def _validate(self, data, indices, indptr, shape, dtype, blocksize, copy):
        if data.ndim != 3:
            raise ValueError(f"BSR data must be 3-dimensional, got shape {tuple(data.shape)}")
        if indices.ndim != 1 or indptr.ndim != 1:
            raise ValueError("indices and indptr should be 1-D")
        r, c = data.shape[1:]
        if blocksize is not None and tuple(blocksize) != (r, c):
            raise ValueError(f"mismatching blocksize={tuple(blocksize)} vs {(r, c)}")
        if data.shape[0] != indices.shape[0]:
            raise ValueError("indices and data should have the same size")
        np_dtype = su.check_dtype(dtype if dtype is not None else data.dtype)
        nb = indices.shape[0]
        steps = torch.diff(indptr) if indptr.shape[0] > 1 else indptr[:1] * 0
        values = [indptr[0], indptr[-1], steps.min(), steps.max()]
        if nb:
            values += [indices.min(), indices.max()]
        major = backend(indices.device).product_index(indptr, nb, indices.device)
        first, last, min_step, width, *minmax = su.host_ints(*values,
                                                      also=() if major is None else (major,))
        imin, imax = minmax if minmax else (0, -1)
        if shape is None:
            shape = ((indptr.shape[0] - 1) * r, (imax + 1) * c)
        shape = su.check_shape(shape)
        _check_blocksize((r, c), shape)
        nbr, nbc = shape[0] // r, shape[1] // c
        if indptr.shape[0] != nbr + 1:
            raise ValueError(f"index pointer size ({indptr.shape[0]}) should be ({nbr + 1})")
        if first != 0:
            raise ValueError("index pointer should start with 0")
        if last != nb:
            raise ValueError("Last value of index pointer should be less than the size of "
                             "index and data arrays")
        if min_step < 0:
            raise ValueError("index pointer values must form a non-decreasing sequence")
        if nb and (imin < 0 or imax >= nbc):
            raise ValueError("column index values must be >= 0 and < "
                             f"{nbc} (number of block columns)")
        idx = su.index_dtype(max(nbc, nb, nbr), (indices, indptr), max(imax, last),
                             keep_int64=self._is_array)
        data = data.to(to_torch_dtype(np_dtype))
        if copy:
            data, indices, indptr = data.clone(), indices.clone(), indptr.clone()
        parts = {"_shape": shape, "data": data, "indices": indices.to(idx),
                 "indptr": indptr.to(idx), "_sorted": None, "_canonical": None}
        return parts, None if major is None else major.to(idx), width

    # the same (data, indices, indptr) transfer as CSR/CSC; ``data`` holds blocks
    _from_scipy = _cs_matrix.__dict__["_from_scipy"]
    to_scipy = _cs_matrix.to_scipy

    @property
    def blocksize(self):
        return tuple(self.data.shape[1:])

    @property
    def nnz(self):
        r, c = self.blocksize
        return self.data.shape[0] * r * c

    def _with_data(self, data, copy=True):
        return self._construct(self.shape, data=data,
                               indices=self.indices.clone() if copy else self.indices,
                               indptr=self.indptr.clone() if copy else self.indptr,
                               _sorted=self._sorted, _canonical=self._canonical)

    def _block_rows(self):
        """Block row of each stored block; computed once per structure."""
        return _plan.prepared(self, None, "major", self._expand_ptr, _plan.STRUCTURE)

    _major_index = _block_rows
    _expand_ptr = _cs_matrix._expand_ptr

    @property
    def has_sorted_indices(self):
        if self._sorted is None:
            self._sorted = self.tocsr_blocks_sorted()
        return self._sorted

    @has_sorted_indices.setter
    def has_sorted_indices(self, value):
        self._sorted = bool(value)

    def tocsr_blocks_sorted(self):
        nb = self.data.shape[0]
        if nb < 2:
            return True
        brow = self._block_rows()
        bad = ((brow[1:] == brow[:-1]) & (self.indices[1:] < self.indices[:-1])).any()
        return not su.host_ints(bad)[0]

    @property
    def has_canonical_format(self):
        if self._canonical is None:
            nb = self.data.shape[0]
            brow = self._block_rows()
            ok = True
            if nb >= 2:
                bad = ((brow[1:] == brow[:-1]) & (self.indices[1:] <= self.indices[:-1])).any()
                ok = not su.host_ints(bad)[0]
            self._canonical = ok
        return self._canonical

    @has_canonical_format.setter
    def has_canonical_format(self, value):
        self._canonical = bool(value)

    def _rebuild(self, other):
        _plan.clear(self)
        self.__dict__.update(other.__dict__)

    def sum_duplicates(self):
        if self.has_canonical_format:
            return
        self._rebuild(bsr_from_coo(self.tocoo(copy=False), self.blocksize, type(self)))

    def sort_indices(self):
        if self.has_sorted_indices:
            return
        nbc = self.shape[1] // self.blocksize[1]
        key = self._block_rows().to(torch.int64) * nbc + self.indices
        _, order = su.sort(key, stable=True)
        self.data, self.indices = self.data[order], self.indices[order]
        self._sorted = True

    def sorted_indices(self):
        out = self.copy()
        out.sort_indices()
        return out

    def eliminate_zeros(self):
        """Drop blocks whose values are all zero, in place (as SciPy)."""
        nonzero = (self.data != 0).flatten(1).any(dim=1)
        brow, indices, data = su.compact(nonzero, self._block_rows(), self.indices, self.data)
        indptr = su.compress(brow, self.shape[0] // self.blocksize[0], self.indptr.dtype)
        self._rebuild(self._construct(self.shape, data=data, indices=indices, indptr=indptr,
                                      _sorted=self._sorted, _canonical=self._canonical))

    def prune(self):
        """Nothing to trim: device containers never hold entries past ``nnz``."""

    def tocoo(self, copy=True):
        r, c = self.blocksize
        nb = self.data.shape[0]
        dev = self.device
        idx = su.index_dtype(max(self.shape))
        brow = self._block_rows().to(torch.int64).reshape(nb, 1, 1)
        bcol = self.indices.to(torch.int64).reshape(nb, 1, 1)
        rr = torch.arange(r, device=dev).reshape(1, r, 1)
        cc = torch.arange(c, device=dev).reshape(1, 1, c)
        row = (brow * r + rr).expand(nb, r, c).reshape(-1)
        col = (bcol * c + cc).expand(nb, r, c).reshape(-1)
        data = self.data.reshape(-1)
        return self._container("coo")._construct(self.shape, row=row.to(idx), col=col.to(idx),
                                                 data=data.clone() if copy else data,
                                                 _canonical=False)

    def tobsr(self, blocksize=None, copy=False):
        if blocksize is None or tuple(blocksize) == self.blocksize:
            return self.copy() if copy else self
        return bsr_from_coo(self.tocoo(copy=False), tuple(blocksize), type(self))

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) != (1, 0):
            raise ValueError("Sparse arrays/matrices do not support an 'axes' parameter "
                             "because swapping dimensions is the only logical permutation.")
        r, c = self.blocksize
        return bsr_from_coo(self.tocoo(copy=False).transpose(), (c, r), type(self))


class bsr_array(_bsr_base, sparray):
    """BSR sparse array on a device (SciPy's bsr_array for host data)."""


class bsr_matrix(spmatrix, _bsr_base):
    """BSR sparse matrix on a device (SciPy's bsr_matrix for host data)."""


_register(bsr_array, _sp.bsr_array)
_register(bsr_matrix, _sp.bsr_matrix)
