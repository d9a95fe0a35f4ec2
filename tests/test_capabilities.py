"""The capability table names real SciPy functions that trnscipy routes.

Its keys are the dotted paths of SciPy's functions (``dispatch`` names a routed function
``f"{scipy_func.__module__}.{scipy_func.__name__}"``, often a private module): a SciPy
release that moves a function would silently turn an entry into a dead key, and the
function would then run where the table says it must not.
"""

import dataclasses
import importlib
import inspect
import sys

import pytest

import trnscipy.linalg
import trnscipy.sparse
import trnscipy.sparse.linalg  # noqa: F401  (imports every routed module)
from trnscipy._capabilities import CAPABILITIES, Capability
from trnscipy.sparse.linalg._dsolve import _devicelu, _superlu

# runs_on_device names that are not dispatch wrappers: SuperLU's methods and attributes
METHOD_NAMES = {_superlu.SOLVE, _devicelu.FACTORS}


def _keys():
    """(kind, field, key) for every string in every set-valued field of the table."""
    out = []
    for kind, cap in CAPABILITIES.items():
        for f in dataclasses.fields(Capability):
            value = getattr(cap, f.name)
            if isinstance(value, (frozenset, set)):
                out.extend((kind, f.name, key) for key in sorted(value))
    return out


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


def _routed_names():
    """The names every dispatch wrapper in trnscipy's loaded modules records."""
    names = set()
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
                    names.add(name)
    return names


KEYS = _keys()


def test_the_table_has_keys():
    assert len(KEYS) > 20
    assert {field for _, field, _ in KEYS} >= {"host_ops", "double_float_ops"}


@pytest.mark.parametrize("kind,field,key", KEYS, ids=[f"{k}-{f}-{p}" for k, f, p in KEYS])
def test_key_names_a_scipy_function(kind, field, key):
    assert key.startswith("scipy."), key
    try:
        obj = _resolve(key)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{kind}.{field}: {key} is not in the installed SciPy ({exc})")
    if key not in METHOD_NAMES:
        assert callable(obj), key
        # the path is where the function lives (the name dispatch gives it), not an alias
        assert f"{obj.__module__}.{obj.__name__}" == key


@pytest.mark.parametrize("kind,field,key", KEYS, ids=[f"{k}-{f}-{p}" for k, f, p in KEYS])
def test_key_names_a_routed_function(kind, field, key):
    assert key in _routed_names() | METHOD_NAMES, (
        f"{kind}.{field}: no trnscipy function routes {key}")


def test_routed_names_are_dispatch_names():
    # the wrappers record the name the table is asked with
    assert trnscipy.sparse.linalg.cg._trnscipy_name == "scipy.sparse.linalg._isolve.iterative.cg"
    assert trnscipy.linalg.eigh._trnscipy_name == (
        f"{trnscipy.linalg.eigh.__wrapped__.__module__}.eigh")
    assert trnscipy.sparse.linalg.cg.__wrapped__ is __import__("scipy").sparse.linalg.cg
