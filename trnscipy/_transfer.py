"""Moving data between the host (NumPy/SciPy) and a device (torch)."""

import numpy as np
import scipy.sparse as _sp
from array_api_compat import is_torch_array

from trnscipy._capabilities import capability
from trnscipy._device import device_kind, resolve_device
from trnscipy._torch import torch

__all__ = ["to_device", "to_host", "is_device_object"]


def is_device_object(x):
    """True for trnscipy's device-backed objects (sparse containers, operators)."""
    return getattr(x, "_trnscipy_device_object", False)


def _array_to_device(a, device):
    if not a.dtype.isnative or not a.flags.writeable or min(a.strides, default=0) < 0:
        a = np.array(a, dtype=a.dtype.newbyteorder("="))
    try:
        t = torch.from_numpy(a)
    except TypeError:
        raise TypeError(f"cannot move a NumPy array of dtype {a.dtype} to a device") from None
    return t.to(device)


def _tensor_to_host(t, copy=False):
    """NumPy data of ``t``; a CPU tensor's array shares its memory unless ``copy``."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.dtype == torch.complex128 and capability(device_kind(t.device)).split_complex128_to_host:
        a = torch.complex(t.real.cpu(), t.imag.cpu()).numpy()
    else:
        a = t.cpu().numpy()
        if copy and t.device.type == "cpu":
            a = a.copy()
    return a[()] if a.ndim == 0 else a


def _tensor_to(t, device):
    """``t`` on ``device``.  complex128 leaving a device whose host copies drop the
    imaginary part (torch-xla 2.9) moves as its real and imaginary parts."""
    if (t.dtype == torch.complex128 and device.type == "cpu" and t.device.type != "cpu"
            and capability(device_kind(t.device)).split_complex128_to_host):
        return torch.complex(t.real.to(device), t.imag.to(device))
    return t.to(device)


def to_device(obj, device=None):
    """Move ``obj`` to ``device`` (name or torch.device; None: the default device).

    ndarray -> torch.Tensor (same dtype); SciPy sparse -> trnscipy sparse of the
    same format and kind (``*_array`` / ``*_matrix``), keeping index dtype and
    the sorted/canonical flags; SciPy's SuperLU (splu, spilu) -> a SuperLU whose
    solve takes and returns device tensors; tensors and trnscipy objects are moved; tuples
    and lists are moved item by item.  Anything else: TypeError.
    """
    device = resolve_device(device)
    return _to_device(obj, device, strict=True)


def _to_device(obj, device, strict):
    if is_torch_array(obj):
        return _tensor_to(obj, device)
    if isinstance(obj, np.ndarray):
        return _array_to_device(obj, device)
    if is_device_object(obj):
        return obj.to(device)
    if _sp.issparse(obj):
        from trnscipy.sparse._base import from_scipy

        return from_scipy(obj, device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(x, device, strict) for x in obj)
    if type(obj).__name__ == "SuperLU":
        from trnscipy.sparse.linalg._dsolve._superlu import SuperLU, is_scipy_superlu

        if is_scipy_superlu(obj):
            return SuperLU(obj, device)
    if strict:
        raise TypeError(f"to_device cannot move an object of type {type(obj).__name__}")
    return obj


def to_host(obj):
    """Move ``obj`` to the host: torch.Tensor -> ndarray (0-d -> NumPy scalar),
    trnscipy sparse -> the SciPy sparse object of the same format and kind.

    NumPy/SciPy objects are returned as they are; tuples and lists item by item.
    Anything else: TypeError.  A CPU tensor's ndarray shares its memory.
    """
    return _to_host(obj, strict=True)


def _to_host(obj, strict):
    if is_torch_array(obj):
        return _tensor_to_host(obj)
    if is_device_object(obj):
        return obj.to_scipy()
    if isinstance(obj, np.ndarray | np.generic) or _sp.issparse(obj):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple results
        return type(obj)(*(_to_host(x, strict) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_host(x, strict) for x in obj)
    if strict:
        raise TypeError(f"to_host cannot move an object of type {type(obj).__name__}")
    return obj
