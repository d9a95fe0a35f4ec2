"""The compressed (CSR and CSC) base: one implementation, axes swapped for CSC."""

import numpy as np

from trnscipy._dtypes import to_torch_dtype
from trnscipy._kernels import _plan, backend
from trnscipy._torch import torch
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _CLASSES1D
from trnscipy.sparse._coo import _is_shape, validate_coo, validate_coo_1d
from trnscipy.sparse._data import _data_matrix


class _cs_matrix(_data_matrix):
    """CSR/CSC storage: ``data``, ``indices`` (minor), ``indptr`` (major)."""

    def _swap(self, x):
        return x if self.format == "csr" else (x[1], x[0])

    # ---- construction ---------------------------------------------------------

    def _init_tuple(self, arg1, shape, dtype, copy, device, blocksize):
        one_d = self._is_array and self.format == "csr"  # 1-D input allowed (see _oned)
        if _is_shape(arg1, allow_1d=True):
            if len(arg1) == 1 and not one_d:
                raise ValueError(f"unrecognized {type(self).__name__} constructor input: "
                                 f"{arg1}")
            shape = su.check_shape(arg1, allow_1d=True)
            np_dtype = su.check_dtype(dtype if dtype is not None else np.float64)
            idx = su.index_dtype(max(shape))
            n_major = self._swap(shape)[0] if len(shape) == 2 else 1
            self.__dict__.update(
                _shape=shape, data=torch.zeros(0, dtype=to_torch_dtype(np_dtype),
                                               device=device),
                indices=torch.zeros(0, dtype=idx, device=device),
                indptr=torch.zeros(n_major + 1, dtype=idx, device=device),
                _sorted=True, _canonical=True)
            return
        if len(arg1) == 2:
            data, coords = arg1
            if not su.is_scalar(coords) and len(coords) == 1:  # 1-D coordinates
                if not self._is_array:
                    raise ValueError("sparse matrices are 2-D; 1-D coordinates given")
                parts = validate_coo_1d(su.as_index(coords[0], device),
                                        su.as_tensor(data, device), shape, dtype, copy=False)
                coo = _CLASSES1D["coo"]._construct(parts.pop("_shape"), **parts)
                self.__dict__.update(coo.asformat(self.format).__dict__)
                return
            if su.is_scalar(coords) or len(coords) != 2:
                raise TypeError("invalid input format")
            parts = validate_coo(su.as_index(coords[0], device), su.as_index(coords[1], device),
                                 su.as_tensor(data, device), shape, dtype, self._is_array,
                                 copy=False)
            coo = self._container("coo")._construct(parts.pop("_shape"), **parts)
            self.__dict__.update(coo.asformat(self.format).__dict__)
            return
        if len(arg1) != 3:
            raise TypeError(f"unrecognized {self.format}_matrix constructor usage")
        data, indices, indptr = arg1
        shape_1d = shape is not None and len(shape) == 1
        if shape_1d and not one_d:
            raise ValueError(f"shape must have length in (2,). Got new_shape={shape}")
        parts, major, width = self._validate(
            su.as_tensor(data, device), su.as_index(indices, device),
            su.as_index(indptr, device), (1, shape[0]) if shape_1d else shape, dtype, copy)
        if shape_1d:  # a 1-D csr_array: the (1, n) structure
            parts["_shape"] = (parts["_shape"][1],)
        self.__dict__.update(parts)
        if major is not None:
            _plan.put(self, None, "major", major, _plan.STRUCTURE)
        backend(self.device).prepare_product(self, width=width)

    def _validate(self, data, indices, indptr, shape, dtype, copy):
        """Checked parts (one host read; SciPy's messages for bad input), the major index
        of each entry where the device computes it with the check (else None), and the
        widest row (CSR; else None)."""
        if data.ndim != 1 or indices.ndim != 1 or indptr.ndim != 1:
            raise ValueError("data, indices, and indptr should be 1-D")
        if data.shape[0] != indices.shape[0]:
            raise ValueError("indices and data should have the same size")
        np_dtype = su.check_dtype(dtype if dtype is not None else data.dtype)
        if indptr.shape[0] == 0:
            raise ValueError("index pointer should have at least one element")
        length = indices.shape[0]
        pos = torch.arange(length, device=indices.device)
        big = torch.iinfo(torch.int64).max
        lim = indptr[-1].to(torch.int64)
        live = pos < lim
        ind = indices.to(torch.int64)
        values = [indptr[0], indptr[-1]]
        steps = torch.diff(indptr) if indptr.shape[0] > 1 else indptr[:1] * 0
        values += [steps.min(), steps.max()]
        if length:
            values.append(torch.where(live, ind, big).min())
            values.append(torch.where(live, ind, -1).max())
        major = backend(indices.device).product_index(indptr, length, indices.device)
        first, last, min_step, width, *minmax = su.host_ints(*values,
                                                      also=() if major is None else (major,))
        imin, imax = minmax if minmax else (big, -1)
        if last > length:
            raise ValueError("Last value of index pointer should be less than the size of "
                             "index and data arrays")
        if shape is None:
            if last == 0 or imax < 0:
                raise ValueError("unable to infer matrix dimensions")
            shape = self._swap((indptr.shape[0] - 1, imax + 1))
        shape = su.check_shape(shape)
        n_major, n_minor = self._swap(shape)
        if indptr.shape[0] != n_major + 1:
            raise ValueError(f"index pointer size {indptr.shape[0]} should be {n_major + 1}")
        if first != 0:
            raise ValueError("index pointer should start with 0")
        if min_step < 0:
            raise ValueError("index pointer values must form a non-decreasing sequence")
        if last and imin < 0:
            raise ValueError(f"{self._minor_name} index values must be >= 0")
        if last and imax >= n_minor:
            raise ValueError(f"{self._minor_name} index values must be < {n_minor}")
        maxval = max(max(shape), last, imax if last else 0)
        idx = su.index_dtype(max(shape[0], shape[1], last), (indices, indptr), maxval,
                             keep_int64=self._is_array)
        data = data[:last].to(to_torch_dtype(np_dtype))
        indices = indices[:last]
        if copy:
            data, indices, indptr = data.clone(), indices.clone(), indptr.clone()
        parts = {"_shape": shape, "data": data, "indices": indices.to(idx),
                 "indptr": indptr.to(idx), "_sorted": None, "_canonical": None}
        if major is not None:
            major = (major[:last] if last < length else major).to(idx)
        return parts, major, width if self.format == "csr" else None

    @property
    def _minor_name(self):
        return "column" if self.format == "csr" else "row"

    @classmethod
    def _from_scipy(cls, sp, device):
        flags = sp.__dict__
        stored = sp.indptr[-1]  # entries (CSR/CSC) or blocks (BSR)
        out = cls._construct(sp.shape, data=su.from_host(sp.data[:stored], device),
                             indices=su.from_host(sp.indices[:stored], device),
                             indptr=su.from_host(sp.indptr, device),
                             _sorted=flags.get("_has_sorted_indices"),
                             _canonical=flags.get("_has_canonical_format"))
        major = backend(device).product_index(sp.indptr, int(stored), device)
        if major is not None:
            _plan.put(out, None, "major", major, _plan.STRUCTURE)
        return out

    def to_scipy(self, copy=True):
        out = self._scipy_class((self._host(self.data, copy), self._host(self.indices, copy),
                                 self._host(self.indptr, copy)), shape=self.shape)
        if self._sorted is not None:
            out.has_sorted_indices = self._sorted
        if self._canonical is not None:
            out._has_canonical_format = self._canonical
        return out

    def _with_data(self, data, copy=True):
        return self._construct(self.shape, data=data,
                               indices=self.indices.clone() if copy else self.indices,
                               indptr=self.indptr.clone() if copy else self.indptr,
                               _sorted=self._sorted, _canonical=self._canonical)

    def _set(self, data, indices, indptr, sorted_, canonical):
        _plan.clear(self)
        self.data, self.indices, self.indptr = data, indices, indptr
        self._sorted, self._canonical = sorted_, canonical

    # ---- structure ---------------------------------------------------------------

    @property
    def nnz(self):
        return self.data.shape[0]

    def _major_index(self):
        """Major (row for CSR) index of each stored entry; computed once per object."""
        return _plan.prepared(self, None, "major", self._expand_ptr, _plan.STRUCTURE)

    def _expand_ptr(self):
        return backend(self.device).expand_ptr(self.indptr, self.data.shape[0])

    def _order_flags(self):
        major, minor = self._major_index(), self.indices
        if self.nnz < 2:
            return True, True
        same = major[1:] == major[:-1]
        down = (same & (minor[1:] < minor[:-1])).any()
        dup = (same & (minor[1:] == minor[:-1])).any()
        down, dup = su.host_ints(down, dup)
        return not down, not down and not dup

    @property
    def has_sorted_indices(self):
        if self._sorted is None:
            self._sorted = self._order_flags()[0]
        return self._sorted

    @has_sorted_indices.setter
    def has_sorted_indices(self, value):
        self._sorted = bool(value)

    @property
    def has_canonical_format(self):
        if self._canonical is None:
            self._sorted, self._canonical = self._order_flags()
        return self._canonical

    @has_canonical_format.setter
    def has_canonical_format(self, value):
        self._canonical = bool(value)
        if value:
            self._sorted = True

    def sort_indices(self):
        """Sort the indices of each row (CSR) / column (CSC), in place."""
        if self.has_sorted_indices:
            return
        n_minor = self._swap(self.shape)[1]
        key = self._major_index().to(torch.int64) * n_minor + self.indices
        _, order = su.sort(key, stable=True)
        self._set(self.data[order], self.indices[order], self.indptr, True, self._canonical)

    def sorted_indices(self):
        out = self.copy()
        out.sort_indices()
        return out

    def sum_duplicates(self):
        """Sort indices and sum duplicates, in place."""
        if self.has_canonical_format:
            return
        n_major, n_minor = self._swap(self.shape)
        major, minor, data = su.coalesce(self._major_index(), self.indices, self.data, n_minor)
        indptr = su.compress(major.to(self.indptr.dtype), n_major, self.indptr.dtype)
        self._set(data, minor.to(self.indices.dtype), indptr, True, True)

    def eliminate_zeros(self):
        n_major = self._swap(self.shape)[0]
        major, minor, data = su.compact(self.data != 0, self._major_index(), self.indices,
                                        self.data)
        indptr = su.compress(major, n_major, self.indptr.dtype)
        self._set(data, minor, indptr, self._sorted, self._canonical)

    def prune(self):
        """Nothing to trim: device containers never hold entries past ``nnz``."""

    # ---- conversions -----------------------------------------------------------------

    def tocoo(self, copy=False):
        major = self._major_index()
        row, col = self._swap((major, self.indices))
        if copy:
            row, col = row.clone(), col.clone()
        return self._container("coo")._construct(
            self.shape, row=row, col=col, data=self.data.clone() if copy else self.data,
            _canonical=self.format == "csr" and bool(self._canonical))

    def _other_compressed(self):
        """The same matrix in the other compressed format (indices sorted, duplicates kept)."""
        n_minor = self._swap(self.shape)[1]
        minor_sorted, order = su.sort(self.indices, stable=True)
        indptr = su.compress(minor_sorted, n_minor, self.indptr.dtype)
        other = "csc" if self.format == "csr" else "csr"
        out = self._container(other)._construct(
            self.shape, data=self.data[order], indices=self._major_index()[order],
            indptr=indptr, _sorted=True, _canonical=self._canonical or None)
        _plan.put(out, None, "major", minor_sorted, _plan.STRUCTURE)
        return out

    def tocsr(self, copy=False):
        if self.format == "csr":
            return self.copy() if copy else self
        return self._other_compressed()

    def tocsc(self, copy=False):
        if self.format == "csc":
            return self.copy() if copy else self
        return self._other_compressed()

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) != (1, 0):
            raise ValueError("Sparse arrays/matrices do not support an 'axes' parameter "
                             "because swapping dimensions is the only logical permutation.")
        other = "csc" if self.format == "csr" else "csr"
        m, n = self.shape
        return self._container(other)._construct(
            (n, m), data=self.data.clone() if copy else self.data,
            indices=self.indices.clone() if copy else self.indices,
            indptr=self.indptr.clone() if copy else self.indptr,
            _sorted=self._sorted, _canonical=self._canonical)
