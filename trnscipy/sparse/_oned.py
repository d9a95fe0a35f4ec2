"""One-dimensional device sparse arrays: SciPy 1.17's 1-D ``coo_array`` and ``csr_array``.

A 1-D array of length n is stored as SciPy stores it: COO keeps ``coords == (col,)``
(``row`` reads as zeros), CSR keeps ``indices`` and a two-entry ``indptr``.  Each
operation runs the 2-D code on the (1, n) view of the same tensors and turns the
result back to 1-D, so the 2-D paths stay the only kernels.  1-D objects are
instances of ``coo_array`` / ``csr_array`` (through private subclasses that hold the
1-D methods); sparse matrices and the CSC, BSR and DIA formats have no 1-D form, as
in SciPy.

Differs from SciPy: ``type(a)`` is the private subclass (``isinstance(a, coo_array)``
holds); indexing with None, Ellipsis or nested lists raises IndexError; products with
dense operands of more than 2 dimensions raise ValueError (SciPy broadcasts); results
of more than 2 dimensions (``reshape``) are SciPy's host objects, with a
DeviceFallbackWarning; max/min/argmax/argmin of complex arrays raise ValueError (as the
2-D containers; SciPy orders lexicographically); ``a.multiply(B)`` with a 2-D sparse B
gives CSR (SciPy: COO when B has one row); ``count_nonzero(axis=0)`` of a 1-D COO
counts (SciPy 1.17.1 raises IndexError).  SciPy 1.17.1's ``tocsr`` (and so ``+``,
``*`` ...) of a 1-D COO with duplicate coordinates rewrites the COO's data in place;
trnscipy's does not.
"""

import numpy as np
import scipy.sparse as _sp

from trnscipy._errors import fallback
from trnscipy._kernels import _plan
from trnscipy._torch import torch
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _CLASSES1D, issparse
from trnscipy.sparse._coo import coo_array
from trnscipy.sparse._csr import csr_array

__all__ = ["as_1d"]


def as_1d(A):
    """The 1-D array (A's format) holding the (1, n) or (n, 1) sparse array ``A``."""
    return _CLASSES1D[A.format]._from_2d(A)


def _host_nd(name, compute):
    """SciPy's n-D (n > 2) result, computed on the host with a DeviceFallbackWarning."""
    fallback(name, "sparse arrays with more than 2 dimensions have no device form; the "
                   "result is SciPy's host object", stacklevel=4)
    return compute()


class _oned:
    """Methods of 1-D sparse arrays, on the (1, n) 2-D view of their tensors."""

    ndim = 1

    def _axis1d(self, axis):
        """None (a whole-array reduction) for axis None, 0 or -1, else SciPy's ValueError."""
        if isinstance(axis, tuple) and len(axis) == 1:
            axis = axis[0]
        if axis is None or (isinstance(axis, (int, np.integer)) and axis in (0, -1)):
            return None
        raise ValueError("axis out of range for ndim")

    def _inplace(self, method):
        """Run the 2-D in-place ``method`` on the view; take its new tensors."""
        view = self._2d()
        getattr(view, method)()
        self.__dict__.clear()
        self.__dict__.update(type(self)._from_2d(view).__dict__)

    def sum_duplicates(self):
        self._inplace("sum_duplicates")

    def eliminate_zeros(self):
        self._inplace("eliminate_zeros")

    # ---- conversions and shape --------------------------------------------------

    def tocsc(self, copy=False):
        raise ValueError("Cannot convert. CSC format must be 2D. Got 1D")

    def tobsr(self, blocksize=None, copy=False):
        raise ValueError("Cannot convert a 1d sparse array to bsr format")

    def todia(self, copy=False):
        raise ValueError("Cannot convert. DIA format must be 2D. Got 1D")

    def tolil(self, copy=False):
        raise ValueError("Cannot convert a 1d sparse array to lil format")

    def toarray(self, order=None, out=None):
        """A dense 1-D device tensor (``order`` is ignored; ``out`` is filled if given)."""
        dense = self._2d().toarray().reshape(-1)
        if out is not None:
            out.copy_(dense)
            return out
        return dense

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) not in ((0,), (-1,)):
            raise ValueError("axes don't match array")
        return self._with_data(self.data.clone() if copy else self.data, copy=copy)

    def reshape(self, *args, shape=None, order="C", copy=False):
        if shape is None:
            shape = args[0] if len(args) == 1 else args
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = self.shape[0]
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple(n // max(known, 1) if s == -1 else s for s in shape)
        if int(np.prod(shape)) != n:
            raise ValueError(f"cannot reshape array of size {n} into shape {shape}")
        if len(shape) > 2:
            return _host_nd(f"{self.format}_array.reshape",
                            lambda: self.to_scipy().reshape(shape, order=order))
        if len(shape) == 1:
            return self.copy() if copy else self
        return self._2d().tocoo(copy=False).reshape(shape, order=order, copy=copy)

    def resize(self, *shape):
        """Resize in place; a 2-D shape turns the array 2-D (row 0 holds it), as SciPy."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        shape = su.check_shape(shape, allow_1d=True)
        view = self._2d()
        view.resize(shape if len(shape) == 2 else (1, shape[0]))
        out = view if len(shape) == 2 else type(self)._from_2d(view)
        self.__dict__.clear()
        self.__dict__.update(out.__dict__)
        self.__class__ = type(out)

    def diagonal(self, k=0):
        raise ValueError("diagonal requires two dimensions")

    def setdiag(self, values, k=0):
        raise ValueError("setdiag requires two dimensions")

    # ---- reductions ------------------------------------------------------------------

    def sum(self, axis=None, dtype=None, out=None):
        return self._2d().sum(axis=self._axis1d(axis), dtype=dtype, out=out)

    def mean(self, axis=None, dtype=None, out=None):
        return self._2d().mean(axis=self._axis1d(axis), dtype=dtype, out=out)

    def count_nonzero(self, axis=None):
        self._axis1d(axis)
        return self._2d().count_nonzero()

    def nonzero(self):
        return (self._2d().nonzero()[1],)

    def max(self, axis=None, out=None, *, explicit=False):
        return self._2d().max(axis=self._axis1d(axis))

    def min(self, axis=None, out=None, *, explicit=False):
        return self._2d().min(axis=self._axis1d(axis))

    def nanmax(self, axis=None, out=None, *, explicit=False):
        return self._2d().nanmax(axis=self._axis1d(axis))

    def nanmin(self, axis=None, out=None, *, explicit=False):
        return self._2d().nanmin(axis=self._axis1d(axis))

    def argmax(self, axis=None, out=None, *, explicit=False):
        return self._2d().argmax(axis=self._axis1d(axis))

    def argmin(self, axis=None, out=None, *, explicit=False):
        return self._2d().argmin(axis=self._axis1d(axis))

    # ---- elementwise and products -------------------------------------------------

    def _binop_sparse(self, other, op):
        if other.shape != self.shape:
            raise ValueError(f"inconsistent shapes {self.shape} and {other.shape}")
        return as_1d(self._2d()._binop_sparse(other._2d(), op))

    def _compare(self, other, op):
        other = self._as_operand(other)
        if issparse(other):
            if other.shape != self.shape:
                raise ValueError("inconsistent shapes")
            other = other._2d()
        elif not su.is_scalar(other):  # a dense result
            return super()._compare(other, op)
        return as_1d(self._2d()._compare(other, op))

    def multiply(self, other):
        """Elementwise product; a 2-D operand broadcasts the array along its rows."""
        other = self._as_operand(other)
        if su.is_scalar(other):
            return self._mul_scalar(other)
        n = self.shape[0]
        if issparse(other):
            if other.ndim == 1:
                return self._binop_sparse(other, "multiply")
            if other.shape[1] != n:
                raise ValueError(f"inconsistent shapes {self.shape} and {other.shape}")
            m = other.shape[0]
            coo = self._coo_canonical()
            rows = torch.arange(m, device=self.device, dtype=coo.col.dtype)
            tiled = self._container("coo")._construct(
                (m, n), row=rows.repeat_interleave(coo.nnz), col=coo.col.repeat(m),
                data=coo.data.repeat(m), _canonical=True)
            return tiled._binop_sparse(other, "multiply")
        if other.ndim > 2:
            raise ValueError("inconsistent shapes")
        if len(su.broadcast_shape(other.shape, self.shape)) == 1:
            return as_1d(self._2d().multiply(other.reshape(1, -1)))
        return self._container("coo")._from_dense(self.toarray() * other, None, None, None)

    def _matmul(self, other):
        """self @ other: a scalar (0-d tensor) for a 1-D operand, else a 1-D result."""
        n = self.shape[0]
        if issparse(other):
            if other.shape[0] != n:
                raise ValueError(f"dimension mismatch: {self.shape} @ {other.shape}")
            if other.ndim == 1:
                prod = self.multiply(other)
                return prod.data.sum() if prod.nnz else torch.zeros(
                    (), dtype=prod.data.dtype, device=self.device)
            return as_1d((self._2d() @ other).tocoo(copy=False))
        if other.ndim == 0:
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        if other.ndim > 2 or other.shape[0] != n:
            raise ValueError(f"dimension mismatch: {self.shape} @ {tuple(other.shape)}")
        out = self._2d() @ other
        return out.reshape(()) if other.ndim == 1 else out.reshape(-1)

    def _rmatmul(self, other):
        """other @ self."""
        if other.ndim < 2:  # a dot product; 0-d: SciPy's ValueError
            return self._matmul(other)
        if other.ndim > 2 or other.shape[-1] != self.shape[0]:
            raise ValueError(f"dimension mismatch: {tuple(other.shape)} @ {self.shape}")
        if not issparse(other):
            return (self._2d() @ other.transpose(0, 1)).reshape(-1)
        if not other._is_array:
            raise ValueError("a sparse matrix times a 1-D sparse array has no sparse "
                             "matrix result (SciPy raises too)")
        return as_1d((other @ self._2d().transpose()).tocoo(copy=False))

    # ---- indexing -----------------------------------------------------------------

    def __getitem__(self, key):
        from trnscipy.sparse._index import getitem

        if isinstance(key, tuple):
            if len(key) != 1:
                raise IndexError(f"too many indices for a 1-D sparse array: {key}")
            (key,) = key
        view = self._2d()
        if isinstance(key, (int, np.integer)):
            return getitem(view, (0, key))
        return as_1d(getitem(view, (slice(None), key)))


class _coo_array_1d(_oned, coo_array):
    """A 1-D ``coo_array`` on a device: ``coords == (col,)``."""

    @classmethod
    def _from_2d(cls, A):
        coo = A.tocoo(copy=False)
        idx, n = (coo.col, A.shape[1]) if A.shape[0] == 1 else (coo.row, A.shape[0])
        return cls._construct((n,), col=idx, data=coo.data,
                              _canonical=coo.has_canonical_format)

    def _2d(self):
        return coo_array._construct((1, self.shape[0]), row=torch.zeros_like(self.col),
                                    col=self.col, data=self.data, _canonical=self._canonical)

    @classmethod
    def _from_scipy(cls, sp, device):
        return cls._construct(sp.shape, col=su.from_host(sp.coords[0], device),
                              data=su.from_host(sp.data, device),
                              _canonical=bool(sp.has_canonical_format))

    def to_scipy(self, copy=True):
        out = _sp.coo_array((self._host(self.data, copy), (self._host(self.col, copy),)),
                            shape=self.shape)
        out.has_canonical_format = self._canonical
        return out

    @property
    def coords(self):
        return (self.col,)

    @property
    def row(self):
        """Zeros, as SciPy's ``row`` of a 1-D array."""
        return torch.zeros_like(self.col)

    @row.setter
    def row(self, value):
        raise ValueError("cannot set row attribute of a 1-dimensional sparse array")

    def _with_data(self, data, copy=True):
        return self._construct(self.shape, col=self.col.clone() if copy else self.col,
                               data=data, _canonical=self._canonical)

    def tocsr(self, copy=False):
        return as_1d(self._2d().tocsr())


def _csr_parts(A):
    """The CSR tensors and flags of ``A``."""
    return {k: A.__dict__[k] for k in ("data", "indices", "indptr", "_sorted", "_canonical")}


def _same_csr(cls, shape, A):
    """A ``cls`` container of ``shape`` on ``A``'s CSR tensors (with its row index, if
    computed)."""
    out = cls._construct(shape, **_csr_parts(A))
    _plan.carry(A, out, "major")
    return out


class _csr_array_1d(_oned, csr_array):
    """A 1-D ``csr_array`` on a device: ``indptr == [0, nnz]``."""

    @classmethod
    def _from_2d(cls, A):
        if A.shape[0] != 1:
            A = A.tocoo(copy=False).transpose()
        A = A.tocsr(copy=False)
        return _same_csr(cls, (A.shape[1],), A)

    def _2d(self):
        return _same_csr(csr_array, (1, self.shape[0]), self)

    def sort_indices(self):
        self._inplace("sort_indices")

    def tocoo(self, copy=False):
        return as_1d(self._2d().tocoo(copy=copy))


_CLASSES1D["coo"] = _coo_array_1d
_CLASSES1D["csr"] = _csr_array_1d
