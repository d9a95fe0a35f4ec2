"""float64 sparse direct solves on a Neuron device: the float32 device LU plus
double-float refinement (the 'neuron' registration of the ``sparse.linalg.factor`` kernel).

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  ``splu``/``spsolve``/``factorized``
factorize the float32 part of A with the device block LU (``_blocklu``, static pivoting)
and solve by LAPACK DSGESV-style refinement, the algorithm of the dense solves
(``trnscipy.linalg._refine._refine``): r = b - op(A) x in double-float, x += S(r) with S the
float32 factors' solve, until the correction is at double-float rounding level.  This is
SuperLU_DIST's scheme (static pivoting plus refinement), with the residual in double-float.

Differs from SciPy: a matrix too ill-conditioned for float32 (cond beyond about 1e7)
refines slowly or not at all: the result then carries a LinAlgWarning, as the dense
solves do.  A float32 factorization with a zero or non-finite pivot hands the matrix to
SciPy's SuperLU on the host (a DeviceFallbackWarning): SciPy's singular-matrix verdict.
``L``/``U`` are the float32 factors' (``Pr A Pc = L U`` to float32 accuracy),
assembled on the host as on every device kind.
"""

import numpy as np
import scipy.sparse.linalg as _spla

from trnscipy import _transfer
from trnscipy._errors import fallback
from trnscipy._kernels import register
from trnscipy._torch import torch
from trnscipy.linalg._refine import _refine
from trnscipy.sparse.linalg._dsolve._devicelu import DeviceLU, device_factor
from trnscipy.sparse.linalg._dsolve._superlu import SuperLU
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _parts

__all__ = ["RefinedLU"]


@register("sparse.linalg.factor", "neuron")
def factor(A):
    """``device_factor`` for float32 data; the refined float64 factorization for float64.
    A float32 factorization that meets a zero or non-finite pivot cannot tell a singular
    matrix from one beyond float32's range (entries near 1e20 overflow its products):
    SciPy's SuperLU decides on the host, announced."""
    if A.data.dtype != torch.float64:
        return device_factor(A)
    try:
        return RefinedLU(A)
    except RuntimeError:
        fallback("scipy.sparse.linalg.splu", "the float32 factorization met a zero or "
                 "non-finite pivot (a singular matrix, or one beyond float32's range)",
                 stacklevel=5)
    return SuperLU(_spla.splu(_transfer.to_host(A).tocsc()), A.device)


class RefinedLU(DeviceLU):
    """A float64 device CSR/CSC container's LU on Neuron: float32 factors, solves refined
    to double-float accuracy with A's exact double-float products."""

    def __init__(self, A):
        self._A = A
        self._ops = {"N": _df_operator(A)}  # A's double-float product and float32 copy
        self._lu32 = device_factor(self._ops["N"].float32)
        self.device = A.device
        self.dtype = np.dtype(np.float64)
        self.shape = tuple(A.shape)
        self._factors = None

    def __repr__(self):
        return f"<RefinedLU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def _solve(self, b, trans):
        if trans not in self._ops:  # real data: A^H = A^T, an operator built once
            self._ops[trans] = self._ops.get("T") or _df_operator(self._A.T)
        op, lu32 = self._ops[trans], self._lu32
        x = _refine(op.product, _parts(b), lambda r: lu32._solve(r, trans))
        return x if x.dtype == torch.float64 else _transfer.df_tensor(*_parts(x))

    traced_solve = None  # the refinement reads the host: callers use ``solve``

    def to(self, device):
        return RefinedLU(self._A.to(device))

    def _export(self):
        return self._lu32._export()
