"""trnscipy: SciPy's sparse, sparse.linalg and linalg on accelerator-backed data.

Swap ``import scipy.sparse`` for ``import trnscipy.sparse`` (likewise
``scipy.sparse.linalg`` and ``scipy.linalg``): NumPy/SciPy inputs go to SciPy
itself; torch tensors and trnscipy sparse objects run on their device.
"""

from trnscipy import _transfer
from trnscipy._device import default_device, resolve_device
from trnscipy._dispatch import offload
from trnscipy._dtypes import device_dtype_problem
from trnscipy._errors import DeviceFallbackWarning, DeviceUnsupportedError, Float32StorageWarning
from trnscipy._transfer import to_device, to_host

__version__ = "0.1.0"


def _move_sparse(obj, device):
    from trnscipy.sparse._base import from_scipy

    return from_scipy(obj, device)


def _sparse_problem(obj):
    """Why a SciPy sparse object has no device form (trnscipy/sparse/_base.py's from_scipy
    takes csr, csc, coo, bsr and dia of 1 or 2 dimensions), or None."""
    if obj.format not in ("csr", "csc", "coo", "bsr", "dia"):
        return f"{obj.format} sparse objects have no device form"
    if len(obj.shape) > 2:
        return f"{len(obj.shape)}-D sparse arrays have no device form"
    return device_dtype_problem(obj.dtype)


def _is_superlu(obj):
    if type(obj).__name__ != "SuperLU":
        return False
    from trnscipy.sparse.linalg._dsolve._superlu import is_scipy_superlu

    return is_scipy_superlu(obj)


def _move_superlu(obj, device):
    from trnscipy.sparse.linalg._dsolve._superlu import SuperLU

    return SuperLU(obj, device)


def _is_scipy_sparse(obj):
    import scipy.sparse

    return scipy.sparse.issparse(obj)


# The transfer layer moves SciPy's objects to their trnscipy twins (registered here, so
# it never imports containers or solvers, and ``import trnscipy`` stays light).
_transfer.register_host_type(_is_scipy_sparse, _move_sparse, _sparse_problem)
_transfer.register_host_type(_is_superlu, _move_superlu)

__all__ = [
    "DeviceFallbackWarning",
    "DeviceUnsupportedError",
    "Float32StorageWarning",
    "default_device",
    "offload",
    "resolve_device",
    "to_device",
    "to_host",
]
