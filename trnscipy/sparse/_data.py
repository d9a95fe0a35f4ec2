"""Operations on ``.data`` alone: casts, copies, and the ufuncs with f(0) = 0."""

import numpy as np

from trnscipy._dtypes import absolute, to_torch_dtype
from trnscipy._torch import torch
from trnscipy._transfer import astype, stores_float32
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import _computes, _spbase


def _exact_cast(self, dtype, *args, **kwargs):
    """True for an ``astype`` that moves exact parts on a device without float64: to the
    container's own dtype, or from real data (floats, integers, bool) to float64."""
    if not stores_float32(self.device):
        return False
    target = su.check_dtype(dtype)
    return target == self.dtype or (target == np.float64 and self.dtype.kind in "biuf")


class _data_matrix(_spbase):
    """Methods that act on the stored values only."""

    def _deduped_data(self):
        self.sum_duplicates()
        return self.data

    @_computes("astype", exact=_exact_cast)
    def astype(self, dtype, casting="unsafe", copy=True):
        dtype = su.check_dtype(dtype)
        if dtype == self.dtype:
            return self.copy() if copy else self
        if not np.can_cast(self.dtype, dtype, casting=casting):
            raise TypeError(f"Cannot cast array data from {self.dtype} to {dtype} "
                            f"according to the rule '{casting}'")
        return self._with_data(astype(self.data, to_torch_dtype(dtype)), copy=copy)

    def copy(self):
        return self._with_data(self.data.clone(), copy=True)

    @property
    def real(self):
        return self._with_data(self.data.real.clone() if self.data.is_complex()
                               else self.data.clone(), copy=True)

    @property
    def imag(self):
        if self.data.is_complex():
            return self._with_data(self.data.imag.clone(), copy=True)
        return self._with_data(torch.zeros_like(self.data), copy=True)

    @_computes("abs")
    def __abs__(self):
        return self._with_data(absolute(self._deduped_data()), copy=False)

    @_computes("round")
    def __round__(self, ndigits=0):
        data = self._deduped_data()
        if data.is_complex():
            rounded = torch.complex(torch.round(data.real, decimals=ndigits),
                                    torch.round(data.imag, decimals=ndigits))
        else:
            rounded = torch.round(data, decimals=ndigits)
        return self._with_data(rounded, copy=False)

    @_computes("power")
    def power(self, n, dtype=None):
        if not su.is_scalar(n):
            raise NotImplementedError("input is not scalar")
        if not n:
            raise NotImplementedError(
                "zero power is not supported as it would densify the matrix.\n"
                "Use `np.ones(A.shape, dtype=A.dtype)` for this case.")
        data = self._deduped_data()
        base = np.dtype(dtype) if dtype is not None else self.dtype
        if self.dtype.kind in "iu" and isinstance(n, (int, np.integer)) and n < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
        out = su.result_dtype(np.power, base, scalars=[n])
        return self._with_data(astype(data, to_torch_dtype(out)) ** n, copy=False)


# NumPy ufunc name -> torch function, for the ufuncs with f(0) == 0.
_UFUNCS = {
    "arcsin": "asin", "arcsinh": "asinh", "arctan": "atan", "arctanh": "atanh", "ceil": "ceil",
    "deg2rad": "deg2rad", "expm1": "expm1", "floor": "floor", "log1p": "log1p",
    "rad2deg": "rad2deg", "rint": "round", "sign": "sgn", "sin": "sin", "sinh": "sinh",
    "sqrt": "sqrt", "tan": "tan", "tanh": "tanh", "trunc": "trunc",
}


def _make_ufunc(np_name, torch_name):
    np_func = getattr(np, np_name)

    def method(self):
        try:
            out = su.result_dtype(np_func, self.dtype)
        except TypeError as exc:
            raise TypeError(f"{np_name} is not supported for dtype {self.dtype}") from exc
        data = astype(self._deduped_data(), to_torch_dtype(out))
        return self._with_data(getattr(torch, torch_name)(data), copy=True)

    method.__name__ = np_name
    method.__doc__ = f"Elementwise {np_name} of the stored values."
    return _computes(np_name)(method)


for _np_name, _torch_name in _UFUNCS.items():
    setattr(_data_matrix, _np_name, _make_ufunc(_np_name, _torch_name))
