"""The persistent compilation cache: compiled XLA graphs kept on disk between processes.

Where: ``TRNSCIPY_CACHE_DIR``, else ``$XDG_CACHE_HOME/trnscipy``, else
``~/.cache/trnscipy``; ``TRNSCIPY_CACHE=0`` turns it off, ``TRNSCIPY_CACHE=1`` turns
torch-xla's cache on even where this torch-xla cannot load what it stores (below).
One subdirectory per mode, ``xla`` and ``xla-neuron`` (Trainium, or the XLA lane under
``TRNSCIPY_EMULATE=neuron``), so emulated-Neuron graphs never share a directory with plain
XLA graphs.  A process picks its mode once, when it first meets an XLA device: torch-xla
reads the path when it creates its computation cache (its first compilation) and never
again.

Two caches, set up before the process compiles its first graph:
- torch-xla's persistent cache (``XLA_PERSISTENT_CACHE_PATH``, what
  ``torch_xla.runtime.initialize_cache`` sets): torch-xla 2.9 writes each executable
  but cannot read one back on PJRT CPU, TPU or PJRT plugins such as Neuron's
  ("Failed to deserialize executable: UNIMPLEMENTED", pytorch/xla#9094): every graph
  compiles again and logs a warning.  So it stays off by default on torch-xla <= 2.9.
- On Trainium, the Neuron compiler's own cache of compiled NEFFs (torch-neuronx's default
  /var/tmp/neuron-compile-cache): pointed into the same directory unless the user chose a
  place (``--cache_dir`` in NEURON_CC_FLAGS, or NEURON_COMPILE_CACHE_URL).
"""

import os
import sys
import warnings
from pathlib import Path

__all__ = ["cache_root", "xla_cache_dir", "setup_xla_cache"]

_OFF = ("0", "false", "off", "no")
_state = {"mode": None}  # the mode ("xla" / "xla-neuron") set up in this process


def cache_root():
    """The cache directory, or None under ``TRNSCIPY_CACHE=0``."""
    if os.environ.get("TRNSCIPY_CACHE", "").strip().lower() in _OFF:
        return None
    path = os.environ.get("TRNSCIPY_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                   ".cache")
        path = os.path.join(base, "trnscipy")
    return Path(path)


def xla_cache_dir(neuron):
    """torch-xla's cache directory for one mode (None when the cache is off)."""
    root = cache_root()
    return None if root is None else root / ("xla-neuron" if neuron else "xla")


def _forced():
    return os.environ.get("TRNSCIPY_CACHE", "").strip().lower() in ("1", "true", "on", "yes")


def _torch_xla_loads_executables():
    """Whether this torch-xla reads back what its persistent cache writes (2.9 does not:
    its PJRT client calls DeserializeExecutable, which PJRT CPU, TPU and the C-API plugins
    leave unimplemented; pytorch/xla#9094).  Later versions are assumed fixed: the cache
    test then checks it (tests/test_compile_cache.py)."""
    import torch_xla

    major, minor = (int(p) for p in torch_xla.__version__.split(".")[:2])
    return (major, minor) > (2, 9)


def _setup_neuron_compiler_cache(root):
    # Trainium only (torch-neuronx); cannot run on the machines this is tested on.
    flags = os.environ.get("NEURON_CC_FLAGS", "")
    if "--cache_dir" not in flags and "NEURON_COMPILE_CACHE_URL" not in os.environ:
        os.environ["NEURON_CC_FLAGS"] = (
            f"{flags} --cache_dir={root / 'neuron-compile-cache'}".strip())


def setup_xla_cache(neuron):
    """Point the caches at the cache directory, once per process, before the first XLA
    compilation; ``neuron``: the process runs under Neuron's rules (its mode).  Where
    torch-xla already compiled (or the user set XLA_PERSISTENT_CACHE_PATH) it is left
    alone, with one warning in the first case."""
    if _state["mode"] is not None:
        return
    mode = _state["mode"] = "xla-neuron" if neuron else "xla"
    root = cache_root()
    if root is None:
        return
    if "torch_neuronx" in sys.modules:
        _setup_neuron_compiler_cache(root)
    if "XLA_PERSISTENT_CACHE_PATH" in os.environ:
        return  # the user's own choice
    if not (_forced() or _torch_xla_loads_executables()):
        return
    import torch_xla

    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        warnings.warn("trnscipy: torch-xla compiled before trnscipy first met the XLA "
                      "device, so its persistent compilation cache stays off in this "
                      "process (call trnscipy.resolve_device('xla') first, or "
                      "torch_xla.runtime.initialize_cache yourself)", RuntimeWarning,
                      stacklevel=4)
        return
    import torch_xla.runtime as xr

    path = root / mode
    path.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(path), readonly=False)
