"""Capability declarations name real SciPy functions that trnscipy routes.

A function's limits (the device kinds that run it on the host, those with a double-float
method) are declared beside it (``@dispatch(..., host=..., double_float=...)``, or
``_capabilities.declare`` for SuperLU's methods) under the dotted path of SciPy's function
(often a private module).  A SciPy release that moves a function would silently turn a
declaration into a dead name, and the function would then run where it must not.
"""

import importlib
import inspect
import sys
import warnings

import pytest

import trnscipy.linalg
import trnscipy.sparse
import trnscipy.sparse.linalg  # noqa: F401  (imports every routed module)
from trnscipy import DeviceFallbackWarning
from trnscipy._capabilities import CAPABILITIES, declaration, declarations, declare, runs_on_device
from trnscipy.sparse.linalg._dsolve import _multifrontal, _superlu

# declared names that are not dispatch wrappers: SuperLU's solve and its L/U export, each
# declared beside the code that asks for it
METHOD_NAMES = {_superlu.SOLVE: _superlu.SuperLU, _multifrontal.FACTORS: _multifrontal.DeviceLU}

DECLARED = declarations()
NAMES = sorted(DECLARED)


def _resolve(path):
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _wrappers():
    """name -> the dispatch wrappers in trnscipy's loaded modules that record it."""
    found = {}
    for modname, module in list(sys.modules.items()):
        if not modname.startswith("trnscipy") or module is None:
            continue
        for value in list(vars(module).values()):
            candidates = [value]
            if inspect.isclass(value) and value.__module__.startswith("trnscipy"):
                candidates += list(vars(value).values())
            for c in candidates:
                name = getattr(c, "_trnscipy_name", None)
                if isinstance(name, str):
                    found.setdefault(name, {})[id(c)] = c
    return {name: list(ws.values()) for name, ws in found.items()}


def test_there_are_declarations():
    assert len(NAMES) > 20
    assert any(d.host for d in DECLARED.values())
    assert any(d.double_float for d in DECLARED.values())


@pytest.mark.parametrize("name", NAMES)
def test_declaration_names_a_scipy_function(name):
    assert name.startswith("scipy."), name
    try:
        obj = _resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{name} is not in the installed SciPy ({exc})")
    if name not in METHOD_NAMES:
        assert callable(obj), name
        # the path is where the function lives (the name dispatch gives it), not an alias
        assert f"{obj.__module__}.{obj.__name__}" == name


@pytest.mark.parametrize("name", NAMES)
def test_declaration_is_carried_by_a_routed_function(name):
    if name in METHOD_NAMES:
        assert METHOD_NAMES[name].__module__.startswith("trnscipy.")
        return
    wrappers = _wrappers().get(name)
    assert wrappers, f"no trnscipy function routes {name}"
    for w in wrappers:
        assert w._trnscipy_route == "device", f"{name} is declared but has no device route"
        assert w._trnscipy_capabilities is DECLARED[name]


@pytest.mark.parametrize("name", NAMES)
def test_declaration_names_known_device_kinds(name):
    decl = DECLARED[name]
    assert decl.host or decl.double_float, f"{name} declares nothing"
    assert decl.host | decl.double_float <= CAPABILITIES.keys()
    assert not any(CAPABILITIES[kind].float64 for kind in decl.double_float)
    assert not decl.host or decl.why


def test_every_wrapper_carries_its_declaration():
    for name, wrappers in _wrappers().items():
        for w in wrappers:
            assert w._trnscipy_capabilities is declaration(name), name


UNDECLARED = "scipy.linalg.a_function_that_declares_nothing"  # (no routed function is left
# that declares nothing and has arithmetic of its own: schur was the last)


def test_declare_refuses_bad_declarations():
    with pytest.raises(ValueError, match="unknown device kinds"):
        declare(UNDECLARED, host=("tpu",), why="no such kind")
    with pytest.raises(ValueError, match="float64"):
        declare(UNDECLARED, double_float=("xla",))
    with pytest.raises(ValueError, match="why"):
        declare(UNDECLARED, host=("neuron",))
    with pytest.raises(ValueError, match="why"):
        declare(UNDECLARED, why="a reason for nothing")
    with pytest.raises(ValueError, match="complex_parts"):
        declare(UNDECLARED, host=("neuron",), why="both", complex_parts=("neuron",))
    with pytest.raises(ValueError, match="declared twice"):
        declare("scipy.linalg._matfuncs.funm", host=("xla",), why="other limits")
    assert declaration(UNDECLARED) is None
    assert DECLARED["scipy.linalg._matfuncs.funm"].host == {"neuron"}


def test_runs_on_device_reads_the_declarations():
    import numpy as np

    f64 = np.dtype(np.float64)
    eig = trnscipy.linalg.eig._trnscipy_name
    funm = trnscipy.linalg.funm._trnscipy_name  # (the complex Schur form: the host there)
    cg = trnscipy.sparse.linalg.cg._trnscipy_name
    schur = trnscipy.linalg.schur._trnscipy_name  # its double-float method
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runs_on_device(eig, "xla", f64)
        assert runs_on_device(cg, "neuron", f64)  # its double-float method
        assert runs_on_device(UNDECLARED, "neuron", np.dtype(np.float32))
        assert runs_on_device(schur, "neuron", f64)
        assert runs_on_device(eig, "neuron", f64)  # real Schur blocks, complex storage
    with pytest.warns(DeviceFallbackWarning, match="no neuron implementation .*complex"):
        assert not runs_on_device(funm, "neuron", np.dtype(np.float32))
    with pytest.warns(DeviceFallbackWarning, match="no float64"):
        assert not runs_on_device(UNDECLARED, "neuron", f64)
    with pytest.warns(DeviceFallbackWarning, match="no complex"):
        assert not runs_on_device(cg, "neuron", np.dtype(np.complex128))
    cdf2rdf = trnscipy.linalg.cdf2rdf._trnscipy_name  # complex data taken apart by views
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.complex64, np.complex128):
            assert runs_on_device(cdf2rdf, "neuron", np.dtype(dtype))


def test_routed_names_are_dispatch_names():
    # the wrappers record the name the declarations are made under
    assert trnscipy.sparse.linalg.cg._trnscipy_name == "scipy.sparse.linalg._isolve.iterative.cg"
    assert trnscipy.linalg.eigh._trnscipy_name == (
        f"{trnscipy.linalg.eigh.__wrapped__.__module__}.eigh")
    assert trnscipy.sparse.linalg.cg.__wrapped__ is __import__("scipy").sparse.linalg.cg
    assert trnscipy.linalg.polar._trnscipy_capabilities.double_float == {"neuron"}
