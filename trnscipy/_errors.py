"""Warning and error raised when device-backed work cannot run on its device."""

import os
import warnings

__all__ = ["DeviceFallbackWarning", "DeviceUnsupportedError", "fallback"]


class DeviceFallbackWarning(UserWarning):
    """A device-backed call ran part of its work on the host."""


class DeviceUnsupportedError(RuntimeError):
    """Raised instead of a host fallback when ``TRNSCIPY_STRICT=1``."""


def strict_mode():
    return os.environ.get("TRNSCIPY_STRICT", "0") not in ("", "0", "false", "False")


def fallback(name, reason, stacklevel=3):
    """Announce that ``name`` runs on the host because of ``reason``.

    Warns with DeviceFallbackWarning, or raises DeviceUnsupportedError in strict mode.
    """
    message = f"trnscipy: {name} runs on the host: {reason}"
    if strict_mode():
        raise DeviceUnsupportedError(message + " (TRNSCIPY_STRICT=1)")
    warnings.warn(message, DeviceFallbackWarning, stacklevel=stacklevel)
