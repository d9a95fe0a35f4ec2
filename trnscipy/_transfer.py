"""Moving data between the host (NumPy/SciPy) and a device (torch).

The one transfer layer: every float64 (complex128) value trnscipy moves to a device that
holds float64 as float32 (Trainium) goes through here and stays exact there as
float32 parts (trnscipy/_double_float.py); back on the host it is exact again.  Upper
layers register how their host objects move (``register_host_type``).
"""

import numpy as np
from array_api_compat import is_torch_array

from trnscipy import _double_float as _df
from trnscipy._capabilities import capability
from trnscipy._device import device_kind, emulating_neuron, resolve_device
from trnscipy._dtypes import device_dtype_problem, to_numpy_dtype
from trnscipy._errors import float32_storage
from trnscipy._torch import torch

__all__ = ["to_device", "to_host", "is_device_object", "register_host_type", "df_parts",
           "df_tensor", "df_triple", "complex_of", "df_complex", "held", "tensor_on",
           "device_storage", "device_form_problem"]

df_parts = _df.df_parts
df_tensor = _df.df_tensor
df_triple = _df.df_triple
complex_of = _df.complex_of
df_complex = _df.df_complex
_WIDE = (np.dtype(np.float64), np.dtype(np.complex128))

# (test, move, problem) triples registered by upper layers: host objects (SciPy sparse,
# SuperLU) that ``to_device`` turns into trnscipy device objects.
_HOST_TYPES = []


def register_host_type(test, move, problem=None):
    """Make ``to_device`` move host objects for which ``test(obj)`` is true with
    ``move(obj, device)`` (containers and solvers register their SciPy twins).
    ``problem(obj)``: why such an object has no device form (a format, a dimension, a
    dtype), or None."""
    _HOST_TYPES.append((test, move, problem))


def device_form_problem(obj):
    """Why the host object ``obj`` (ndarray, NumPy scalar, a registered host type) has no
    device form, or None (also for objects the transfer layer does not move)."""
    if isinstance(obj, np.ndarray | np.generic):
        return device_dtype_problem(obj.dtype)
    for test, _, problem in _HOST_TYPES:
        if problem is not None and test(obj):
            return problem(obj)
    dtype = getattr(obj, "dtype", None)
    if isinstance(dtype, np.dtype) and not is_device_object(obj):
        # host objects that compute in a NumPy dtype (SciPy's LinearOperator): their
        # results in a dtype the device cannot hold could not come to it
        return device_dtype_problem(dtype)
    return None


def stores_float32(device):
    """True where float64 data is held as float32 (no float64 on the device)."""
    return not capability(device_kind(device)).float64


def held_as_parts(dtype, device):
    """True where ``dtype`` data on ``device`` is float64 held as exact float32 parts."""
    return dtype == torch.float64 and stores_float32(device)


def astype(t, dtype):
    """``t`` cast to torch ``dtype`` (complex to real keeps the real part, as NumPy); to
    float64 on a device without float64: exact parts (``_double_float.cast``)."""
    if t.dtype == dtype:
        return t
    if t.is_complex() and not dtype.is_complex:
        t = t.real
    if held_as_parts(dtype, t.device):
        return _df.cast(t, dtype)
    return t.to(dtype)


def is_device_object(x):
    """True for trnscipy's device-backed objects (sparse containers, operators)."""
    return getattr(x, "_trnscipy_device_object", False)


def _array_to_device(a, device):
    if (not a.dtype.isnative or not a.flags.writeable or min(a.strides, default=0) < 0
            or any(s % a.itemsize for s in a.strides)):  # (torch takes whole-item strides)
        a = np.array(a, dtype=a.dtype.newbyteorder("="))
    if a.dtype in _WIDE and stores_float32(device):
        return _df.from_host(a, device)
    try:
        t = torch.from_numpy(a)
    except TypeError:
        raise TypeError(f"cannot move a NumPy array of dtype {a.dtype} to a device") from None
    return t.to(device)


def _tensor_to_host(t, copy=False):
    """NumPy data of ``t``; a CPU tensor's array shares its memory unless ``copy``."""
    t = t.detach()
    if _df.is_exact(t):
        a = _df.host_value(t)
        return a[()] if a.ndim == 0 else a
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
    imaginary part (torch-xla 2.9) moves as its real and imaginary parts; float64 coming
    to a device that holds it as float32 stays exact (as float32 parts)."""
    if (t.dtype in (torch.float64, torch.complex128) and not _df.is_exact(t)
            and stores_float32(device) and not stores_float32(t.device)):
        return _df.from_host(np.asarray(_tensor_to_host(t)), device)
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
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(x, device, strict) for x in obj)
    for test, move, _ in _HOST_TYPES:
        if test(obj):
            return move(obj, device)
    if strict:
        raise TypeError(f"to_device cannot move an object of type {type(obj).__name__}")
    return obj


_SCIPY_FORMATS = frozenset({"csr", "csc", "coo", "bsr", "dia", "dok", "lil"})


def held(t, what=None, **advice):
    """``t`` as the device holds it.  On a device that holds float64 as float32, a float64
    (complex128) tensor that trnscipy did not move there exactly holds float32 values:
    say so (Float32StorageWarning, an error under TRNSCIPY_STRICT=1; ``what`` names it,
    ``advice``: float32_storage's) and go on with what the device holds (rounded under
    the TRNSCIPY_EMULATE=neuron emulation, as there)."""
    if (t.dtype not in (torch.float64, torch.complex128) or _df.is_exact(t)
            or not stores_float32(t.device)):
        return t
    float32_storage(what or f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}",
                    **advice)
    values = np.asarray(_tensor_to_host(t))
    narrow = np.complex64 if values.dtype.kind == "c" else np.float32
    return _df.from_host(values.astype(narrow).astype(values.dtype), t.device)


def tensor_on(x, device, dtype=None):
    """``x`` (tensor, ndarray, list or scalar) as a tensor on ``device`` in ``dtype`` (a
    torch dtype; None keeps x's), through the transfer rules above (host values are
    cast on the host: float64 stays exact on devices without it)."""
    if not is_torch_array(x):
        a = np.asarray(x)
        if dtype is not None:
            a = a.astype(to_numpy_dtype(dtype))
        return _array_to_device(np.require(a, requirements='C'), device)  # 0-d stays 0-d
    t = held(_tensor_to(x, device))
    if dtype is None or dtype == t.dtype:
        return t
    return _df.cast(t, dtype) if stores_float32(device) else t.to(dtype)


def device_storage(device):
    """Context for work on ``device``: under TRNSCIPY_EMULATE=neuron on an XLA device,
    float64 values torch computes or moves there are held as float32, as on Trainium."""
    return _df.emulated_storage(device.type == "xla" and emulating_neuron())


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
    if isinstance(obj, np.ndarray | np.generic) or getattr(obj, "format", None) in _SCIPY_FORMATS:
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple results
        return type(obj)(*(_to_host(x, strict) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_host(x, strict) for x in obj)
    if strict:
        raise TypeError(f"to_host cannot move an object of type {type(obj).__name__}")
    return obj
