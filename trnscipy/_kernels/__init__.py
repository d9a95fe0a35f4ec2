"""The kernel seam: one entry point per operation, the implementation chosen by device kind.

Containers and solvers call ``kernel("csr_matvec", device)(...)`` and never branch on
the device themselves; a container calls its own format's primitives
(``<format>_matvec``), so kernels never branch on the format either.  Implementations
register per kind; a kind without its own implementation uses its parent's (neuron ->
xla -> generic, cuda -> generic, cpu -> generic).  "generic" kernels are plain torch ops
that run anywhere.  NKI kernels for Trainium plug in here as "neuron" registrations.
"""

import importlib

from trnscipy._device import device_kind

__all__ = ["register", "kernel", "kind_kernel"]

_PARENT = {"neuron": "xla", "xla": "generic", "cuda": "generic", "cpu": "generic"}
_MODULES = {
    "generic": "trnscipy._kernels._generic",
    "cpu": "trnscipy._kernels._cpu",
    "cuda": "trnscipy._kernels._cuda",
    "xla": "trnscipy._kernels._xla",
    "neuron": "trnscipy._kernels._neuron",
}
_IMPLS = {}
_loaded = set()


def register(op, *kinds):
    """Decorator: register ``fn`` as the ``op`` kernel for each of ``kinds``."""

    def decorate(fn):
        for kind in kinds:
            _IMPLS[(op, kind)] = fn
        return fn

    return decorate


def _load(kind):
    if kind not in _loaded:
        _loaded.add(kind)
        try:
            importlib.import_module(_MODULES[kind])
        except ModuleNotFoundError as exc:
            if exc.name != _MODULES[kind]:
                raise


def kernel(op, device):
    """The ``op`` implementation for ``device`` (a torch.device)."""
    impl = kind_kernel(op, device_kind(device))
    if impl is None:
        raise NotImplementedError(f"no {op!r} kernel for device {device}")
    return impl


def kind_kernel(op, kind):
    """The ``op`` implementation for device kind ``kind`` (or its parent's), else None."""
    while kind is not None:
        _load(kind)
        impl = _IMPLS.get((op, kind))
        if impl is not None:
            return impl
        kind = _PARENT.get(kind)
    return None
