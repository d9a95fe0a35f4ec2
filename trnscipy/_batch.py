"""SciPy's batch rule for device calls, in one place.

SciPy 1.15+ takes stacks of matrices in most of ``scipy.linalg``: each array argument
has a number of core dimensions (2 for a matrix, 1 for a vector, ``"1|2"`` for a
right-hand side that is a matrix when it has two or more dimensions, 0 for a scalar);
the dimensions in front of them are batch dimensions, broadcast together, and the
function applies to each matrix of the broadcast batch.  SciPy declares the core
dimensions with its ``_apply_over_batch`` decorator; ``core_dims`` reads that
declaration from the installed SciPy's function, and ``dispatch(..., batch=...)``
declares it for the functions SciPy batches in its own code (``solve``, ``inv``,
``cho_solve``, ...), where an argument may be an element of a tuple
(``("lu_and_piv", 0)``).

``plan`` looks at one call: None when no operand has batch dimensions (the call runs as
it is), else a ``Batch`` that broadcasts the operands once.  What runs a batch is the
dispatcher's choice (``_dispatch._run_on_device``): a device implementation that takes
stacks gets the broadcast stacks (one device execution); otherwise, or where it raises
``PerMatrix`` for the operands it got (a double-float method written for one matrix), the
dispatcher loops over the device implementation as SciPy loops over its own.
"""

import functools
import inspect
import math

import numpy as np
from array_api_compat import is_torch_array

__all__ = ["core_dims", "plan", "Batch", "PerMatrix"]


class PerMatrix(Exception):  # noqa: N818  (a signal to the dispatcher, not an error)
    """Raised by a device implementation that takes stacks but has no batched method for
    these operands: the dispatcher runs it on each matrix instead, so that the batch gives
    exactly what its single calls give."""


def core_dims(scipy_func):
    """The ``(argument, core ndim)`` pairs SciPy's ``_apply_over_batch`` wrapper of
    ``scipy_func`` declares, or None (SciPy batches it in its own code, or not at all)."""
    try:
        found = inspect.getclosurevars(scipy_func).nonlocals
    except (TypeError, ValueError):
        return None
    names, ndims = found.get("names"), found.get("ndims")
    if not names or not ndims or "n_arrays" not in found:
        return None
    # SciPy takes the first len(names) positional arguments as the arrays (its names
    # matter only for keywords, and one is off: solveh_banded declares 'a' for 'ab')
    params = list(_signature(scipy_func).parameters)[:len(names)]
    return tuple(zip(params, ndims, strict=True))


@functools.cache
def _signature(func):
    return inspect.signature(func)


def _get(bound, path):
    name, index = (path, None) if isinstance(path, str) else path
    value = bound.get(name)
    if index is None:
        return value
    if type(value) not in (tuple, list) or len(value) <= index:
        return None
    return value[index]


def _set(bound, path, value):
    name, index = (path, None) if isinstance(path, str) else path
    if index is None:
        bound[name] = value
    else:
        parts = list(bound[name])
        parts[index] = value
        bound[name] = type(bound[name])(parts)


def _shape(x):
    if x is None or type(x) is tuple:  # a tuple operand: its elements are declared
        return None
    if is_torch_array(x) or isinstance(x, np.ndarray):
        return tuple(x.shape)
    if getattr(x, "_trnscipy_device_object", False) or hasattr(x, "tocsr"):
        return None  # sparse operands are not batched
    try:
        return np.shape(x)
    except ValueError:  # ragged: the implementation raises SciPy's error
        return None


class Batch:
    """One batched call: the bound arguments, the operands' core shapes and the broadcast
    batch shape."""

    def __init__(self, func, bound, cores, batch_shape):
        self.func, self.bound, self.cores, self.shape = func, bound, cores, batch_shape

    def _broadcast(self, x, core, device):
        from trnscipy._torch import torch

        if not is_torch_array(x):
            from trnscipy._transfer import _to_device

            x = _to_device(np.asarray(x), device, strict=False)
        return torch.broadcast_to(x, self.shape + core)

    def broadcast(self, device):
        """(args, kwargs) with every batched operand broadcast to the batch shape (an
        operand without batch dimensions stays as it is: solve's vector b)."""
        bound = dict(self.bound)
        for path, core in self.cores.items():
            if len(_shape(_get(bound, path))) > len(core):
                _set(bound, path, self._broadcast(_get(bound, path), core, device))
        return self._call_args(bound)

    def _call_args(self, bound):
        sig = _signature(self.func)
        args, kwargs, gap = [], {}, False
        for name, p in sig.parameters.items():
            if name not in bound:
                gap = True  # a default: what follows goes by keyword
                continue
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and not gap:
                args.append(bound[name])
            elif p.kind is p.VAR_POSITIONAL:
                args.extend(bound[name])
            elif p.kind is p.VAR_KEYWORD:
                kwargs.update(bound[name])
            else:
                kwargs[name] = bound[name]
        return tuple(args), kwargs

    def loop(self, impl, device):
        """``impl`` on each matrix of the batch, results stacked (SciPy's own loop)."""
        from trnscipy._kernels import backend

        materialize = backend(device).materialize
        bound = dict(self.bound)
        items = {}
        for path, core in self.cores.items():
            stack = self._broadcast(_get(bound, path), core, device)
            items[path] = list(stack.reshape((-1, *core)).unbind(0))
        # each matrix computed now (one execution for all on XLA): a lazy slice of the stack
        # would put its offset into every graph of the loop, one compilation per matrix
        materialize([t for parts in items.values() for t in parts])
        results = []
        for i in range(math.prod(self.shape)):
            for path, parts in items.items():
                item = parts[i]
                if item.ndim == 0 and not item.is_floating_point() and not item.is_complex():
                    item = item.item()  # an integer argument (solve_banded's l, u)
                _set(bound, path, item)
            args, kwargs = self._call_args(bound)
            out = impl(*args, **kwargs)
            out = out if isinstance(out, tuple) else (out,)
            materialize(_tensors(out))  # the same graph each time
            results.append(out)
        stacked = tuple(self._stack(parts, device) for parts in zip(*results, strict=True))
        return stacked[0] if len(stacked) == 1 else stacked

    def _stack(self, parts, device):
        """The batch's results of one output stacked.  A nested tuple (matrix_balance's
        ``(scale, perm)`` with ``separate=True``) becomes one array per matrix, as NumPy
        makes of it in SciPy's batch loop: shape (..., 2, n), dtypes promoted."""
        if len({tuple(np.shape(p)) for p in parts if not isinstance(p, tuple)}) > 1:
            # (orth of matrices of different ranks) NumPy's error in SciPy's loop
            raise ValueError("all input arrays must have the same shape")
        out = _tensor(tuple(parts), device)
        return out.reshape(self.shape + tuple(out.shape[1:]))


def _tensor(p, device):
    """One result of one matrix as a device tensor (a nested tuple stacked, as np.asarray)."""
    from trnscipy._torch import torch

    if isinstance(p, tuple):
        p = [_tensor(q, device) for q in p]
        dtype = functools.reduce(torch.promote_types, (q.dtype for q in p))
        return torch.stack([q.to(dtype) for q in p])
    return p if is_torch_array(p) else torch.as_tensor(np.asarray(p), device=device)


def _tensors(out):
    """The tensors of a result tuple, nested tuples included."""
    return [t for p in out for t in (_tensors(p) if isinstance(p, tuple) else [p])
            if is_torch_array(t)]


def plan(func, argdefs, args, kwargs):
    """A ``Batch`` when an operand of ``func(*args, **kwargs)`` has batch dimensions under
    ``argdefs``, else None; SciPy's ValueError when the batch shapes do not broadcast or
    the batch is empty."""
    try:
        bound = _signature(func).bind(*args, **kwargs).arguments
    except TypeError:
        return None  # the implementation raises SciPy's TypeError
    cores, batch_shapes = {}, []
    for path, ndim in argdefs:
        shape = _shape(_get(bound, path))
        if shape is None:
            continue
        if ndim == "1|2":
            ndim = 2 if len(shape) >= 2 else 1
        if len(shape) < ndim:
            return None  # too few dimensions: the implementation raises SciPy's error
        cores[path] = shape[len(shape) - ndim:]
        batch_shapes.append(shape[:len(shape) - ndim])
    if not any(batch_shapes):
        return None
    batch_shape = tuple(np.broadcast_shapes(*batch_shapes))
    if math.prod(batch_shape) == 0:
        raise ValueError(f"`{func.__name__}` does not support zero-size batches.")
    return Batch(func, bound, cores, batch_shape)
