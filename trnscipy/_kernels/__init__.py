"""The backends: one object per device kind, holding that kind's device primitives.

``backend(device)`` returns the backend of a torch.device: an instance of ``Generic``
(plain torch ops, every device), ``Cpu``, ``Cuda`` or ``Xla`` (each a ``Generic``), or
``Neuron`` (an ``Xla``: Trainium, or ``TRNSCIPY_EMULATE=neuron``).  A kind overrides the
primitives it does better and inherits the rest; the primitives and their signatures are
the ``Backend`` protocol (``_backend.py``).  Containers call their own format's product
(``backend(A.device).csr_matvec(A, x)``), solvers the loops and reductions
(``backend(device).device_loop(...)``); nothing above this package branches on the
device kind to pick a primitive.  NKI kernels for Trainium become ``Neuron`` methods.

Each kind's class is imported when a device of that kind is first met (``_create``:
``Xla`` imports torch-xla), never by import side effect.

``register``/``kernel`` are the algorithm table (transitional, issue 28 item 2): whole
algorithms or strategies per device kind (``"linalg.qr"``, ``"sparse.linalg.spsolve"``),
registered beside the algorithm and looked up along the backends' class hierarchy
(neuron -> xla -> generic, cuda/cpu -> generic).  Device primitives are not in it.
"""

from trnscipy._device import device_kind

__all__ = ["backend", "kind_backend", "register", "kernel", "kind_kernel"]

_BACKENDS = {}  # device kind -> its backend instance


def _create(kind):
    """The backend instance of device kind ``kind`` (one per kind, made on first use)."""
    if kind == "cpu":
        from trnscipy._kernels._cpu import Cpu as cls
    elif kind == "cuda":
        from trnscipy._kernels._cuda import Cuda as cls
    elif kind == "xla":
        from trnscipy._kernels._xla import Xla as cls
    elif kind == "neuron":
        from trnscipy._kernels._neuron import Neuron as cls
    else:  # any other torch device (mps, meta ...): plain torch ops
        from trnscipy._kernels._generic import Generic as cls
    return cls()


def kind_backend(kind):
    """The backend of device kind ``kind`` (``"cpu"``, ``"cuda"``, ``"xla"``, ``"neuron"``,
    ``"generic"``)."""
    impl = _BACKENDS.get(kind)
    if impl is None:
        impl = _BACKENDS[kind] = _create(kind)
    return impl


def backend(device):
    """The backend of ``device`` (a torch.device)."""
    return kind_backend(device_kind(device))


# ---- the algorithm table (transitional) ------------------------------------------------

_IMPLS = {}  # (op, kind) -> function


def register(op, *kinds):
    """Decorator: register ``fn`` as algorithm ``op`` for each device kind of ``kinds``."""

    def decorate(fn):
        for kind in kinds:
            _IMPLS[(op, kind)] = fn
        return fn

    return decorate


def kernel(op, device):
    """Algorithm ``op`` for ``device`` (a torch.device): see ``kind_kernel``."""
    impl = kind_kernel(op, device_kind(device))
    if impl is None:
        raise NotImplementedError(f"no {op!r} implementation for device {device}")
    return impl


def kind_kernel(op, kind):
    """Algorithm ``op`` registered for device kind ``kind`` or the nearest kind its backend
    extends (the backend classes' bases), else None."""
    for cls in type(kind_backend(kind)).__mro__:
        impl = _IMPLS.get((op, getattr(cls, "kind", None)))
        if impl is not None:
            return impl
    return None
