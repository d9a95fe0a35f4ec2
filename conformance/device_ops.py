"""What a trnscipy call computed on a device in dtypes the device cannot compute in.

On a lane with host dtypes (xla-neuron: no float64, no complex), the harness runs the
trnscipy call under ``DeviceArithmetic``, a torch function mode that sees every torch
call trnscipy's code makes and records those that compute on such values on the lane's
device.  (A torch *dispatch* mode would see aten ops, but on torch-xla 2.9 it changes
results: it bypasses functionalization.)  The rule
(docs/design.md, "Data movement is not arithmetic"): pure data movement on stored
values (views, copies, concatenation, gathers and scatters by index, fills, transfers,
same-dtype conversions) is not arithmetic and may stay on the device; everything else
(comparisons, sums, products, casts that change the dtype ...) is, and must run on the
host with a DeviceFallbackWarning.

Calls a case makes on the user's behalf (the matvec of a LinearOperator built from a
Python callable) are the user's own computation, not trnscipy's: a case wraps them with
``user_code`` and the ops inside are not recorded.
"""

import contextlib
import functools

from trnscipy._double_float import MOVEMENT as _MOVEMENT

__all__ = ["DeviceArithmetic", "user_code", "MOVEMENT"]

# torch functions and Tensor methods (by name) that only move stored values: trnscipy's
# own list, which DoubleFloatTensor's low parts follow too
MOVEMENT = _MOVEMENT | {"as_subclass"}

_USER_DEPTH = [0]


def user_code(fn):
    """``fn`` with the ops it runs left unrecorded: the user's own computation."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _USER_DEPTH[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _USER_DEPTH[0] -= 1

    return wrapper


def _tensors(tree):
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _is_movement(func, args, kwargs, tensors_in, out):
    name = getattr(func, "__name__", "")
    if name not in MOVEMENT:
        return False
    if name in ("index_put", "index_put_"):
        return not kwargs.get("accumulate", args[3] if len(args) > 3 else False)
    if name in ("scatter", "scatter_"):
        return "reduce" not in kwargs and len(args) < 5
    if name == "to":  # a transfer, not a cast; between float32 and float64 (complex64 and
        # complex128) a relabelling on a device that holds float64 as float32
        return all(_same_storage(t.dtype, tensors_in[0].dtype) for t in _tensors(out))
    return True


def _same_storage(a, b):
    import torch

    held = {torch.float64: torch.float32, torch.complex128: torch.complex64}
    return held.get(a, a) == held.get(b, b)


class DeviceArithmetic(contextlib.AbstractContextManager):
    """Context manager recording the torch calls (at the top level: what trnscipy's
    Python code calls) that compute in ``dtypes`` (torch dtypes) on a device of type
    ``device_type``.  ``ops``: the sorted names with a dtype, after exit."""

    def __init__(self, device_type, dtypes):
        self.device_type = device_type
        self.dtypes = frozenset(dtypes)
        self.ops = []
        self._seen = set()
        self._mode = None

    def _record(self, func, args, kwargs, out):
        if _USER_DEPTH[0]:
            return
        tensors_in = _tensors((args, kwargs))
        involved = [t for t in tensors_in + _tensors(out)
                    if t.dtype in self.dtypes and t.device.type == self.device_type]
        if involved and not _is_movement(func, args, kwargs, tensors_in, out):
            self._seen.add(f"{getattr(func, '__name__', func)}({involved[0].dtype})")

    def __enter__(self):
        from torch.overrides import TorchFunctionMode

        recorder = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                recorder._record(func, args, kwargs, out)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        self.ops = sorted(self._seen)
        return False
