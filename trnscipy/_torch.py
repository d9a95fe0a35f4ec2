"""Lazy torch: ``from trnscipy._torch import torch`` imports torch on first use.

``import trnscipy.sparse`` and every call that SciPy serves must not import torch
(a 1-2 s import).  Modules whose code only runs on device data use this proxy.
"""

import importlib

__all__ = ["torch", "torch_xla_available"]


class _LazyModule:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        module = self.__dict__.get("_module")
        if module is None:
            module = self.__dict__["_module"] = importlib.import_module(self._name)
        value = getattr(module, attr)
        if not attr.startswith("_"):
            self.__dict__[attr] = value  # later lookups skip __getattr__ (hot paths)
        return value

    def __repr__(self):
        return f"<lazy module {self._name!r}>"


torch = _LazyModule("torch")


def torch_xla_available():
    """True when torch_xla can be imported (without importing it)."""
    return importlib.util.find_spec("torch_xla") is not None
