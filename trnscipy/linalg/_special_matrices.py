"""Special matrices (``scipy.linalg._special_matrices``), ``block_diag`` and ``khatri_rao``
on device data.

Tensor inputs give tensors on their device, in SciPy's result dtype, built by torch
gathers, scatters and elementwise ops (batches as SciPy's).  toeplitz, circulant,
hankel, block_diag and convolution_matrix only move values (docs/design.md): they stay
on the device in any dtype, without asking the capability table.

trnscipy's addition: the functions whose SciPy signature has no array input
(hadamard, helmert, hilbert, invhilbert, pascal, invpascal, dft) take a keyword-only
``device=``; with it the matrix is built on that device, without it (the default)
the result is SciPy's own NumPy array.  Exact integer results that SciPy returns as
object arrays of Python integers (``invhilbert(n, exact=True)`` for n > 14,
``pascal``/``invpascal`` with ``exact=True`` for n >= 35) cannot be tensors: on a
device they raise ValueError.
"""

import functools
import inspect
import math

import numpy as np
import scipy.linalg as _sl
from array_api_compat import is_torch_array

from trnscipy._capabilities import declaration, declare, runs_on_device
from trnscipy._device import device_kind, resolve_device
from trnscipy._dispatch import dispatch
from trnscipy._double_float import high_part
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import _df, kernel
from trnscipy._torch import torch
from trnscipy._transfer import (
    _to_device,
    astype,
    df_tensor,
    df_triple,
    held_as_parts,
    stores_float32,
    tensor_on,
)
from trnscipy.linalg._validate import device_of

__all__ = ["toeplitz", "circulant", "hankel", "hadamard", "leslie", "block_diag",
           "companion", "helmert", "hilbert", "invhilbert", "pascal", "invpascal", "dft",
           "fiedler", "fiedler_companion", "convolution_matrix", "khatri_rao"]


def _raw(x, device):
    """``x`` as a tensor on ``device`` in its own dtype (NumPy's rules for array-likes)."""
    if not is_torch_array(x):
        x = torch.as_tensor(np.asarray(x))
    x = x.to(device)
    return x.resolve_conj() if x.is_conj() else x.resolve_neg() if x.is_neg() else x


def _promote(*tensors):
    """NumPy's result dtype (int64 with float32 is float64; torch would say float32)."""
    try:
        return to_torch_dtype(np.result_type(*(to_numpy_dtype(t.dtype) for t in tensors)))
    except TypeError:  # dtypes NumPy lacks (bfloat16): torch's rule
        return functools.reduce(torch.promote_types, (t.dtype for t in tensors))


def _float(dtype):
    """NumPy's dtype of ``x / 1.0``: integers and bool become float64."""
    return dtype if dtype.is_floating_point or dtype.is_complex else torch.float64


def _arange(n, like):
    return torch.arange(n, device=like.device)


# On a device without float64 (Neuron) float64 values are exact float32 parts: the
# functions declared ``double_float=_PARTS`` place them by index (data movement), negate
# them part by part (exact) and divide or subtract them in triple-float (``_df``: float32
# operations only, within a unit of float64 rounding of SciPy's values).
_PARTS = ("neuron",)


def _on_parts(t):
    """True for float64 data held as exact float32 parts (a device without float64)."""
    return held_as_parts(t.dtype, t.device)


def _neg(t):
    return df_tensor(*_df.neg3(df_triple(t))) if _on_parts(t) else -t


def _div(a, b):
    """a / b (b broadcast to a's shape), correctly rounded from the parts on Neuron."""
    return kernel("linalg._divide", a.device)(a, b.expand(a.shape))


# ----------------------------------------------------------------------------------------
# tensor inputs


def _toeplitz(c, r):
    """Batched Toeplitz from first column ``c`` (..., m) and first row ``r`` (..., n)."""
    batch = torch.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    dtype = _promote(c, r)
    c, r = c.to(dtype).expand(*batch, c.shape[-1]), r.to(dtype).expand(*batch, r.shape[-1])
    m, n = c.shape[-1], r.shape[-1]
    vals = torch.cat([c.flip(-1), r[..., 1:]], -1)
    idx = (m - 1) - _arange(m, c)[:, None] + _arange(n, c)[None, :]
    return vals[..., idx]


# data movement only: no table to ask; SciPy batches c and r (its inner function)
@dispatch(_sl.toeplitz, composite=True, batch=(("c", 1), ("r", 1)), stacks=True)
def toeplitz(c, r=None):
    c = torch.atleast_1d(_raw(c, device_of(c, r)))
    r = c.conj() if r is None else torch.atleast_1d(_raw(r, c.device))
    return _toeplitz(c, r)


@dispatch(_sl.circulant, composite=True)
def circulant(c):
    c = torch.atleast_1d(_raw(c, device_of(c)))
    n = c.shape[-1]
    idx = (_arange(n, c)[:, None] - _arange(n, c)[None, :]) % max(n, 1)
    return c[..., idx]


@dispatch(_sl.hankel, composite=True)
def hankel(c, r=None):
    """As SciPy 1.17, multidimensional input is raveled (with its FutureWarning)."""
    c = _raw(c, device_of(c, r))
    r = torch.zeros_like(c) if r is None else _raw(r, c.device)
    if c.ndim > 1 or r.ndim > 1:
        import warnings

        warnings.warn("Beginning in SciPy 1.19, multidimensional input will be treated as a "
                      "batch, not `ravel`ed. To preserve the existing behavior and silence "
                      "this warning, `ravel` arguments before passing them to `hankel`.",
                      FutureWarning, stacklevel=3)
    c, r = c.reshape(-1), r.reshape(-1)
    dtype = _promote(c, r)
    vals = torch.cat([c.to(dtype), r[1:].to(dtype)])
    m, n = c.shape[0], r.shape[0]
    return vals[_arange(m, c)[:, None] + _arange(n, c)[None, :]]


@dispatch(_sl.leslie, stacks=True, double_float=_PARTS)
def leslie(f, s):
    device = device_of(f, s)
    f, s = torch.atleast_1d(_raw(f, device)), torch.atleast_1d(_raw(s, device))
    if f.shape[-1] != s.shape[-1] + 1:
        raise ValueError("Incorrect lengths for f and s. The length of s along "
                         "the last axis must be one less than the length of f.")
    if s.shape[-1] == 0:
        raise ValueError("The length of s must be at least 1.")
    batch = torch.broadcast_shapes(f.shape[:-1], s.shape[:-1])
    dtype = _promote(f, s)
    f, s = astype(f, dtype).expand(*batch, -1), astype(s, dtype).expand(*batch, -1)
    n = f.shape[-1]
    out = torch.zeros(*batch, n, n, dtype=dtype, device=device)
    out[..., 0, :] = f  # (placed: the exact parts move, no arithmetic)
    i = _arange(n - 1, f)
    out[..., i + 1, i] = s
    return out


@dispatch(_sl.block_diag, composite=True)
def block_diag(*arrs):
    device = device_of(*arrs)
    if not arrs:  # SciPy: an empty 1x0 float64 array
        return tensor_on(np.empty((1, 0)), device)
    arrs = [_raw(a, device) for a in arrs]
    arrs = [a.reshape((1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a
            for a in arrs]
    batch = torch.broadcast_shapes(*(a.shape[:-2] for a in arrs))
    dtype = _promote(*arrs)
    rows = [sum(a.shape[-2] for a in arrs), sum(a.shape[-1] for a in arrs)]
    out = torch.zeros(batch + tuple(rows), dtype=dtype, device=device)
    r = c = 0
    for a in arrs:
        rr, cc = a.shape[-2:]
        out[..., r:r + rr, c:c + cc] = a.to(dtype)
        r, c = r + rr, c + cc
    return out


@dispatch(_sl.companion, double_float=_PARTS)
def companion(a):
    a = torch.atleast_1d(_raw(a, device_of(a)))
    n = a.shape[-1]
    if n < 2:
        raise ValueError("The length of `a` along the last axis must be at least 2.")
    if bool((high_part(a[..., 0]) == 0).any()):
        raise ValueError("The first coefficient(s) of `a` (i.e. elements "
                         "of `a[..., 0]`) must not be zero.")
    dtype = _float(a.dtype)
    a = astype(a, dtype)
    first = _neg(_div(a[..., 1:], a[..., :1]))
    out = torch.zeros(a.shape[:-1] + (n - 1, n - 1), dtype=dtype, device=a.device)
    out[..., 0, :] = first
    i = _arange(n - 2, a)
    out[..., i + 1, i] = 1
    return out


@dispatch(_sl.fiedler, double_float=_PARTS)
def fiedler(a):
    a = torch.atleast_1d(_raw(a, device_of(a)))
    if a.numel() == 0:
        return torch.zeros(0, dtype=torch.float64, device=a.device)
    if a.numel() == 1:
        return torch.zeros((1, 1), dtype=torch.float64, device=a.device)
    if _on_parts(a):  # |a_i - a_j|: a triple-float difference, its sign flipped exactly
        x = df_triple(a)
        d = _df.add3([p[..., :, None] for p in x], [-p[..., None, :] for p in x])
        sign = torch.where(d[0] < 0, -1.0, 1.0)
        return df_tensor(*(p * sign for p in d))
    d = a[..., :, None] - a[..., None, :]
    # complex: neither hypot nor a real-typed abs lowers on torch-xla 2.9
    return torch.sqrt(d.real ** 2 + d.imag ** 2) if d.is_complex() else d.abs()


def _fiedler_companion(a):
    n = a.shape[0] - 1
    a = _neg(_div(a, a[:1].expand(a.shape)))  # -a / a[0]: the entries placed below
    c = torch.zeros((n, n), dtype=a.dtype, device=a.device)
    one = torch.ones((), dtype=a.dtype, device=a.device)
    rng = range
    c[list(rng(3, n, 2)), list(rng(1, n - 2, 2))] = one
    c[list(rng(2, n, 2)), list(rng(1, n - 1, 2))] = a[3::2]
    c[list(rng(0, n - 2, 2)), list(rng(2, n, 2))] = one
    c[list(rng(0, n - 1, 2)), list(rng(1, n, 2))] = a[2::2]
    c[0, 0] = a[1]
    c[1, 0] = one
    return c


@dispatch(_sl.fiedler_companion, double_float=_PARTS)
def fiedler_companion(a):
    a = torch.atleast_1d(_raw(a, device_of(a)))
    a = astype(a, _float(a.dtype))
    if a.ndim > 1:
        flat = a.reshape(-1, a.shape[-1])
        out = torch.stack([fiedler_companion(row) for row in flat])
        return out.reshape(a.shape[:-1] + out.shape[1:])
    if a.shape[0] <= 2:
        if a.shape[0] == 2:
            return _neg(_div(a[-1:], a[:1])).reshape(1, 1)
        return a[:0]
    if bool(high_part(a[0]) == 0):
        raise ValueError("Leading coefficient is zero.")
    return _fiedler_companion(a)


@dispatch(_sl.convolution_matrix, composite=True)
def convolution_matrix(a, n, mode="full"):
    if n <= 0:
        raise ValueError("n must be a positive integer.")
    a = _raw(a, device_of(a))
    if a.numel() == 0:
        raise ValueError("len(a) must be at least 1.")
    if mode not in ("full", "valid", "same"):
        raise ValueError("'mode' argument must be one of ('full', 'valid', 'same')")
    if a.ndim == 0:
        a = a.reshape(1)
    k = a.shape[-1]
    pad = torch.zeros(a.shape[:-1] + (n - 1,), dtype=a.dtype, device=a.device)
    az, raz = torch.cat([a, pad], -1), torch.cat([a.flip(-1), pad], -1)
    length = az.shape[-1]
    if mode == "full":
        return _toeplitz(az, raz[..., length - n:])
    tb = te = min(n, k) - 1
    if mode == "same":
        tb = tb // 2
        te = min(n, k) - 1 - tb
    return _toeplitz(az[..., tb:length - te], raz[..., length - n - tb:length - tb])


@dispatch(_sl.khatri_rao, stacks=True, double_float=_PARTS)
def khatri_rao(a, b):
    device = device_of(a, b)
    a, b = _raw(a, device), _raw(b, device)
    if not (a.ndim >= 2 and b.ndim >= 2):
        raise ValueError("The both arrays should be 2-dimensional.")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError("The number of columns for both arrays should be equal.")
    dtype = _promote(a, b)
    if held_as_parts(dtype, device):  # triple-float products
        x, y = df_triple(astype(a, dtype)), df_triple(astype(b, dtype))
        c = df_tensor(*_df.mul3([p[..., :, None, :] for p in x], [p[..., None, :, :] for p in y]))
    else:
        c = a.to(dtype)[..., :, None, :] * b.to(dtype)[..., None, :, :]
    return c.reshape(c.shape[:-3] + (c.shape[-3] * c.shape[-2], c.shape[-1]))  # no -1: empty


# ----------------------------------------------------------------------------------------
# no array input: the device= keyword


def _device_keyword(scipy_func, dtype_of, double_float=()):
    """SciPy's function plus trnscipy's keyword-only ``device=`` (default None: SciPy's
    own host result).  With a device, ``impl`` builds the matrix there after the
    capability table accepts the result dtype ``dtype_of(bound arguments)``; otherwise
    SciPy builds it and the result is copied there (warned).  ``double_float``: the
    device kinds without float64 where ``impl`` builds float64 exactly (``declare``)."""
    name = f"{scipy_func.__module__}.{scipy_func.__name__}"
    if double_float:
        declare(name, double_float=double_float)
    signature = inspect.signature(scipy_func)

    def decorate(impl):
        @functools.wraps(scipy_func)
        def wrapper(*args, device=None, **kwargs):
            if device is None:
                return scipy_func(*args, **kwargs)
            device = resolve_device(device)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if runs_on_device(name, device_kind(device), dtype_of(bound.arguments)):
                return impl(*bound.args, device=device)
            return _to_device(scipy_func(*args, **kwargs), device, strict=False)

        params = list(signature.parameters.values())
        params.append(inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY,
                                        default=None))
        wrapper.__signature__ = signature.replace(parameters=params)
        wrapper._trnscipy_route = "device"
        wrapper._trnscipy_device_impl = impl
        wrapper._trnscipy_name = name  # as dispatch's wrappers: the table's key, its limits
        wrapper._trnscipy_capabilities = declaration(name)
        wrapper.__wrapped__ = scipy_func
        return wrapper

    return decorate


_F8, _C16 = np.dtype(np.float64), np.dtype(np.complex128)


def _built_from_integers(scipy_func, *args, device):
    """``scipy_func(*args)``'s float64 matrix on a device without float64.  Its entries are
    quotients, square roots or rounded products of integers computed from ``n`` alone,
    not float32 values: they are built from the integer arguments on the host, as SciPy
    builds them (bitwise SciPy's values; a double-float computation on the device would
    give about 48 of their 53 bits), and moved there exactly as double-float storage."""
    return tensor_on(scipy_func(*args), device)


def _binomials(rows, dtype, device):
    """Lower Pascal matrix L[i, j] = C(i, j) of order ``rows``.  Column j is T^j 1 for the
    strictly lower triangular matrix of ones T (Pascal's rule), built by doubling: log2(rows)
    matrix products, exact in int64 (every entry met is a binomial C(a, b), a < rows)."""
    i = torch.arange(rows, device=device)
    power = (i[:, None] > i[None, :]).to(dtype)
    cols = torch.ones((rows, 1), dtype=dtype, device=device)
    while cols.shape[1] < rows:
        cols = torch.cat([cols, _matmul(power, cols)], 1)
        if cols.shape[1] < rows:
            power = _matmul(power, power)
    return cols[:, :rows]


def _matmul(a, b):
    """a @ b; integer products as a broadcast sum (CUDA has no integer matmul)."""
    if a.is_floating_point() or a.is_complex():
        return a @ b
    return (a[:, :, None] * b[None, :, :]).sum(1)


def _check_size(n):
    if int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n}")
    return int(n)


@_device_keyword(_sl.hadamard, lambda b: np.dtype(b["dtype"]))
def hadamard(n, dtype=int, *, device):
    lg2 = int(math.log(n, 2)) if n >= 1 else 0
    if 2 ** lg2 != n:
        _sl.hadamard(n)  # raises SciPy's ValueError (its wording differs between versions)
        raise ValueError(f"n must be a power of 2, got {n}")
    h = torch.ones((1, 1), dtype=to_torch_dtype(np.dtype(dtype)), device=device)
    for _ in range(lg2):
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@_device_keyword(_sl.helmert, lambda b: _F8, double_float=("neuron",))
def helmert(n, full=False, *, device):
    n = _check_size(n)
    if stores_float32(device):
        return _built_from_integers(_sl.helmert, n, full, device=device)
    i = torch.arange(n, device=device, dtype=torch.float64)
    h = torch.tril(torch.ones((n, n), dtype=torch.float64, device=device), -1) - torch.diag(i)
    d = i * (i + 1)
    if n:
        h[0] = 1
        d[0] = n
    h = h / torch.sqrt(d)[:, None]
    return h if full else h[1:]


@_device_keyword(_sl.hilbert, lambda b: _F8, double_float=("neuron",))
def hilbert(n, *, device):
    n = _check_size(n)
    if stores_float32(device):
        return _built_from_integers(_sl.hilbert, n, device=device)
    i = torch.arange(n, device=device, dtype=torch.float64)
    return 1.0 / (i[:, None] + i[None, :] + 1)


def _exact_limit(exact, n, limit, name):
    if exact and n > limit:
        raise ValueError(f"{name}(n, exact=True) for n > {limit} holds Python integers "
                         "beyond 64 bits (SciPy returns an object array): it cannot be a "
                         "tensor; use exact=False or the host (device=None)")


@_device_keyword(_sl.invhilbert, lambda b: _F8 if not b["exact"] else None,
                 double_float=("neuron",))
def invhilbert(n, exact=False, *, device):
    n = _check_size(n)
    _exact_limit(exact, n, 14, "invhilbert")
    if not exact and stores_float32(device):
        return _built_from_integers(_sl.invhilbert, n, device=device)
    dtype = torch.int64 if exact else torch.float64
    comb = _binomials(2 * n, dtype, device)  # C(a, b), a < 2n
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    s = i + j
    sign = 1 - 2 * (s % 2)
    out = (sign * (s + 1)).to(dtype) * comb[n + i, n - j - 1] * comb[n + j, n - i - 1] * \
        comb[s, i.expand(n, n)] ** 2
    return out


@_device_keyword(_sl.pascal, lambda b: _F8 if not b["exact"] else None)
def pascal(n, kind="symmetric", exact=True, *, device):
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError("kind must be 'symmetric', 'lower', or 'upper'")
    n = _check_size(n)
    _exact_limit(exact, n, 34, "pascal")
    dtype = torch.int64 if exact else torch.float64
    if kind == "symmetric":  # P[i, j] = C(i + j, i)
        comb = _binomials(max(2 * n - 1, 0), dtype, device)
        i = torch.arange(n, device=device)
        p = comb[i[:, None] + i[None, :], i[:, None].expand(n, n)]
    else:
        p = _binomials(n, dtype, device)
        p = p if kind == "lower" else p.T.contiguous()
    return p.to(torch.uint64) if exact else p


@_device_keyword(_sl.invpascal, lambda b: _F8 if not b["exact"] else None)
def invpascal(n, kind="symmetric", exact=True, *, device):
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError("'kind' must be 'symmetric', 'lower' or 'upper'.")
    n = _check_size(n)
    _exact_limit(exact, n, 34, "invpascal")
    dtype = torch.int64 if exact else torch.float64
    low = _binomials(n, dtype, device)
    i = torch.arange(n, device=device)
    signs = (1 - 2 * ((i[:, None] + i[None, :]) % 2)).to(dtype)
    inv_low = low * signs  # inv(L) flips the sign of every other diagonal
    if kind == "lower":
        return inv_low
    if kind == "upper":
        return inv_low.T.contiguous()
    # inv(L L^T) = inv(L)^T inv(L); exact in int64 as a sum of products (every term of a
    # sum has the sign of the result, so no partial sum overflows)
    if not exact:
        return inv_low.T @ inv_low
    return (inv_low[:, :, None] * inv_low[:, None, :]).sum(0)


@_device_keyword(_sl.dft, lambda b: _C16)
def dft(n, scale=None, *, device):
    if scale not in (None, "sqrtn", "n"):
        raise ValueError(f"scale must be None, 'sqrtn', or 'n'; {scale!r} is not valid.")
    n = _check_size(n)
    i = torch.arange(n, device=device)
    angle = (-2 * math.pi / max(n, 1)) * ((i[:, None] * i[None, :]) % max(n, 1)).to(
        torch.float64)
    scale = {None: 1.0, "sqrtn": 1 / math.sqrt(n) if n else 1.0, "n": 1 / max(n, 1)}[scale]
    # scaled before combining: torch-xla 2.9 turns complex128 / float into float32, and
    # torch.complex does not lower there (view_as_complex does)
    return torch.view_as_complex(torch.stack([torch.cos(angle) * scale,
                                              torch.sin(angle) * scale], -1))
