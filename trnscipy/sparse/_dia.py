"""DIAgonal format on a device: ``data[k, j]`` is entry (j - offsets[k], j)."""

import numpy as np
import scipy.sparse as _sp

from trnscipy._dtypes import to_torch_dtype
from trnscipy._torch import torch
from trnscipy._transfer import df_parts, held_as_parts
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _computes, _register, sparray, spmatrix
from trnscipy.sparse._coo import _is_shape
from trnscipy.sparse._data import _data_matrix


class _dia_base(_data_matrix):
    format = "dia"

    def _init_tuple(self, arg1, shape, dtype, copy, device, blocksize):
        if _is_shape(arg1):
            shape = su.check_shape(arg1)
            np_dtype = su.check_dtype(dtype if dtype is not None else np.float64)
            self.__dict__.update(
                _shape=shape, data=torch.zeros((0, 0), dtype=to_torch_dtype(np_dtype),
                                               device=device),
                offsets=torch.zeros(0, dtype=su.index_dtype(max(shape)), device=device),
                _offsets_host=())
            return
        if len(arg1) != 2:
            raise ValueError("unrecognized form for dia constructor")
        if shape is None:
            raise ValueError("expected a shape argument")
        shape = su.check_shape(shape)
        data = su.as_tensor(arg1[0], device)
        offsets = su.as_index(arg1[1], device)
        if offsets.ndim == 0:
            offsets = offsets.reshape(1)
        if data.ndim < 2:
            data = data.reshape(1, -1)
        if offsets.ndim != 1:
            raise ValueError("offsets array must have rank 1")
        if data.ndim != 2:
            raise ValueError("data array must have rank 2")
        if data.shape[0] != offsets.shape[0]:
            raise ValueError(f"number of diagonals ({data.shape[0]}) does not match the "
                             f"number of offsets ({offsets.shape[0]})")
        host = tuple(int(v) for v in offsets.cpu().tolist())
        if len(set(host)) != len(host):
            raise ValueError("offset array contains duplicate values")
        np_dtype = su.check_dtype(dtype if dtype is not None else data.dtype)
        data = data.to(to_torch_dtype(np_dtype))
        if copy:
            data = data.clone()
        self.__dict__.update(_shape=shape, data=data,
                             offsets=offsets.to(su.index_dtype(max(shape))),
                             _offsets_host=host)

    @classmethod
    def _construct(cls, shape, **parts):
        if "_offsets_host" not in parts:
            parts["_offsets_host"] = tuple(int(v) for v in parts["offsets"].cpu().tolist())
        return super()._construct(shape, **parts)

    @classmethod
    def _from_scipy(cls, sp, device):
        return cls._construct(sp.shape, data=su.from_host(sp.data, device),
                              offsets=su.from_host(sp.offsets, device),
                              _offsets_host=tuple(int(v) for v in sp.offsets))

    def to_scipy(self, copy=True):
        return self._scipy_class((self._host(self.data, copy), self._host(self.offsets, copy)),
                                 shape=self.shape)

    @property
    def nnz(self):
        m, n = self.shape
        width = min(self.data.shape[1], n)
        return int(sum(max(min(m + k, width) - max(k, 0), 0) for k in self._offsets_host))

    def _with_data(self, data, copy=True):
        return self._construct(self.shape, data=data,
                               offsets=self.offsets.clone() if copy else self.offsets,
                               _offsets_host=self._offsets_host)

    def _deduped_data(self):
        return self.data

    def sum_duplicates(self):
        """DIA holds no duplicates."""

    # drops the stored zeros: compares values (float64 held as parts: their float32 high
    # parts, no float64 arithmetic on a device without float64)
    @_computes("tocoo", exact=lambda self, *args, **kwargs: _held_as_parts(self.data))
    def tocoo(self, copy=False):
        m, n = self.shape
        ndiag, width = self.data.shape
        dev = self.device
        col = torch.arange(width, device=dev, dtype=torch.int64).reshape(1, -1)
        row = col - self.offsets.to(torch.int64).reshape(-1, 1)
        # float64 held as float32 parts (no float64 on the device): a value is zero iff
        # its high part is (the high parts: what the device stores, read by a relabel)
        values = df_parts(self.data)[0] if _held_as_parts(self.data) else self.data
        keep = (row >= 0) & (row < m) & (col < n) & (values != 0)
        row, col = row.expand(ndiag, width).reshape(-1), col.expand(ndiag, width).reshape(-1)
        row, col, data = su.compact(keep.reshape(-1), row, col, self.data.reshape(-1))
        idx = su.index_dtype(max(m, n, data.shape[0]))
        coo = self._container("coo")._construct(self.shape, row=row.to(idx), col=col.to(idx),
                                                data=data, _canonical=False)
        return coo.tocsr().tocoo()  # row-major, as SciPy's (via CSR)

    def todia(self, copy=False):
        return self.copy() if copy else self

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) != (1, 0):
            raise ValueError("Sparse arrays/matrices do not support an 'axes' parameter "
                             "because swapping dimensions is the only logical permutation.")
        return self.tocoo().transpose().todia()


def _held_as_parts(t):
    return held_as_parts(t.dtype, t.device)


class dia_array(_dia_base, sparray):
    """DIA sparse array on a device (SciPy's dia_array for host data)."""


class dia_matrix(spmatrix, _dia_base):
    """DIA sparse matrix on a device (SciPy's dia_matrix for host data)."""


_register(dia_array, _sp.dia_array)
_register(dia_matrix, _sp.dia_matrix)
