"""COOrdinate format on a device."""

import numpy as np
import scipy.sparse as _sp

from trnscipy._dtypes import to_torch_dtype
from trnscipy._kernels import _plan
from trnscipy._torch import torch
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _register, sparray, spmatrix
from trnscipy.sparse._data import _data_matrix


def _is_shape(x, allow_1d=False):
    return (isinstance(x, tuple) and (len(x) == 2 or (allow_1d and len(x) == 1))
            and all(isinstance(s, (int, np.integer)) for s in x))


class _coo_base(_data_matrix):
    format = "coo"

    def _init_tuple(self, arg1, shape, dtype, copy, device, blocksize):
        if _is_shape(arg1, allow_1d=self._is_array):
            self._init_empty(su.check_shape(arg1, allow_1d=True), dtype, device)
            return
        if len(arg1) != 2:
            raise TypeError("invalid input format")
        data, coords = arg1
        if not su.is_scalar(coords) and len(coords) == 1:
            if not self._is_array:
                raise ValueError("sparse matrices are 2-D; 1-D coordinates given")
            self.__dict__.update(validate_coo_1d(su.as_index(coords[0], device),
                                                 su.as_tensor(data, device), shape, dtype,
                                                 copy))
            return
        if su.is_scalar(coords) or len(coords) != 2:
            raise TypeError("invalid input format: coords must be (row, col)")
        row, col = su.as_index(coords[0], device), su.as_index(coords[1], device)
        data = su.as_tensor(data, device)
        parts = validate_coo(row, col, data, shape, dtype, self._is_array, copy)
        self.__dict__.update(parts)

    def _init_empty(self, shape, dtype, device):
        np_dtype = su.check_dtype(dtype if dtype is not None else np.float64)
        idx = su.index_dtype(max(shape))
        self._shape = shape
        if len(shape) == 2:
            self.row = torch.zeros(0, dtype=idx, device=device)
        self.col = torch.zeros(0, dtype=idx, device=device)
        self.data = torch.zeros(0, dtype=to_torch_dtype(np_dtype), device=device)
        self._canonical = True

    @classmethod
    def _from_scipy(cls, sp, device):
        return cls._construct(sp.shape, row=su.from_host(sp.row, device),
                              col=su.from_host(sp.col, device),
                              data=su.from_host(sp.data, device),
                              _canonical=bool(sp.has_canonical_format))

    def to_scipy(self, copy=True):
        out = self._scipy_class((self._host(self.data, copy), (self._host(self.row, copy),
                                                         self._host(self.col, copy))),
                                shape=self.shape)
        out.has_canonical_format = self._canonical
        return out

    @property
    def nnz(self):
        return self.data.shape[0]

    @property
    def coords(self):
        return (self.row, self.col)

    @property
    def has_canonical_format(self):
        return self._canonical

    @has_canonical_format.setter
    def has_canonical_format(self, value):
        self._canonical = bool(value)

    def _with_data(self, data, copy=True):
        return self._construct(self.shape, row=self.row.clone() if copy else self.row,
                               col=self.col.clone() if copy else self.col, data=data,
                               _canonical=self._canonical)

    def _set(self, row, col, data, canonical):
        self.row, self.col, self.data, self._canonical = row, col, data, canonical

    def sum_duplicates(self):
        """Sort entries row-major and sum duplicates, in place."""
        if self._canonical:
            return
        row, col, data = su.coalesce(self.row, self.col, self.data, self.shape[1])
        self._set(row, col, data, True)

    def eliminate_zeros(self):
        row, col, data = su.compact(self.data != 0, self.row, self.col, self.data)
        self._set(row, col, data, self._canonical)

    def tocoo(self, copy=False):
        return self.copy() if copy else self

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) != (1, 0):
            raise ValueError("Sparse arrays/matrices do not support an 'axes' parameter "
                             "because swapping dimensions is the only logical permutation.")
        m, n = self.shape
        return self._construct((n, m), row=self.col.clone() if copy else self.col,
                               col=self.row.clone() if copy else self.row,
                               data=self.data.clone() if copy else self.data, _canonical=False)

    def _compressed(self, fmt):
        m, n = self.shape
        major, minor, n_major, n_minor = ((self.row, self.col, m, n) if fmt == "csr"
                                          else (self.col, self.row, n, m))
        idx = su.index_dtype(max(m, n, self.nnz), tensors=(self.row, self.col))
        major, minor, data = su.coalesce(major, minor, self.data, n_minor)
        major = major.to(idx)
        indptr = su.compress(major, n_major, idx)
        out = self._container(fmt)._construct(self.shape, data=data, indices=minor.to(idx),
                                              indptr=indptr, _sorted=True, _canonical=True)
        _plan.put(out, None, "major", major, _plan.STRUCTURE)
        return out

    def tocsr(self, copy=False):
        """CSR with duplicates summed (as SciPy)."""
        return self._compressed("csr")

    def tocsc(self, copy=False):
        return self._compressed("csc")

    def todia(self, copy=False):
        self.sum_duplicates()
        m, n = self.shape
        dia = self._container("dia")
        if self.nnz == 0:
            return dia._construct(self.shape, data=torch.zeros((0, 0), dtype=self.data.dtype,
                                                               device=self.device),
                                  offsets=torch.zeros(0, dtype=torch.int32, device=self.device))
        ks = self.col.to(torch.int64) - self.row.to(torch.int64)
        sk, _ = su.sort(ks)
        new = torch.ones_like(sk, dtype=torch.bool)
        new[1:] = sk[1:] != sk[:-1]
        (offsets,) = su.compact(new, sk)
        width, = su.host_ints(self.col.max() + 1)
        which = torch.searchsorted(offsets, ks)
        data = torch.zeros((offsets.shape[0], width), dtype=self.data.dtype,
                           device=self.device)
        data[which, self.col.to(torch.int64)] = self.data
        idx = su.index_dtype(max(self.shape))
        return dia._construct(self.shape, data=data, offsets=offsets.to(idx))


def validate_coo(row, col, data, shape, dtype, is_array, copy):
    """Checked COO parts (one host read); SciPy's errors for bad input."""
    if row.ndim != 1 or col.ndim != 1 or data.ndim != 1:
        raise ValueError("row, column, and data arrays must be 1-D")
    if not (row.shape[0] == col.shape[0] == data.shape[0]):
        raise ValueError("row, column, and data array must all be the same length")
    np_dtype = su.check_dtype(dtype if dtype is not None else data.dtype)
    nnz = data.shape[0]
    if nnz:
        rmin, rmax, cmin, cmax = su.host_ints(row.min(), row.max(), col.min(), col.max())
    else:
        rmin = rmax = cmin = cmax = 0
    if shape is None:
        if nnz == 0:
            raise ValueError("cannot infer dimensions from zero sized index arrays")
        shape = (rmax + 1, cmax + 1)
    shape = su.check_shape(shape)
    if nnz:
        if rmin < 0:
            raise ValueError("negative row index found")
        if cmin < 0:
            raise ValueError("negative column index found")
        if rmax >= shape[0]:
            raise ValueError("row index exceeds matrix dimensions")
        if cmax >= shape[1]:
            raise ValueError("column index exceeds matrix dimensions")
    idx = su.index_dtype(max(shape), (row, col), max(rmax, cmax), keep_int64=is_array)
    data = data.to(to_torch_dtype(np_dtype))
    if copy:
        row, col, data = row.clone(), col.clone(), data.clone()
    return {"_shape": shape, "row": row.to(idx), "col": col.to(idx), "data": data,
            "_canonical": False}


def validate_coo_1d(idx, data, shape, dtype, copy):
    """Checked 1-D COO parts (one host read); SciPy's errors for bad input."""
    if idx.ndim != 1 or data.ndim != 1:
        raise ValueError("coordinates and data arrays must be 1-D")
    if idx.shape[0] != data.shape[0]:
        raise ValueError("all index and data arrays must have the same length")
    np_dtype = su.check_dtype(dtype if dtype is not None else data.dtype)
    nnz = data.shape[0]
    lo, hi = su.host_ints(idx.min(), idx.max()) if nnz else (0, 0)
    if shape is None:
        if nnz == 0:
            raise ValueError("cannot infer dimensions from zero sized index arrays")
        shape = (hi + 1,)
    shape = su.check_shape(shape, allow_1d=True)
    if len(shape) != 1:
        raise ValueError(f"shape {shape} does not match 1-D coordinates")
    if nnz and lo < 0:
        raise ValueError("negative axis 0 index: " + str(lo))
    if nnz and hi >= shape[0]:
        raise ValueError(f"axis 0 index {hi} exceeds matrix dimension {shape[0]}")
    data = data.to(to_torch_dtype(np_dtype))
    if copy:
        idx, data = idx.clone(), data.clone()
    return {"_shape": shape, "col": idx.to(su.index_dtype(shape[0], (idx,))), "data": data,
            "_canonical": False}



class coo_array(_coo_base, sparray):
    """COO sparse array on a device (SciPy's coo_array for host data)."""


class coo_matrix(spmatrix, _coo_base):
    """COO sparse matrix on a device (SciPy's coo_matrix for host data)."""


_register(coo_array, _sp.coo_array)
_register(coo_matrix, _sp.coo_matrix)
