"""NumPy <-> torch dtype conversion (trnscipy reports NumPy dtypes, as SciPy)."""

import numpy as np

from trnscipy._torch import torch

__all__ = ["absolute", "divide", "device_dtype_problem", "to_numpy_dtype", "to_torch_dtype"]

# uint64: scipy.linalg.pascal's exact results (torch 2.9 stores and moves it; few ops)
_NAMES = ("bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32",
          "float64", "complex64", "complex128")


# NumPy dtypes device implementations compute with.  Not uint16/uint32/uint64 (torch 2.9
# stores them but few ops take them, and torch's promotion of them differs from NumPy's),
# nor longdouble, object, str, bytes, datetime (torch has no such tensors).
_DEVICE_KINDS = frozenset("biufc")
_NOT_ON_DEVICE = frozenset(np.dtype(n) for n in ("uint16", "uint32", "uint64"))


def device_dtype_problem(dtype):
    """Why data of NumPy ``dtype`` cannot go to a device implementation, or None."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _DEVICE_KINDS or dtype in _NOT_ON_DEVICE or dtype not in _tables()[0]:
        return f"devices hold no {dtype} data"
    return None


def _pairs():
    return {np.dtype(n): getattr(torch, n) for n in _NAMES}


_np_to_torch = None
_torch_to_np = None


def _tables():
    global _np_to_torch, _torch_to_np
    if _np_to_torch is None:
        _np_to_torch = _pairs()
        _torch_to_np = {t: n for n, t in _np_to_torch.items()}
    return _np_to_torch, _torch_to_np


def to_torch_dtype(dtype):
    """torch dtype for a NumPy dtype-like (or a torch dtype, returned as is)."""
    if dtype is None:
        return None
    if type(dtype).__module__ == "torch":
        return dtype
    try:
        return _tables()[0][np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"dtype {np.dtype(dtype)} has no torch equivalent") from None


def to_numpy_dtype(dtype):
    """NumPy dtype object for a torch dtype (or NumPy dtype-like)."""
    if type(dtype).__module__ == "torch":
        try:
            return _tables()[1][dtype]
        except KeyError:
            raise TypeError(f"torch dtype {dtype} has no NumPy equivalent") from None
    return np.dtype(dtype)


def divide(a, b):
    """``a / b`` in torch's result dtype.  torch-xla 2.9 labels a complex tensor (complex64
    or complex128) divided by a complex tensor or any Python number float32
    (pytorch/xla#4519; the device data stay complex: a later product promotes them back,
    but ``conj``, ``torch.where``, ``is_complex``, ``.real`` and reads to the host see
    float32, imaginary part dropped); the cast restores the label.  Every division that
    can see a complex dividend on a device goes through here."""
    out = a / b
    if not isinstance(out, torch.Tensor):  # host numbers (a distributed solve's sums)
        return out
    dtype = torch.result_type(a, b)
    return out if out.dtype == dtype else out.to(dtype)


def absolute(t):
    """``|t|``, real for complex ``t`` (torch-xla 2.9 labels the absolute value of a
    complex128 tensor complex128: later reductions then fail to lower)."""
    out = t.abs()
    return out.real if out.is_complex() else out


def abs_max(t, dim=None):
    """``max |t|`` over all entries (or along ``dim``), NaN where an entry is NaN:
    torch-xla 2.9's ``max`` skips NaN (an all-NaN tensor reads -3.4e38), which would pass
    a convergence test."""
    a = absolute(t)
    if dim is None:
        return torch.where(torch.isnan(a).any(), torch.nan, a.max())
    return torch.where(torch.isnan(a).any(dim), torch.nan, a.amax(dim))
