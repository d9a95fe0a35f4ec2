"""bandwidth, issymmetric, ishermitian on device tensors (SciPy's Cython helpers in
scipy/linalg/_cythonized_array_utils); one host read for the answer.  float64 on a
device without float64 (Neuron): the zero tests and equalities read the exact float32
parts, the tolerance test is computed in triple-float."""

import numpy as np
import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._double_float import is_exact, split
from trnscipy._errors import fallback
from trnscipy._kernels import _df
from trnscipy._torch import torch
from trnscipy._transfer import _to_host, df_parts, df_triple, tensor_on
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["bandwidth", "issymmetric", "ishermitian"]


def _values(a):
    """``a`` as compared with zero: the float32 high parts of float64 data held exactly on a
    device without float64 (zero iff the value is), else ``a``."""
    return df_parts(a)[0] if is_exact(a) else a


def _two_d(a):
    """``a`` as a tensor: one matrix, or a stack (the dispatcher's broadcast batch)."""
    a = as_tensor(a, device_of(a), False, dtype=a.dtype if hasattr(a, "dtype") else None)
    if a.ndim < 2:
        raise ValueError("Input array must be a 2D NumPy array.")
    return a


def _per_matrix(t, a):
    """The answer of each matrix from its entries' test ``t``: a bool for one matrix (one
    host read), a bool tensor of the batch shape for a stack (no read: SciPy's loop's
    array, on the device)."""
    per = t.flatten(-2).all(-1)
    return bool(per) if a.ndim == 2 else per


# (batch declared: SciPy 1.18 batches it natively, without the wrapper core_dims reads)
@dispatch(_sl.bandwidth, stacks=True, double_float=("neuron",), batch=(("a", 2),))
def bandwidth(a):
    a = _two_d(a)
    i = torch.arange(a.shape[-2], device=a.device).unsqueeze(1)
    j = torch.arange(a.shape[-1], device=a.device).unsqueeze(0)
    nz = _values(a) != 0
    if a.numel() == 0:
        if a.ndim == 2:
            return 0, 0
        zero = torch.zeros(a.shape[:-2], dtype=torch.int64, device=a.device)
        return zero, zero.clone()
    zero = torch.zeros((), dtype=torch.int64, device=a.device)
    # (a full reduction by dim: torch-xla 2.9's amax() with no dim does not reduce)
    band = torch.stack([torch.where(nz, i - j, zero), torch.where(nz, j - i, zero)])
    per = band.flatten(-2).amax(-1)  # (lower, upper) of each matrix
    if a.ndim > 2:  # a stack: SciPy's loop's two arrays, on the device
        return per[0], per[1]
    lower, upper = per.tolist()
    return int(lower), int(upper)


def _is_sym(a, atol, rtol, conj, scipy_func):
    """SciPy's rules: without tolerances (None or 0) the entries off the diagonal equal
    their mirror images (a complex diagonal is compared with its conjugate); with them
    every entry is close to its mirror image as ``np.isclose`` says (equal infinities
    are, nan is not)."""
    a = _two_d(a)
    if a.shape[-1] != a.shape[-2]:
        raise ValueError("Input array must be square.")
    if a.numel() == 0:
        return True if a.ndim == 2 else torch.ones(a.shape[:-2], dtype=torch.bool,
                                                   device=a.device)
    exact = not atol and not rtol
    if is_exact(a) and not exact and not (
            _holdable(atol, covers_all=True) and _holdable(rtol)):
        fallback(f"scipy.linalg.{scipy_func.__name__}", "a tolerance outside float32's "
                 "exponent range has no exact form on a device without float64",
                 stacklevel=5)
        out = scipy_func(_to_host(a, strict=False), atol=atol, rtol=rtol)
        return out if a.ndim == 2 else tensor_on(np.asarray(out), a.device)
    if is_exact(a):  # (the isclose test of the parts takes infinities itself)
        same, close = _compare_parts(a, None if exact else (atol or 0.0, rtol or 0.0))
    else:
        at = a.mT.conj() if conj and a.is_complex() else a.mT
        same = a == at
        if not exact:
            close = (a - at).abs() <= (atol or 0.0) + (rtol or 0.0) * at.abs()
            close = torch.where(torch.isfinite(a) & torch.isfinite(at), close, same)
    if not exact:
        return _per_matrix(close, a)
    if not (conj and a.is_complex()):  # the diagonal is its own mirror image (nan too)
        same = same | torch.eye(a.shape[-1], dtype=torch.bool, device=a.device)
    return _per_matrix(same, a)


def _compare_parts(a, tolerances):
    """Real float64 held as exact float32 parts (a device without float64): (a == a^T,
    None) from the parts (equal values have equal parts); with ``tolerances`` (atol,
    rtol): (None, isclose(a, a^T)), SciPy's |a - a^T| <= atol + rtol |a^T| in
    triple-float (float32 operations only)."""
    x = df_triple(a)
    xt = [p.mT for p in x]
    if tolerances is None:
        same = (x[0] == xt[0]) & (x[1] == xt[1]) & (x[2] == xt[2])
        return same, None
    atol, rtol = tolerances
    finite = torch.isfinite(x[0]) & torch.isfinite(xt[0])  # (else: equal infinities)
    if atol >= _COVERS_ALL:  # every finite pair is close
        return None, finite | (x[0] == xt[0])
    sign = torch.where(xt[0] < 0, -1.0, 1.0)
    bound = _df.mul3(_triple(rtol, a), [p * sign for p in xt])  # rtol |a^T|
    bound = _df.add3(_triple(atol, a), bound)
    diff = _df.add3(x, _df.neg3(xt))
    sign = torch.where(diff[0] < 0, -1.0, 1.0)
    slack = _df.add3(bound, [-p * sign for p in diff])  # bound - |a - a^T|
    return None, torch.where(finite, _nonnegative(slack), x[0] == xt[0])


# An atol above any difference of two values a device without float64 holds (2 * 2**128)
_COVERS_ALL = 2.0 ** 129


def _holdable(value, covers_all=False):
    """True for a tolerance that a device without float64 holds exactly as parts (or,
    with ``covers_all``, one that covers every finite difference)."""
    if covers_all and value is not None and value >= _COVERS_ALL:
        return True
    try:
        split(np.asarray(0.0 if value is None else value, dtype=np.float64))
    except ValueError:
        return False
    return True


def _triple(value, like):
    """A Python float tolerance as a 0-d triple on ``like``'s device (exact)."""
    t = tensor_on(np.asarray(0.0 if value is None else value, dtype=np.float64), like.device)
    return df_triple(t)


def _nonnegative(t):
    """hi + lo + tail >= 0 for a distilled triple: the sign of its first nonzero part."""
    hi, lo, tail = t
    return (hi > 0) | ((hi == 0) & ((lo > 0) | ((lo == 0) & (tail >= 0))))


@dispatch(_sl.issymmetric, stacks=True, double_float=("neuron",))
def issymmetric(a, atol=None, rtol=None):
    return _is_sym(a, atol, rtol, False, _sl.issymmetric)


@dispatch(_sl.ishermitian, stacks=True, double_float=("neuron",))
def ishermitian(a, atol=None, rtol=None):
    return _is_sym(a, atol, rtol, True, _sl.ishermitian)
