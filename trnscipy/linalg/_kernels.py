"""scipy.linalg's kernels behind the seam (``trnscipy._kernels``).

Each ``linalg.<name>`` kernel takes validated, non-empty tensors and SciPy's
keyword arguments of ``scipy.linalg.<name>`` (minus ``overwrite_*`` and
``check_finite``) and returns tensors.

- cpu: SciPy's own LAPACK calls on zero-copy NumPy views of the CPU tensors.
  Measured on this machine (2 busy cores, n = 256/1024) torch.linalg was not
  reliably faster and was up to 5-7x slower for lu/lu_factor at n = 1024, so
  SciPy itself serves CPU tensors: its speed, its results, its warnings.
- generic (CUDA, and what XLA does not override): torch.linalg.
- xla: ops that lower to XLA HLO on torch-xla 2.9 (measured with PJRT_DEVICE=CPU,
  counting ``aten::`` fallback counters): ``torch.cholesky``,
  ``torch.triangular_solve``, ``linalg.eigh``/``eigvalsh``, real ``linalg.svd`` (slow: svd
  is QDWH + eigh, _xla_svd.py),
  ``linalg.inv_ex``, ``linalg.slogdet``.  ``linalg.cholesky``,
  ``linalg.solve_triangular``, ``linalg.solve``, ``linalg.det``, ``lu*``, ``qr``,
  ``eig``, ``lstsq``, ``matrix_exp`` do NOT lower (torch-xla runs them on the host
  through its silent aten fallback), and complex SVD fails to lower.  Also
  measured: XLA's complex LU inverse is wrong (complex solve/inv/det go to the
  host, announced), and XLA's float64 eigh/SVD vectors reach only ~1e-8/1e-7
  residuals (eigenvalues and singular values are accurate to ~1e-15).
"""

import functools
import math
import warnings

import numpy as np
import scipy.linalg as _sl
from array_api_compat import is_torch_array

from trnscipy._batch import PerMatrix
from trnscipy._dtypes import absolute
from trnscipy._errors import fallback
from trnscipy._kernels import kernel, register
from trnscipy._scipy_version import scipy_at_least
from trnscipy._torch import torch
from trnscipy._transfer import _tensor_to, _tensor_to_host
from trnscipy.linalg._validate import LinAlgError, linalg_errors

# ----------------------------------------------------------------------------------------
# cpu: SciPy on views


def _view(x):
    if is_torch_array(x):
        return x.detach().resolve_conj().resolve_neg().numpy()
    if type(x) in (tuple, list):
        return type(x)(_view(v) for v in x)
    return x


def _tensor(x):
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x if all(s >= 0 for s in x.strides) else x.copy())
    if isinstance(x, np.generic | float | complex):
        return torch.from_numpy(np.asarray(x))
    if type(x) in (tuple, list):
        return type(x)(_tensor(v) for v in x)
    return x


def _on_views(func, finite_kw=True):
    def run(*args, **kwargs):
        if finite_kw:
            kwargs["check_finite"] = False
        return _tensor(func(*_view(args), **_view(kwargs)))

    run.__name__ = f"{func.__name__}_on_views"
    return run


for _name in ("cholesky", "cho_solve", "solve_triangular", "eigh", "solve", "inv", "det",
              "pinv", "lstsq", "lu", "lu_factor", "lu_solve", "qr", "svd", "svdvals", "eig",
              "eigvals", "norm"):
    register(f"linalg.{_name}", "cpu")(_on_views(getattr(_sl, _name)))
for _name in ("expm", "sqrtm"):
    register(f"linalg.{_name}", "cpu")(_on_views(getattr(_sl, _name), finite_kw=False))


@register("linalg.solve_toeplitz", "cpu")
def _solve_toeplitz_cpu(c, r, b):
    """SciPy's Levinson recursion (its LinAlgError on a singular leading minor)."""
    return _tensor(_sl.solve_toeplitz((_view(c), _view(r)), _view(b), check_finite=False))


@register("linalg._all_finite", "cpu")
def _all_finite_cpu(*tensors):
    return all(bool(np.isfinite(_view(t)).all()) for t in tensors)


@register("linalg._all_finite", "generic")
def _all_finite(*tensors):
    return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all())


@register("linalg._all_finite", "cuda")
def _all_finite_cuda(*tensors):
    """Two kernels a tensor, not seven: 0 * x sums to 0 unless x holds inf or NaN (each
    launch costs about as much as a 256 x 256 check's work)."""
    sums = [(t * 0).sum() for t in tensors if t.is_floating_point() or t.is_complex()]
    if len(sums) == 1:
        return sums[0].item() == 0
    return not sums or bool((torch.stack(sums) == 0).all())


# ----------------------------------------------------------------------------------------
# primitives: generic (torch.linalg) and xla (ops that lower)


@register("linalg._fetch", "generic")
def _fetch(t):
    """Device tensor -> Python value (one host read)."""
    return t.tolist()


@register("linalg._fetch", "xla")
def _fetch_xla(t):
    import torch_xla

    torch_xla.sync()  # materialise every live result in one graph, then read the flag
    return t.tolist()


@register("linalg._potrf", "generic")
def _potrf(a, upper):
    """(factor, info): info[...] = k > 0 where the k-th leading minor is not positive
    definite, -1 where the order is unknown, 0 where the factorization succeeded."""
    c, info = torch.linalg.cholesky_ex(a, upper=upper)
    return c, info


@register("linalg._potrf", "cpu")
def _potrf_cpu(a, upper):
    """LAPACK's potrf on a view: torch's CPU Cholesky of a 9 x 9 matrix took 62 ms with
    two OpenMP threads on the loaded 2-core machine (8 us on one thread); this, microseconds."""
    if a.ndim != 2:
        return _potrf(a, upper)
    from scipy.linalg.lapack import get_lapack_funcs

    view = _view(a)
    c, info = get_lapack_funcs("potrf", (view,))(view, lower=not upper)
    return _tensor(c), torch.tensor(max(info, 0), dtype=torch.int32)


@register("linalg._potrf", "xla")
def _potrf_xla(a, upper):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.cholesky's deprecation note
        c = torch.cholesky(a, upper=upper)
    # XLA's Cholesky yields NaN instead of an info code: -1 = "not positive definite"
    # (isnan does not lower for complex; isfinite does)
    return c, -(~torch.isfinite(c)).any(-1).any(-1).to(torch.int32)


@register("linalg._trsm", "generic")
def _trsm(a, b, upper, trans=0, unit=False):
    """Solve op(a) x = b for triangular a; op = identity, transpose (1), conj transpose (2)."""
    if trans == 1:
        a, upper = a.mT, not upper
    elif trans == 2:
        a, upper = a.mH, not upper
    return torch.linalg.solve_triangular(a, b, upper=upper, unitriangular=unit)


# XLA's CPU compiler solves a triangular system (and inverts by LU) with one method for up
# to 8 matrices and another above 8, which round differently: a stack of fewer than
# _XLA_BATCH_SWITCH small matrices is padded to it, so that a matrix rounds the same alone
# as in any stack (SciPy's test_batch compares a batch with its single calls at rtol 1e-7)
_XLA_BATCH_SWITCH = 9
_PAD_MAX_N = 64  # above, padding would cost a big matrix 9 times its work


@functools.cache
def _pjrt_cpu():
    """True where XLA compiles for the host CPU (the switch above is that compiler's)."""
    import torch_xla.runtime as xr

    return xr.device_type() == "CPU"


def as_stack(fn, *tensors, at_least=2):
    """``fn(*tensors)`` (each (..., n, k), batch dimensions broadcast) on PJRT CPU run as a
    stack of at least ``at_least`` matrices (padded with copies of the first): XLA's CPU
    compiler rounds some graphs of one matrix otherwise than those of a stack of 2 or more
    (QR, real Sylvester), and others of up to 8 otherwise than above 8 (triangular solve,
    LU inverse, Francis QR: ``at_least=_XLA_BATCH_SWITCH``); SciPy's test_batch compares a
    batch with its single calls.  Returns fn's tensor or (nested) tuple of tensors."""
    batch = torch.broadcast_shapes(*(t.shape[:-2] for t in tensors))
    count = math.prod(batch)
    if (count >= at_least or count == 0 or tensors[0].shape[-1] > _PAD_MAX_N
            or not _pjrt_cpu()):
        return fn(*tensors)
    pad = at_least - count
    flat = [t.expand(*batch, *t.shape[-2:]).reshape(count, *t.shape[-2:]) for t in tensors]
    out = fn(*(torch.cat([t, t[:1].expand(pad, *t.shape[1:])]) for t in flat))

    def back(r):
        return tuple(back(o) for o in r) if isinstance(r, tuple) else \
            r[:count].reshape(*batch, *r.shape[1:])

    return back(out)


def xla_triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve(...).solution (it lowers on XLA), rounding per matrix as in
    any stack (as_stack)."""
    return as_stack(lambda a, b: torch.triangular_solve(
        b, a, upper=upper, transpose=transpose, unitriangular=unitriangular).solution, a, b,
        at_least=_XLA_BATCH_SWITCH)


@register("linalg._trsm", "xla")
def _trsm_xla(a, b, upper, trans=0, unit=False):
    if trans == 2:
        a = a.conj().resolve_conj()
    return xla_triangular_solve(b, a, upper=upper, transpose=trans != 0, unitriangular=unit)


def _inv_ex_xla(a):
    return as_stack(lambda a: torch.linalg.inv_ex(a)[0], a, at_least=_XLA_BATCH_SWITCH)


@register("linalg._matmul", "generic")
def _matmul(a, b):
    return a @ b


@register("linalg._solve", "generic")
def _solve_general(a, b):
    x, info = torch.linalg.solve_ex(a, b)
    return x, info


def _cpu(t):
    """A CPU copy of an XLA tensor, through the transfer layer: exact for float64 held as
    double-float, complex128 whole (torch-xla 2.9's ``.cpu()`` drops its imaginary part)."""
    if t.device.type == "cpu":
        return t
    return torch.from_numpy(np.asarray(_tensor_to_host(t)))


def _to(device, obj):
    if is_torch_array(obj):
        return _tensor_to(obj, device)  # float64 stays exact on a device without it
    if isinstance(obj, tuple | list):
        return type(obj)(_to(device, x) for x in obj) if type(obj) in (tuple, list) else \
            tuple(_to(device, x) for x in obj)
    return obj


def _on_host(op, reason, fn, *tensors):
    """Run ``fn`` on CPU copies of ``tensors``, announced; results back on their device."""
    fallback(op, reason, stacklevel=6)
    device = tensors[0].device
    return _to(device, fn(*(_cpu(t) for t in tensors)))


_COMPLEX_LU = "XLA's LU-based inverse gives wrong results for complex input (torch-xla 2.9)"


@register("linalg._solve", "xla")
def _solve_general_xla(a, b):
    if a.is_complex():
        return _on_host("scipy.linalg.solve", _COMPLEX_LU, _solve_general, a, b)
    # No LU solve lowers; the LU-based inverse does.  One step of iterative
    # refinement brings the backward error to that of an LU solve.
    ainv = _inv_ex_xla(a)
    x = ainv @ b
    x = x + ainv @ (b - a @ x)
    return x, (_singular_from_inverse(a, ainv) | _nonfinite(x)).to(torch.int32)


@register("linalg._inv", "generic")
def _inv(a):
    return torch.linalg.inv_ex(a)


@register("linalg._inv", "xla")
def _inv_xla(a):
    if a.is_complex():
        return _on_host("scipy.linalg.inv", _COMPLEX_LU, _inv, a)
    ainv = _inv_ex_xla(a)  # (inv_ex's info is not computed on XLA)
    return ainv, _singular_from_inverse(a, ainv).to(torch.int32)


def _nonfinite(t):
    return (~torch.isfinite(t)).flatten(-2).any(-1)


def _singular_from_inverse(a, ainv):
    """Per-slice singular flags for an inverse computed without pivot info (XLA).

    SciPy raises where LAPACK meets an exact zero pivot; XLA's inverse of such a matrix can
    be finite garbage.  A slice counts as singular when its inverse is not finite or
    ``A @ (inv(A) @ z) - z`` misses by more than 1/2 for two fixed probe vectors z (of
    max-norm 1): a singular A maps into a proper subspace, which one of the probes leaves,
    while a backward-stable inverse misses by about cond(A) * eps.  O(n^2), one graph."""
    n = a.shape[-1]
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(a.dtype,
                                                                                 a.dtype)
    k = torch.arange(n, device=a.device, dtype=real)  # (no float64 work on Neuron)
    probes = torch.stack([torch.ones_like(k), torch.cos(2.399963 * k)], -1).to(a.dtype)
    miss = (a @ (ainv @ probes) - probes).abs().flatten(-2).amax(-1)
    return _nonfinite(ainv) | ~(miss <= 0.5)


@register("linalg._det", "generic")
def _det(a):
    return torch.linalg.det(a)


@register("linalg._svd", "generic")
def _svd(a, full_matrices, compute_uv):
    if compute_uv:
        return tuple(torch.linalg.svd(a, full_matrices=full_matrices))  # SciPy: a plain tuple
    return torch.linalg.svdvals(a)


# ----------------------------------------------------------------------------------------
# generic composites (built from the primitives, so XLA picks its own primitives)


def _k(op, t):
    return kernel(op, t.device)


def _bad_slices(info, t):
    """Indices of batch slices whose ``info`` is nonzero (host read)."""
    flags = np.atleast_1d(np.asarray(_k("linalg._fetch", t)(info)))
    return flags.ravel(), np.flatnonzero(flags.ravel())


def hermitian(a, lower):
    """The Hermitian matrix whose ``lower`` (or upper) triangle ``a`` holds."""
    tri = a.tril(-1) if lower else a.triu(1)
    diag = a.diagonal(dim1=-2, dim2=-1)
    if a.is_complex():
        diag = diag.real.to(a.dtype)
    return tri + tri.mH + torch.diag_embed(diag)


def potrf(a, lower):
    """Cholesky factor, numpy LinAlgError when not positive definite."""
    c, info = _k("linalg._potrf", a)(a, not lower)
    check_potrf(info, a)
    return c


def check_potrf(info, a):
    """Raise numpy's LinAlgError where ``_potrf``'s info flags a slice of ``a`` (one host
    read: on XLA it also computes every pending result, in the same graph)."""
    flags, bad = _bad_slices(info, a)
    if bad.size:
        if a.ndim == 2 and flags[0] > 0:
            raise LinAlgError(f"{int(flags[0])}-th leading minor of the array is not "
                              "positive definite")
        raise LinAlgError(f"the matrix is not positive definite (slice(s) {bad.tolist()})")


@register("linalg.cholesky", "generic")
def cholesky(a, lower=False):
    return potrf(a, lower)  # the other triangle is zero, as in SciPy


@register("linalg.cho_solve", "generic")
def cho_solve(c_and_lower, b):
    c, lower = c_and_lower
    trsm = _k("linalg._trsm", c)
    c, b = _broadcast(c, b)
    if lower:
        return trsm(c, trsm(c, b, upper=False), upper=False, trans=2)
    return trsm(c, trsm(c, b, upper=True, trans=2), upper=True)


def _broadcast(a, b):
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])


@register("linalg.solve_triangular", "generic")
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
    if not unit_diagonal:
        zero = (a.diagonal(dim1=-2, dim2=-1) == 0)
        first = _k("linalg._fetch", a)(zero.flatten().to(torch.int8).argmax())
        if bool(zero.flatten()[first]):
            raise LinAlgError(f"singular matrix: resolution failed at diagonal "
                              f"{first % a.shape[-1]}")
    a, b = _broadcast(a, b)
    return _k("linalg._trsm", a)(a, b, upper=not lower, trans=trans, unit=unit_diagonal)


def _gen_reduce(a, b, lower, itype):
    """Reduce the generalized problem to a standard one: (C, back-transform)."""
    L = potrf(hermitian(b, lower), lower=True)
    trsm = _k("linalg._trsm", L)
    if itype == 1:  # C = L^-1 A L^-H, v = L^-H y
        x = trsm(L, a, upper=False)
        c = trsm(L, x.mH, upper=False)
        return c, lambda y: trsm(L, y, upper=False, trans=2)
    c = L.mH @ a @ L  # types 2 and 3: C = L^H A L
    if itype == 2:
        return c, lambda y: trsm(L, y, upper=False, trans=2)
    return c, lambda y: L @ y


@register("linalg.eigh", "generic")
def eigh(a, b=None, lower=True, eigvals_only=False, type=1, subset_by_index=None,
         subset_by_value=None, driver=None):
    a = hermitian(a, lower)
    back = None
    if b is not None:
        a, back = _gen_reduce(a, b, lower, type)
        a = (a + a.mH) * 0.5
    with linalg_errors():
        if eigvals_only:
            w, v = torch.linalg.eigvalsh(a), None
        else:
            w, v = torch.linalg.eigh(a)
    if v is not None and back is not None:
        v = back(v)
    return select_eigh(w, v, subset_by_index, subset_by_value)


def select_eigh(w, v, subset_by_index, subset_by_value):
    """SciPy's eigh result from all ascending eigenvalues ``w`` (and vectors ``v``, None
    for eigvals_only): the subset by index or by value."""
    lo, hi = 0, w.shape[-1]
    if subset_by_index is not None:
        lo, hi = int(subset_by_index[0]), int(subset_by_index[1]) + 1
    elif subset_by_value is not None:
        vlo, vhi = subset_by_value
        counts = _k("linalg._fetch", w)(torch.stack([(w <= vlo).sum(-1), (w <= vhi).sum(-1)]))
        lo, hi = int(np.min(counts[0])), int(np.max(counts[1]))
    if (lo, hi) != (0, w.shape[-1]):
        w = w[..., lo:hi]
        v = v[..., lo:hi] if v is not None else None
    return w if v is None else (w, v)


_SOLVE_KINDS = {None: "gen", "general": "gen", "gen": "gen", "diagonal": "diagonal",
                "tridiagonal": "tridiagonal", "banded": "gen",
                "upper triangular": "upper", "lower triangular": "lower",
                "pos": "pos", "positive definite": "pos", "sym": "sym", "symmetric": "sym",
                "her": "her", "hermitian": "her"}


def _singular(info, t):
    _, bad = _bad_slices(info, t)
    if bad.size:
        raise LinAlgError(f"A singular matrix detected: slice(s) {bad.tolist()} are singular.")


@register("linalg.solve", "generic")
def solve(a, b, lower=False, assume_a=None, transposed=False):
    kind = _SOLVE_KINDS[assume_a]
    if transposed:
        a = a.mT
        lower = not lower
        if kind in ("upper", "lower"):
            kind = "upper" if kind == "lower" else "lower"
    if kind == "pos":
        return cho_solve((potrf(hermitian(a, lower), lower=True), True), b)
    if kind in ("upper", "lower"):
        return solve_triangular(a, b, lower=kind == "lower")
    if kind == "diagonal":
        d = a.diagonal(dim1=-2, dim2=-1)
        _singular((d == 0).any(-1).to(torch.int32), a)
        return b / d.unsqueeze(-1)
    if kind == "tridiagonal":
        a = a.triu(-1).tril(1)
    elif kind == "sym":
        a = hermitian(a, lower) if not a.is_complex() else \
            (a.tril() + a.tril(-1).mT if lower else a.triu() + a.triu(1).mT)
    elif kind == "her":
        a = hermitian(a, lower)
    a, b = _broadcast(a, b)
    x, info = _k("linalg._solve", a)(a, b)
    _singular(info, a)
    return x


@register("linalg.inv", "generic")
def inv(a, assume_a=None, lower=False):
    kind = _SOLVE_KINDS[assume_a]
    if kind in ("pos", "upper", "lower", "diagonal"):
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape)
        return solve(a, eye, lower=lower, assume_a=assume_a)
    if kind in ("sym", "her"):
        a = hermitian(a, lower)
    x, info = _k("linalg._inv", a)(a)
    _singular(info, a)
    return x


@register("linalg.det", "generic")
def det(a):
    return _k("linalg._det", a)(a)


@register("linalg.svd", "generic")
def svd(a, full_matrices=True, compute_uv=True, lapack_driver="gesdd"):
    with linalg_errors():
        return _k("linalg._svd", a)(a, full_matrices, compute_uv)


@register("linalg.svdvals", "generic")
def svdvals(a):
    return svd(a, compute_uv=False)


def _cutoff(s, atol, rtol, m, n):
    """SciPy's pinv cut-off: atol + rtol s_max (rtol by default max(m, n) eps, atol 0)."""
    atol = 0.0 if atol is None else atol
    rtol = max(m, n) * torch.finfo(s.dtype).eps if rtol is None else rtol
    smax = s[..., :1] if s.shape[-1] else s.new_zeros(s.shape[:-1] + (1,))
    return smax * rtol + atol


@register("linalg.pinv", "generic")
def pinv(a, atol=None, rtol=None, return_rank=False):
    u, s, vh = svd(a, full_matrices=False)
    keep = s > _cutoff(s, atol, rtol, *a.shape[-2:])
    sinv = torch.where(keep, 1 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    x = (vh.mH * sinv.unsqueeze(-2).to(vh.dtype)) @ u.mH
    if return_rank:
        rank = keep.sum(-1)
        return x, (int(_k("linalg._fetch", rank)(rank)) if rank.ndim == 0 else rank)
    return x


@register("linalg.lstsq", "generic")
def lstsq(a, b, cond=None, lapack_driver=None):
    """A stack of ``a`` (b with or without batch dimensions): its results stacked as
    SciPy's loop stacks them; PerMatrix where their residues' shapes differ (some
    matrices short of full rank)."""
    m, n = a.shape[-2:]
    vec = b.ndim == 1
    bm = b.unsqueeze(-1) if vec else b
    u, s, vh = svd(a, full_matrices=False)
    cut = (torch.finfo(s.dtype).eps if cond is None else cond) * s[..., :1]
    keep = s > cut
    sinv = torch.where(keep, 1 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    def pinv_times(r):
        return vh.mH @ (sinv.unsqueeze(-1).to(u.dtype) * (u.mH @ r))

    x = pinv_times(bm)
    # one refinement step with the residual: the SVD's own rounding (XLA's float32 SVD
    # left residuals 3x LAPACK's, past SciPy's test_batch bound) leaves x's accuracy
    x = x + pinv_times(bm - a @ x)
    ranks = keep.sum(-1)
    found = np.asarray(_k("linalg._fetch", ranks)(ranks))  # one host read
    full = bool((found == n).all())
    if a.ndim > 2 and (scipy_at_least(1, 18) or (m > n and lapack_driver != "gelsy"
                                                  and not full and (found == n).any())):
        raise PerMatrix  # (each matrix's residues take its own rank's rule)
    rank = ranks if a.ndim > 2 else int(found)
    if scipy_at_least(1, 18):
        # SciPy 1.18: sum(r * conj(r)) of x's dtype (complex input: complex) for every
        # overdetermined solve but gelsy's, NaN where the rank is short; else empty
        if m > n and lapack_driver != "gelsy":
            r = bm - a @ x
            resid = (r * r.conj()).sum(-2)
            resid = resid if rank == n else torch.full_like(resid, float("nan"))
            return (x[..., 0] if vec else x), (resid[..., 0] if vec else resid), rank, s
        return (x[..., 0] if vec else x), x.new_zeros((0,)), rank, s
    # SciPy 1.17: real for a full-rank overdetermined solve (not gelsy), else empty of
    # x's dtype (one per matrix of a stack)
    if full and m > n and lapack_driver != "gelsy":
        resid = ((bm - a @ x).abs() ** 2).sum(-2)
    else:
        resid = x.new_zeros(x.shape[:-2] + (0,))
    return (x[..., 0] if vec else x), (resid[..., 0] if vec and resid.numel() else resid), \
        rank, s


def lu_factor_warning(info, t):
    """SciPy's LinAlgWarning for an exactly zero diagonal of U (one host read)."""
    flags, bad = _bad_slices(info, t)
    if bad.size:
        from scipy.linalg import LinAlgWarning

        warnings.warn(f"Diagonal number {int(flags[bad[0]])} is exactly zero. Singular "
                      "matrix.", LinAlgWarning, stacklevel=5)


@register("linalg.lu_factor", "generic")
def lu_factor(a):
    lu, piv, info = torch.linalg.lu_factor_ex(a)
    lu_factor_warning(info, a)
    return lu, (piv - 1).to(torch.int32)


def _perm_rows(piv, m):
    """Row permutation p (a[p] = L U) from 0-based LAPACK pivots (host loop on a copy)."""
    perm = list(range(m))
    for i, p in enumerate(_k("linalg._fetch", piv)(piv)):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


@register("linalg.lu_solve", "generic")
def lu_solve(lu_and_piv, b, trans=0):
    lu, piv = lu_and_piv
    pivots = (piv + 1).to(torch.int32)
    with linalg_errors():
        if trans == 0:
            return torch.linalg.lu_solve(lu, pivots, b)
        if trans == 2 or not lu.is_complex():
            return torch.linalg.lu_solve(lu, pivots, b, adjoint=True)
        return torch.linalg.lu_solve(lu, pivots, b.conj(), adjoint=True).conj()


@register("linalg.lu", "generic")
def lu(a, permute_l=False, p_indices=False):
    with linalg_errors():
        P, L, U = torch.linalg.lu(a)
    P = P.real if P.is_complex() else P  # SciPy's permutation matrix is real
    if permute_l:
        return P.to(L.dtype) @ L, U
    if p_indices:
        return P.argmax(-1).to(torch.int32), L, U  # a = L[p] @ U
    return P, L, U


@register("linalg.qr", "generic")
def qr(a, mode="full", pivoting=False):
    if pivoting and not a.is_complex() and a.ndim == 2:
        return kernel("linalg._qr_pivoted", a.device)(a, mode)  # (_xla_dense: geqp3)
    if pivoting:
        fallback("scipy.linalg.qr", "complex or batched column pivoting has no torch "
                 "implementation", stacklevel=5)
        out = _sl.qr(_view(_cpu(a)), mode=mode, pivoting=True, check_finite=False)
        return _to(a.device, _tensor(out))
    m, n = a.shape[-2:]
    if mode == "raw":
        h, tau = torch.geqrf(a)
        r = h.triu()[..., :min(m, n), :] if m > n else h.triu()
        return (h, tau), r
    if mode == "r":
        r = torch.linalg.qr(a, mode="r")[1]
        if m > n:
            r = torch.cat([r, r.new_zeros(r.shape[:-2] + (m - n, n))], dim=-2)
        return (r,)
    return tuple(torch.linalg.qr(a, mode="complete" if mode == "full" else "reduced"))


@register("linalg.eig", "generic")
def eig(a, b=None, left=False, right=True, homogeneous_eigvals=False):
    if b is not None or left or homogeneous_eigvals:
        fallback("scipy.linalg.eig", "generalized, left or homogeneous eigenproblems have no "
                 "torch implementation", stacklevel=5)
        out = _sl.eig(_view(_cpu(a)), None if b is None else _view(_cpu(b)), left=left,
                      right=right, homogeneous_eigvals=homogeneous_eigvals,
                      check_finite=False)
        return _to(a.device, _tensor(out))
    with linalg_errors():
        w, v = torch.linalg.eig(a)
    if not right:
        return w
    if not a.is_complex() and not bool((w.imag != 0).any()):
        v = v.real.contiguous()
    return w, v


@register("linalg.eigvals", "generic")
def eigvals(a, b=None, homogeneous_eigvals=False):
    if b is not None or homogeneous_eigvals:
        return eig(a, b, right=False, homogeneous_eigvals=homogeneous_eigvals)
    with linalg_errors():
        return torch.linalg.eigvals(a)


@register("linalg.expm", "generic")
def expm(a):
    return torch.linalg.matrix_exp(a)


@register("linalg.norm", "generic")
def norm(a, ord=None, axis=None, keepdims=False):
    if ord in (2, -2, "nuc") and (axis is None and a.ndim == 2 or
                                  isinstance(axis, tuple) and len(axis) == 2):
        if axis is not None:
            a = torch.movedim(a, axis, (-2, -1))
        s = svdvals(a)
        r = s.sum(-1) if ord == "nuc" else (s[..., 0] if ord == 2 else s[..., -1])
        if keepdims:
            r = r.reshape(r.shape + (1, 1)) if axis is None else \
                r.unsqueeze(min(axis) % a.ndim).unsqueeze(max(axis) % a.ndim)
        return r
    if a.is_complex():
        # every other norm depends on |a| only (hypot: XLA's complex abs stays complex-typed)
        a = torch.hypot(a.real, a.imag)
    return torch.linalg.norm(a, ord=ord, dim=axis, keepdim=keepdims)


def small_eigh(T, steps=3):
    """eigh of a small Hermitian matrix, refined by Ogita-Aishima steps (matrix products
    only): torch-xla 2.9's float64 eigh left eigenvector residuals of 1e-6 on a 20 x 20
    matrix here (eigenvalues to 3e-12).  Returns the refined Rayleigh quotients and
    vectors.  Pairs closer than 100 times the current coupling error are only
    orthonormalised (there the span is what is defined)."""
    w, S = torch.linalg.eigh(T)
    eps = torch.finfo(T.real.dtype).eps
    eye = torch.eye(T.shape[0], dtype=T.dtype, device=T.device)
    scale = w.abs().max()
    for _ in range(steps):
        R = eye - S.mH @ S
        G = S.mH @ T @ S
        lam = G.diagonal().real / (1 - R.diagonal().real)
        F = G + R * lam[None, :]
        off = torch.where(eye.real.bool(), 0, absolute(F)).max()
        gap = lam[None, :] - lam[:, None]
        far = gap.abs() > torch.clamp(100 * off, min=100 * eps * scale)
        safe = torch.where(far, gap, torch.ones_like(gap))
        S = S + S @ torch.where(far, F / safe, R * 0.5)
    G = S.mH @ T @ S
    return G.diagonal().real / (S.mH @ S).diagonal().real, S

