"""SciPy's SuperLU serving device tensors.

``splu``/``spilu`` of CPU tensors return it (SuperLU runs where the data is, in host
memory, and nothing is said), and so do ``to_device`` of a SciPy SuperLU and the host
fallback of a dtype the device lacks (float64/complex on Neuron).  On other kinds
each solve of SciPy's object runs on a host copy with a DeviceFallbackWarning (the
declaration of ``SOLVE`` below).  What differs from SciPy: ``solve``
takes tensors (NumPy right-hand sides are moved to the factors' device, as the
routing rule does) and returns them on the factors' device; ``L`` and ``U`` are
trnscipy csc_arrays and ``perm_r``/``perm_c`` int32 tensors on that device.
"""

import numpy as np
from array_api_compat import is_torch_array
from scipy.sparse.linalg import SuperLU as _ScipySuperLU

from trnscipy import _autograd
from trnscipy._capabilities import declare, runs_on_device
from trnscipy._device import device_kind
from trnscipy._dispatch import find_device, requires_grad
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import _to_device, _to_host

__all__ = ["SuperLU", "is_scipy_superlu"]

SOLVE = "scipy.sparse.linalg.SuperLU.solve"
# trnscipy has no device solve with SciPy's SuperLU factors (splu/spilu factorize on the
# device with _multifrontal and _ilu instead); a CPU tensor's solve runs where its data is, unwarned
declare(SOLVE, host=("cuda", "xla", "neuron"), why="SciPy's SuperLU object solves on the host")


def is_scipy_superlu(obj):
    return isinstance(obj, _ScipySuperLU)


@register("sparse.linalg.superlu_solve", "cpu")
def _solve_cpu(lu, b, trans):
    """SciPy's solve reading the CPU tensor's memory; its result array becomes the tensor."""
    return torch.from_numpy(lu.solve(_to_host(b, strict=False), trans))


class SuperLU:
    """SciPy's SuperLU (from ``splu``/``spilu``) serving device tensors on ``device``."""

    _trnscipy_device_object = True

    def __init__(self, lu, device):
        self._lu = lu
        self.device = device
        self._moved = {}
        self._dtype = None

    def __repr__(self):
        return f"<SuperLU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    @property
    def shape(self):
        return self._lu.shape

    @property
    def nnz(self):
        return self._lu.nnz

    def _on_device(self, name):
        if name not in self._moved:
            self._moved[name] = _to_device(getattr(self._lu, name), self.device, strict=True)
        return self._moved[name]

    @property
    def perm_r(self):
        return self._on_device("perm_r")

    @property
    def perm_c(self):
        return self._on_device("perm_c")

    @property
    def L(self):
        return self._on_device("L")

    @property
    def U(self):
        return self._on_device("U")

    def solve(self, rhs, trans="N"):
        """x with A x = rhs ('N'), A^T x = rhs ('T') or A^H x = rhs ('H'), on the factors'
        device (SciPy's errors for a wrong shape, dtype or ``trans``)."""
        find_device((self, rhs))  # ValueError for a right-hand side on another device
        if requires_grad(rhs):  # implicit differentiation (trnscipy._autograd)
            return _autograd.factorization_solve(self, None, rhs, trans)
        if isinstance(rhs, np.ndarray):
            rhs = _to_device(rhs, self.device, strict=True)
        if not is_torch_array(rhs):
            return self._lu.solve(rhs, trans)  # SciPy's TypeError (lists, scalars ...)
        if self._dtype is None:
            self._dtype = self._lu.U.dtype
        if runs_on_device(SOLVE, device_kind(self.device), self._dtype):
            return kernel("sparse.linalg.superlu_solve", self.device)(self._lu, rhs, trans)
        x = self._lu.solve(_to_host(rhs, strict=False), trans)
        return _to_device(x, self.device, strict=True)

    def to(self, device):
        return SuperLU(self._lu, device)

    def to_scipy(self):
        """SciPy's SuperLU object."""
        return self._lu
