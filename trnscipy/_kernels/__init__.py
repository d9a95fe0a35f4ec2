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

``register``/``kernel`` are the algorithm table: whole algorithms or strategies per
device kind (``"linalg.qr"``, ``"sparse.linalg.spsolve"``), registered with ``@register``
beside the algorithm's code and looked up along the backends' class hierarchy (neuron ->
xla -> generic, cuda/cpu -> generic).  Device primitives are not in it.  ``PROVIDERS``
names, per family of algorithms (the op's name up to its last dot), the modules that
register them; ``kernel`` imports a family's modules before its first lookup in it, so
a lookup never depends on which modules the caller happened to import (modules above this
layer, hence named, not imported: tests/test_layers.py checks the table against the
registrations).
"""

import importlib
import sys

from trnscipy._device import device_kind

__all__ = ["backend", "kind_backend", "register", "kernel", "kind_kernel", "PROVIDERS"]

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


# ---- the algorithm table -----------------------------------------------------------------

# family -> the modules that register its algorithms (a new module that registers one is
# added here: tests/test_layers.py fails otherwise)
PROVIDERS = {
    "linalg": tuple(f"trnscipy.linalg.{m}" for m in (
        "_kernels", "_kernels_struct", "_basic", "_decomp_ldl", "_decomp_polar", "_procrustes",
        "_decomp_schur", "_decomp_qz", "_decomp_svd", "_matfuncs", "_solvers", "_xla_dense",
        "_xla_svd",
        "_refine", "_refine_band", "_refine_funcs", "_refine_lsq", "_refine_orth",
        "_refine_struct", "_refine_decomp", "_refine_schur", "_refine_qz", "_refine_matfuncs",
        "_decomp_update")),
    "sparse.linalg": tuple(f"trnscipy.sparse.linalg.{m}" for m in (
        "_dsolve.linsolve", "_dsolve._superlu", "_dsolve._triangular", "_dsolve._multifrontal",
        "_dsolve._ilu", "_dsolve._refine", "_norm", "_onenormest", "_refine_norm")),
    # the solver strategies: SciPy's loop on CPU views, the torch loop, double-float on Neuron
    "krylov": ("trnscipy._kernels._cpu", "trnscipy.sparse.linalg._isolve.utils",
               "trnscipy.sparse.linalg._isolve._refine"),
    "eigen": ("trnscipy._kernels._cpu", "trnscipy.sparse.linalg._isolve.utils",
              "trnscipy.sparse.linalg._eigen._refine"),
}

_IMPLS = {}  # (op, kind) -> function
_ORIGIN = {}  # (op, kind) -> the module that registered it (checked against PROVIDERS)
_LOADED = set()  # the families whose PROVIDERS are imported


def register(op, *kinds):
    """Decorator: register ``fn`` as algorithm ``op`` for each device kind of ``kinds``
    (called at the top level of a module that ``PROVIDERS`` lists for ``op``'s family)."""
    origin = sys._getframe(1).f_globals.get("__name__")

    def decorate(fn):
        for kind in kinds:
            _IMPLS[(op, kind)] = fn
            _ORIGIN[(op, kind)] = origin
        return fn

    return decorate


def family(op):
    """The family of algorithm ``op``: its name up to the last dot (``"sparse.linalg"``
    for ``"sparse.linalg.spsolve"``), the name itself without one (``"krylov"``)."""
    return op.rpartition(".")[0] or op


def _load(fam):
    if fam not in _LOADED:
        for module in PROVIDERS.get(fam, ()):
            importlib.import_module(module)
        _LOADED.add(fam)


def kernel(op, device):
    """Algorithm ``op`` for ``device`` (a torch.device): see ``kind_kernel``."""
    impl = kind_kernel(op, device_kind(device))
    if impl is None:
        raise NotImplementedError(f"no {op!r} implementation for device {device}")
    return impl


def kind_kernel(op, kind):
    """Algorithm ``op`` registered for device kind ``kind`` or the nearest kind its backend
    extends (the backend classes' bases), else None."""
    _load(family(op))
    for cls in type(kind_backend(kind)).__mro__:
        impl = _IMPLS.get((op, getattr(cls, "kind", None)))
        if impl is not None:
            return impl
    return None
