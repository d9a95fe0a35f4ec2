"""Warning and error raised when device-backed work cannot run on its device."""

import os
import warnings

__all__ = ["DeviceFallbackWarning", "DeviceUnsupportedError", "Float32StorageWarning",
           "fallback", "float32_storage"]


class DeviceFallbackWarning(UserWarning):
    """A device-backed call ran part of its work on the host."""


class Float32StorageWarning(UserWarning):
    """A float64 (complex128) tensor on a device without float64 (Trainium) holds float32
    values: torch-xla stores float64 as float32 there while the dtype says float64.
    Results computed from it are float32-accurate.  Move float64 data with
    ``trnscipy.to_device`` (or offload) to keep it exact."""


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


_MOVE_EXACTLY = ("Move float64 data with trnscipy.to_device or offload() to keep it exact")


def float32_storage(what, stacklevel=4, advice=_MOVE_EXACTLY):
    """Announce that ``what`` holds float32 values though it says float64
    (Float32StorageWarning; DeviceUnsupportedError under TRNSCIPY_STRICT=1)."""
    message = (f"trnscipy: {what} holds float32 values (a device without float64 stores "
               f"float64 as float32); results from it are float32-accurate. {advice}")
    if strict_mode():
        raise DeviceUnsupportedError(message + " (TRNSCIPY_STRICT=1)")
    warnings.warn(message, Float32StorageWarning, stacklevel=stacklevel)
