"""norm of device sparse containers: SciPy 1.17's ord/axis rules on the container's own
device methods (abs, sum, max, min, power).

Differs from SciPy: results are device tensors (0-d for a matrix norm).  ``ord=2`` is
the largest singular value from the public routed ``svds`` (as SciPy), which runs on
the host until trnscipy has a device ``svds``.
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import dispatch
from trnscipy._torch import torch

__all__ = ["norm"]


def _frobenius(x):
    """np.linalg.norm of the deduplicated stored values (SciPy's _sparse_frobenius_norm)."""
    data = x._deduped_data().reshape(-1)  # BSR stores (blocks, R, C)
    if data.is_complex():
        re, im = data.real, data.imag
        return (torch.dot(re, re) + torch.dot(im, im)).sqrt()
    if not data.is_floating_point():
        data = data.to(torch.float64)
    return torch.dot(data, data).sqrt()


def _issparse(x):
    return getattr(x, "_trnscipy_device_object", False) and hasattr(x, "tocsr")


@dispatch(_scipy.norm)
def norm(x, ord=None, axis=None):
    if not _issparse(x):
        raise TypeError("input is not sparse. use numpy.linalg.norm")
    if axis is None and ord in (None, "fro", "f"):
        return _frobenius(x)
    x = x.tocsr()
    if axis is None:
        axis = tuple(range(x.ndim))
    elif not isinstance(axis, tuple):
        msg = "'axis' must be None, an integer or a tuple of integers"
        try:
            int_axis = int(axis)
        except TypeError as e:
            raise TypeError(msg) from e
        if axis != int_axis:
            raise TypeError(msg)
        axis = (int_axis,)
    nd = x.ndim
    if len(axis) == 2:
        row_axis, col_axis = axis
        if not (-nd <= row_axis < nd and -nd <= col_axis < nd):
            raise ValueError(f"Invalid axis {axis!r} for an array with shape {x.shape!r}")
        if row_axis % nd == col_axis % nd:
            raise ValueError("Duplicate axes given.")
        if ord == 2:
            from trnscipy.sparse.linalg import svds

            _, s, _ = svds(x, k=1, solver="arpack", rng=None)
            return s[0]
        if ord == -2:
            raise NotImplementedError
        if ord == 1:
            return abs(x).sum(axis=row_axis).max()
        if ord == np.inf:
            return abs(x).sum(axis=col_axis).max()
        if ord == -1:
            return abs(x).sum(axis=row_axis).min()
        if ord == -np.inf:
            return abs(x).sum(axis=col_axis).min()
        if ord in (None, "f", "fro"):
            return _frobenius(x)
        raise ValueError("Invalid norm order for matrices.")
    if len(axis) == 1:
        (a,) = axis
        if not (-nd <= a < nd):
            raise ValueError(f"Invalid axis {axis!r} for an array with shape {x.shape!r}")
        if ord == np.inf:
            M = abs(x).max(axis=a)
        elif ord == -np.inf:
            M = abs(x).min(axis=a)
        elif ord == 0:
            M = (x != 0).sum(axis=a)
        elif ord == 1:
            M = abs(x).sum(axis=a)
        elif ord in (2, None):
            M = torch.sqrt(_inexact(_dense(abs(x).power(2).sum(axis=a))))
        else:
            try:
                ord + 1
            except TypeError as e:
                raise ValueError("Invalid norm order for vectors.") from e
            M = torch.pow(_inexact(_dense(abs(x).power(ord).sum(axis=a))), 1 / ord)
        return _dense(M).reshape(-1)
    raise ValueError("Improper number of dimensions to norm.")


def _inexact(M):
    """Integer sums in float64, as NumPy's sqrt and power give (torch's: float32)."""
    return M if M.is_floating_point() or M.is_complex() else M.to(torch.float64)


def _dense(M):
    """A reduction result as a tensor (sparse results of max/min: toarray)."""
    if hasattr(M, "toarray"):
        return M.toarray()
    return M if isinstance(M, torch.Tensor) else torch.as_tensor(M)
