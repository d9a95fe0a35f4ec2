"""Exact float64 storage on devices that hold float64 as float32 (Trainium).

torch-xla stores a float64 tensor on a NeuronCore as float32 while the tensor still
reports torch.float64 (``MaybeDowncastToXlaDeviceType`` in torch_xla/csrc/dtype.cpp).
trnscipy keeps float64 data it moves there exact as an unevaluated sum of two float32
numbers (double-float): the float64-dtype tensor holds ``hi = fl32(x)`` (what the device
stores anyway) and carries ``lo = fl32(x - hi)`` as a float32 tensor.  complex128 is held
the same way as two complex64 parts.

A ``DoubleFloatTensor`` is such a tensor.  Data movement (views, gathers, concatenation,
transfers: the calls in ``MOVEMENT``) applied to it is applied to its low part too, so
sparse containers and solvers keep exact data without knowing about it; any other torch
call returns a plain tensor (float32 values on the device, as the hardware computes).
"""

import numpy as np

from trnscipy._device import materialize
from trnscipy._torch import torch

__all__ = ["is_float64", "MOVEMENT", "double_float_class", "split", "df_tensor", "df_parts",
           "df_triple", "complex_of", "df_complex",
           "is_exact", "high_part", "host_value"]

# torch functions and Tensor methods (by name) that only move stored values: not
# arithmetic on Trainium (docs/design.md), and what a DoubleFloatTensor's low part follows.
MOVEMENT = frozenset({
    # views, reshapes and properties (shape, dtype, real, imag, T, mT ...)
    "__get__", "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "permute",
    "t", "transpose", "swapaxes", "squeeze", "unsqueeze", "flatten", "unflatten", "narrow",
    "select", "split", "chunk", "unbind", "diagonal", "movedim", "contiguous", "detach",
    "unfold", "as_strided", "broadcast_to", "broadcast_tensors", "conj", "resolve_conj",
    "flip", "roll",
    "atleast_1d", "atleast_2d", "atleast_3d",
    # sign flips (exact on every part)
    "neg", "negative", "__neg__", "resolve_neg",
    # copies, concatenation, gathers and scatters by index, selection by a given mask
    "clone", "copy_", "cat", "concat", "concatenate", "stack", "hstack", "vstack",
    "__getitem__", "__setitem__", "index_select", "gather", "take", "masked_select", "where",
    "masked_fill", "masked_fill_", "index_copy", "index_copy_", "index_fill", "index_fill_",
    "scatter", "scatter_", "index_put", "index_put_", "repeat", "tile", "repeat_interleave",
    # fills and allocation
    "fill_", "zero_", "empty", "empty_like", "new_empty", "zeros", "zeros_like", "new_zeros",
    "full", "full_like", "new_full", "ones", "ones_like", "new_ones",
    # transfers, same-dtype conversions and metadata
    "to", "cpu", "numpy", "item", "tolist", "dim", "size", "numel", "nelement", "stride",
    "element_size", "is_complex", "is_floating_point", "is_conj", "is_neg", "is_contiguous",
    "storage_offset", "data_ptr", "__len__", "__repr__", "__format__", "requires_grad_",
})

# Movement calls whose low part is not the same call on the low parts.
_NO_LOW_PART = frozenset({"numpy", "item", "tolist", "__repr__", "__format__"})

_WIDE = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}
# The low parts are stored scaled by powers of two, so they stay normal float32 numbers
# (a device flushes subnormals) for data down to float32's smallest normal magnitude.
LO_SCALE = 2.0 ** 24
TAIL_SCALE = 2.0 ** 48


def is_float64(x):
    """True for float64 data: a tensor, a NumPy array or scalar, a sparse container (its
    values), or array_like that NumPy reads as float64."""
    if getattr(x, "format", None) is not None:
        x = x.data
    dtype = getattr(x, "dtype", None)
    return dtype in (torch.float64, np.float64) or (
        dtype is None and np.asarray(x).dtype == np.float64)


def split(a):
    """(hi, lo, tail) float32 (complex64) NumPy arrays of a float64 (complex128) array,
    ``hi = fl32(a)``, ``lo = fl32(a - hi) * LO_SCALE`` and ``a == hi + lo / LO_SCALE +
    tail / TAIL_SCALE`` exactly.  ValueError where float32's exponent range cannot hold
    ``a`` exactly: magnitudes above 3.4e38, or nonzero ones whose parts would fall below
    float32's smallest normal number (possible below 2**-98, about 3e-30)."""
    narrow = _WIDE[a.dtype]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        hi = a.astype(narrow)
        rest = a - hi.astype(a.dtype)
        lo = (rest * LO_SCALE).astype(narrow)
        tail = ((rest - lo.astype(a.dtype) / LO_SCALE) * TAIL_SCALE).astype(narrow)
        back = _sum_parts(hi, lo, tail, a.dtype)
    finite = np.isfinite(a)
    exact = (back == a) | ~finite
    ok = exact & ((_normal(hi) & _normal(lo) & _normal(tail)) | ~finite)
    if not ok.all():
        bad = a[~ok].ravel()[0]
        raise ValueError(
            f"float64 value {bad!r} cannot be held exactly on a device without float64 "
            "(Trainium), which holds float64 data as float32 parts: float32's exponent range "
            "covers magnitudes from about 3e-30 (1.2e-38 for values with short mantissas) "
            "to 3.4e38, and zero; scale the data or compute on the host")
    if not finite.all():  # inf/nan: hi carries them
        lo = np.where(finite, lo, 0).astype(narrow)
        tail = np.where(finite, tail, 0).astype(narrow)
    # (arrays: a 0-d array's arithmetic gives NumPy scalars)
    return np.asarray(hi), np.asarray(lo), np.asarray(tail)


def _normal(p):
    """True where ``p`` (float32 or complex64) is zero or normal in each component."""
    f = np.stack([p.real, p.imag], axis=-1) if p.dtype.kind == "c" else p[..., None]
    return ((np.abs(f) >= np.finfo(np.float32).tiny) | (f == 0)).all(axis=-1)


def _sum_parts(hi, lo, tail, dtype):
    return hi.astype(dtype) + lo.astype(dtype) / LO_SCALE + tail.astype(dtype) / TAIL_SCALE


def _torch_function(cls, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    name = getattr(func, "__name__", "")
    movement = (name in MOVEMENT and name not in _NO_LOW_PART
                and not kwargs.get("accumulate") and not kwargs.get("reduce"))
    with torch._C.DisableTorchFunctionSubclass():
        if not movement:
            out = func(*args, **kwargs)
            if _in_place(name) and _is_df(args[0]):  # computed in place: not exact now
                args[0]._low = None
            return _plain(out)
        if name in ("to", "cpu") and _is_df(args[0]):
            return _moved(func, args, kwargs)
        args, kwargs = _int_values(name, args, kwargs)
        out = func(*_high_parts(args), **_high_parts(kwargs))
        lows = [(_low_parts(args, i), _low_parts(kwargs, i)) for i in range(2)]
        if _in_place(name):  # the low parts too
            target = args[0]
            if not _is_df(target) and _wide_dtype(target):  # now holds exact values
                zeros = torch.zeros(target.shape, dtype=_narrow_of(target.dtype),
                                    device=target.device)
                target.__class__ = double_float_class()
                target._low = (zeros, zeros.clone())
                lows = [(_low_parts(args, i), _low_parts(kwargs, i)) for i in range(2)]
            for low_args, low_kwargs in lows:
                func(*low_args, **low_kwargs)
            return out
        if not _has_wide(out):
            return out
        return _pair(out, [func(*low_args, **low_kwargs) for low_args, low_kwargs in lows])


# Movement calls whose Python-number operand at these positions (or keywords) is a value
# stored into the tensor, not a size, a dimension or an index.
_VALUE_OPERANDS = {"fill_": (1,), "__setitem__": (2,), "masked_fill": (2,),
                   "masked_fill_": (2,), "index_fill": (3,), "index_fill_": (3,),
                   "full_like": (1,), "new_full": (2,), "where": (1, 2)}


def _int_values(name, args, kwargs):
    """``args``, ``kwargs`` with Python integers stored as values made floats: split into
    parts as floats are (an int would be copied into the low parts as it is)."""
    places = _VALUE_OPERANDS.get(name)
    if places is None:
        return args, kwargs
    args = tuple(float(a) if i in places and type(a) is int else a
                 for i, a in enumerate(args))
    kwargs = {k: float(v) if k in ("value", "fill_value", "other") and type(v) is int
              else v for k, v in kwargs.items()}
    return args, kwargs


def _in_place(name):
    return (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_DUNDERS


_IN_PLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__",
                               "__itruediv__", "__ipow__"})


def _moved(func, args, kwargs):
    """``.to``/``.cpu`` of a DoubleFloatTensor: the parts move with it (torch-xla 2.9
    drops the imaginary part of complex128 leaving the device); off the device, the
    exact value; a cast to another dtype gives the values the device holds."""
    src = args[0]
    if func.__name__ == "cpu":
        device, dtype = torch.device("cpu"), None
    else:
        device, dtype = torch._C._nn._parse_to(*args[1:], **kwargs)[:2]
    device, dtype = device or src.device, dtype or src.dtype
    if not _wide_dtype_of(dtype) or (src.dtype.is_complex and not dtype.is_complex):
        return func(*args, **kwargs)
    # float64 -> complex128 is exact too (a toeplitz of real c and complex r): parts as complex
    lows = [p.to(_narrow_of(dtype)) for p in src._low]
    if device.type == "xla":
        out = func(*args, **kwargs)
        return src if out is src else _wrap(out, [p.to(device) for p in lows])
    return _exact([p.to(device) for p in (src.to(_narrow_of(src.dtype)), *src._low)], dtype)


def _exact(parts, dtype):
    hi, lo, tail = (p.to(dtype) for p in parts)
    return hi + lo / LO_SCALE + tail / TAIL_SCALE


_CLASS = []


def double_float_class():
    """The class (built on first use: torch is lazy) of float64 (complex128) tensors
    holding float32 values on a device without float64, with their exact low parts
    ``_low = (lo, tail)`` (docs/design.md, "float64 on Trainium")."""
    if not _CLASS:
        _CLASS.append(type("DoubleFloatTensor", (torch.Tensor,), {
            "__doc__": double_float_class.__doc__, "_low": None, "__module__": __name__,
            "__torch_function__": classmethod(_torch_function)}))
    return _CLASS[0]


def _is_df(x):
    """True for a DoubleFloatTensor whose low parts are current (an in-place computation
    on it drops them: its values are then the device's float32 results)."""
    return bool(_CLASS) and isinstance(x, _CLASS[0]) and x._low is not None


def _wide_dtype_of(dtype):
    return dtype in (torch.float64, torch.complex128)


def _wide_dtype(t):
    return _wide_dtype_of(t.dtype)


def _has_wide(out):
    if isinstance(out, torch.Tensor):
        return _wide_dtype(out)
    return isinstance(out, (tuple, list)) and any(_has_wide(o) for o in out)


def _plain(out):
    if bool(_CLASS) and isinstance(out, _CLASS[0]):
        return out.as_subclass(torch.Tensor)
    if isinstance(out, (tuple, list)) and any(bool(_CLASS) and isinstance(o, _CLASS[0])
                                              for o in out):
        return type(out)(_plain(o) for o in out)
    return out


def _narrow_of(dtype):
    return torch.complex64 if dtype.is_complex else torch.float32


def _high_parts(tree):
    """Operands of a movement call as the device holds them: Python floats rounded to
    float32 (their remainders go to the low parts)."""
    if isinstance(tree, dict):
        return {k: _high_parts(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_high_parts(v) for v in tree)
    if type(tree) is float:
        return float(np.float32(tree))
    if type(tree) is complex:
        return complex(np.complex64(tree))
    return tree


def _low_parts(tree, i):
    """Operands of a movement call with each float64 tensor replaced by its low part ``i``
    (0: lo, 1: the scaled tail; zeros where there is none)."""
    if isinstance(tree, dict):
        return {k: _low_parts(v, i) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_low_parts(v, i) for v in tree)
    if _is_df(tree):
        return tree._low[i]
    if isinstance(tree, torch.Tensor) and _wide_dtype(tree):
        return torch.zeros(tree.shape, dtype=_narrow_of(tree.dtype), device=tree.device)
    if type(tree) in (float, complex):
        wide = np.complex128 if type(tree) is complex else np.float64
        hi, lo, tail = split(np.asarray(tree, dtype=wide))
        return type(tree)((lo, tail)[i])
    if isinstance(tree, torch.dtype) and tree in (torch.float64, torch.complex128):
        return _narrow_of(tree)
    return tree


def _pair(out, lows):
    if isinstance(out, torch.Tensor):
        if not _wide_dtype(out) or not all(isinstance(p, torch.Tensor) for p in lows):
            return _plain(out)
        return _wrap(out, lows)
    return type(out)(_pair(o, [p[j] for p in lows]) for j, o in enumerate(out))


def _wrap(hi_wide, lows):
    # a detached alias (same storage): as_subclass's alias would keep hi_wide alive out of
    # reach, pending after the result is computed, for the next sync to run as a graph
    # of its own; autograd needs as_subclass's (its graph goes through the alias)
    t = (hi_wide.as_subclass(double_float_class()) if hi_wide.requires_grad
         else torch.Tensor._make_subclass(double_float_class(), hi_wide))
    t._low = tuple(lows)
    return t


def df_tensor(hi, lo, tail=None):
    """The float64 (complex128) tensor ``hi + lo (+ tail)`` of float32 (complex64) tensors
    on a device without float64 (a double-float result): values ``hi``, carrying ``lo``
    (and ``tail``, a third part below ``lo``: float64's full precision)."""
    wide = torch.complex128 if hi.is_complex() else torch.float64
    with torch._C.DisableTorchFunctionSubclass():
        tail = torch.zeros_like(lo) if tail is None else tail * TAIL_SCALE
        return _wrap(hi.to(wide), (lo * LO_SCALE, tail))


def complex_of(re, im):
    """The complex tensor ``re + i im`` of real tensors by data movement only (a zero fill,
    then writes into its real and imaginary views): the storage of a complex result on a
    device without complex arithmetic.  (torch.complex runs on the host on XLA.)"""
    dtype = torch.complex128 if re.dtype == torch.float64 else torch.complex64
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.zeros(re.shape, dtype=dtype, device=re.device)
        out.real[...] = re
        out.imag[...] = im
    return out


def df_complex(re, im):
    """The complex128 tensor of double-float pairs ``re``, ``im`` (float32 ``(hi, lo)``)
    on a device without float64 or complex arithmetic: the parts assembled by
    ``complex_of``, the low parts scaled while still real."""
    with torch._C.DisableTorchFunctionSubclass():
        hi = complex_of(re[0], im[0])
        lo = complex_of(re[1] * LO_SCALE, im[1] * LO_SCALE)
        return _wrap(hi.to(torch.complex128), (lo, torch.zeros_like(lo)))


def df_parts(t):
    """``(hi, lo)`` float32 (complex64) tensors of a float64 (complex128) tensor on a device
    without float64 (lo zeros where ``t`` carries no low part).  hi + lo holds about 48
    bits: the double-float value arithmetic works with."""
    with torch._C.DisableTorchFunctionSubclass():
        hi = t.to(_narrow_of(t.dtype))
        lo = _unscale(t._low[0], 1 / LO_SCALE) if _is_df(t) else torch.zeros_like(hi)
    return hi, lo


def _unscale(x, s):
    """x * s, a complex x by its parts (no complex arithmetic on the device)."""
    return complex_of(x.real * s, x.imag * s) if x.is_complex() else x * s


def df_triple(t):
    """``(hi, lo, tail)`` float32 (complex64) tensors of a float64 (complex128) tensor on a
    device without float64, ``hi + lo + tail`` its exact value (``df_parts`` and the
    rest; the unscaled tail is exact for magnitudes above about 2**-77)."""
    hi, lo = df_parts(t)
    with torch._C.DisableTorchFunctionSubclass():
        tail = _unscale(t._low[1], 1 / TAIL_SCALE) if _is_df(t) else torch.zeros_like(hi)
    return hi, lo, tail


def is_exact(t):
    """True for a tensor that carries the exact low parts of its float64 values."""
    return _is_df(t)


def high_part(t):
    """What a comparison with zero reads of ``t``: the float32 high parts of a
    DoubleFloatTensor (zero, and of the value's sign, exactly where the value is), else
    ``t`` itself."""
    return df_parts(t)[0] if _is_df(t) else t


def host_value(t):
    """The exact float64 (complex128) NumPy value of a DoubleFloatTensor (its parts
    computed in one graph: read one by one, each would be a graph of its own)."""
    with torch._C.DisableTorchFunctionSubclass():
        # real: the float64 values themselves (float32 values on the device, read back
        # exactly), no conversion graph after the result's own
        parts = [p.detach().resolve_conj().resolve_neg() for p in t._low]
        if t.is_complex():
            parts.insert(0, t.to(_narrow_of(t.dtype)).detach().resolve_conj().resolve_neg())
        else:
            parts.insert(0, t.detach())
        materialize([t, *t._low, *parts])  # t too: a view (a
        # transposed factor) would otherwise stay pending and run its graph again
        parts = [p.cpu() for p in parts]
        return _exact(parts, t.dtype).numpy()


def from_host(a, device):
    """A float64 (complex128) NumPy array on a device without float64, exactly (hi goes
    as float64: the device stores it as float32, exactly)."""
    hi, lo, tail = split(a)
    with torch._C.DisableTorchFunctionSubclass():
        return _wrap(torch.from_numpy(np.asarray(hi.astype(a.dtype))).to(device),
                     [torch.from_numpy(p).to(device) for p in (lo, tail)])


def cast(t, dtype):
    """``t.to(dtype)`` on a device without float64: a float64 (complex128) result carries
    its exact low parts; a cast to another dtype gives what the device computes (from
    ``hi``)."""
    if not _wide_dtype_of(dtype):
        return t.to(dtype)
    narrow = _narrow_of(dtype)
    with torch._C.DisableTorchFunctionSubclass():
        if _is_df(t):
            return _wrap(t.to(dtype), [p.to(narrow) for p in t._low])
        if not (t.is_floating_point() or t.is_complex()):  # integers: exact remainders
            wide_int = t.to(torch.int64)
            hi = wide_int.to(torch.float32)
            rest = wide_int - hi.to(torch.int64)
            lo = rest.to(torch.float32)
            tail = (rest - lo.to(torch.int64)).to(torch.float32) * TAIL_SCALE
            return _wrap(hi.to(dtype), [(lo * LO_SCALE).to(narrow), tail.to(narrow)])
        hi = t.to(narrow)  # float32 / complex64 / narrower: exact in hi
        return _wrap(hi.to(dtype), [torch.zeros_like(hi), torch.zeros_like(hi)])


# ---- emulation: what torch-xla does to float64 on a NeuronCore ----------------------------

# Movement calls that can bring values from outside the device tensors (Python scalars,
# host tensors): under the emulation their float64 results are rounded as others are.
_BRINGS_VALUES = frozenset({
    "to", "copy_", "__setitem__", "index_put", "index_put_", "where", "masked_fill",
    "masked_fill_", "index_fill", "index_fill_", "scatter", "scatter_", "fill_", "full",
    "full_like", "new_full"})
_EMULATING = []


def _round_held(t):
    """``t``'s values as a NeuronCore holds them: float32 (complex64)."""
    return t.to(_narrow_of(t.dtype)).to(t.dtype)


def _emulation_mode():
    from torch.overrides import TorchFunctionMode

    class Float32Storage(TorchFunctionMode):
        """Rounds every float64 (complex128) value that torch computes or transfers on an
        XLA device to float32 (complex64), as torch-xla stores it on a NeuronCore."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            if name in MOVEMENT and name not in _BRINGS_VALUES:
                return out
            if _in_place(name) or (name == "to" and out is args[0]):
                target = args[0]
                if _needs_rounding(target):
                    with torch._C.DisableTorchFunctionSubclass():
                        target.copy_(_round_held(target))
                return out
            if isinstance(out, torch.Tensor):
                return _round_held(out) if _needs_rounding(out) else out
            if isinstance(out, (tuple, list)) and any(_needs_rounding(o) for o in out):
                return type(out)(_round_held(o) if _needs_rounding(o) else o for o in out)
            return out

    return Float32Storage()


def _needs_rounding(t):
    return (isinstance(t, torch.Tensor) and t.device.type == "xla" and _wide_dtype(t)
            and not _is_df(t))


class emulated_storage:  # noqa: N801  (a context manager used like a function)
    """While active (and ``TRNSCIPY_EMULATE=neuron``), float64 (complex128) values torch
    computes or transfers on XLA devices are rounded to float32 (complex64), as torch-xla
    stores them on a NeuronCore (``MaybeDowncastToXlaDeviceType``): the emulated lane
    judges what real Trainium returns.  Nested uses are free."""

    def __init__(self, active=True):
        self._mode = None
        self._active = active

    def __enter__(self):
        if self._active and not _EMULATING:
            self._mode = _emulation_mode()
            self._mode.__enter__()
            _EMULATING.append(self._mode)
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            _EMULATING.pop()
            self._mode.__exit__(*exc)
        return False
