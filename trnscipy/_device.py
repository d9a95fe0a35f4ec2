"""Device names, the default device, and the kind of a device.

The kind ("cpu", "cuda", "xla", "neuron") is what the capability table and the
kernel seam key on.  An XLA device is of kind "neuron" on Trainium (torch-neuronx
loaded) or when ``TRNSCIPY_EMULATE=neuron`` asks the XLA lane to obey Neuron's
limits.
"""

import contextlib
import contextvars
import os
import sys

from trnscipy._torch import torch, torch_xla_available

__all__ = ["resolve_device", "default_device", "device_kind", "emulating_neuron",
           "offloading", "serving_offload", "materialize", "VALID_DEVICES"]

# True while a device implementation runs on behalf of host (offloaded) inputs: set by the
# routing layer (_dispatch), read by the backends and algorithms below it.
_OFFLOADING = contextvars.ContextVar("trnscipy_offloading", default=False)


def offloading():
    """True while a device implementation serves an offloaded (host-data) call."""
    return _OFFLOADING.get()


@contextlib.contextmanager
def serving_offload():
    """The block runs a device implementation for an offloaded (host-data) call."""
    token = _OFFLOADING.set(True)
    try:
        yield
    finally:
        _OFFLOADING.reset(token)


def materialize(tensors):
    """Compute ``tensors`` now, in one graph execution on a lazy (XLA) device; eager
    devices already have (the backends' ``materialize`` primitive).

    Reading a result's tensors one by one traces one graph per tensor, and
    torch-xla 2.9 can hand two such graphs the same compiled executable when they
    differ only in which same-shaped input feeds which op (pytorch/xla#8353, open):
    ``row[order]`` then ``col[order]`` read back ``row[order]`` twice.  One graph
    for all of a result's tensors avoids that, at one graph execution.
    """
    tensors = list(tensors)
    if tensors and tensors[0].device.type == "xla":
        import torch_xla

        torch_xla._XLAC._xla_sync_multi(_with_held(tensors), devices=[], wait=False)


def _with_held(tensors):
    """``tensors`` and what they keep alive of the same computation: a view's base (a
    double-float tensor is a view of its float64 part) and a double-float tensor's low
    parts.  Left pending, the next sync would compute them in a graph of its own, one
    that differs between a first call and later ones (a compile each time it differs)."""
    out, seen, todo = [], set(), list(tensors)
    with torch._C.DisableTorchFunctionSubclass():
        while todo:
            t = todo.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            out.append(t)
            if t._base is not None:
                todo.append(t._base)
            todo.extend(getattr(t, "_low", None) or ())
    return out


VALID_DEVICES = ("cpu", "cuda", "cuda:<i>", "xla", "xla:<i>", "a torch.device")


def _neuron_present():
    return os.path.exists("/dev/neuron0")


def _xla_device(index=None):
    if not torch_xla_available():
        raise ValueError("device 'xla' needs torch-xla (pip install 'trnscipy[xla]') "
                         "or torch-neuronx on Trainium")
    if not _neuron_present():
        os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch_xla

    _setup_cache()
    return torch_xla.device(index) if index is not None else torch_xla.device()


def resolve_device(device=None):
    """Turn a device name or torch.device into a torch.device (None: the default)."""
    if device is None:
        return default_device()
    if type(device).__name__ == "device" and type(device).__module__ == "torch":
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be a str or torch.device, not {type(device).__name__}")
    name, _, index = device.partition(":")
    if index and not index.isdigit():
        name = device  # report the whole string below
    if name == "cpu" and not index:
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine")
        # Indexed, as the tensors on it report their device.
        return torch.device("cuda", int(index) if index else torch.cuda.current_device())
    if name == "xla":
        return _xla_device(int(index) if index else None)
    raise ValueError(f"unknown device {device!r}; valid devices: {', '.join(VALID_DEVICES)}")


def default_device():
    """``TRNSCIPY_DEVICE``, else xla on a Neuron host, else cuda if available, else cpu."""
    name = os.environ.get("TRNSCIPY_DEVICE")
    if name:
        return resolve_device(name)
    if _neuron_present() and torch_xla_available():
        return _xla_device()
    if torch.cuda.is_available():
        return resolve_device("cuda")
    return torch.device("cpu")


_FIXED_KINDS = {}  # torch.device -> kind, for every device but XLA's (emulation can change)


def device_kind(device):
    """The capability-table kind of a torch.device."""
    kind = _FIXED_KINDS.get(device)
    if kind is not None:
        return kind
    kind = device.type
    if kind == "xla":
        _setup_cache()
        return "neuron" if "torch_neuronx" in sys.modules or emulating_neuron() else kind
    _FIXED_KINDS[device] = kind
    return kind


_compilation_setup_done = False


def _setup_cache():
    """The persistent compilation cache, set up when trnscipy first meets an XLA device
    (before it compiles anything there: user tensors reach trnscipy through here)."""
    global _compilation_setup_done
    if not _compilation_setup_done:
        _compilation_setup_done = True
        from trnscipy._cache import setup_xla_cache

        setup_xla_cache(neuron="torch_neuronx" in sys.modules or emulating_neuron())


def emulating_neuron():
    """True under ``TRNSCIPY_EMULATE=neuron`` off Trainium: the XLA lane obeys Neuron's
    limits and holds float64 as float32 as a NeuronCore does."""
    return os.environ.get("TRNSCIPY_EMULATE") == "neuron" and "torch_neuronx" not in sys.modules
