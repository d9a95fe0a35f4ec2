"""The base of trnscipy's device sparse containers: construction, kinds, operators.

A device container keeps its arrays (``data``, ``indices``, ``indptr``, ``row``,
``col``, ``offsets``) as torch tensors on one device and follows SciPy's
semantics.  Constructed from host data without ``device=``, a trnscipy class
returns SciPy's own object; ``isinstance`` accepts SciPy's objects too, so
``trnscipy.sparse`` can stand in for ``scipy.sparse`` in user code.

Layering (as SciPy's): ``_spbase`` (operators, reductions and other methods built
on a canonical COO view), ``_data_matrix`` (ops on ``.data``), ``_cs_matrix``
(CSR/CSC), format classes, and thin leaf classes ``*_array`` / ``*_matrix`` that
pick the array or matrix semantics through the ``sparray`` / ``spmatrix`` mixins.
"""

import abc
import functools

import numpy as np
import scipy.sparse as _sp
from array_api_compat import is_torch_array

from trnscipy._capabilities import capability, host_kinds, runs_on_device
from trnscipy._device import device_kind, resolve_device
from trnscipy._dispatch import find_device
from trnscipy._double_float import is_exact
from trnscipy._dtypes import divide, to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import _df, _plan, backend
from trnscipy._torch import torch
from trnscipy._transfer import (
    _tensor_to,
    _tensor_to_host,
    _to_device,
    df_parts,
    df_tensor,
    df_triple,
    stores_float32,
    tensor_on,
)
from trnscipy.sparse import _sputils as su

__all__ = ["sparray", "spmatrix", "issparse", "isspmatrix", "from_scipy"]

# (format, is_array) -> device class; filled by the format modules.
_CLASSES = {}
# format -> class of the 1-D sparse arrays of that format; filled by _oned.
_CLASSES1D = {}


def _register(cls, scipy_cls):
    _CLASSES[cls.format, issubclass(cls, sparray)] = cls
    cls._scipy_class = scipy_cls
    cls.register(scipy_cls)
    return cls


def from_scipy(sp, device):
    """The device container of ``sp``'s format and kind on ``device``, exact copy."""
    fmt = getattr(sp, "format", None)
    if fmt in ("dok", "lil"):
        raise TypeError(f"{fmt} sparse objects have no device form; convert first, "
                        "e.g. A.tocsr()")
    if len(sp.shape) == 1:
        cls = _CLASSES1D[fmt]
    elif len(sp.shape) == 2:
        cls = _CLASSES[fmt, isinstance(sp, _sp.sparray)]
    else:
        raise TypeError(f"trnscipy device sparse containers are 1-D or 2-D, not "
                        f"{sp.ndim}-D")
    device = resolve_device(device)
    out = cls._from_scipy(sp, device)
    backend(device).prepare_product(out, sp)
    return out


def _dtypes_of(self, args):
    """The dtypes a method of ``self`` computes in: its own, its device operands', and
    dtypes passed as arguments (``astype(np.float64)``)."""
    yield self.dtype
    for a in args:
        if is_torch_array(a) or getattr(a, "_trnscipy_device_object", False):
            yield to_numpy_dtype(a.dtype)
        elif isinstance(a, np.dtype) or (isinstance(a, type) and issubclass(
                a, (np.generic, bool, int, float, complex))):
            yield np.dtype(a)


def _cpu(x):
    """A CPU copy of a device operand, through the host transfer (torch-xla 2.9's
    ``.cpu()`` drops the imaginary part of complex128)."""
    if is_torch_array(x):
        return torch.from_numpy(np.array(_tensor_to_host(x)))
    if getattr(x, "_trnscipy_device_object", False):
        return from_scipy(x.to_scipy(), "cpu")
    return x


def _computes(op, exact=None):
    """Decorator for a method that computes on stored values (docs/design.md: data
    movement is not arithmetic).  Where the capability table refuses one of its dtypes
    on this device (float64 on Neuron), the method runs on CPU copies of its operands,
    after the table's DeviceFallbackWarning, and the result moves back; unless
    ``exact(self, *args)`` says the method works on the exact float32 parts there."""
    name = f"trnscipy.sparse.{op}"

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            kind = device_kind(self.device)
            cap = capability(kind)
            if exact is not None and exact(self, *args, **kwargs):
                return method(self, *args, **kwargs)
            if (cap.float64 and cap.complex and kind not in host_kinds(name)) or all(
                    runs_on_device(name, kind, dt)
                    for dt in _dtypes_of(self, (*args, *kwargs.values()))):
                return method(self, *args, **kwargs)
            out = kwargs.pop("out", None)
            res = method(_cpu(self), *map(_cpu, args),
                         **{k: _cpu(v) for k, v in kwargs.items()})
            res = _to_device(res, self.device, strict=False)
            if out is not None:
                out.copy_(res)
                return out
            return res

        return wrapper

    return decorate


def issparse(x):
    """True for SciPy sparse objects and trnscipy device sparse objects."""
    return isinstance(x, _spbase) or _sp.issparse(x)


def isspmatrix(x):
    """True for sparse matrices (not sparse arrays), host or device."""
    return isinstance(x, spmatrix)


def _isspmatrix_format(fmt):
    def check(x):
        return isinstance(x, spmatrix) and getattr(x, "format", None) == fmt

    check.__name__ = f"isspmatrix_{fmt}"
    check.__doc__ = (f"True for {fmt}_matrix objects, host or device "
                     f"(False for {fmt}_array, as SciPy).")
    return check


isspmatrix_csr = _isspmatrix_format("csr")
isspmatrix_csc = _isspmatrix_format("csc")
isspmatrix_coo = _isspmatrix_format("coo")
isspmatrix_bsr = _isspmatrix_format("bsr")
isspmatrix_dia = _isspmatrix_format("dia")
isspmatrix_dok = _isspmatrix_format("dok")
isspmatrix_lil = _isspmatrix_format("lil")


class _spbase(metaclass=abc.ABCMeta):  # noqa: B024
    """Operators and format-independent methods of the device containers."""

    _trnscipy_device_object = True
    __array_priority__ = 10.1
    ndim = 2
    format = None
    _scipy_class = None

    def __new__(cls, arg1=None, shape=None, dtype=None, copy=False, *, device=None,
                **kwargs):
        if device is None and find_device((arg1,)) is None:
            if cls._scipy_class is None:
                raise TypeError(f"{cls.__name__} cannot be instantiated directly")
            return cls._scipy_class(arg1, shape=shape, dtype=dtype, copy=copy, **kwargs)
        return super().__new__(cls)

    def __init__(self, arg1=None, shape=None, dtype=None, copy=False, *, device=None,
                 maxprint=None, blocksize=None):
        data_device = find_device((arg1,))
        device = resolve_device(device) if device is not None else data_device
        if data_device is None:
            # host data built on ``device``: SciPy builds it, then it moves
            kwargs = {"blocksize": blocksize} if blocksize is not None else {}
            arg1 = from_scipy(self._scipy_class(arg1, shape=shape, dtype=dtype, copy=copy,
                                                **kwargs), device)
            dtype, copy, shape = None, False, None
        if getattr(arg1, "_trnscipy_device_object", False):
            other = arg1.to(device)
            if other.format != self.format:
                other = other.asformat(self.format, **(
                    {"blocksize": blocksize} if self.format == "bsr" and blocksize else {}))
            elif copy:
                other = other.copy()
            if dtype is not None:
                other = other.astype(dtype, copy=False)
            if shape is not None and su.check_shape(shape, allow_1d=True) != other.shape:
                raise ValueError(f"shape {shape} does not match the input's {other.shape}")
            self.__dict__.update(other.__dict__)
        elif is_torch_array(arg1):
            self.__dict__.update(self._from_dense(tensor_on(arg1, device), shape, dtype,
                                                  blocksize).__dict__)
        elif isinstance(arg1, tuple):
            self._init_tuple(arg1, shape, dtype, copy, device, blocksize)
        else:
            raise TypeError(f"unrecognized {type(self).__name__} constructor input: "
                            f"{type(arg1).__name__}")
        if len(self._shape) == 1:  # a 1-D sparse array (see _oned)
            if not self._is_array:
                raise ValueError(f"shape must have length in (2,). Got {self._shape}")
            self.__class__ = _CLASSES1D[self.format]

    # ---- construction helpers -------------------------------------------------

    @classmethod
    def _construct(cls, shape, **parts):
        """A container from trusted parts (no checks)."""
        obj = object.__new__(cls)
        obj._shape = tuple(int(s) for s in shape)
        obj.__dict__.update(parts)
        return obj

    def _container(self, fmt):
        return _CLASSES[fmt, self._is_array]

    @classmethod
    def _from_dense(cls, t, shape, dtype, blocksize):
        one_d = t.ndim == 1 and cls._is_array
        if one_d and cls.format not in _CLASSES1D:
            raise ValueError(f"{cls.format.upper()} arrays don't support 1D input. Use 2D")
        if t.ndim not in (1, 2):
            raise ValueError(f"trnscipy device sparse containers are 2-D; got a {t.ndim}-D "
                             "tensor")
        np_dtype = su.check_dtype(dtype if dtype is not None else t.dtype)
        # double-float data (float64 held as parts): a value is zero iff its high part is
        exact = t.dtype == torch.float64 and is_exact(t) and np_dtype == np.float64
        if not exact and not all(runs_on_device("trnscipy.sparse.from_dense",
                                                device_kind(t.device), dt)
                                 for dt in (to_numpy_dtype(t.dtype), np_dtype)):
            # finding the nonzeros compares values (and a dtype change rounds them):
            # SciPy does it on a host copy where the device cannot compute in the dtype
            kwargs = {"blocksize": blocksize} if blocksize is not None else {}
            return from_scipy(cls._scipy_class(_tensor_to_host(t), dtype=np_dtype, **kwargs),
                              t.device)
        if t.ndim == 1:
            t = t.reshape(1, -1)
        t = t.to(to_torch_dtype(np_dtype))
        m, n = t.shape
        if t.is_conj():
            t = t.resolve_conj()
        flat = t.reshape(-1)
        keys = torch.arange(m * n, device=t.device, dtype=torch.int64)
        # the zero test on the high parts, the gather of every stored part (exact)
        nonzero = df_parts(flat)[0] != 0 if exact else flat != 0
        keys, data = su.compact(nonzero, keys, flat)
        idx = su.index_dtype(max(m, n, data.shape[0]))
        coo_cls = _CLASSES["coo", cls._is_array]
        row, col = su.divmod_index(keys, max(n, 1))
        coo = coo_cls._construct((m, n), row=row.to(idx), col=col.to(idx), data=data.clone(),
                                 _canonical=True)
        if one_d:
            return _CLASSES1D[cls.format]._from_2d(coo)
        if cls.format == "bsr":
            return coo.tobsr(blocksize=blocksize)
        return coo.asformat(cls.format)

    # ---- kind and identity ------------------------------------------------------

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return to_numpy_dtype(self.data.dtype)

    @property
    def device(self):
        return self.data.device

    @property
    def size(self):
        return self.nnz

    def get_shape(self):
        return self._shape

    def getformat(self):
        return self.format

    def __len__(self):
        raise TypeError("sparse array length is ambiguous; use getnnz() or shape[0]")

    def __bool__(self):
        if self.shape == (1, 1):
            return bool(self.toarray().reshape(()))
        raise ValueError("The truth value of an array with more than one element is "
                         "ambiguous. Use a.any() or a.all().")

    def __repr__(self):
        kind = "sparse array" if self._is_array else "sparse matrix"
        return (f"<{self.format.upper()} {kind} of dtype '{self.dtype}'\n"
                f"\twith {self.nnz} stored elements and shape {self.shape} on {self.device}>")

    def to(self, device):
        """This container on ``device`` (self if already there)."""
        device = resolve_device(device)
        if device == self.device:
            return self
        moved = {k: (_tensor_to(v, device) if is_torch_array(v) else v)
                 for k, v in _plan.without_plan(self.__dict__.items())}
        obj = object.__new__(type(self))
        obj.__dict__.update(moved)
        return obj

    def to_scipy(self, copy=True):
        """SciPy's object of the same format and kind (same index dtype, values, flags);
        ``copy=False`` shares a CPU container's memory (for read-only use)."""
        raise NotImplementedError

    def _host(self, t, copy=True):
        """A host copy of ``t`` (SciPy may change it in place); with ``copy=False`` a CPU
        tensor's memory is shared."""
        return _tensor_to_host(t, copy=copy)

    # ---- conversions --------------------------------------------------------------

    def asformat(self, format, copy=False, **kwargs):
        if format is None or format == self.format:
            return self.copy() if copy else self
        if format in ("dok", "lil"):
            raise TypeError(f"{format} sparse objects have no device form")
        return getattr(self, "to" + format)(copy=copy, **kwargs)

    def tocsr(self, copy=False):
        return self.tocoo(copy=False).tocsr(copy=copy)

    def tocsc(self, copy=False):
        return self.tocoo(copy=False).tocsc(copy=copy)

    def tobsr(self, blocksize=None, copy=False):
        return self.tocsr(copy=False).tobsr(blocksize=blocksize, copy=copy)

    def todia(self, copy=False):
        return self.tocoo(copy=False).todia(copy=copy)

    def todok(self, copy=False):
        raise TypeError("dok has no device form; use to_scipy().todok()")

    def tolil(self, copy=False):
        raise TypeError("lil has no device form; use to_scipy().tolil()")

    def toarray(self, order=None, out=None):
        """A dense device tensor (``order`` is ignored; ``out`` is filled if given)."""
        coo = self.tocoo(copy=False)
        m, n = self.shape
        pos = coo.row.to(torch.int64) * n + coo.col
        if coo.has_canonical_format:  # no duplicates: a scatter, no arithmetic
            flat = torch.zeros(m * n, dtype=coo.data.dtype, device=coo.data.device)
            flat = flat.index_put((pos,), coo.data)
        else:
            flat = su.segment_sum(coo.data, pos, m * n)
        dense = flat.reshape(m, n)
        if out is not None:
            out.copy_(dense)
            return out
        return dense

    def todense(self, order=None, out=None):
        """A dense device tensor (SciPy gives np.matrix for sparse matrices)."""
        return self.toarray(order=order, out=out)

    def _coo_canonical(self):
        coo = self.tocoo(copy=False)
        if not coo.has_canonical_format:
            coo = coo.copy()
            coo.sum_duplicates()
        return coo

    # ---- shape ----------------------------------------------------------------------

    def transpose(self, axes=None, copy=False):
        if axes is not None and tuple(axes) != (1, 0):
            raise ValueError("Sparse arrays/matrices do not support an 'axes' parameter "
                             "because swapping dimensions is the only logical permutation.")
        return self.tocoo(copy=False).transpose(copy=copy).asformat(self.format)

    @property
    def T(self):
        return self.transpose()

    @property
    def H(self):
        """Conjugate transpose (SciPy has ``getH()`` on matrices only)."""
        return self.conj().transpose()

    def getH(self):
        return self.H

    def adjoint(self):
        return self.H

    def conjugate(self, copy=True):
        if self.dtype.kind == "c":
            return self._conjugated()
        return self.copy() if copy else self

    @_computes("conj")
    def _conjugated(self):
        return self._with_data(self.data.conj().resolve_conj(), copy=False)

    def conj(self, copy=True):
        return self.conjugate(copy=copy)

    def reshape(self, *args, shape=None, order="C", copy=False):
        if shape is None:
            shape = args[0] if len(args) == 1 else args
        shape = tuple(int(s) for s in (shape if not isinstance(shape, int) else (shape,)))
        m, n = self.shape
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple((m * n) // max(known, 1) if s == -1 else s for s in shape)
        if len(shape) == 1 and self._is_array:  # a 1-D sparse array
            if shape[0] != m * n:
                raise ValueError(f"cannot reshape array of size {m * n} into shape {shape}")
            return _CLASSES1D["coo"]._from_2d(self.reshape((1, m * n), order=order))
        shape = su.check_shape(shape)
        if shape[0] * shape[1] != m * n:
            raise ValueError(f"cannot reshape array of size {m * n} into shape {shape}")
        if order not in ("C", "F"):
            raise ValueError("'order' must be 'C' or 'F'")
        if shape == self.shape:
            return self.copy() if copy else self
        coo = self.tocoo(copy=False)
        r, c = coo.row.to(torch.int64), coo.col.to(torch.int64)
        if order == "C":
            flat = r * n + c
            nr, nc = flat // shape[1], flat % shape[1]
        else:
            flat = c * m + r
            nc, nr = flat // shape[0], flat % shape[0]
        idx = su.index_dtype(max(shape))
        return self._container("coo")._construct(shape, row=nr.to(idx), col=nc.to(idx),
                                                 data=coo.data.clone(), _canonical=False)

    def resize(self, *shape):
        """Resize in place (entries outside the new shape are dropped)."""
        shape = su.check_shape(shape[0] if len(shape) == 1 else shape)
        coo = self.tocoo(copy=False)
        keep = (coo.row < shape[0]) & (coo.col < shape[1])
        row, col, data = su.compact(keep, coo.row, coo.col, coo.data)
        out = self._container("coo")._construct(shape, row=row, col=col, data=data,
                                                _canonical=coo.has_canonical_format)
        self.__dict__.clear()
        self.__dict__.update(out.asformat(self.format).__dict__)

    # ---- reductions ----------------------------------------------------------------

    def _axis(self, axis):
        if axis is None:
            return None
        if isinstance(axis, tuple):
            if sorted(a % 2 for a in axis) == [0, 1]:
                return None
            if len(axis) != 1:
                raise ValueError("invalid axis")
            axis = axis[0]
        if not isinstance(axis, (int, np.integer)) or not -2 <= axis < 2:
            raise ValueError("axis out of range")
        return int(axis) % 2

    def _reduced(self, vec, axis):
        """A 1-D reduction result in SciPy's shape (matrices: 2-D)."""
        if self._is_array:
            return vec
        return vec.reshape(1, -1) if axis == 0 else vec.reshape(-1, 1)

    @_computes("sum")
    def sum(self, axis=None, dtype=None, out=None):
        axis = self._axis(axis)
        acc = su.sum_dtype(self.dtype) if dtype is None else np.dtype(dtype)
        coo = self.tocoo(copy=False)
        data = coo.data.to(to_torch_dtype(acc))
        if axis is None:
            res = data.sum() if data.dtype != torch.bool else data.to(torch.int64).sum()
            res = res.to(to_torch_dtype(acc))
        else:
            idx, n = (coo.col, self.shape[1]) if axis == 0 else (coo.row, self.shape[0])
            res = su.segment_sum(data, idx.to(torch.int64), n)
            res = self._reduced(res, axis)
        if out is not None:
            out.copy_(res)
            return out
        return res

    @_computes("mean")
    def mean(self, axis=None, dtype=None, out=None):
        axis = self._axis(axis)
        res_dtype = np.dtype(np.float64) if self.dtype.kind in "biu" else self.dtype
        if dtype is not None:
            res_dtype = np.dtype(dtype)
        total = self.astype(res_dtype, copy=False).sum(axis=axis, dtype=res_dtype)
        count = self.shape[0] * self.shape[1] if axis is None else self.shape[axis]
        res = divide(total, count)
        if out is not None:
            out.copy_(res)
            return out
        return res

    def diagonal(self, k=0):
        m, n = self.shape
        if k <= -m or k >= n:
            return torch.zeros(0, dtype=self.data.dtype, device=self.device)
        length = min(m + min(k, 0), n - max(k, 0))
        coo = self.tocoo(copy=False)
        on = (coo.col.to(torch.int64) - coo.row.to(torch.int64)) == k
        pos = torch.where(on, coo.row.to(torch.int64) - min(k, 0), length)
        out = su.segment_sum(coo.data, pos, length + 1)
        return out[:length]

    def trace(self, offset=0):
        return self.diagonal(k=offset).sum()

    @_computes("count_nonzero")
    def count_nonzero(self, axis=None):
        coo = self._coo_canonical()
        nz = coo.data != 0
        axis = self._axis(axis)
        if axis is None:
            return int(nz.sum())
        idx, n = (coo.col, self.shape[1]) if axis == 0 else (coo.row, self.shape[0])
        return su.segment_sum(nz.to(torch.int64), idx.to(torch.int64), n)

    def _getnnz(self, axis=None):
        if axis is None:
            return self.nnz
        axis = self._axis(axis)
        coo = self.tocoo(copy=False)
        idx, n = (coo.col, self.shape[1]) if axis == 0 else (coo.row, self.shape[0])
        ones = torch.ones(coo.data.shape[0], dtype=torch.int64, device=self.device)
        return su.segment_sum(ones, idx.to(torch.int64), n)

    @_computes("nonzero")
    def nonzero(self):
        coo = self.tocoo(copy=False)
        row, col = su.compact(coo.data != 0, coo.row, coo.col)
        if self.format == "csc":  # SciPy sorts CSC's by row
            order = su.argsort(row, stable=True)
            row, col = row[order], col[order]
        return row, col

    @_computes("min_or_max")
    def _min_or_max(self, axis, reduce, name, nan=False):
        """max/min (``nan``: nanmax/nanmin, NaNs skipped) with implicit zeros included."""
        if self.dtype.kind == "c":
            raise ValueError(f"{name} is not supported for complex dtypes")
        m, n = self.shape
        axis = self._axis(axis)
        if nan:
            reduce = torch.fmax if name == "max" else torch.fmin
        if axis is None:
            if m * n == 0:
                raise ValueError("zero-size array to reduction operation "
                                 f"{name} which has no identity")
            coo = self._coo_canonical()
            zero = torch.zeros((), dtype=coo.data.dtype, device=self.device)
            if coo.nnz == 0:
                return zero
            data, all_nan = self._skip_nan(coo.data, name, nan)
            val = getattr(data, name)()
            if all_nan is not None:
                val = torch.where(all_nan.all(), coo.data[0], val)
            if coo.nnz < m * n:
                val = reduce(val, zero)
            return val
        if self.shape[axis] == 0:
            raise ValueError("zero-size array to reduction operation")
        coo = self._coo_canonical()
        idx, count = (coo.col, n) if axis == 0 else (coo.row, m)
        idx = idx.to(torch.int64)
        full = self.shape[axis]
        zeros = torch.zeros(count, dtype=coo.data.dtype, device=self.device)
        data, is_nan = self._skip_nan(coo.data, name, nan)
        red = zeros.scatter_reduce(0, idx, data, "a" + name, include_self=False)
        stored = su.segment_sum(torch.ones_like(idx), idx, count)
        if is_nan is not None:  # lines whose stored values are all NaN
            nans = su.segment_sum(is_nan.to(torch.int64), idx, count)
            red = torch.where((nans == stored) & (stored > 0), torch.nan, red)
        red = torch.where(stored < full, reduce(red, zeros), red)
        if self._is_array:  # a 1-D coo_array
            return self._container("coo")._from_dense(red, None, None, None)
        return self._container("coo")._from_dense(red.reshape(1, -1) if axis == 0
                                                  else red.reshape(-1, 1), None, None, None)

    @staticmethod
    def _skip_nan(data, name, nan):
        """(data with NaNs replaced by the reduction's identity, NaN mask) for nanmax/nanmin;
        (data, None) otherwise."""
        if not nan or not data.is_floating_point():
            return data, None
        is_nan = torch.isnan(data)
        fill = -torch.inf if name == "max" else torch.inf
        return torch.where(is_nan, fill, data), is_nan

    def max(self, axis=None, out=None, *, explicit=False):
        return self._min_or_max(axis, torch.maximum, "max")

    def min(self, axis=None, out=None, *, explicit=False):
        return self._min_or_max(axis, torch.minimum, "min")

    def nanmax(self, axis=None, out=None, *, explicit=False):
        return self._min_or_max(axis, torch.maximum, "max", nan=True)

    def nanmin(self, axis=None, out=None, *, explicit=False):
        return self._min_or_max(axis, torch.minimum, "min", nan=True)

    @_computes("argmin_or_argmax")
    def _arg_min_or_max(self, axis, name):
        if self.dtype.kind == "c":
            raise ValueError(f"{name} is not supported for complex dtypes")
        if axis is not None:
            return self._arg_axis(self._axis(axis), name)
        m, n = self.shape
        if m * n == 0:
            raise ValueError(f"cannot {name[3:]} an empty sparse array")
        coo = self._coo_canonical()
        keys = coo.row.to(torch.int64) * n + coo.col.to(torch.int64)
        nnz = coo.nnz
        if nnz == 0:
            return 0
        best = getattr(coo.data, name[3:])()
        hit = coo.data == best
        big = torch.full_like(keys, m * n)
        first_hit = torch.where(hit, keys, big).min()
        gaps = keys != torch.arange(nnz, device=keys.device, dtype=torch.int64)
        first_zero = torch.where(gaps.any(), gaps.to(torch.int8).argmax(),
                                 torch.tensor(nnz, device=keys.device))
        zero_wins = (best > 0) if name == "argmin" else (best < 0)
        zero_ties = best == 0
        if nnz < m * n:
            cand = torch.where(zero_wins, first_zero,
                               torch.where(zero_ties, torch.minimum(first_zero, first_hit),
                                           first_hit))
        else:
            cand = first_hit
        return int(cand)

    def _arg_axis(self, axis, name):
        """Per-column (axis 0) or per-row (axis 1) arg-extremum, implicit zeros included;
        ties go to the first position, as NumPy."""
        if self.shape[axis] == 0:
            raise ValueError("Cannot apply the operation along a zero-sized dimension.")
        coo = self._coo_canonical()
        if axis == 0:  # work on the transpose: one "line" per column
            coo = coo.transpose().tocsr().tocoo()
        line, pos = coo.row.to(torch.int64), coo.col.to(torch.int64)
        n_lines, length = self.shape[1 - axis], self.shape[axis]
        data = coo.data if name == "argmax" else -coo.data
        zeros = torch.zeros(n_lines, dtype=data.dtype, device=self.device)
        best = zeros.scatter_reduce(0, line, data, "amax", include_self=False)
        stored = su.segment_sum(torch.ones_like(line), line, n_lines)
        implicit = stored < length
        best = torch.where(implicit, torch.maximum(best, zeros), best)
        full = torch.full((n_lines,), length, dtype=torch.int64, device=self.device)
        hit = torch.where(data == best[line], pos, length)
        first_hit = full.scatter_reduce(0, line, hit, "amin", include_self=True)
        start = torch.cumsum(stored, 0) - stored  # entries are sorted by line, then pos
        rank = torch.arange(line.shape[0], device=self.device) - start[line]
        missing = torch.where(pos != rank, rank, length)
        first_missing = stored.scatter_reduce(0, line, missing, "amin", include_self=True)
        zero_best = implicit & (best == 0)
        res = torch.where(zero_best, torch.minimum(first_hit, first_missing), first_hit)
        return self._reduced(res, axis)

    def argmax(self, axis=None, out=None, *, explicit=False):
        return self._arg_min_or_max(axis, "argmax")

    def argmin(self, axis=None, out=None, *, explicit=False):
        return self._arg_min_or_max(axis, "argmin")

    # ---- elementwise with other operands ------------------------------------------

    def _as_operand(self, other):
        """Move a host operand (ndarray, SciPy sparse, list) to this device."""
        if isinstance(other, torch.Tensor):
            if other.device != self.device:
                raise ValueError(f"operands are on two devices, {self.device} and "
                                 f"{other.device}")
            return other
        if getattr(other, "_trnscipy_device_object", False):
            if other.device != self.device:
                raise ValueError(f"operands are on two devices, {self.device} and "
                                 f"{other.device}")
            return other
        if _sp.issparse(other):
            return from_scipy(other, self.device)
        if su.is_scalar(other):
            return other
        return su.as_tensor(np.asarray(other), self.device)

    @_computes("elementwise")
    def _binop_sparse(self, other, op):
        """Elementwise union/intersection op of two sparse operands, zeros dropped."""
        if other.shape != self.shape:
            raise ValueError(f"inconsistent shapes {self.shape} and {other.shape}")
        dt = su.result_dtype(np.add, self.dtype, other.dtype)
        a = self._coo_canonical().astype(dt, copy=False)
        b = other._coo_canonical().astype(dt, copy=False)
        m, n = self.shape
        row = torch.cat([a.row.to(torch.int64), b.row.to(torch.int64)])
        col = torch.cat([a.col.to(torch.int64), b.col.to(torch.int64)])
        if op in ("add", "sub"):
            data = torch.cat([a.data, b.data if op == "add" else -b.data])
            row, col, data = su.coalesce(row, col, data, n)
        else:
            nnz_a = a.nnz
            data = torch.cat([a.data, b.data])
            from_a = torch.arange(row.shape[0], device=self.device) < nnz_a
            key = row * n + col
            key, order = su.sort(key, stable=True)
            data, from_a = data[order], from_a[order]
            nxt = torch.zeros_like(key, dtype=torch.bool)
            nxt[:-1] = key[1:] == key[:-1]
            prv = torch.zeros_like(nxt)
            prv[1:] = nxt[:-1]
            shifted = torch.roll(data, -1)
            if op == "multiply":
                data = data * shifted
                keep = nxt
            else:
                red = torch.maximum if op == "maximum" else torch.minimum
                zero = torch.zeros_like(data)
                paired = red(data, shifted)
                data = torch.where(nxt, paired, red(data, zero))
                keep = ~prv
            key, data = su.compact(keep, key, data)
            row, col = su.divmod_index(key, n)
        row, col, data = su.compact(data != 0, row, col, data)
        idx = su.index_dtype(max(m, n, data.shape[0]))
        coo = self._container("coo")._construct((m, n), row=row.to(idx), col=col.to(idx),
                                                data=data, _canonical=True)
        if op in ("maximum", "minimum") and self.format not in ("csr", "csc"):
            return coo.tocsr()
        return coo.asformat(self._binop_format(other))

    def _binop_format(self, other):
        return self.format if self.format in ("csr", "csc", "bsr", "dia") else "csr"

    @_computes("scale")
    def _mul_scalar(self, other):
        dt = su.result_dtype(np.multiply, self.dtype, scalars=[other])
        return self._with_data(self.data.to(to_torch_dtype(dt)) * other, copy=False)

    @_computes("multiply")
    def multiply(self, other):
        """Elementwise product (dense operands give a COO result, as SciPy)."""
        other = self._as_operand(other)
        if su.is_scalar(other):
            return self._mul_scalar(other)
        if issparse(other):
            if other.ndim == 1:  # the 1-D sparse array broadcasts along the rows
                return other.multiply(self).asformat(self._binop_format(self))
            if other.shape != self.shape:
                raise ValueError(f"inconsistent shapes {self.shape} and {other.shape}")
            return self._binop_sparse(other, "multiply")
        dense = other
        if dense.ndim > 2:
            raise ValueError("inconsistent shapes")
        try:
            full = torch.broadcast_to(dense, self.shape) if dense.ndim else dense
        except RuntimeError:
            raise ValueError(f"inconsistent shapes {self.shape} and {tuple(dense.shape)}")\
                from None
        if su.broadcast_shape(dense.shape, self.shape) != self.shape:
            return self.toarray() * dense
        dt = su.result_dtype(np.multiply, self.dtype, to_numpy_dtype(dense.dtype))
        coo = self._coo_canonical().astype(dt, copy=False)
        vals = coo.data * full[coo.row.to(torch.int64), coo.col.to(torch.int64)].to(
            coo.data.dtype)
        out = self._container("coo")._construct(self.shape, row=coo.row.clone(),
                                                col=coo.col.clone(), data=vals, _canonical=True)
        return out.todia() if self.format == "dia" else out

    def maximum(self, other):
        return self._max_min(other, "maximum")

    def minimum(self, other):
        return self._max_min(other, "minimum")

    @_computes("maximum_or_minimum")
    def _max_min(self, other, op):
        other = self._as_operand(other)
        if issparse(other):
            return self._binop_sparse(other, op)
        if su.is_scalar(other):
            red = torch.maximum if op == "maximum" else torch.minimum
            if (other > 0 if op == "maximum" else other < 0):
                dense = red(self.toarray(), torch.as_tensor(other, device=self.device))
                return type(self)._from_dense(dense, None, None, None)
            dt = su.result_dtype(getattr(np, op), self.dtype, scalars=[other])
            coo = self._coo_canonical().astype(dt, copy=False)
            data = red(coo.data, torch.as_tensor(other, dtype=coo.data.dtype,
                                                 device=self.device))
            out = coo._with_data(data, copy=False)
            out.eliminate_zeros()
            return out.asformat(self.format if self.format in ("csr", "csc") else "csr")
        red = torch.maximum if op == "maximum" else torch.minimum
        return red(self.toarray(), other)

    def _add(self, other, negate_self=False, negate_other=False):
        other = self._as_operand(other)
        if self._double_float_pair(other):
            return self._add_double_float(other, negate_self, negate_other)
        return self._add_computing(other, negate_self, negate_other)

    def _double_float_pair(self, other):
        """True for two real sparse operands whose sum is float64 on a device without
        float64 (held as exact parts there)."""
        return (issparse(other) and getattr(other, "_trnscipy_device_object", False)
                and self.ndim == 2
                and stores_float32(self.device) and other.shape == self.shape
                and self.dtype.kind in "biuf" and other.dtype.kind in "biuf"
                and su.result_dtype(np.add, self.dtype, other.dtype) == np.float64)

    def _add_double_float(self, other, negate_self, negate_other):
        """The sparse sum on a device without float64: canonical operands hold a position
        at most once each, so a sorted position holds one value or two, added in
        triple-float arithmetic (_df.add3, float32 ops only); zeros (float32 high parts
        zero) dropped, as SciPy drops them."""
        m, n = self.shape
        a, b = self._coo_canonical(), other._coo_canonical()
        row = torch.cat([a.row.to(torch.int64), b.row.to(torch.int64)])
        col = torch.cat([a.col.to(torch.int64), b.col.to(torch.int64)])
        parts = []
        for x, negate in ((a.data, negate_self), (b.data, negate_other)):
            triple = df_triple(tensor_on(x, self.device, torch.float64))
            parts.append([-p if negate else p for p in triple])
        parts = [torch.cat(pair) for pair in zip(*parts, strict=True)]
        key, order = su.sort(row * n + col, stable=True)
        parts = [p[order] for p in parts]
        last = torch.zeros(min(1, key.shape[0]), dtype=torch.bool, device=key.device)
        pairs = torch.cat([key[1:] == key[:-1], last])  # i and i + 1 at one position
        second = torch.cat([last, pairs[:-1]])
        summed = _df.add3(parts, [torch.cat([p[1:], p[:1]]) for p in parts])  # i + 1's
        parts = [torch.where(pairs, s, p) for s, p in zip(summed, parts, strict=True)]
        keep = ~second & (parts[0] != 0)
        key, *parts = su.compact(keep, key, *parts)
        row, col = su.divmod_index(key, n)
        idx = su.index_dtype(max(m, n, key.shape[0]))
        coo = self._container("coo")._construct((m, n), row=row.to(idx), col=col.to(idx),
                                                data=df_tensor(*parts), _canonical=True)
        return coo.asformat(self._binop_format(other))

    @_computes("add")
    def _add_computing(self, other, negate_self=False, negate_other=False):
        base = -self if negate_self else self
        if su.is_scalar(other):
            if other == 0:
                return base.copy()
            raise NotImplementedError("adding a nonzero scalar to a sparse array is not "
                                      "supported")
        if issparse(other):
            return base._binop_sparse(other, "sub" if negate_other else "add")
        if su.broadcast_shape(other.shape, self.shape) != self.shape:
            raise ValueError(f"inconsistent shapes {self.shape} and {tuple(other.shape)}")
        dt = su.result_dtype(np.add, self.dtype, to_numpy_dtype(other.dtype))
        dense = base.toarray().to(to_torch_dtype(dt))
        return dense - other if negate_other else dense + other

    def __add__(self, other):
        return self._add(other)

    def __radd__(self, other):
        return self._add(other)

    def __sub__(self, other):
        return self._add(other, negate_other=True)

    def __rsub__(self, other):
        return self._add(other, negate_self=True)

    @_computes("neg")
    def __neg__(self):
        if self.dtype == np.bool_:
            raise NotImplementedError("negating a boolean sparse array is not supported")
        return self._with_data(-self.data, copy=False)

    @_computes("truediv")
    def __truediv__(self, other):
        other = self._as_operand(other)
        if su.is_scalar(other):
            if np.can_cast(self.dtype, np.float64):
                return self.astype(np.float64, copy=False)._mul_scalar(1 / other)
            r = self._mul_scalar(1 / other)
            if self.dtype.kind in "iu" and np.asarray(other).dtype.kind in "iu":
                return r.astype(self.dtype, copy=False)
            return r
        if issparse(other):
            return divide(self.toarray(), other.toarray())
        return divide(self.toarray(), other)

    @_computes("truediv")
    def __rtruediv__(self, other):
        return divide(other, self.toarray())

    def __mul__(self, other):
        if self._is_array:
            return self.multiply(other)
        other = self._as_operand(other)
        if su.is_scalar(other):
            return self._mul_scalar(other)
        if not isinstance(other, torch.Tensor) and other.ndim == 1:  # 1-D sparse array
            return other._rmatmul(self)
        return self._matmul(other)

    def __rmul__(self, other):
        if self._is_array or su.is_scalar(other):
            return self.__mul__(other)
        return self._rmatmul(self._as_operand(other))

    def __matmul__(self, other):
        if isinstance(other, torch.Tensor):  # the hot path: devices checked by the plan
            return self._matmul(other)
        if su.is_scalar(other):
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        other = self._as_operand(other)
        if not isinstance(other, torch.Tensor) and other.ndim == 1:  # 1-D sparse array
            return other._rmatmul(self)
        return self._matmul(other)

    def __rmatmul__(self, other):
        if su.is_scalar(other):
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        return self._rmatmul(self._as_operand(other))

    def dot(self, other):
        if su.is_scalar(other):
            return self * other
        return self @ other

    def _on_host(self, op, dtype):
        """True (after the capability table's warning) when ``op`` in ``dtype`` cannot
        run on this device, e.g. float64 on Trainium."""
        return not runs_on_device(f"trnscipy.sparse.{op}", device_kind(self.device), dtype)

    def _matmul(self, other):
        """self @ other through the device's backend: the format's product
        (``_product_kernel``), or spgemm."""
        m, n = self.shape
        if not isinstance(other, torch.Tensor):  # sparse (dense operands are tensors here)
            if other.shape[0] != n:
                raise ValueError("dimension mismatch")
            dt = su.result_dtype(np.multiply, self.dtype, other.dtype)
            # real float64 on a device without float64: the backends' spgemm multiplies
            # and sums the exact parts in triple-float (float32 operations only)
            exact = (dt == np.float64 and stores_float32(self.device)
                     and self.dtype.kind in "biuf" and other.dtype.kind in "biuf")
            if not exact and self._on_host("spgemm", dt):
                return from_scipy(self.to_scipy() @ other.to_scipy(), self.device)
            a, b = self.astype(dt, copy=False), other.astype(dt, copy=False)
            out = backend(self.device).spgemm(a.tocsr(), b.tocsr())
            res = self._container("csr")._construct((m, other.shape[1]), **out)
            if self.format == "bsr":
                cols = other.blocksize[1] if other.format == "bsr" else 1
                return res.tobsr(blocksize=(self.blocksize[0], cols))
            if self.format == "csc" or (self.format == "dia" and other.format == "dia"):
                return res.asformat(self.format)
            return res
        ndim = other.dim()
        if ndim == 0:
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        if ndim > 2 or other.shape[0] != n:
            raise ValueError(f"dimension mismatch: {self.shape} @ {tuple(other.shape)}")
        # The kernel and x's dtype depend only on the dtypes and the device kind (which
        # TRNSCIPY_EMULATE can change): prepared per kind while the container holds the
        # same tensors, and per operand dtype, rank and device.
        kind = device_kind(self.data.device)
        plans = _plan.get(self, kind, "products")
        if plans is None:
            plans = _plan.put(self, kind, "products", {}, shared=True)
        key = (other.dtype, ndim, other.device)
        plan = plans.get(key)
        if plan is None:
            if other.device != self.device:
                raise ValueError(f"operands are on two devices, {self.device} and "
                                 f"{other.device}")
            dt = su.result_dtype(np.multiply, self.dtype, to_numpy_dtype(other.dtype))
            op = "spmv" if ndim == 1 else "spmm"
            if self._on_host(op, dt):
                host = self.to_scipy() @ _tensor_to_host(other)
                return tensor_on(np.asarray(host), self.device)
            if self.dtype != dt:
                x = other.to(to_torch_dtype(dt)).resolve_conj()
                A = self.astype(dt, copy=False)
                return A._product_kernel(ndim)(A, x)
            cast = None if other.dtype == self.data.dtype else self.data.dtype
            plan = plans[key] = (self._product_kernel(ndim), cast, other.dtype.is_complex)
        impl, cast, conj = plan
        x = other if cast is None else other.to(cast)
        return impl(self, x.resolve_conj() if conj and x.is_conj() else x)

    def _product_kernel(self, ndim):
        """The backend's product primitive of this format, as SciPy's format classes call
        sparsetools' ``<format>_matvec`` (``x`` a vector) or ``<format>_matvecs``."""
        return getattr(backend(self.device), f"{self.format}_matvec{'s' if ndim == 2 else ''}")

    def _rmatmul(self, other):
        if issparse(other):
            return other @ self
        if other.ndim == 0:
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        if other.ndim > 2 or other.shape[-1] != self.shape[0]:
            raise ValueError("dimension mismatch")
        if other.ndim == 1:  # x @ A = A^T @ x
            return self.transpose()._matmul(other)
        return self.transpose()._matmul(other.transpose(0, 1)).transpose(0, 1)

    def _matrix_power(self, n):
        m, k = self.shape
        if m != k:
            raise TypeError("sparse matrix is not square")
        if not isinstance(n, (int, np.integer)):
            raise ValueError("exponent must be an integer")
        if n < 0:
            raise ValueError("exponent must be >= 0")
        if n == 0:
            eye = torch.arange(m, device=self.device, dtype=torch.int32)
            ones = torch.ones(m, dtype=self.data.dtype, device=self.device)
            coo = self._container("coo")._construct(self.shape, row=eye, col=eye.clone(),
                                                    data=ones, _canonical=True)
            return coo.asformat(self._binop_format(self))
        result = self
        for _ in range(n - 1):
            result = result @ self
        return result

    def __pow__(self, other):
        if self._is_array:
            return self.power(other)
        return self._matrix_power(other)

    @_computes("compare")
    def _compare(self, other, op):
        """Elementwise comparison.

        Where a zero compares False with a zero (or with the scalar), implicit zeros stay
        False and only stored entries are compared (O(nnz), as SciPy); otherwise (==,
        <=, >=, or e.g. ``A < 1``) every implicit zero is True and the result is built
        densely, O(M*N) (SciPy does the same, with a SparseEfficiencyWarning).  Sparse
        or scalar ``other``: a boolean sparse result (CSC for CSC, else CSR); dense
        ``other``: a dense boolean tensor, as SciPy.
        """
        other = self._as_operand(other)
        out_format = "csc" if self.format == "csc" else "csr"
        zero = torch.zeros((), dtype=self.data.dtype)
        if issparse(other):
            if other.shape != self.shape:
                raise ValueError("inconsistent shapes")
            if not bool(op(zero, torch.zeros((), dtype=self.data.dtype))):
                return self._compare_stored(other, op).asformat(out_format)
            rhs = other.toarray()
        elif su.is_scalar(other):
            scalar = other.item() if isinstance(other, torch.Tensor) else other
            if not bool(op(zero, scalar)):
                coo = self._coo_canonical()
                hit = op(coo.data, scalar)
                return self._bool_coo(coo.row, coo.col, hit).asformat(out_format)
            rhs = other
        else:
            if su.broadcast_shape(other.shape, self.shape) != self.shape:
                raise ValueError("inconsistent shapes")
            return op(self.toarray(), other)
        dense = op(self.toarray(), rhs)
        return self._container(out_format)._from_dense(dense, None, None, None)

    def _compare_stored(self, other, op):
        """op on the union of both operands' stored entries (implicit zeros compare 0)."""
        a, b = self._coo_canonical(), other._coo_canonical()
        n = self.shape[1]
        row = torch.cat([a.row.to(torch.int64), b.row.to(torch.int64)])
        col = torch.cat([a.col.to(torch.int64), b.col.to(torch.int64)])
        va = torch.cat([a.data, torch.zeros(b.nnz, dtype=a.data.dtype, device=self.device)])
        vb = torch.cat([torch.zeros(a.nnz, dtype=b.data.dtype, device=self.device), b.data])
        # Each operand is canonical, so every union position holds at most one entry of
        # each: summing duplicates pairs them up, in the same (sorted) order for both.
        row_u, col_u, va = su.coalesce(row, col, va, n)
        _, _, vb = su.coalesce(row, col, vb, n)
        return self._bool_coo(row_u, col_u, op(va, vb))

    def _bool_coo(self, row, col, hit):
        """A canonical boolean COO holding True where ``hit`` holds."""
        row, col = su.compact(hit, row, col)
        m, n = self.shape
        idx = su.index_dtype(max(m, n, row.shape[0]))
        ones = torch.ones(row.shape[0], dtype=torch.bool, device=self.device)
        return self._container("coo")._construct((m, n), row=row.to(idx), col=col.to(idx),
                                                 data=ones, _canonical=True)

    def __eq__(self, other):
        return self._compare(other, torch.eq)

    def __ne__(self, other):
        return self._compare(other, torch.ne)

    def __lt__(self, other):
        return self._compare(other, torch.lt)

    def __le__(self, other):
        return self._compare(other, torch.le)

    def __gt__(self, other):
        return self._compare(other, torch.gt)

    def __ge__(self, other):
        return self._compare(other, torch.ge)

    __hash__ = None

    def __iter__(self):
        for r in range(self.shape[0]):
            yield self[r]

    # ---- diagonal assignment ------------------------------------------------------

    def setdiag(self, values, k=0):
        """Set diagonal ``k`` in place (SciPy's rules for scalar and short ``values``)."""
        m, n = self.shape
        if k <= -m or k >= n:
            raise ValueError("k exceeds array dimensions")
        length = min(m + min(k, 0), n - max(k, 0))
        if su.is_scalar(values):
            vals = torch.full((length,), 0, dtype=self.data.dtype, device=self.device)
            vals = vals + torch.as_tensor(values, device=self.device).to(self.data.dtype)
        else:
            vals = su.as_tensor(values, self.device).to(self.data.dtype).reshape(-1)
            length = min(length, vals.shape[0])
            vals = vals[:length]
        pos = torch.arange(length, device=self.device, dtype=torch.int64)
        drow = pos - min(k, 0)
        dcol = pos + max(k, 0)
        coo = self.tocoo(copy=False)
        r, c = coo.row.to(torch.int64), coo.col.to(torch.int64)
        on = ((c - r) == k) & (r - min(k, 0) < length) & (r >= -min(k, 0))
        r, c, d = su.compact(~on, r, c, coo.data)
        row = torch.cat([r, drow])
        col = torch.cat([c, dcol])
        data = torch.cat([d, vals])
        idx = su.index_dtype(max(m, n, data.shape[0]))
        new = self._container("coo")._construct(self.shape, row=row.to(idx), col=col.to(idx),
                                                data=data, _canonical=False)
        fmt = new.asformat(self.format, **({"blocksize": self.blocksize}
                                           if self.format == "bsr" else {}))
        self.__dict__.clear()
        self.__dict__.update(fmt.__dict__)

    # ---- indexing (see _index.py) --------------------------------------------------

    def __getitem__(self, key):
        from trnscipy.sparse._index import getitem

        return getitem(self, key)

    def getrow(self, i):
        return self[i:i + 1, :] if i >= 0 else self[i:(i + 1) or None, :]

    def getcol(self, j):
        return self[:, j:j + 1] if j >= 0 else self[:, j:(j + 1) or None]


class sparray(metaclass=abc.ABCMeta):  # noqa: B024
    """Sparse array semantics (``*`` elementwise, 1-D reductions); SciPy's
    ``scipy.sparse.sparray`` objects are instances too."""

    _is_array = True


class spmatrix(metaclass=abc.ABCMeta):  # noqa: B024
    """Sparse matrix semantics (``*`` is the matrix product, 2-D reductions);
    SciPy's ``scipy.sparse.spmatrix`` objects are instances too."""

    _is_array = False

    def getnnz(self, axis=None):
        return self._getnnz(axis)

    def asfptype(self):
        if self.dtype.kind in "fc":
            return self
        dt = np.float32 if self.dtype.itemsize <= 2 and self.dtype.kind in "iub" \
            else np.float64
        return self.astype(dt)

    def getmaxprint(self):
        return 50


# SciPy's kind classes count as ours.
sparray.register(_sp.sparray)
spmatrix.register(_sp.spmatrix)
