"""The routing rule, in one place.

    a distributed operand (trnscipy.distributed)              -> distributed implementation
    device operands (torch tensors, trnscipy device objects)  -> device implementation
      one of them requiring a gradient (grad mode on)         -> differentiable implementation
    no device operand, inside ``offload(dev)`` (or TRNSCIPY_OFFLOAD)
                                                              -> device implementation on dev,
                                                                 results back to NumPy/SciPy
    otherwise (NumPy, SciPy sparse, scalars, lists)           -> SciPy itself, untouched

Host arrays mixed with a device operand are moved to that operand's device;
operands on two devices raise ValueError.  A host operand the device cannot hold (a
dtype torch has no tensors of or few ops for: longdouble, uint16-64, object, str; a
sparse format or dimension without a device container: lil, dok, n-D COO) sends the
call to SciPy with a DeviceFallbackWarning: SciPy computes or raises its own error.
Array-likes (lists, scalars) stay as they are: device implementations convert them
as SciPy does (np.asarray, SciPy's dtype rules) on the device ``call_device`` gives.
Before a device implementation runs,
the capability table is asked whether the device can run it in the operands'
dtype; if not, the call runs on SciPy with a DeviceFallbackWarning (an error
under TRNSCIPY_STRICT=1) and the results go back to the device.
"""

import contextlib
import contextvars
import functools
import os
import warnings

import numpy as np
import scipy.sparse as _sp
from array_api_compat import is_torch_array

from trnscipy import _batch
from trnscipy._capabilities import declaration, declare, runs_on_device
from trnscipy._device import device_kind, offloading, resolve_device, serving_offload
from trnscipy._dtypes import device_dtype_problem
from trnscipy._errors import fallback
from trnscipy._torch import torch
from trnscipy._transfer import (
    _to_device,
    _to_host,
    device_form_problem,
    device_storage,
    held,
    stores_float32,
)

__all__ = ["dispatch", "host_only", "find_device", "call_device", "requires_grad", "offload",
           "offloading", "register_distributed"]

# The offload target: a device name until first use, then a torch.device.
_OFFLOAD = contextvars.ContextVar("trnscipy_offload",
                                  default=os.environ.get("TRNSCIPY_OFFLOAD") or None)

# The device the running device implementation was routed to (for operands with none).
_CALL_DEVICE = contextvars.ContextVar("trnscipy_call_device", default=None)

# SciPy function -> its distributed implementation (trnscipy.distributed registers them).
_DISTRIBUTED = {}

_SCAN_LIMIT = 256  # items of a list/tuple operand inspected for device data


# Types that are never device data: checked first, to keep SciPy calls cheap.
_PYTHON_SCALARS = frozenset({float, int, complex, bool, str, type(None)})
_HOST_TYPES = _PYTHON_SCALARS | {np.ndarray}


def _device_of(x, depth=0):
    kind = type(x)
    if kind in _HOST_TYPES:
        return None
    if kind is tuple or kind is list:
        found = None
        if depth < 2 and len(x) <= _SCAN_LIMIT:
            for item in x:
                if type(item) not in _HOST_TYPES:
                    found = _merge(found, _device_of(item, depth + 1))
        return found
    if getattr(x, "_trnscipy_device_object", False):
        return x.device
    placement = getattr(x, "_trnscipy_placement", None)
    if placement is not None:
        return placement
    if is_torch_array(x):
        return x.device
    return None


def _merge(found, device):
    if device is None:
        return found
    if found is None or found == device:
        return device
    raise ValueError(f"operands are on two devices, {found} and {device}; "
                     "move them to one device with trnscipy.to_device")


def find_device(args, kwargs=None):
    """The device of the device-backed operands in ``args``/``kwargs`` (None: all host)."""
    found = None
    for x in args:
        if type(x) not in _HOST_TYPES:
            found = _merge(found, _device_of(x))
    if kwargs:
        for x in kwargs.values():
            if type(x) not in _HOST_TYPES:
                found = _merge(found, _device_of(x))
    return found


def call_device(*operands):
    """The device a device implementation computes on: its device operands' device, else
    the device the dispatcher routed the call to (offload with only array-likes, such as
    ``cholesky([[4, 2], [2, 3]])``).  None outside a routed call without device operands."""
    # a solver passes (args, kwargs): the keyword operands are looked at too
    args = [x for x in operands if type(x) is not dict]
    kwargs = {k: v for x in operands if type(x) is dict for k, v in x.items()}
    device = find_device(args, kwargs)
    return device if device is not None else _CALL_DEVICE.get()


def requires_grad(*operands):
    """True when grad mode is on and an operand (a tensor, a sparse container's ``data``)
    requires a gradient: the call then goes to its differentiable implementation."""
    for x in operands:
        if type(x) in _HOST_TYPES:
            continue
        if getattr(x, "_trnscipy_device_object", False) and hasattr(x, "format"):
            x = x.data
        if is_torch_array(x) and x.requires_grad:
            return torch.is_grad_enabled()
    return False


def _is_host_array(x):
    return isinstance(x, np.ndarray) or _sp.issparse(x)


def _move(obj, device, depth=0):
    """Move host arrays and SciPy sparse objects in an argument tree to ``device``."""
    if _is_host_array(obj):
        return _to_device(obj, device, strict=False)
    if depth < 2 and type(obj) in (tuple, list):
        moved = [_move(x, device, depth + 1) for x in obj]
        if all(m is x for m, x in zip(moved, obj, strict=True)):
            return obj  # keep the caller's list: solvers fill outer_v / CU in place
        return type(obj)(moved)
    return obj


def _host(obj, depth=0):
    """Bring device data in an argument tree to the host."""
    if is_torch_array(obj) or getattr(obj, "_trnscipy_device_object", False):
        return _to_host(obj, strict=False)
    if depth < 2 and type(obj) in (tuple, list):
        return type(obj)(_host(x, depth + 1) for x in obj)
    return obj


def _working_dtype(args, kwargs, double=False):
    """NumPy dtype the operation computes in: the first device operand's (ints promote to
    float64, as SciPy; with ``double``, float32/complex64 too), complex where any operand
    is (a real matrix with a complex right-hand side computes in complex).  Where there is
    no device operand, array-likes (lists) give the dtype NumPy reads them as
    (``orthogonal_procrustes(list, list)``)."""
    operands = (*args, *(kwargs or {}).values())
    dtypes = [d for x in operands for d in _device_dtypes(x)]
    if not dtypes:
        dtypes = [d for x in operands if type(x) is list
                  for d in [_list_dtype(x)] if d is not None and d.kind in "biufc"]
    if not dtypes:
        return None
    dtype = dtypes[0] if dtypes[0].kind in "fc" and not double else np.dtype(np.float64)
    if dtypes[0].kind == "c" and double:
        dtype = np.dtype(np.complex128)
    if dtype.kind != "c" and any(d.kind == "c" for d in dtypes):
        dtype = np.result_type(dtype, np.complex64)
    return dtype


def _device_dtypes(x):
    """[the NumPy dtype of ``x``] for a device operand (not inside lists: hstack's blocks
    are moved, not computed with), else []."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not (is_torch_array(x) or getattr(x, "_trnscipy_device_object", 0)):
        return []
    from trnscipy._dtypes import to_numpy_dtype

    return [to_numpy_dtype(dtype)]


def _list_dtype(x):
    """The dtype NumPy reads a list as, or None (not an array-like of numbers)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(x).dtype
    except Exception:  # noqa: BLE001 -- not an array-like of numbers
        return None


def _held(obj, depth=0):
    """Tensors in an argument tree as a device without float64 holds them (trnscipy's
    Float32StorageWarning for float64 tensors that did not come exactly)."""
    if is_torch_array(obj):
        return held(obj)
    if depth < 2 and type(obj) in (tuple, list):
        moved = [_held(x, depth + 1) for x in obj]
        if all(m is x for m, x in zip(moved, obj, strict=True)):
            return obj
        return type(obj)(moved)
    return obj


def _list_problem(x):
    """Why the array a list of numbers makes (np.asarray) has no device form, or None
    (lists of other things, ragged lists: left to the implementation)."""
    dtype = _list_dtype(x)
    return None if dtype is None or dtype.kind == "O" else device_dtype_problem(dtype)


def _host_problem(obj, depth=0):
    """Why a host operand in an argument tree cannot go to a device implementation (its
    dtype, format or dimensions), or None."""
    kind = type(obj)
    if kind in _PYTHON_SCALARS:
        return None
    if kind is tuple or kind is list:
        if depth >= 2:
            return None
        for x in obj:
            problem = _host_problem(x, depth + 1)
            if problem is not None:
                return problem
        return _list_problem(obj) if kind is list and find_device((obj,)) is None else None
    return device_form_problem(obj)


def _operands_problem(args, kwargs):
    for x in (*args, *kwargs.values()):
        problem = _host_problem(x)
        if problem is not None:
            return problem
    return None


def _run_on_device(name, scipy_func, device_impl, device, args, kwargs, composite=False,
                   double=False, batch=None, offloaded=False, grad=None):
    """``offloaded``: the call of host operands that offload sent here (its host results
    stay on the host); calls with device operands, also those nested in an offloaded
    implementation, get device results.  ``grad``: the differentiable implementation,
    for a call with an operand that requires a gradient (``requires_grad``)."""
    problem = _operands_problem(args, kwargs)
    if problem is not None:
        fallback(name, problem, stacklevel=5 if offloaded else 4)
        result = _on_host(scipy_func, args, kwargs)
        return result if offloaded else _to_device(result, device, strict=False)
    # (an offloaded call SciPy must run gets the caller's own arrays: its overwrite_*
    # then writes where SciPy's does)
    caller = (args, kwargs)
    with device_storage(device):
        given = (*args, *kwargs.values())
        args = tuple(_move(x, device) for x in args)
        kwargs = {k: _move(v, device) for k, v in kwargs.items()}
        copies = _copies(given, (*args, *kwargs.values())) if offloaded else ()
        lists = _lists(given, (*args, *kwargs.values()))
        if stores_float32(device):
            args = tuple(_held(x) for x in args)
            kwargs = {k: _held(v) for k, v in kwargs.items()}
        if device_impl is not None and (composite or runs_on_device(
                name, device_kind(device), _working_dtype(args, kwargs, double))):
            if grad is not None and requires_grad(*args, *kwargs.values()):
                device_impl = _differentiable(grad, scipy_func, device_impl)
            argdefs, stacks = batch or (None, False)
            plan = _batch.plan(scipy_func, argdefs, args, kwargs) if argdefs else None
            token = _CALL_DEVICE.set(device)
            layouts = _LAYOUTS.set({id(m): (x.flags.c_contiguous, x.flags.f_contiguous,
                                            _behaved(x))
                                    for x, m, _ in copies}) if offloaded else None
            try:
                if plan is None:
                    result = device_impl(*args, **kwargs)
                    _lists_back(lists, offloaded)
                    return _written_back(copies, result)
                if stacks:  # the implementation takes the broadcast stacks at once
                    stacked_args, stacked_kwargs = plan.broadcast(device)
                    try:
                        return device_impl(*stacked_args, **stacked_kwargs)
                    except _batch.PerMatrix:
                        pass  # no batched method for these operands: SciPy's loop below
                # SciPy's own loop, over the device implementation on every device: a
                # batch must equal the loop of its single calls, which run here too
                return _written_back(copies, plan.loop(device_impl, device))
            finally:
                _CALL_DEVICE.reset(token)
                if layouts is not None:  # (nested calls keep the offloaded call's)
                    _LAYOUTS.reset(layouts)
        if device_impl is None:  # (the capability table announced its own refusal)
            fallback(name, "it has no device implementation", stacklevel=4)
        if offloaded:
            return scipy_func(*caller[0], **caller[1])
        return _to_device(_on_host(scipy_func, args, kwargs), device, strict=False)


def _differentiable(grad, scipy_func, device_impl):
    """The call of ``grad(scipy_func, device_impl, args, kwargs)``: the differentiable
    implementation runs the forward and adjoint problems through ``device_impl``."""
    def impl(*args, **kwargs):
        return grad(scipy_func, device_impl, args, kwargs)

    return impl


# The host arrays' layouts of the device copies an offloaded call works on (an XLA
# tensor has no strides): SciPy's overwrite rules read them (``contiguity``).
_LAYOUTS = contextvars.ContextVar("trnscipy_layouts", default=None)


def contiguity(t):
    """(C-contiguous, F-contiguous) of tensor ``t``; for the device copy of a host array
    that offload made, the host array's."""
    flags = (_LAYOUTS.get() or {}).get(id(t))
    if flags is not None:
        return flags[:2]
    return t.is_contiguous(), t.mT.is_contiguous() if t.ndim == 2 else t.is_contiguous()


def behaved(t):
    """Whether tensor ``t`` (for offload's device copy: the host array) is what SciPy's
    Cython updates compute in as it is: native byte order, aligned, strides positive
    multiples of the item size (a tensor's always are)."""
    flags = (_LAYOUTS.get() or {}).get(id(t))
    return True if flags is None else flags[2]


def _behaved(x):
    return (x.dtype.isnative and x.flags.aligned
            and all(s > 0 and s % x.itemsize == 0 for s in x.strides))


def _copies(given, moved):
    """(host array, its device copy, the copy's version) for the writable NumPy arrays
    offload moved into tensors of their own (a CPU tensor shares the array's memory)."""
    return tuple((x, m, m._version) for x, m in zip(given, moved, strict=True)
                 if isinstance(x, np.ndarray) and x.flags.writeable and is_torch_array(m)
                 and not (m.device.type == "cpu" and np.may_share_memory(x, m.detach().numpy())))


def _lists(given, moved):
    """(caller's list, the list the implementation gets, that list's items) for the list
    operands: solvers fill some in place between calls (lgmres ``outer_v``, gcrotmk ``CU``)."""
    return tuple((g, m, list(m)) for g, m in zip(given, moved, strict=True) if type(g) is list)


def _lists_back(lists, offloaded):
    """A list operand the implementation changed in place gets the new items in the
    caller's list: items it kept are the caller's own, new ones are host arrays where the
    call was offloaded (SciPy fills ``outer_v`` with NumPy arrays; device tensors there
    would route the next host call to the device and return tensors)."""
    for caller, seen, before in lists:
        if len(seen) == len(before) and all(a is b for a, b in zip(seen, before, strict=True)):
            continue  # (unchanged: the caller's list stays as it is)
        own = {id(m): g for g, m in zip(caller, before, strict=False)}
        caller[:] = [own[id(item)] if id(item) in own else
                     _host(item) if offloaded else item for item in seen]


def _written_back(copies, result):
    """An offloaded call that wrote into an operand's device copy (SciPy's overwrite_a /
    overwrite_b, where LAPACK works in the caller's array) writes the host array too, and
    a result that is that copy is the host array itself, as SciPy returns it."""
    for host, copy, version in copies:
        if copy._version != version:
            host[...] = _to_host(copy, strict=False)
            if type(result) is tuple:  # (lu_factor, cho_factor: the factor and more)
                result = tuple(host if r is copy else r for r in result)
            elif result is copy:
                result = host
    return result


def _on_host(scipy_func, args, kwargs):
    return scipy_func(*(_host(x) for x in args), **{k: _host(v) for k, v in kwargs.items()})


def _offload_target():
    target = _OFFLOAD.get()
    if target is not None and isinstance(target, str):
        target = resolve_device(target)
        _OFFLOAD.set(target)
    return target


def _run_offloaded(name, scipy_func, device_impl, device, args, kwargs, composite, double,
                   batch):
    with serving_offload():
        try:
            result = _run_on_device(name, scipy_func, device_impl, device, args, kwargs,
                                    composite, double, batch, offloaded=True)
        except Exception as err:
            # results an exception carries (ArpackNoConvergence's converged pairs) come
            # back to the host as the call's results would
            for key, value in vars(err).items():
                setattr(err, key, _to_host(value, strict=False))
            raise
    return _to_host(result, strict=False)


def register_distributed(scipy_func):
    """Decorator: the decorated function is the distributed implementation of
    ``scipy_func`` (called when an operand carries a ``_trnscipy_placement``)."""
    def decorate(impl):
        _DISTRIBUTED[scipy_func] = impl
        return impl

    return decorate


def _run_distributed(name, scipy_func, args, kwargs):
    impl = _DISTRIBUTED.get(scipy_func)
    if impl is None:
        raise ValueError(f"{name} has no distributed implementation; "
                         "bring the operands together with trnscipy.distributed.gather")
    return impl(*args, **kwargs)


def dispatch(scipy_func, *, name=None, offloadable=True, composite=False, double=False,
             batch=None, stacks=False, host=(), double_float=(), why="", complex_parts=(),
             grad=None):
    """Decorator: the decorated function is the device implementation of ``scipy_func``.

    The returned wrapper has ``scipy_func``'s name and docstring and applies the
    routing rule above.  ``offloadable=False`` for constructors, whose host
    results stay SciPy objects even inside ``offload()``.  ``composite=True`` for
    an implementation that only calls other routed functions (each asks the
    capability table itself) and moves data: the table is not asked for ``name``.
    An implementation with arithmetic of its own is not composite (on a device
    without float64 that arithmetic would escape the table's dtype check).
    ``double=True`` for functions that compute in float64 (complex128) whatever their
    operands' precision, as SciPy's do: the table is asked for that dtype.

    SciPy's batch rule (``_batch``): ``batch`` declares the ``(argument, core ndim)``
    pairs of a function SciPy batches in its own code (default: what SciPy's
    ``_apply_over_batch`` declares); ``stacks=True`` says the implementation takes the
    broadcast stacks (one device execution for the batch).  Without it a batched call
    loops over the implementation, as SciPy loops over its own (one device execution
    per matrix), so that a batch gives what its single calls give.

    The function's limits are declared here, beside it (``_capabilities.declare``):
    ``host`` names the device kinds that run it on the host (``why``: the reason their
    DeviceFallbackWarning gives); ``double_float`` the kinds without float64 where it has a
    double-float method, so that it runs there on float64 data; ``complex_parts`` the kinds
    without complex arithmetic where it takes complex data apart by data movement.

    ``grad``: the differentiable implementation (``trnscipy._autograd``), called as
    ``grad(scipy_func, device_impl, args, kwargs)`` instead of the device implementation
    when grad mode is on and an operand requires a gradient; calls without gradients
    never reach it.
    """
    name = name or f"{scipy_func.__module__}.{scipy_func.__name__}"
    if host or double_float or why or complex_parts:
        declare(name, host=host, double_float=double_float, why=why,
                complex_parts=complex_parts)
    argdefs = batch if batch is not None else _batch.core_dims(scipy_func)
    batch = (argdefs, stacks) if argdefs else None

    def decorate(device_impl):
        @functools.wraps(scipy_func)
        def wrapper(*args, **kwargs):
            device = find_device(args, kwargs)
            if getattr(device, "distributed", False):
                return _run_distributed(name, scipy_func, args, kwargs)
            if device is not None:
                return _run_on_device(name, scipy_func, device_impl, device, args, kwargs,
                                      composite, double, batch, grad=grad)
            if offloadable and _OFFLOAD.get() is not None:
                if device_impl is None:
                    fallback(name, "it has no device implementation", stacklevel=3)
                    return scipy_func(*args, **kwargs)
                return _run_offloaded(name, scipy_func, device_impl, _offload_target(),
                                      args, kwargs, composite, double, batch)
            return scipy_func(*args, **kwargs)

        wrapper._trnscipy_route = "device" if device_impl is not None else "host"
        wrapper._trnscipy_name = name  # the capability table's key for this function
        wrapper._trnscipy_capabilities = declaration(name)  # its limits, or None
        wrapper._trnscipy_device_impl = device_impl
        wrapper._trnscipy_grad = grad  # the differentiable implementation, or None
        wrapper._trnscipy_batch = batch  # ((argument, core ndim) pairs, stacks) or None
        wrapper.__wrapped__ = scipy_func
        return wrapper

    return decorate


def host_only(scipy_func):
    """SciPy's function with the routing rule: device data runs on the host with a
    DeviceFallbackWarning and the results go back to the device."""
    return dispatch(scipy_func)(None)


@contextlib.contextmanager
def offload(device=None):
    """Inside the block, trnscipy functions given NumPy/SciPy data compute on
    ``device`` (default: the default device) and return NumPy/SciPy results.

    Containers built from host data stay SciPy objects.  ``TRNSCIPY_OFFLOAD=xla``
    (read at import) does the same for a whole process.
    """
    token = _OFFLOAD.set(resolve_device(device))
    try:
        yield _OFFLOAD.get()
    finally:
        _OFFLOAD.reset(token)
