"""Input rules shared by trnscipy.linalg's device functions, in one place.

SciPy's rules: array-likes become arrays, integer/bool inputs compute in
float64 and float16 in float32, ``check_finite`` rejects inf/NaN with
ValueError, square-only functions reject other shapes with ValueError, and
numerical failure (not positive definite, singular) is
``numpy.linalg.LinAlgError`` -- torch's own LinAlgError (a RuntimeError) is
translated by :func:`linalg_errors`.
"""

import contextlib

import numpy as np
from array_api_compat import is_torch_array

from trnscipy._dtypes import to_torch_dtype
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on

__all__ = ["LinAlgError", "as_tensor", "as_matrix", "as_square", "linalg_errors",
           "result_dtype", "empty", "check_finite"]

LinAlgError = np.linalg.LinAlgError


_LAPACK_DTYPE = {}  # torch dtype -> SciPy's working dtype, filled on first device call


def _lapack_dtypes():
    exact = (torch.float32, torch.float64, torch.complex64, torch.complex128)
    table = {t: t for t in exact}
    table.update({torch.float16: torch.float32, torch.bfloat16: torch.float32,
                  torch.complex32: torch.complex64})
    table.update({t: None for t in (torch.bool, torch.int8, torch.uint8, torch.int16)})
    return table


def result_dtype(dtype, small_ints=None):
    """The torch dtype SciPy's LAPACK wrappers compute in for torch ``dtype``.

    bool/int8/uint8/int16 map to float32 (LAPACK's type choice), wider integers
    to float64; ``small_ints`` overrides the former (expm and solve use float64).
    """
    if not _LAPACK_DTYPE:
        _LAPACK_DTYPE.update(_lapack_dtypes())
    if dtype in _LAPACK_DTYPE:
        return _LAPACK_DTYPE[dtype] or small_ints or torch.float32
    return torch.complex128 if dtype.is_complex else torch.float64


def check_finite(*tensors):
    """ValueError, as SciPy, when a tensor holds inf or NaN (one host read for all).

    Through the kernel seam: on the CPU NumPy checks the zero-copy view (a torch
    op there would leave torch's OpenMP threads spinning against OpenBLAS's).
    """
    from trnscipy._kernels import kernel

    tensors = [t for t in tensors if t is not None and t.numel()]
    if tensors and not kernel("linalg._all_finite", tensors[0].device)(*tensors):
        raise ValueError("array must not contain infs or NaNs")


def as_tensor(x, device, finite=True, dtype=None, small_ints=None):
    """``x`` (tensor or array-like) as a tensor on ``device`` in SciPy's working dtype."""
    if not is_torch_array(x):
        x = np.asarray(x)
        if x.dtype.kind not in "biufc":
            raise ValueError(f"array of dtype {x.dtype} is not numeric")
    x = tensor_on(x, device, dtype or result_dtype(to_torch_dtype(x.dtype), small_ints))
    if x.is_conj():
        x = x.resolve_conj()
    if finite:
        check_finite(x)
    return x


def floating(a):
    """A tensor of an integer or bool dtype as float64 (SciPy's LAPACK cast), else ``a``."""
    return a if a.is_floating_point() or a.is_complex() else a.to(torch.float64)


def as_matrix(x, device, finite=True, dtype=None, name="a", small_ints=None):
    """A tensor of shape (..., M, N) (ValueError for fewer than 2 dimensions)."""
    x = as_tensor(x, device, finite, dtype, small_ints)
    if x.ndim < 2:
        raise ValueError(f"expected at least a 2-D array for {name}, got shape {tuple(x.shape)}")
    return x


def as_square(x, device, finite=True, dtype=None, name="a", small_ints=None):
    """A tensor of shape (..., N, N); ValueError otherwise, as SciPy."""
    x = as_matrix(x, device, finite, dtype, name, small_ints)
    if x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Input array {name} is expected to be square but has the shape: "
                         f"{tuple(x.shape)}.")
    return x


def empty(shape, like, dtype=None):
    """An empty result on ``like``'s device."""
    return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)


@contextlib.contextmanager
def linalg_errors():
    """Turn torch's linear-algebra failures into numpy.linalg.LinAlgError."""
    try:
        yield
    except torch.linalg.LinAlgError as exc:
        raise LinAlgError(str(exc)) from None


def device_of(*operands):
    """The device the call computes on (its device operands', else the dispatcher's
    choice: offloaded array-likes)."""
    from trnscipy._dispatch import call_device

    return call_device(*operands)


def common_dtype(*tensors, small_ints=None):
    """SciPy's working dtype for several operands (promotion, then its dtype rules)."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return result_dtype(dtype, small_ints)


def as_rhs(b, a, device, finite=True, small_ints=None):
    """Right-hand side ``b`` for ``a`` (..., N, N): (b as (..., N, K), was_1d, dtype)."""
    b = as_tensor(b, device, finite, small_ints=small_ints)
    dtype = common_dtype(a, b, small_ints=small_ints)
    vec = b.ndim == 1
    if b.ndim == 0:
        raise ValueError("b must be at least 1-D")
    bm = b.unsqueeze(-1) if vec else b
    if bm.shape[-2] != a.shape[-1]:
        raise ValueError(f"incompatible shapes: a {tuple(a.shape)} and b {tuple(b.shape)}")
    return bm.to(dtype), vec, dtype
