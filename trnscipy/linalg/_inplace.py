"""SciPy's ``overwrite_a`` / ``overwrite_b``: where LAPACK can work in the caller's array
(its dtype is the one computed in, its layout the one LAPACK takes), SciPy does, and the
result is that array (``inv``, ``lu_factor``, ``cholesky``, a solve's ``b``) or the array
holds a factorization (``solve``'s and ``det``'s LU).  A device call does the same with a
tensor operand; offload writes the host array back (``_dispatch._written_back``).
"""

from trnscipy._dispatch import contiguity
from trnscipy._torch import torch

__all__ = ["reusable", "into", "result_in", "solved_in"]

def reusable(x, dtype, order="F", ndims=(1, 2)):
    """Whether SciPy would compute in ``x`` itself: a tensor (no autograd; float64 held as
    double-float on Neuron too: copying into its parts is exact) of the LAPACK dtype
    ``dtype`` computed in, with ``ndims`` dimensions (None: any), contiguous in ``order``
    ('F': column-major, as LAPACK's matrices; 'C')."""
    lapack = (torch.float32, torch.float64, torch.complex64, torch.complex128)
    if (not torch.is_tensor(x) or x.dtype != dtype or dtype not in lapack
            or x.requires_grad or (ndims is not None and x.ndim not in ndims)):
        return False
    return contiguity(x)[order == "F"]


def into(x, value):
    """``value`` written into ``x``; returns ``x`` (``value`` where it carries a
    gradient: a result autograd tracks stays its own tensor)."""
    if value.requires_grad:
        return value
    with torch.no_grad():
        x.copy_(value)
    return x


def result_in(overwrite, given, value, ndims=(2,)):
    """``value``, in the ``given`` operand itself where SciPy's LAPACK call computes it
    there (``overwrite`` given, column-major, same dtype and shape)."""
    if overwrite and reusable(given, value.dtype, ndims=ndims) and given.shape == value.shape:
        return into(given, value)
    return value


def solved_in(overwrite_b, b, x):
    """A solve's ``x``, in the given ``b`` itself where SciPy's LAPACK call solves there."""
    return result_in(overwrite_b, b, x, ndims=(1, 2))
