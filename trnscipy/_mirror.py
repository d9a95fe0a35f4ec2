"""Namespace mirroring: a trnscipy module exposes every public name of its SciPy twin."""

import inspect

from trnscipy._dispatch import host_only

__all__ = ["mirror"]


def mirror(namespace, scipy_module):
    """Fill ``namespace`` (a module's globals) with the public names of ``scipy_module``.

    Names the trnscipy module already defines are its own (device-aware)
    versions.  Missing SciPy functions are wrapped with ``host_only`` (device
    data runs on SciPy with a DeviceFallbackWarning); classes, modules and
    other objects are SciPy's own.  Returns the ``__all__`` list.
    """
    for name in scipy_module.__all__:
        if name in namespace:
            continue
        obj = getattr(scipy_module, name)
        if inspect.isfunction(obj) or inspect.isbuiltin(obj):
            obj = host_only(obj)
        namespace[name] = obj
    return list(scipy_module.__all__)


def route_of(obj):
    """How a public trnscipy name serves device data: 'device', 'host' or 'scipy'."""
    route = getattr(obj, "_trnscipy_route", None)
    if route is not None:
        return route
    if inspect.isclass(obj) and obj.__module__.startswith("trnscipy"):
        return "device"
    return "scipy"
