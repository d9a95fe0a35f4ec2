"""``scipy_trn``: SciPy with the public names of its three mirrored namespaces taken from
trnscipy.  The rewritten test files import ``scipy_trn``, ``scipy_trn.linalg``,
``scipy_trn.sparse`` and ``scipy_trn.sparse.linalg`` where they imported SciPy's.

An attribute of a proxy is trnscipy's when it is a public name of the SciPy namespace (in
its ``__all__``); anything else (private modules such as ``scipy.sparse._sputils``,
``scipy.linalg.lapack``'s internals, other subpackages) is SciPy's own object.
"""

import importlib
import sys
import types

__all__ = ["PROXIED", "install"]

# SciPy namespace -> trnscipy module that mirrors it
PROXIED = {
    "scipy.linalg": "trnscipy.linalg",
    "scipy.sparse": "trnscipy.sparse",
    "scipy.sparse.linalg": "trnscipy.sparse.linalg",
}
TOP = "scipy_trn"


def proxy_name(scipy_name):
    """``scipy.sparse.linalg`` -> ``scipy_trn.sparse.linalg``."""
    return TOP + scipy_name[len("scipy"):]


class _Proxy(types.ModuleType):
    def __init__(self, scipy_name):
        super().__init__(proxy_name(scipy_name))
        self._scipy_name = scipy_name

    def __getattr__(self, name):
        scipy_mod = importlib.import_module(self._scipy_name)
        sub = f"{self._scipy_name}.{name}"
        if sub in PROXIED:
            return sys.modules[proxy_name(sub)]
        trn_name = PROXIED.get(self._scipy_name)
        if trn_name is not None and name in getattr(scipy_mod, "__all__", ()):
            trn = importlib.import_module(trn_name)
            if hasattr(trn, name):
                return getattr(trn, name)
        if name == "__path__":
            # not a package: Python must not load SciPy's submodules anew under our name
            raise AttributeError(name)
        try:
            return getattr(scipy_mod, name)
        except AttributeError:
            if name.startswith("__"):
                raise
            # a submodule SciPy has not imported yet (scipy.linalg._matfuncs_inv_ssq)
            try:
                return importlib.import_module(sub)
            except ModuleNotFoundError:
                raise AttributeError(f"module {self.__name__!r} has no attribute "
                                     f"{name!r}") from None

    def __dir__(self):
        return dir(importlib.import_module(self._scipy_name))


def install():
    """Register the proxies in ``sys.modules`` (idempotent)."""
    if TOP in sys.modules:
        return
    for name in ["scipy", *PROXIED]:
        module = _Proxy(name)
        sys.modules[module.__name__] = module
