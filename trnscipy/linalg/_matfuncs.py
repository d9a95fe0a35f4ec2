"""expm, sqrtm, logm, funm and expm_frechet on device tensors.

sqrtm, logm and funm work on the complex Schur form from trnscipy.linalg.schur (the
host's SciPy, announced, where the device has no schur of its own) with triangular
recurrences on the device; CPU tensors run SciPy on zero-copy views.
"""

import functools
import warnings

import numpy as np
import scipy.linalg as _sl

from trnscipy._batch import PerMatrix
from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import dispatch
from trnscipy._dtypes import to_torch_dtype
from trnscipy._kernels import kernel, register
from trnscipy._scipy_version import scipy_at_least
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _on_views
from trnscipy.linalg._kernels_struct import _cabs
from trnscipy.linalg._misc import norm
from trnscipy.linalg._validate import LinAlgError, as_tensor, device_of

__all__ = ["expm", "sqrtm", "logm", "funm", "expm_frechet", "cosm", "sinm", "tanm", "coshm",
           "sinhm", "tanhm", "expm_cond", "signm", "fractional_matrix_power"]


@dispatch(_sl.expm, double_float=("neuron",))
def expm(A):
    a = as_tensor(A, device_of(A), finite=False, small_ints=torch.float64)
    if a.ndim < 2 and a.numel() == 1:  # SciPy: one number x gives [[exp(x)]], in double
        from trnscipy.linalg._basic import _wide_result

        return expm(_wide_result(a.reshape(1, 1)))
    if a.ndim < 2:
        raise LinAlgError("The input array must be at least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if a.numel() == 0:
        return a.clone()
    return kernel("linalg.expm", a.device)(a)


# funm works in the complex Schur form: Neuron has no complex arithmetic, whatever the
# input's dtype (sqrtm, logm, signm, fractional_matrix_power: real methods there,
# ``_refine_matfuncs``).
_COMPLEX_SCHUR = "it computes with the complex Schur form"
_NO = object()


def _removed_argument(func, name, value):
    """``disp`` (and sqrtm's ``blocksize``): deprecated in SciPy 1.16, removed in 1.18
    (passing one raises TypeError there, as Python does for an unknown keyword)."""
    if value is _NO:
        return
    if scipy_at_least(1, 18):
        raise TypeError(f"{func}() got an unexpected keyword argument '{name}'")
    warnings.warn(f"The `{name}` argument is deprecated and will be removed in SciPy "
                  "1.18.0.", DeprecationWarning, stacklevel=4)


@dispatch(_sl.sqrtm, double_float=("neuron",))
def sqrtm(A, disp=_NO, blocksize=_NO):
    for name, value in (("disp", disp), ("blocksize", blocksize)):
        _removed_argument("sqrtm", name, value)
    a = as_tensor(A, device_of(A), True, small_ints=torch.float64)  # SciPy: ints -> float64
    if a.ndim < 2:
        raise LinAlgError("The input array must be at least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if a.numel() == 0:
        return a.clone()
    kwargs = {} if disp is _NO else {"disp": disp}
    if a.ndim > 2 and not kwargs:
        try:  # a kernel that takes the stack at once (one Schur form for all)
            return kernel("linalg.sqrtm", a.device)(a)
        except PerMatrix:
            pass
    return _batched(kernel("linalg.sqrtm", a.device), a, **kwargs)


def _square(A, message):
    a = as_tensor(A, device_of(A), False)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(message)
    return a


def _batched(fn, a, *args, **kwargs):
    """``fn`` on each matrix of a batch (SciPy's batch rule), a loop over the slices."""
    if a.ndim == 2:
        return fn(a, *args, **kwargs)
    out = [fn(m, *args, **kwargs) for m in a.reshape(-1, *a.shape[-2:])]
    dtype = functools.reduce(torch.promote_types, (o.dtype for o in out))
    return torch.stack([o.to(dtype) for o in out]).reshape(a.shape)


@dispatch(_sl.logm, stacks=True, double_float=("neuron",))
def logm(A, disp=_NO):
    """Returns double precision where the device has it (SciPy returns float64 for
    float32 input); ``disp=False`` gives (logm, ||expm(F) - A||_1 / ||A||_1) (a stack:
    each matrix's, as one float64 array).  A stack: one computation (the double-float
    method: PerMatrix)."""
    from trnscipy.linalg._basic import _wide

    _removed_argument("logm", "disp", disp)
    a = _square(A, "expected a square matrix")
    if a.numel() == 0:
        if a.ndim > 2:
            raise PerMatrix  # (SciPy's loop's shapes)
        return _wide(a.clone())
    f = _wide(kernel("linalg.logm", a.device)(a))
    if disp is _NO or disp:
        return f
    err = kernel("linalg._logm_error", a.device)(f, a)
    return f, (err if a.ndim > 2 else float(err))


@register("linalg._logm_error", "generic")
def _logm_error(f, a):
    """SciPy's ||expm(F) - A||_1 / ||A||_1 (a stack: each matrix's)."""
    if f.ndim > 2:
        return _norm1(expm(f) - a.to(f.dtype)) / _norm1(a)
    return norm(expm(f) - a.to(f.dtype), 1) / norm(a, 1)


def _norm1(x):
    """Each matrix's 1-norm (its largest absolute column sum), in the real dtype."""
    return _cabs(x).sum(-2).amax(-1)


@dispatch(_sl.funm, stacks=True, host=("neuron",), why=_COMPLEX_SCHUR)
def funm(A, func, disp=True):
    """``func`` is called with each matrix's eigenvalues as a device tensor; a function
    that cannot take one (TypeError: a NumPy function on XLA data) gets them as a NumPy
    array, and its result is moved back (the user's own host computation).  A stack: one
    Schur form and recurrence for all (complex stacks: the Schur kernel's PerMatrix)."""
    a = _square(A, "expected square array_like input")
    return kernel("linalg.funm", a.device)(a, func, disp=disp)


@dispatch(_sl.expm_frechet, stacks=True, double_float=("neuron",))
def expm_frechet(A, E, method=None, compute_expm=True, check_finite=True):
    """Both methods take the block route: expm([[A, E], [0, A]]) through trnscipy's expm
    (SciPy's 'SPS' is the Al-Mohy-Higham recurrence, in double precision: so is this
    route for 'SPS' where the device has float64; the results agree to rounding)."""
    from trnscipy.linalg._basic import _wide, _wide_result

    device = device_of(A, E)
    a = as_tensor(A, device, check_finite, small_ints=torch.float64)
    e = as_tensor(E, device, check_finite, small_ints=torch.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:  # (a stack: the dispatcher's broadcast)
        raise ValueError("expected A to be a square matrix")
    if e.ndim < 2 or e.shape[-1] != e.shape[-2]:
        raise ValueError("expected E to be a square matrix")
    if a.shape != e.shape:
        raise ValueError("expected A and E to be the same shape")
    if method not in (None, "SPS", "blockEnlarge"):
        raise ValueError(f"Unknown implementation {method}")
    if method in (None, "SPS"):  # SciPy's SPS computes in double precision
        a, e = _wide(a), _wide(e)
    dtype = torch.promote_types(a.dtype, e.dtype)
    a, e = a.to(dtype), e.to(dtype)
    n = a.shape[-1]
    big = torch.cat([torch.cat([a, e], -1), torch.cat([torch.zeros_like(a), a], -1)], -2)
    m = expm(big)
    out = m[..., :n, :n].clone(), m[..., :n, n:].clone()
    if method in (None, "SPS"):  # SciPy's dtype (exact double-float where no float64)
        out = tuple(_wide_result(o) for o in out)
    return out if compute_expm else out[1]


# ----------------------------------------------------------------------------------------
# cosm, sinm, tanm, coshm, sinhm, tanhm: SciPy's formulas through trnscipy's expm and solve


def _square_input(A):
    a = as_tensor(A, device_of(A), finite=False, small_ints=torch.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:  # (a stack: cosm, sinm take one)
        raise ValueError("expected square array_like input")
    return a


def _maybe_real(a, b):
    """b.real where a is real and b's imaginary part is negligible (SciPy's rule), decided
    per matrix of a stack as SciPy's loop does: a stack mixing both is complex, its real
    matrices with a zero imaginary part (NumPy's promotion of the loop's results)."""
    if a.is_complex() or not b.is_complex():
        return b
    tol = 1e3 * torch.finfo(torch.float32).eps if b.dtype == torch.complex64 else \
        1e6 * torch.finfo(torch.float64).eps
    real = (b.imag.abs() <= tol).flatten(-2).all(-1)
    if bool(real.all()):
        return b.real.clone()
    if b.ndim == 2 or not bool(real.any()):
        return b
    return torch.where(real[..., None, None], b.real.to(b.dtype), b)


def _ij(a):
    return a.to(torch.complex64 if a.dtype == torch.float32 else
                torch.complex128 if not a.is_complex() else a.dtype) * 1j


def _cos_sin(a):
    """(cos A, sin A) of real ``a`` in real arithmetic: expm([[0, -A], [A, 0]]) is
    [[cos A, -sin A], [sin A, cos A]] (SciPy takes expm(iA): Neuron has no complex
    arithmetic, and float64 there then goes through expm's double-float method)."""
    n = a.shape[-1]
    zero = torch.zeros_like(a)
    e = expm(torch.cat([torch.cat([zero, -a], -1), torch.cat([a, zero], -1)], -2))
    return e[..., :n, :n].contiguous(), e[..., n:, :n].contiguous()


@dispatch(_sl.cosm, stacks=True, double_float=("neuron",))
def cosm(A):
    a = _square_input(A)
    if a.is_complex():
        return 0.5 * (expm(_ij(a)) + expm(-_ij(a)))
    return _cos_sin(a)[0]


@dispatch(_sl.sinm, stacks=True, double_float=("neuron",))
def sinm(A):
    a = _square_input(A)
    if a.is_complex():
        return -0.5j * (expm(_ij(a)) - expm(-_ij(a)))
    return _cos_sin(a)[1]


@dispatch(_sl.tanm, stacks=True, double_float=("neuron",))
def tanm(A):
    from trnscipy.linalg._basic import solve

    a = _square_input(A)
    if a.is_complex():
        return solve(cosm(a), sinm(a))
    return solve(*_cos_sin(a))


@dispatch(_sl.coshm, stacks=True, double_float=("neuron",))
def coshm(A):
    a = _square_input(A)
    return _maybe_real(a, kernel("linalg._expm_half", a.device)(a, 1))


@dispatch(_sl.sinhm, stacks=True, double_float=("neuron",))
def sinhm(A):
    a = _square_input(A)
    return _maybe_real(a, kernel("linalg._expm_half", a.device)(a, -1))


@register("linalg._expm_half", "generic")
def _expm_half(a, sign):
    """(expm(A) + sign expm(-A)) / 2: coshm (sign 1), sinhm (-1)."""
    return 0.5 * (expm(a) + expm(-a)) if sign > 0 else 0.5 * (expm(a) - expm(-a))


@dispatch(_sl.tanhm, stacks=True, double_float=("neuron",))
def tanhm(A):
    from trnscipy.linalg._basic import solve

    a = _square_input(A)
    return _maybe_real(a, solve(coshm(a), sinhm(a)))


@dispatch(_sl.expm_cond, stacks=True, double_float=("neuron",))
def expm_cond(A, check_finite=True):
    """SciPy's Kronecker form of the Frechet derivative (its n^2 columns from batched
    calls of trnscipy's expm_frechet), its 2-norm through trnscipy's norm (CPU tensors:
    SciPy on views; its float32 route mixes precisions).  Stacks too."""
    a = as_tensor(A, device_of(A), check_finite)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError("expected a square matrix")
    if a.shape[-1] == 0:  # SciPy's error (its Kronecker form stacks no columns)
        raise ValueError("need at least one array to concatenate")
    return kernel("linalg.expm_cond", a.device)(a)


register("linalg.expm_cond", "cpu")(_on_views(_sl.expm_cond))

_FRECHET_CHUNK = 2 ** 22  # entries of the block matrices of one batched expm_frechet call


@register("linalg.expm_cond", "generic")
def _expm_cond(a):
    from trnscipy.linalg._basic import _wide_result

    n = a.shape[-1]
    # E in float64 (SciPy's np.identity) where the device has it; else float32 work and
    # a float64 result holding its values exactly (double-float)
    wide = capability(device_kind(a.device)).float64
    dtype = torch.promote_types(a.dtype, torch.float64) if wide else a.dtype
    eye = torch.eye(n, dtype=dtype, device=a.device)
    # the directions E_ij = e_i e_j^T (row i * n + j), in chunks of one batched call each
    basis = (eye[:, None, :, None] * eye[None, :, None, :]).reshape(n * n, n, n)
    step = max(1, _FRECHET_CHUNK // (a[..., :1, :1].numel() * 4 * n * n))
    rows = torch.cat([expm_frechet(a[..., None, :, :], basis[i:i + step], compute_expm=False,
                                   method=None if wide else "blockEnlarge",
                                   check_finite=False).mT.flatten(-2)
                      for i in range(0, n * n, step)], -2)
    k2 = norm(rows.mT, 2, axis=(-2, -1))
    return _wide_result((k2 * norm(a, "fro", axis=(-2, -1)))
                        / norm(expm(a), "fro", axis=(-2, -1)))


@register("linalg.expm_cond", "neuron")
def _expm_cond_df(a):
    """float64: the Kronecker form at once, K = the top-right block of
    expm([[I (x) A, I], [0, A^T (x) I]]) (the two blocks commute: the block is
    int_0^1 exp(s A^T) (x) exp((1-s) A) ds, SciPy's n^2 Frechet derivatives as columns up
    to their order, which the 2-norm does not see), one double-float expm of order 2 n^2
    instead of n^2 of order 2n; the norms double-float, their quotient in triple-float."""
    if a.dtype != torch.float64 or a.numel() == 0:
        return _expm_cond(a)
    if a.ndim > 2:
        raise PerMatrix  # (the Kronecker form's double-float expm: one matrix at a time)
    from trnscipy import _transfer
    from trnscipy._kernels import _df

    n = a.shape[0]
    hi, lo = _transfer.df_parts(a)
    eye = torch.eye(n, dtype=hi.dtype, device=a.device)
    big_eye = torch.eye(n * n, dtype=hi.dtype, device=a.device)
    zero = torch.zeros_like(big_eye)
    # products with 0 and 1 only: exact on each part
    big = [torch.cat([torch.cat([torch.kron(eye, p), i], 1),
                      torch.cat([zero, torch.kron(p.mT, eye)], 1)], 0)
           for p, i in ((hi, big_eye), (lo, zero))]
    m = expm(_transfer.df_tensor(*big))
    k = m[:n * n, n * n:].clone()
    k2, an, xn = (_transfer.df_triple(v) for v in (norm(k, 2), norm(a, "fro"),
                                                    norm(expm(a), "fro")))
    return _transfer.df_tensor(*_df.div3(_df.mul3(k2, an), xn))


@dispatch(_sl.signm, stacks=True, double_float=("neuron",))
def signm(A, disp=_NO):
    """A stack: funm's and the Newton iteration's steps for all matrices at once, each
    matrix iterating until its own estimate stops (the double-float method: PerMatrix)."""
    _removed_argument("signm", "disp", disp)
    disp = True if disp is _NO else disp
    a = _square(A, "expected square array_like input")
    return kernel("linalg.signm", a.device)(a, disp=disp)


@dispatch(_sl.fractional_matrix_power, stacks=True, double_float=("neuron",))
def fractional_matrix_power(A, t):
    """Integer ``t`` keeps integer input integer (np.linalg.matrix_power); otherwise the
    result is double precision, as SciPy's.  A stack: one computation where its matrices
    take the same branch (the double-float method: PerMatrix)."""
    a = _square(A, "expected square array_like input")
    dtype = to_torch_dtype(A.dtype if hasattr(A, "dtype") else np.asarray(A).dtype)
    if t == int(t) and not (dtype.is_floating_point or dtype.is_complex):
        a = as_tensor(A, a.device, False, dtype=dtype)
    if a.numel() == 0:
        if a.ndim > 2:
            raise PerMatrix  # (SciPy's loop's shapes)
        return a.clone()
    return kernel("linalg.fractional_matrix_power", a.device)(a, t)
