"""Paired comparison of a SciPy result with a trnscipy result.

In the manner of CuPy's ``numpy_cupy_allclose`` (our own code): the same result kind
(type family, sparse format and array/matrix kind, index dtype, tuple structure, shape,
dtype, device), then the values within a per-dtype tolerance.  Each check returns None
when it passes, else a short reason.  Exceptions are compared in ``harness``.
"""

import numbers

import numpy as np
import scipy.sparse as sp
from array_api_compat import is_torch_array
from scipy.sparse.linalg import LinearOperator

__all__ = ["kind_diff", "to_host", "values_diff", "RTOL"]

# Default normwise relative tolerance per dtype (float32 cases with a natural
# backward error use a judge from ``judges`` instead).
RTOL = {
    np.dtype(np.float64): 1e-10, np.dtype(np.complex128): 1e-10,
    np.dtype(np.float32): 2e-5, np.dtype(np.complex64): 2e-5,
    np.dtype(np.float16): 2e-3,
}


def _is_device_object(x):
    return getattr(x, "_trnscipy_device_object", False)


def to_host(x):
    """A result on the host (trnscipy's own transfer: tensors -> ndarray, 0-d -> NumPy
    scalar, trnscipy objects -> SciPy, recursively)."""
    from trnscipy._transfer import _to_host

    return _to_host(x, strict=False)


def _dtype_of(x):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(x.dtype) if is_torch_array(x) else np.dtype(x.dtype)


def _device_diff(act, lane, path):
    want = lane.device_type
    got = getattr(act, "device", None)
    got = getattr(got, "type", got)
    if got != want:
        return f"{path}: on device {got}, expected {want}"
    return None


def _is_scalar(x):
    return isinstance(x, (numbers.Number, np.generic))


def _array_kind(exp, act, lane, path):
    if lane.host_results:
        if type(act) is not type(exp):
            return f"{path}: {type(act).__name__}, expected {type(exp).__name__}"
    else:
        if not is_torch_array(act):
            return f"{path}: {type(act).__module__}.{type(act).__name__}, expected a torch.Tensor"
        diff = _device_diff(act, lane, path)
        if diff:
            return diff
    if tuple(act.shape) != exp.shape:
        return f"{path}: shape {tuple(act.shape)}, expected {exp.shape}"
    if _dtype_of(act) != exp.dtype:
        return f"{path}: dtype {_dtype_of(act)}, expected {exp.dtype}"
    return None


def _sparse_kind(exp, act, lane, path):
    if lane.host_results:
        host = act
        if not sp.issparse(act):
            return f"{path}: {type(act).__name__}, expected scipy.sparse.{type(exp).__name__}"
    else:
        if not _is_device_object(act) or not hasattr(act, "to_scipy"):
            return (f"{path}: {type(act).__module__}.{type(act).__name__}, expected a trnscipy "
                    f"device {type(exp).__name__}")
        diff = _device_diff(act, lane, path)
        if diff:
            return diff
        host = act.to_scipy()
    if type(host) is not type(exp):
        return f"{path}: {type(host).__name__}, expected {type(exp).__name__}"
    if host.shape != exp.shape:
        return f"{path}: shape {host.shape}, expected {exp.shape}"
    if host.dtype != exp.dtype:
        return f"{path}: dtype {host.dtype}, expected {exp.dtype}"
    for attr in ("indices", "row", "offsets"):
        e, a = getattr(exp, attr, None), getattr(host, attr, None)
        if isinstance(e, np.ndarray) and isinstance(a, np.ndarray) and e.dtype != a.dtype:
            return f"{path}: index dtype {a.dtype}, expected {e.dtype}"
    return None


def _scalar_kind(exp, act, lane, path):
    if is_torch_array(act) and not lane.host_results:
        if act.ndim != 0:
            return f"{path}: tensor of shape {tuple(act.shape)}, expected a scalar"
        diff = _device_diff(act, lane, path)
        if diff:
            return diff
        got = _dtype_of(act)
    elif _is_scalar(act):
        got = np.asarray(act).dtype
    else:
        return f"{path}: {type(act).__name__}, expected a scalar ({type(exp).__name__})"
    want = np.asarray(exp).dtype
    if got.kind != want.kind or (want.kind in "fc" and got != want):
        return f"{path}: scalar dtype {got}, expected {want}"
    return None


def kind_diff(exp, act, lane, path="result"):
    """Why ``act`` (trnscipy, on the lane) is not the same kind of result as ``exp`` (SciPy)."""
    if exp is None or isinstance(exp, (str, bytes)):
        return None if act == exp else f"{path}: {act!r}, expected {exp!r}"
    if isinstance(exp, np.ndarray):
        return _array_kind(exp, act, lane, path)
    if sp.issparse(exp):
        return _sparse_kind(exp, act, lane, path)
    if _is_scalar(exp):
        return _scalar_kind(exp, act, lane, path)
    if isinstance(exp, (tuple, list)):
        if type(act) is not type(exp) and not (
                hasattr(exp, "_fields") and getattr(act, "_fields", None) == exp._fields):
            return f"{path}: {type(act).__name__}, expected {type(exp).__name__}"
        if len(act) != len(exp):
            return f"{path}: {len(act)} items, expected {len(exp)}"
        for i, (e, a) in enumerate(zip(exp, act, strict=True)):
            diff = kind_diff(e, a, lane, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(exp, LinearOperator):
        if tuple(getattr(act, "shape", ())) != exp.shape:
            return f"{path}: operator shape {getattr(act, 'shape', None)}, expected {exp.shape}"
        return None
    if type(act) is not type(exp):
        return f"{path}: {type(act).__name__}, expected {type(exp).__name__}"
    return None


def _normwise(e, a, rtol):
    e = np.asarray(e)
    a = np.asarray(a)
    if e.dtype.kind in "biuSUO" or e.dtype == bool:
        return None if np.array_equal(e, a) else "values differ (exact comparison)"
    if e.size == 0:
        return None
    bad_nan = np.isnan(e) != np.isnan(a)
    if bad_nan.any():
        return "NaN in different places"
    fin = np.isfinite(e)
    if not np.array_equal(e[~fin & ~np.isnan(e)], a[~fin & ~np.isnan(e)]):
        return "infinities differ"
    e, a = e[fin], a[fin]
    if e.size == 0:
        return None
    scale = max(float(np.max(np.abs(e))), np.finfo(np.float64).tiny)
    err = float(np.max(np.abs(a.astype(np.complex128) - e)))
    if err > rtol * scale:
        return f"max |trn - scipy| = {err:.3g} > rtol {rtol:g} * max|scipy| ({scale:.3g})"
    return None


def values_diff(exp, act, rtol=None, path="result"):
    """Why host result ``act`` differs in value from ``exp`` (normwise, per-dtype rtol)."""
    if exp is None or isinstance(exp, (str, bytes)):
        return None
    if isinstance(exp, (tuple, list)):
        for i, (e, a) in enumerate(zip(exp, act, strict=True)):
            diff = values_diff(e, a, rtol, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(exp, LinearOperator):
        probe = np.arange(1, exp.shape[1] + 1, dtype=exp.dtype)
        exp, act = exp @ probe, to_host(act @ _like(act, probe))
    if sp.issparse(exp):
        exp, act = exp.toarray(), act.toarray()
    exp_arr = np.asarray(exp)
    tol = rtol if rtol is not None else RTOL.get(exp_arr.dtype, 1e-10)
    diff = _normwise(exp_arr, act, tol)
    return f"{path}: {diff}" if diff else None


def _like(op, host_vector):
    """``host_vector`` on the device of operator ``op`` (for probing device operators)."""
    device = getattr(op, "device", None)
    if device is None:
        return host_vector
    import trnscipy

    return trnscipy.to_device(host_vector, device)
