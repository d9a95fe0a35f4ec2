"""bandwidth, issymmetric, ishermitian on device tensors (SciPy's Cython helpers in
scipy/linalg/_cythonized_array_utils); one host read for the answer."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._double_float import is_exact
from trnscipy._torch import torch
from trnscipy._transfer import df_parts
from trnscipy.linalg._validate import as_tensor, device_of

__all__ = ["bandwidth", "issymmetric", "ishermitian"]


def _values(a):
    """``a`` as compared with zero: the float32 high parts of float64 data held exactly on a
    device without float64 (zero iff the value is), else ``a``."""
    return df_parts(a)[0] if is_exact(a) else a


def _two_d(a):
    a = as_tensor(a, device_of(a), False, dtype=a.dtype if hasattr(a, "dtype") else None)
    if a.ndim != 2:
        raise ValueError("Input array must be a 2D NumPy array.")
    return a


@dispatch(_sl.bandwidth, double_float=("neuron",))
def bandwidth(a):
    a = _two_d(a)
    i = torch.arange(a.shape[0], device=a.device).unsqueeze(1)
    j = torch.arange(a.shape[1], device=a.device).unsqueeze(0)
    nz = _values(a) != 0
    if a.numel() == 0:
        return 0, 0
    zero = torch.zeros((), dtype=torch.int64, device=a.device)
    # (a full reduction by dim: torch-xla 2.9's amax() with no dim does not reduce)
    band = torch.stack([torch.where(nz, i - j, zero), torch.where(nz, j - i, zero)])
    lower, upper = band.flatten(1).amax(1).tolist()
    return int(lower), int(upper)


def _is_sym(a, atol, rtol, conj):
    a = _two_d(a)
    if a.shape[0] != a.shape[1]:
        raise ValueError("Input array must be square.")
    if a.numel() == 0:
        return True
    at = a.mT.conj() if conj and a.is_complex() else a.mT
    if atol is None and rtol is None:
        return bool((a == at).all())
    atol = 0.0 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    return bool(((a - at).abs() <= atol + rtol * at.abs()).all())


@dispatch(_sl.issymmetric)
def issymmetric(a, atol=None, rtol=None):
    return _is_sym(a, atol, rtol, False)


@dispatch(_sl.ishermitian)
def ishermitian(a, atol=None, rtol=None):
    return _is_sym(a, atol, rtol, True)
