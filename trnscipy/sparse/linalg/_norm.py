"""norm of device sparse containers: the installed SciPy's ord/axis rules (1.17 or 1.18)
on the container's own device methods (abs, sum, max, min, power).

SciPy 1.18 computes the matrix norms (ord 1, -1, inf, -inf) and the vector norms other
than ord 0 in float64 where the dtype casts safely to it (float32 and integer input
give float64), and its vector p-norms (ord not 0, 1, 2, inf, -inf) of an spmatrix keep
the matrix's 2-D shape ((n, 1) or (1, n)); 1.17 keeps the dtype and returns 1-D.

Differs from SciPy: results are device tensors (0-d for a matrix norm).  ``ord=2`` is
the largest singular value from the public routed ``svds`` (as SciPy), which runs on
the host until trnscipy has a device ``svds``.
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel, register
from trnscipy._scipy_version import scipy_at_least
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


@dispatch(_scipy.norm, double_float=("neuron",))
def norm(x, ord=None, axis=None):
    if not _issparse(x):
        raise TypeError("input is not sparse. use numpy.linalg.norm")
    return kernel("sparse.linalg.norm", x.device)(x, ord, axis)


@register("sparse.linalg.norm", "generic")
def _norm(x, ord=None, axis=None):
    """norm with the containers' methods (on Neuron, float64: ``_refine_norm``)."""
    if axis is None and ord in (None, "fro", "f"):
        return _frobenius(x)
    v118 = scipy_at_least(1, 18)
    given = x
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
        if v118 and ord not in (None, "f", "fro"):
            x = _as_float64(x)
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
        if v118 and ord != 0:
            x = _as_float64(x)
        if ord == np.inf:
            M = abs(x).max(axis=a)
        elif ord == -np.inf:
            M = abs(x).min(axis=a)
        elif ord == 0:
            M = (x != 0).sum(axis=a)
            if v118 and _counts_are_indptr_steps(given, a):
                M = _dense(M).to(given.indptr.dtype)
        elif ord == 1:
            M = abs(x).sum(axis=a)
        elif ord in (2, None):
            M = torch.sqrt(_inexact(_dense(abs(x).power(2).sum(axis=a))))
        else:
            try:
                ord + 1
            except TypeError as e:
                raise ValueError("Invalid norm order for vectors.") from e
            if not _inexact_dtype(x) and int(ord) == ord and ord < 0:  # NumPy's error
                raise ValueError("Integers to negative integer powers are not allowed.")
            M = torch.pow(_inexact(_dense(abs(x).power(ord).sum(axis=a))), 1 / ord)
            if v118:
                return M  # (an spmatrix's sum keeps its 2-D shape)
        return _dense(M).reshape(-1)
    raise ValueError("Improper number of dimensions to norm.")


def _inexact_dtype(x):
    return np.dtype(x.dtype).kind in "fc"


def _inexact(M):
    """Integer sums in float64, as NumPy's sqrt and power give (torch's: float32)."""
    return M if M.is_floating_point() or M.is_complex() else M.to(torch.float64)


def _counts_are_indptr_steps(x, axis):
    """SciPy 1.18's ``count_nonzero(axis)`` of a CSR/CSC along its major axis where no
    stored value is zero: ``np.diff(indptr)``, of the index dtype (int64 otherwise)."""
    major = {"csr": 1, "csc": 0}.get(x.format)
    return major is not None and axis % 2 == major and bool((x.data != 0).all())


def _as_float64(x):
    """SciPy 1.18's ``x.astype(float)`` where ``np.can_cast(x.dtype, float)``."""
    return x.astype(np.float64) if np.can_cast(x.dtype, np.float64) else x


def _dense(M):
    """A reduction result as a tensor (sparse results of max/min: toarray)."""
    if hasattr(M, "toarray"):
        return M.toarray()
    return M if isinstance(M, torch.Tensor) else torch.as_tensor(M)
