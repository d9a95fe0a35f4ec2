"""The capability table: what each kind of device can run.

Two parts, consulted by the dispatcher, the kernel seam and the device implementations;
nothing else decides where work runs:

- ``CAPABILITIES``: one ``Capability`` per device kind, the facts of the device (float64,
  complex, sparse layouts ...), measured (docs/architecture.md, decisions 0003, 0005).
- the declarations: a function's limits, declared beside the function (``@dispatch(...,
  host=..., double_float=...)``, or ``declare`` for methods), recorded here by name.

A function with no declaration runs on every kind that can compute in its dtype.
"""

from dataclasses import dataclass

import numpy as np

from trnscipy._errors import fallback

__all__ = ["Capability", "CAPABILITIES", "Declaration", "capability", "declaration",
           "declarations", "declare", "host_kinds", "runs_on_device"]


@dataclass(frozen=True)
class Capability:
    kind: str
    float64: bool = True
    complex: bool = True
    # torch sparse layouts (sparse_csr_tensor ...) exist on this device
    sparse_layouts: bool = True
    # reading a device scalar on the host costs no graph execution or stream sync
    # (solvers then test convergence every iteration and update in place)
    host_reads_free: bool = False
    # device->host copies of complex128 lose the imaginary part (torch-xla 2.9,
    # measured): copy the real and imaginary parts separately
    split_complex128_to_host: bool = False
    # the device_loop kernel leaves its loop on a device flag (an XLA While whose
    # condition reads it): a Krylov solve then runs to its stop flag in one execution,
    # not one execution and host read per block of iterations
    device_while: bool = False


CAPABILITIES = {
    "cpu": Capability("cpu", host_reads_free=True),
    "cuda": Capability("cuda"),
    # torch-xla (PJRT CPU here): no torch sparse layouts.
    "xla": Capability("xla", sparse_layouts=False, split_complex128_to_host=True,
                      device_while=True),
    # Trainium: no float64, no complex arithmetic, no torch sparse layouts.
    "neuron": Capability("neuron", float64=False, complex=False, sparse_layouts=False,
                         split_complex128_to_host=True, device_while=True),
}


@dataclass(frozen=True)
class Declaration:
    """A function's limits: the device kinds that run it on the host (``host``, a
    DeviceFallbackWarning saying ``why``), and the kinds without float64 where it has a
    float64-accurate double-float method (``double_float``: it runs on the device with
    float64 data; the kernels registered for the kind do the double-float work), and the
    kinds without complex arithmetic where it takes complex data apart by data movement
    (``complex_parts``: views of the real and imaginary parts, real arithmetic on them)."""

    name: str
    host: frozenset = frozenset()
    double_float: frozenset = frozenset()
    why: str = ""
    complex_parts: frozenset = frozenset()


# name -> Declaration.  Filled as the declaring modules are imported: a declaration is
# made where its function is defined, so it exists before the function can be called.
_DECLARED = {}


def declare(name, *, host=(), double_float=(), why="", complex_parts=()):
    """Declare the limits of the function (or method) the capability table knows as
    ``name`` (a dispatch wrapper's ``_trnscipy_name``): see ``Declaration``.  Returns the
    declaration.  Declaring a name again with other limits is an error."""
    host, double_float = frozenset(host), frozenset(double_float)
    unknown = (host | double_float) - CAPABILITIES.keys()
    if unknown:
        raise ValueError(f"{name}: unknown device kinds {sorted(unknown)}")
    if host & double_float:
        raise ValueError(f"{name}: {sorted(host & double_float)} both host and double_float")
    if any(CAPABILITIES[k].float64 for k in double_float):
        raise ValueError(f"{name}: double_float names a kind with float64")
    if bool(host) != bool(why):
        raise ValueError(f"{name}: host kinds and why go together")
    if host & frozenset(complex_parts):
        raise ValueError(f"{name}: {sorted(host & frozenset(complex_parts))} both host and "
                         "complex_parts")
    decl = Declaration(name, host, double_float, why, frozenset(complex_parts))
    if _DECLARED.setdefault(name, decl) != decl:
        raise ValueError(f"{name} is declared twice: {_DECLARED[name]} and {decl}")
    return decl


def declaration(name):
    """The declaration of ``name``, or None (no limits declared)."""
    return _DECLARED.get(name)


def declarations():
    """Every declaration made so far (by the modules imported so far)."""
    return dict(_DECLARED)


def host_kinds(name):
    """The device kinds on which ``name`` runs on the host."""
    decl = _DECLARED.get(name)
    return decl.host if decl is not None else frozenset()


_FLOAT64 = np.dtype(np.float64)


def capability(kind):
    return CAPABILITIES[kind]


def _dtype_problem(cap, dtype):
    """Why ``cap`` cannot compute in ``dtype`` (a NumPy dtype), or None."""
    if dtype is None:
        return None
    if not cap.complex and dtype.kind == "c":
        return f"{cap.kind} devices have no complex arithmetic ({dtype})"
    component_size = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    if not cap.float64 and dtype.kind in "fc" and component_size > 4:
        return f"{cap.kind} devices have no float64 arithmetic ({dtype})"
    return None


def runs_on_device(op, kind, dtype=None):
    """True if ``op`` can run on a device of ``kind`` in ``dtype``.

    When it cannot, announce the host fallback (DeviceFallbackWarning, or
    DeviceUnsupportedError under TRNSCIPY_STRICT=1) and return False.
    """
    cap = CAPABILITIES[kind]
    decl = _DECLARED.get(op)
    if decl is not None and kind in decl.host:
        fallback(op, f"no {kind} implementation ({decl.why})", stacklevel=4)
        return False
    if decl is not None and kind in decl.complex_parts and dtype is not None \
            and dtype.kind == "c":
        dtype = np.empty(0, dtype).real.dtype  # computes on the parts
    problem = _dtype_problem(cap, dtype)
    if problem is not None and not (decl is not None and kind in decl.double_float
                                    and dtype == _FLOAT64):
        fallback(op, problem, stacklevel=4)
        return False
    return True
