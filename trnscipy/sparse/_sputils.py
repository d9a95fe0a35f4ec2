"""Helpers for the device sparse containers: dtypes, shapes, result dtypes; the index
building blocks every format uses (sorting, duplicate summing, compression) live below
the containers, in ``trnscipy._kernels._sparsetools``, and are re-exported here.
"""

import functools

import numpy as np
import scipy.sparse._sputils as _scipy_sputils
from array_api_compat import is_torch_array

from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels._sparsetools import (  # noqa: F401  (the containers' index helpers)
    INT32_MAX,
    argsort,
    as_index,
    as_tensor,
    coalesce,
    compact,
    compress,
    divmod_index,
    expand_ptr,
    from_host,
    host_ints,
    index_dtype,
    segment_sum,
    sort,
)
from trnscipy._torch import torch


def check_dtype(dtype):
    """A NumPy dtype SciPy's sparse containers support and torch can hold, else ValueError."""
    try:
        dtype = to_numpy_dtype(dtype)
    except TypeError:
        raise ValueError(f"scipy.sparse does not support dtype {dtype}") from None
    supported = _scipy_sputils.getdtype(dtype)  # SciPy's ValueError for float16, object ...
    try:
        to_torch_dtype(supported)
    except TypeError:
        raise ValueError(f"trnscipy device sparse containers do not support dtype {dtype} "
                         "(torch has no such tensor dtype)") from None
    return supported


def result_dtype(func, *dtypes, scalars=()):
    """NumPy's result dtype of ``func`` on arrays of ``dtypes`` and Python ``scalars``."""
    if not scalars:  # the products' hot path: cached per dtype combination
        return _array_result_dtype(func, tuple(np.dtype(d) for d in dtypes))
    with np.errstate(all="ignore"):
        args = [np.ones(1, dtype=d) for d in dtypes] + list(scalars)
        return np.asarray(func(*args)).dtype


@functools.lru_cache(maxsize=256)
def _array_result_dtype(func, dtypes):
    with np.errstate(all="ignore"):
        return np.asarray(func(*(np.ones(1, dtype=d) for d in dtypes))).dtype


def sum_dtype(dtype):
    """SciPy's accumulator dtype for sums (small ints -> int64/uint64)."""
    return np.dtype(_scipy_sputils.get_sum_dtype(np.dtype(dtype)))


def is_scalar(x):
    if is_torch_array(x):
        return x.ndim == 0
    return np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0)


def broadcast_shape(a, b):
    """The broadcast shape of ``a`` and ``b`` (shapes), NumPy's ValueError if none."""
    try:
        return tuple(torch.broadcast_shapes(tuple(a), tuple(b)))
    except RuntimeError:
        raise ValueError(f"inconsistent shapes {tuple(a)} and {tuple(b)}") from None


def check_shape(shape, allow_1d=False):
    """A tuple of two (or, with ``allow_1d``, one) non-negative ints (SciPy's messages)."""
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"invalid shape {shape!r}") from None
    if len(shape) != 2 and not (allow_1d and len(shape) == 1):
        raise ValueError("trnscipy device sparse containers are 2-D; "
                         f"shape {shape} is not supported")
    if any(s < 0 for s in shape):
        raise ValueError("'shape' elements cannot be negative")
    return shape
