"""trnscipy: SciPy's sparse, sparse.linalg and linalg on accelerator-backed data.

Swap ``import scipy.sparse`` for ``import trnscipy.sparse`` (likewise
``scipy.sparse.linalg`` and ``scipy.linalg``): NumPy/SciPy inputs go to SciPy
itself; torch tensors and trnscipy sparse objects run on their device.
"""

from trnscipy._device import default_device, resolve_device
from trnscipy._dispatch import offload
from trnscipy._errors import DeviceFallbackWarning, DeviceUnsupportedError
from trnscipy._transfer import to_device, to_host

__version__ = "0.1.0"

__all__ = [
    "DeviceFallbackWarning",
    "DeviceUnsupportedError",
    "default_device",
    "offload",
    "resolve_device",
    "to_device",
    "to_host",
]
