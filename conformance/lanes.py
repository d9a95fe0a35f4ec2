"""Lanes: the ways trnscipy is run against SciPy.

    cpu         torch CPU tensors and trnscipy sparse objects on the CPU
    xla         the same on the torch-xla device (PJRT_DEVICE=CPU here, a NeuronCore on Trainium)
    xla-neuron  the xla lane with TRNSCIPY_EMULATE=neuron: no float64, no complex on device
    cuda        CUDA tensors, where a GPU is present
    offload     NumPy/SciPy inputs inside ``trnscipy.offload("cpu")``: results must be
                NumPy/SciPy objects of SciPy's own types

A lane moves a case's host inputs to its device (``put``), runs the trnscipy call in its
context, and says what the results must look like (``host_results``, ``device_type``).
"""

import contextlib
import importlib.util
import os

import numpy as np
import scipy.sparse as sp

__all__ = ["Lane", "LANES", "available_lanes", "lane_names"]


def _have_torch():
    return importlib.util.find_spec("torch") is not None


def _have_xla():
    return _have_torch() and importlib.util.find_spec("torch_xla") is not None


def _have_cuda():
    if not _have_torch():
        return False
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def _env(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


class Lane:
    """One way of running trnscipy: a device for the inputs, or offload of host inputs."""

    def __init__(self, name, device, available, *, host_results=False, env=None,
                 host_dtypes=()):
        self.name = name
        self.device_name = device
        self._available = available
        self.host_results = host_results  # results must be NumPy/SciPy (offload)
        self.env = env or {}
        # NumPy dtype kinds/sizes the lane's device cannot compute in: such cases are
        # expected to run on the host with a DeviceFallbackWarning.
        self.host_dtypes = frozenset(np.dtype(d) for d in host_dtypes)
        self._device = None

    def available(self):
        return self._available()

    @property
    def device(self):
        if self._device is None:
            import trnscipy

            self._device = trnscipy.resolve_device(self.device_name)
        return self._device

    @property
    def device_type(self):
        """torch device type results must be on (None for host results)."""
        return None if self.host_results else self.device.type

    @contextlib.contextmanager
    def context(self):
        """The environment (and offload block) the trnscipy call runs in."""
        with contextlib.ExitStack() as stack:
            for k, v in self.env.items():
                stack.enter_context(_env(k, v))
            if self.device_name == "xla" and not self.host_results:
                from trnscipy._transfer import device_storage

                stack.enter_context(device_storage(self.device))  # float64 held as float32
            if self.host_results:
                import trnscipy

                stack.enter_context(trnscipy.offload(self.device_name))
            yield

    def put(self, obj):
        """Move a host input (ndarray, SciPy sparse, or a tuple/list of them) to the lane."""
        if self.host_results:
            return obj
        if isinstance(obj, np.ndarray) or sp.issparse(obj):
            import trnscipy

            return trnscipy.to_device(obj, self.device)
        if type(obj) in (tuple, list):
            return type(obj)(self.put(x) for x in obj)
        return obj

    def expects_host(self, dtype):
        """True when a case computing in ``dtype`` must fall back to the host on this lane."""
        return dtype is not None and np.dtype(dtype) in self.host_dtypes

    def __repr__(self):
        return f"Lane({self.name!r})"


LANES = {
    "cpu": Lane("cpu", "cpu", _have_torch),
    "xla": Lane("xla", "xla", _have_xla),
    "xla-neuron": Lane("xla-neuron", "xla", _have_xla, env={"TRNSCIPY_EMULATE": "neuron"},
                       host_dtypes=(np.float64, np.complex64, np.complex128)),
    "cuda": Lane("cuda", "cuda", _have_cuda),
    "offload": Lane("offload", "cpu", _have_torch, host_results=True),
}


def lane_names():
    return list(LANES)


def available_lanes(names=None):
    """The lanes (all, or those named) that can run on this machine."""
    names = names or list(LANES)
    unknown = [n for n in names if n not in LANES]
    if unknown:
        raise ValueError(f"unknown lanes {unknown}; valid lanes: {', '.join(LANES)}")
    return [LANES[n] for n in names if LANES[n].available()]
