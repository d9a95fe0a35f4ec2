"""Kernels of the banded, tridiagonal and structured functions and the matrix functions
(``trnscipy.linalg._kernels`` holds the primitives they are built from).

- cpu: SciPy's own function on zero-copy views, as for the other linalg kernels.
- generic (CUDA, XLA, Neuron): composites of the primitives behind the seam
  (``linalg._potrf``, ``linalg._trsm``, ``linalg._solve``, ``linalg.eigh``), so each
  kind runs the ones that lower there.  Band storage is expanded to the dense matrix by
  a gather (O(n^2) memory, O(n^3) work: a dense factorization, not LAPACK's banded one).
"""

import warnings

import numpy as np
import scipy.linalg as _sl

from trnscipy._batch import PerMatrix
from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dtypes import abs_max
from trnscipy._kernels import backend, register
from trnscipy._scipy_version import scipy_at_least
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on, to_host
from trnscipy.linalg._kernels import (
    _XLA_BATCH_SWITCH,
    _bad_slices,
    _broadcast,
    _cpu,
    _k,
    _on_views,
    _tensor,
    _view,
    as_stack,
    cho_solve,
    hermitian,
)
from trnscipy.linalg._validate import LinAlgError, as_tensor

for _name in ("solve_banded", "solveh_banded", "cholesky_banded", "cho_solve_banded",
              "eigh_tridiagonal", "pinvh"):
    register(f"linalg.{_name}", "cpu")(_on_views(getattr(_sl, _name)))


def band_to_dense(ab, lower, upper):
    """The (..., n, n) matrix whose band ``ab`` (..., lower + upper + 1, n) holds
    ``a[i, j] = ab[upper + i - j, j]`` (zero outside the band)."""
    rows, n = ab.shape[-2:]
    i = torch.arange(n, device=ab.device)[:, None]
    j = torch.arange(n, device=ab.device)[None, :]
    k = upper + i - j
    inside = (k >= 0) & (k < rows) & (k <= upper + lower)
    vals = ab[..., k.clamp(0, rows - 1), j.expand(n, n)]
    return torch.where(inside, vals, torch.zeros((), dtype=ab.dtype, device=ab.device))


def dense_to_band(a, like, lower, upper):
    """The band of ``a`` in the layout of ``like``; entries of ``like`` outside the matrix
    (LAPACK leaves them alone) are kept."""
    rows, n = like.shape[-2:]
    k = torch.arange(rows, device=a.device)[:, None]
    j = torch.arange(n, device=a.device)[None, :]
    i = j + k - upper
    inside = (i >= 0) & (i < n)
    vals = a[..., i.clamp(0, n - 1), j.expand(rows, n)]
    return torch.where(inside, vals, like)


def _potrf_scipy(a, lower, message):
    """Cholesky factor with SciPy's banded error message (the order where known)."""
    c, info = _k("linalg._potrf", a)(a, not lower)
    flags, bad = _bad_slices(info, a)
    if bad.size:
        k = int(flags[bad[0]])
        raise LinAlgError(message.format(k) if k > 0 else
                          "the matrix is not positive definite")
    return c


@register("linalg.solve_banded", "generic")
def solve_banded(l_and_u, ab, b):
    lower, upper = l_and_u
    a = band_to_dense(ab, lower, upper)
    a, b = _broadcast(a, b)
    x, info = _k("linalg._solve", a)(a, b)
    _, bad = _bad_slices(info, a)
    if bad.size:
        raise LinAlgError("singular matrix")
    return x


def _hermitian_band(ab, lower):
    """The Hermitian matrix of LAPACK's symmetric band storage (upper or lower form)."""
    rows = ab.shape[-2]
    tri = band_to_dense(ab, rows - 1, 0) if lower else band_to_dense(ab, 0, rows - 1)
    return hermitian(tri, lower)


@register("linalg.solveh_banded", "generic")
def solveh_banded(ab, b, lower=False):
    c = _potrf_scipy(_hermitian_band(ab, lower), True, "{}th leading minor not positive "
                     "definite")
    return cho_solve((c, True), b)


@register("linalg.cholesky_banded", "generic")
def cholesky_banded(ab, lower=False):
    rows = ab.shape[-2]
    c = _potrf_scipy(_hermitian_band(ab, lower), lower, "{}-th leading minor not positive "
                     "definite")
    return dense_to_band(c, ab, rows - 1, 0) if lower else dense_to_band(c, ab, 0, rows - 1)


@register("linalg.cho_solve_banded", "generic")
def cho_solve_banded(cb_and_lower, b):
    cb, lower = cb_and_lower
    rows = cb.shape[-2]
    c = band_to_dense(cb, rows - 1, 0) if lower else band_to_dense(cb, 0, rows - 1)
    return cho_solve((c, lower), b)


@register("linalg.eigh_tridiagonal", "generic")
def eigh_tridiagonal(d, e, eigvals_only=False, select="a", select_range=None, tol=0.0,
                     lapack_driver="auto"):
    """All eigenpairs of the dense tridiagonal matrix (the eigh kernel), then SciPy's
    selection: by index, or the eigenvalues in (vl, vu] (one host read for the count)."""
    a = torch.diag_embed(d) + torch.diag_embed(e, 1) + torch.diag_embed(e, -1)
    out = _k("linalg.eigh", a)(a, eigvals_only=eigvals_only)
    w, v = (out, None) if eigvals_only else out
    n = d.shape[-1]
    lo, hi = 0, n
    if select in (1, 2):
        if select == 2:
            lo, hi = int(select_range[0]), int(select_range[1]) + 1
        else:
            vl, vu = (float(x) for x in select_range)
            counts = torch.stack([(w <= vl).sum(-1), (w <= vu).sum(-1)]).reshape(2, -1)
            lo, hi = _k("linalg._fetch", w)(counts)
            if len(set(lo)) > 1 or len(set(hi)) > 1:
                raise ValueError("the batch's slices have different numbers of eigenvalues "
                                 "in select_range (SciPy cannot stack them either)")
            lo, hi = lo[0], hi[0]
        w = w[..., lo:hi]
        v = v[..., lo:hi] if v is not None else None
    return w if eigvals_only else (w, v)


@register("linalg.eig_banded", "generic")
def eig_banded(a_band, lower=False, eigvals_only=False, select=0, select_range=None):
    """The eigh kernel on the dense Hermitian matrix of the band (upper form: row u + i - j
    of column j holds a[i, j]; lower form: row i - j), selection as eigh's subsets."""
    rows = a_band.shape[-2]
    a = band_to_dense(a_band, rows - 1, 0) if lower else band_to_dense(a_band, 0, rows - 1)
    subset = {"subset_by_value": select_range} if select == 1 else (
        {"subset_by_index": select_range} if select == 2 else {})
    return _k("linalg.eigh", a)(a, lower=lower, eigvals_only=eigvals_only, **subset)


@register("linalg.eig_banded", "cpu")
def eig_banded_cpu(a_band, lower=False, eigvals_only=False, select=0, select_range=None):
    """SciPy's eig_banded on a view (its selection codes back to SciPy's letters)."""
    return _on_views(_sl.eig_banded)(a_band, lower=lower, eigvals_only=eigvals_only,
                                     select="avi"[select], select_range=select_range)


@register("linalg.pinvh", "generic")
def pinvh(a, atol=None, rtol=None, lower=True, return_rank=False):
    s, u = _k("linalg.eigh", a)(a, lower=lower)
    eps = torch.finfo(s.dtype).eps
    atol = 0.0 if atol is None else atol
    rtol = max(a.shape[-2:]) * eps if rtol is None else rtol
    keep = s.abs() > atol + s.abs().amax(-1, keepdim=True) * rtol
    sinv = torch.where(keep, 1 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    x = (u * sinv.unsqueeze(-2).to(u.dtype)) @ u.mH
    if return_rank:
        rank = keep.sum(-1)
        return x, (int(_k("linalg._fetch", rank)(rank)) if rank.ndim == 0 else rank)
    return x


def rank_of(s, rcond, m, n):
    """SciPy's numerical rank of singular values ``s``: its rule on the host, on ``s``
    read once (exact float64 under double-float storage, where a device without float64
    would otherwise compare and scale in float64).  A stack: each matrix's rank, the
    stack's one rank (PerMatrix where they differ: SciPy's loop's results differ in shape)."""
    if s.shape[-1] == 0:
        return 0
    s = to_host(s)
    if rcond is None:
        rcond = np.finfo(s.dtype).eps * max(m, n)
    ranks = np.sum(s > np.amax(s, axis=-1, keepdims=True) * rcond, axis=-1)
    if np.ndim(ranks) and (ranks != ranks.flat[0]).any():
        raise PerMatrix
    return int(ranks.flat[0])


# ----------------------------------------------------------------------------------------
# Schur-based matrix functions and the Sylvester equation.  The complex Schur form comes
# from the device's schur kernel; the triangular work below runs on the device.  The
# kernels here call other kernels through the table (``_k``), never the routed public
# functions above them: their operands are validated already.

for _name in ("logm", "funm", "solve_sylvester"):
    register(f"linalg.{_name}", "cpu")(_on_views(getattr(_sl, _name), finite_kw=False))


def complex_schur(a):
    """``schur(a, output="complex")`` of a 2-D tensor or a stack (with its finiteness
    check)."""
    a = as_tensor(a, a.device)
    return _uniform_schur(a, "complex")


def _uniform_schur(a, output):
    """``schur(a, output=output)``; real input on XLA runs as a stack of at least 9
    matrices where XLA compiles for the host CPU (``as_stack``): its Francis QR
    rounds a stack of up to 8 otherwise than a single matrix, and SciPy's test_batch
    compares a batch with its single calls at rtol 1e-7."""
    schur = _k("linalg.schur", a)
    if a.is_complex() or device_kind(a.device) != "xla":
        return schur(a, output=output, sort=None)
    return as_stack(lambda m: schur(m, output=output, sort=None), a,
                    at_least=_XLA_BATCH_SWITCH)


def _stacked_schur(a):
    """``complex_schur`` of a matrix or a stack, as (B, n, n) stacks (a single matrix
    goes as itself: its complex Schur form has no stacked method)."""
    n = a.shape[-1]
    t, z = complex_schur(a if a.ndim <= 3 else a.reshape(-1, n, n))
    return t.reshape(-1, n, n), z.reshape(-1, n, n)


def _schur(a, output):
    """``schur(a, output=output)`` of a finite 2-D tensor."""
    return _k("linalg.schur", a)(a, output=output, sort=None)


def _rsf2csf(t, z):
    dtype = torch.promote_types(torch.promote_types(t.dtype, z.dtype), torch.complex64)
    return _k("linalg.rsf2csf", t)(t, z, dtype)


def _svdvals(a):
    return _k("linalg.svd", a)(a, full_matrices=True, compute_uv=False, lapack_driver="gesdd")


def _inv(a):
    return _k("linalg.inv", a)(a, assume_a=None, lower=False)


def _funm(a, func):
    """funm's (F, error estimate) on the device (CPU tensors too: the schur kernel's
    SciPy), a stack's estimates as a host float64 ndarray."""
    return funm_parts(a, func)


def _wide(t):
    """Double precision where the device has it (SciPy's expm_frechet computes in it)."""
    if not capability(device_kind(t.device)).float64:
        return t
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _complex(dtype):
    return {torch.float32: torch.complex64, torch.float64: torch.complex128}.get(dtype, dtype)


def _cabs(x):
    """|x| in the real dtype (torch-xla 2.9's abs of a complex tensor stays complex)."""
    return torch.sqrt(x.real ** 2 + x.imag ** 2) if x.is_complex() else x.abs()


def _real_if_negligible(a, x, tol):
    """SciPy's ``_maybe_real``: the real part when ``a`` is real and ``x``'s imaginary
    part is within ``tol`` of zero, decided per matrix of a stack (one host read)."""
    if a.is_complex() or not x.is_complex():
        return x
    small = (x.imag.abs() <= tol).flatten(-2).all(-1)
    flags = np.asarray(_k("linalg._fetch", small)(small.reshape(-1)), dtype=bool)
    return _real_where(x.reshape(-1, *x.shape[-2:]), flags).reshape(x.shape)


def _shifted_solve(r, shift, rhs):
    """Solve (r + shift I) y = rhs for upper triangular r and a 0-d shift."""
    eye = torch.eye(r.shape[-1], dtype=r.dtype, device=r.device)
    return _k("linalg._trsm", r)(r + shift * eye, rhs, upper=True)


def sqrtm_triu(t):
    """Principal square root of upper triangular ``t`` (Bjorck-Hammarling, by
    superdiagonals: R[i, j] = (T[i, j] - sum_{i<k<j} R[i, k] R[k, j]) / (R[i, i] + R[j, j]),
    0 where that is 0 / 0 (a repeated zero eigenvalue, as SciPy: sqrtm(0) = 0), +-inf or
    NaN where the square root does not exist)."""
    n = t.shape[-1]
    d = torch.sqrt(t.diagonal(0, -2, -1))
    r = torch.diag_embed(d)
    for p in range(1, n):
        # (R R)[i, i + p] from the entries known so far (R's p-th superdiagonal still 0)
        num = t.diagonal(p, -2, -1) - (r[..., :n - p, :] * r[..., :, p:].mT).sum(-1)
        den = d[..., :n - p] + d[..., p:]
        r = r + torch.diag_embed(torch.where((den == 0) & (num == 0), torch.zeros_like(num),
                                             num / den), p)
    return r


@register("linalg.sqrtm", "generic")
def sqrtm(a, disp=True, blocksize=None):
    """``disp=False``: (X, ||X X - A||_F^2 / ||A||_F), as SciPy."""
    x = _sqrtm(a)
    if disp is False:
        err = torch.linalg.norm(x @ x - a) ** 2 / torch.linalg.norm(a)
        return x, float(_k("linalg._fetch", err)(err))
    return x


def _sqrtm(a):
    """``a``: a matrix or a stack (complex stacks: PerMatrix, from the Schur kernel)."""
    t, z = complex_schur(a)
    x = z @ sqrtm_triu(t) @ z.mH
    if a.is_complex():
        return x
    # real when no eigenvalue is on the closed negative real axis (SciPy: the real Schur
    # route); otherwise complex, as SciPy (a stack: complex if one matrix is, as NumPy
    # stacks SciPy's loop, the others' imaginary parts zero)
    w = t.diagonal(0, -2, -1)
    negative = ((w.real < 0) & (w.imag.abs() <= 1e3 * torch.finfo(a.dtype).eps *
                                _cabs(w).amax(-1, keepdim=True))).any(-1)
    flags = np.asarray(_k("linalg._fetch", negative)(negative.reshape(-1)), dtype=bool)
    if not flags.any():
        return x.real.contiguous()
    if flags.all():
        return x
    return torch.where(negative[..., None, None], x, x.real.to(x.dtype))


def _on_eigenvalues(func, w):
    """``func`` of each matrix's eigenvalues (rows of ``w`` (B, n)), called per matrix as
    SciPy's loop calls it (a function of all of them, signm's rounded sign, sees one
    matrix's); a function that cannot read device tensors (TypeError: a NumPy function on
    XLA data) gets NumPy arrays (the user's own host computation, one read for all)."""
    rows = list(w.unbind(0))
    try:
        out = [func(r) for r in rows]
    except TypeError:
        out = [func(r) for r in _cpu(w).numpy()]
    out = [o if torch.is_tensor(o) else torch.as_tensor(np.asarray(o)) for o in out]
    return torch.stack([o.to(w.device, w.dtype) for o in out])


def funm_parts(a, func):
    """Schur-Parlett (Golub and Van Loan's Algorithm 11.1.1, by superdiagonals:
    F[i, j] = (T F - F T)[i, j] / (T[j, j] - T[i, i]) with F known below diagonal j - i)
    of a matrix or a stack: (F, SciPy's error estimate of each matrix as a float64
    ndarray of the batch shape), one host read for the stack."""
    lead, n = a.shape[:-2], a.shape[-1]
    t, z = _stacked_schur(a)
    a = a.reshape(-1, n, n)
    w = t.diagonal(0, -2, -1)
    f = torch.diag_embed(_on_eigenvalues(func, w))
    den = w[..., None, :] - w[..., :, None]  # T[j, j] - T[i, i]
    safe = torch.where(den == 0, torch.ones_like(den), den)
    for p in range(1, n):
        num = (t @ f - f @ t).diagonal(p, -2, -1)
        f = f + torch.diag_embed(torch.where(den.diagonal(p, -2, -1) == 0, num,
                                             num / safe.diagonal(p, -2, -1)), p)
    x = z @ f @ z.mH
    real_t = x.real.dtype
    tol = torch.finfo(real_t).eps
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=a.device), 1)
    dist = torch.where(upper, _cabs(den), torch.full_like(_cabs(den), float("inf")))
    minden = torch.minimum(dist.flatten(-2).amin(-1), _cabs(w[:, 0]))
    tnorm = _cabs(t.triu(1)).sum(-2).amax(-1)
    finite = torch.isfinite(torch.view_as_real(x)).flatten(-3).all(-1)
    # SciPy's _maybe_real, per matrix as its loop decides
    negligible = (x.imag.abs() <= tol * (1e3 if real_t == torch.float32 else 1e6)
                  ).flatten(-2).all(-1)
    vals = torch.stack([v.to(torch.float64 if capability(device_kind(a.device)).float64
                             else torch.float32)
                        for v in (negligible, minden, tnorm, finite)], -1)
    real, minden, tnorm, finite = np.asarray(_k("linalg._fetch", vals)(vals),
                                             np.float64).reshape(-1, 4).T
    if not a.is_complex():
        x = _real_where(x, real.astype(bool))
    with np.errstate(divide="ignore", invalid="ignore"):
        minden = np.where(minden == 0, tol, minden)
        err = np.where(finite.astype(bool), np.minimum(1, np.maximum(
            tol, (tol / minden) * tnorm)), np.inf)
    return x.reshape(*lead, n, n), err.reshape(lead)


def _as_scipys(err):
    """The estimate as SciPy's ``min(1, max(tol, ...))`` gives it: the int 1 at the cap."""
    return 1 if err == 1 else float(err)


def _real_where(x, real):
    """Complex ``x`` (B, n, n) real where ``real`` (B,) says (NumPy's stacking of SciPy's
    loop: all real, real; mixed, complex with the real ones' imaginary parts zero)."""
    if real.all():
        return x.real.contiguous()
    if not real.any():
        return x
    mask = torch.as_tensor(real, device=x.device)[:, None, None]
    return torch.where(mask, x.real.to(x.dtype), x)


@register("linalg.funm", "generic")
def funm(a, func, disp=True):
    """``funm_parts``; a stack's error estimates (disp=False) as one float64 array on the
    device, as the dispatcher's loop stacks the single calls' floats."""
    x, err = funm_parts(a, func)
    tol = torch.finfo(x.real.dtype if x.is_complex() else x.dtype).eps
    if disp:
        for e in err.reshape(-1):  # each matrix's message, in the loop's order
            if e > 1000 * tol:
                print("funm result may be inaccurate, approximate err =", _as_scipys(e))
        return x
    if err.ndim == 0:
        return x, _as_scipys(err)
    return x, torch.as_tensor(err, device=a.device)


# Gauss-Legendre nodes and weights on [0, 1] (degree 8): log(I + X) is
# sum_j w_j X (I + x_j X)^-1 up to the [8/8] Pade error, below double's unit roundoff for
# ||X||_1 <= 0.25.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


_LOGM_TINY = 1e-20  # SciPy's ad hoc stand-in for an exactly zero eigenvalue


def _logm_nonsingular(t, eye):
    """SciPy's treatment of a singular triangular factor, per matrix of the stack ``t``
    (B, n, n): a zero diagonal entry becomes 1e-20 (LogmExactlySingularWarning), one below
    1e-20 is announced (LogmNearlySingularWarning); one host read."""
    from scipy.linalg._matfuncs_inv_ssq import (
        LogmExactlySingularWarning,
        LogmNearlySingularWarning,
    )

    d = _cabs(t.diagonal(0, -2, -1))
    flags = torch.stack([(d == 0).any(-1), (d < _LOGM_TINY).any(-1)], -1)
    flags = np.asarray(_k("linalg._fetch", flags)(flags), dtype=bool).reshape(-1, 2)
    for zero, tiny in flags:  # each matrix's warning, in SciPy's loop's order
        if zero:
            warnings.warn("The logm input matrix is exactly singular.",
                          LogmExactlySingularWarning, stacklevel=6)
        elif tiny:
            warnings.warn("The logm input matrix may be nearly singular.",
                          LogmNearlySingularWarning, stacklevel=6)
    if flags[:, 0].any():  # (only a singular matrix has a zero on its diagonal)
        return torch.where(eye.bool() & (t == 0), torch.full_like(t, _LOGM_TINY), t)
    return t


@register("linalg.logm", "generic")
def logm(a):
    """Inverse scaling and squaring on the triangular Schur factor: square roots until
    ||T - I||_1 <= 1/4, then the degree-8 Pade approximant by partial fractions (8
    triangular solves), times 2^k.  A stack: each matrix its own number of roots k (the
    matrices still above the bound rooted, one host read per round for the stack);
    complex stacks: the Schur kernel's PerMatrix."""
    lead, n = a.shape[:-2], a.shape[-1]
    # (a real matrix: its real Schur form made complex, as SciPy's)
    t, z = _stacked_schur(a)
    a = a.reshape(-1, n, n)
    eye = torch.eye(n, dtype=t.dtype, device=t.device)
    t = _logm_nonsingular(t, eye)
    t0 = t
    k = np.zeros(a.shape[0], dtype=int)
    active = np.ones(a.shape[0], dtype=bool)
    for _ in range(64):
        # max(||X^3||^(1/3), ||X^4||^(1/4)), X = T - I, bounds the Pade error (Al-Mohy &
        # Higham 2012): far below ||X||_1 for a non-normal T, whose roots then stay few
        x = t - eye
        x3 = x @ x @ x
        gap = torch.maximum(_cabs(x3).sum(-2).amax(-1) ** (1 / 3),
                            _cabs(x3 @ x).sum(-2).amax(-1) ** 0.25)
        active &= ~(np.asarray(_k("linalg._fetch", gap)(gap)).reshape(-1) <= 0.25)
        if not active.any():
            break
        t = torch.where(torch.as_tensor(active, device=t.device)[:, None, None],
                        sqrtm_triu(t), t)
        k += active
    x = t - eye
    trsm = _k("linalg._trsm", t)
    log = torch.zeros_like(t)
    for node, weight in zip(_GL_NODES, _GL_WEIGHTS, strict=True):
        log = log + (weight / 2) * trsm(eye + ((node + 1) / 2) * x, x, upper=True)
    rooted = k > 0
    if rooted.any():
        log = log * torch.as_tensor(2.0 ** k, dtype=log.real.dtype, device=log.device)[
            :, None, None]
        # the diagonal and first superdiagonal exactly, not through the roots (as SciPy)
        d = t0.diagonal(0, -2, -1)
        logd = torch.log(d)
        lo, hi = d[:, :-1], d[:, 1:]
        same = lo == hi
        dd = torch.where(same, 1 / lo, (logd[:, 1:] - logd[:, :-1]) / torch.where(
            same, torch.ones_like(lo), hi - lo))
        fixed = torch.where(eye.bool(), torch.diag_embed(logd), log)
        sup = torch.ones(n - 1, dtype=torch.bool, device=t.device).diag_embed(1)
        fixed = torch.where(sup, torch.diag_embed(t0.diagonal(1, -2, -1) * dd, 1), fixed)
        log = torch.where(torch.as_tensor(rooted, device=t.device)[:, None, None], fixed,
                          log)
    out = z @ log @ z.mH
    # SciPy computes in the input's precision and returns double precision, real where the
    # imaginary part is within double's tolerance (so float32 input with complex
    # eigenvalues gives complex128, as SciPy)
    if capability(device_kind(a.device)).float64:
        out = out.to(torch.complex128)
    real = out.real.dtype
    out = _real_if_negligible(a, out, torch.finfo(real).eps * (1e3 if real == torch.float32
                                                                else 1e6))
    return out.reshape(*lead, n, n)


@register("linalg.solve_sylvester", "generic")
def solve_sylvester(a, b, q):
    """Bartels-Stewart: real Schur forms for real input (``real_sylvester``), complex
    Schur forms for complex input (``_complex_sylvester``)."""
    if a.is_complex() or b.is_complex() or q.is_complex():
        return _complex_sylvester(a, b, q)
    return real_sylvester(a, b, q)


@register("linalg.solve_sylvester", "xla")
def _solve_sylvester_xla(a, b, q):
    # (a real equation as a pair on PJRT CPU: it then rounds as it does in a stack;
    # complex stacks raise PerMatrix, so a complex equation is one matrix)
    return as_stack(solve_sylvester, a, b, q) if not q.is_complex() else \
        solve_sylvester(a, b, q)


def _complex_sylvester(a, b, q):
    """Complex Schur forms A = U R U^H, B = V S V^H: R Y + Y S = F (F = U^H Q V) column
    by column, (R + S[k, k] I) y_k = f_k - Y[:, :k] S[:k, k]."""
    dtype = _complex(q.dtype)
    r, u = complex_schur(a.to(dtype))
    s, v = complex_schur(b.to(dtype))
    f = u.mH @ q.to(dtype) @ v
    cols = []
    for j in range(s.shape[-1]):
        rhs = f[:, j:j + 1]
        if cols:
            rhs = rhs - torch.stack(cols, 1) @ s[:j, j:j + 1]
        cols.append(_shifted_solve(r, s[j, j], rhs)[:, 0])
    x = u @ torch.stack(cols, 1) @ v.mH
    return x if q.is_complex() else x.real.contiguous()


def real_sylvester(a, b, q):
    """A X + X B = Q for real A, B, Q in real arithmetic only (``sylvester_factors``,
    ``sylvester_solve``)."""
    return sylvester_solve(sylvester_factors(a, b), q)


def sylvester_factors(a, b):
    """What Bartels-Stewart needs of real A (n x n) and B (m x m), or of stacks of them
    (..., n, n) and (..., m, m), computed once: their real Schur forms A = U R U^T,
    B = V S V^T (standardized: S's subdiagonal is nonzero exactly at its 2x2 blocks,
    complex eigenvalue pairs), S's block structure (one host read; in a stack each
    matrix's own), and the inverses of the shifted systems, all in batched inverses:
    R + s I for a 1x1 block (s), kron(I_2, R) + kron(S_kk^T, I_n) (2n x 2n) for a 2x2
    block S_kk, which couples its two columns of Y in R Y + Y S = F.  O(m n^2) memory and
    O(m n^3) work (the inverses) per matrix: sized for control problems, not large n."""
    batch, same = a.shape[:-2], b is a  # (sqrtm's X E + E X: one Schur form)
    a, b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    r, u = _schur(a, "real")
    s, v = (r, u) if same else _schur(b, "real")
    nb, n, m = r.shape[0], r.shape[-1], s.shape[-1]
    sub = (np.asarray(_k("linalg._fetch", s)(s.diagonal(-1, -2, -1) != 0), dtype=bool)
           if m > 1 else np.zeros((nb, 0), dtype=bool))
    # kind[i, k]: 1 where column k of matrix i is a 1x1 block, 2 where a 2x2 block starts
    # there, 0 at a 2x2 block's second column (solved with the first)
    kind = np.zeros((nb, m), dtype=np.int64)
    for i in range(nb):
        k = 0
        while k < m:
            size = 2 if k + 1 < m and sub[i, k] else 1
            kind[i, k] = size
            k += size
    eye = torch.eye(n, dtype=r.dtype, device=r.device)
    # LAPACK's trsyl: a (near-)singular system is solved with its pivots raised to smin
    smin = torch.finfo(r.dtype).eps * torch.maximum(r.abs().amax((-2, -1)),
                                                    s.abs().amax((-2, -1)))
    ones = [k for k in range(m) if (kind[:, k] == 1).any()]
    twos = [k for k in range(m) if (kind[:, k] == 2).any()]
    inv1 = inv2 = None
    if ones:  # (every matrix's system at each such k: one batched inverse)
        idx = torch.tensor(ones, device=s.device)
        shifts = s.diagonal(0, -2, -1).index_select(-1, idx)  # (nb, k1)
        sys1 = r[:, None] + shifts[..., None, None] * eye
        inv1 = _perturbed_inverses(sys1.reshape(-1, n, n), smin.repeat_interleave(len(ones)))
        inv1 = inv1.reshape(nb, len(ones), n, n)
    if twos:
        idx = torch.tensor(twos, device=s.device)
        rows = torch.stack([idx, idx, idx + 1, idx + 1], 1).reshape(-1)
        cols = torch.stack([idx, idx + 1, idx, idx + 1], 1).reshape(-1)
        sk = s.reshape(nb, -1).index_select(1, rows * m + cols).reshape(nb, -1, 2, 2)
        # block (i, j) of the 2n x 2n system: R [i == j] + S_kk[j, i] I
        eye2 = torch.eye(2, dtype=r.dtype, device=r.device)
        sys2 = (eye2[:, None, :, None] * r[:, None, None, :, None, :]
                + sk.mT[..., :, None, :, None] * eye[None, :, None, :])
        inv2 = _perturbed_inverses(sys2.reshape(-1, 2 * n, 2 * n),
                                   smin.repeat_interleave(len(twos)))
        inv2 = inv2.reshape(nb, len(twos), 2 * n, 2 * n)
    return batch, r, u, s, v, kind, (ones, inv1), (twos, inv2)


def _perturbed_inverses(m, smin):
    """Inverses of the stack ``m``; a slice the inverse finds singular (A and -B share
    an eigenvalue) is inverted with its ``smin`` added to its diagonal: a large finite
    solution, as SciPy's (LAPACK's trsyl perturbs its pivots the same way), not NaN."""
    inv = _k("linalg._inv", m)
    minv, info = inv(m)
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    pert, _ = inv(m + smin[:, None, None] * eye)
    return torch.where((info != 0)[:, None, None], pert, minv)


def _set_column(y, k, col, mask):
    """Y with column k replaced by ``col`` where ``mask`` (per matrix; None: all)."""
    if mask is not None:
        col = torch.where(torch.as_tensor(mask, device=y.device)[:, None], col, y[:, :, k])
    return torch.cat([y[:, :, :k], col[:, :, None], y[:, :, k + 1:]], 2)


def sylvester_solve(factors, q):
    """X with A X + X B = Q from ``sylvester_factors(A, B)``: F = U^T Q V, then S's
    columns left to right, Y_k = M_k^-1 (F_k - Y S[:, k]) (the columns of Y not yet
    found are zero) and one refinement step with M_k Y_k = R Y_k + Y_k S_kk (an LU
    solve's backward error from the inverse, as ``linalg._solve`` on XLA), a 2x2 block's
    two columns at once; in a stack each matrix by its own blocks (masks where the
    matrices' blocks differ); X = U Y V^T."""
    batch, r, u, s, v, kind, (ones, inv1), (twos, inv2) = factors
    nb = r.shape[0]
    f = u.mT @ q.reshape(nb, *q.shape[-2:]) @ v
    y = torch.zeros_like(f)
    for k in range(kind.shape[1]):
        one, two = kind[:, k] == 1, kind[:, k] == 2
        if one.any():
            minv = inv1[:, ones.index(k)]
            g = f[:, :, k:k + 1] - y @ s[:, :, k:k + 1]
            yk = minv @ g
            yk = yk + minv @ (g - r @ yk - yk * s[:, k:k + 1, k:k + 1])
            y = _set_column(y, k, yk[:, :, 0], None if one.all() else one)
        if two.any():
            minv = inv2[:, twos.index(k)]
            sk = s[:, k:k + 2, k:k + 2]
            g = f[:, :, k:k + 2] - y @ s[:, :, k:k + 2]
            yk = (minv @ g.mT.reshape(nb, -1, 1)).reshape(nb, 2, -1).mT
            res = g - r @ yk - yk @ sk
            yk = yk + (minv @ res.mT.reshape(nb, -1, 1)).reshape(nb, 2, -1).mT
            mask = None if two.all() else two
            y = _set_column(_set_column(y, k, yk[:, :, 0], mask), k + 1, yk[:, :, 1], mask)
    x = u @ y @ v.mT
    return x.reshape(*batch, *x.shape[-2:])


# ----------------------------------------------------------------------------------------
# solve_circulant: DFTs as products with the DFT matrix, complex numbers as (real,
# imaginary) pairs of real tensors (torch.fft and complex division do not lower on XLA)

register("linalg.solve_circulant", "cpu")(_on_views(_sl.solve_circulant, finite_kw=False))


def _dft_parts(n, dtype, device):
    """cos and sin of 2 pi jk / n (the DFT matrix is cos - i sin), angles reduced mod n
    in integers, computed in double precision where the device has it."""
    i = torch.arange(n, device=device)
    wide = torch.float64 if capability(device_kind(device)).float64 else torch.float32
    angle = (2 * np.pi / n) * ((i[:, None] * i[None, :]) % n).to(wide)
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def _parts(x):
    return (x.real, x.imag) if x.is_complex() else (x, None)


def _dft(x, cos, sin, inverse=False):
    """x @ F (inverse: x @ conj(F) / n) for x as a (real, imaginary-or-None) pair."""
    re, im = x
    s = sin if inverse else -sin
    out_re = re @ cos - (im @ s if im is not None else 0)
    out_im = re @ s + (im @ cos if im is not None else 0)
    if inverse:
        n = cos.shape[0]
        out_re, out_im = out_re / n, out_im / n
    return out_re, out_im


@register("linalg.solve_circulant", "generic")
def solve_circulant(c, b, singular="raise", tol=None, caxis=-1, baxis=0, outaxis=0):
    cm, bm = c.movedim(caxis, -1), b.movedim(baxis, -1)
    n = cm.shape[-1]
    real = cm.real.dtype if cm.is_complex() else cm.dtype
    cos, sin = _dft_parts(n, real, c.device)
    fc_re, fc_im = _dft(_parts(cm), cos, sin)
    abs_fc = torch.sqrt(fc_re ** 2 + fc_im ** 2)
    if tol is None:
        tol = abs_fc.max(-1, keepdim=True).values * (n * np.finfo(np.float64).eps)
    elif torch.is_tensor(tol):  # as given (SciPy adds no axis to a given tol)
        tol = tol.to(abs_fc.device, abs_fc.dtype)
        try:
            torch.broadcast_shapes(abs_fc.shape, tol.shape)
        except RuntimeError:
            raise ValueError("operands could not be broadcast together with shapes "
                             f"{tuple(abs_fc.shape)} {tuple(tol.shape)}") from None
    near = abs_fc <= tol
    flag = near.any()
    is_near_singular = bool(_k("linalg._fetch", flag)(flag))
    if is_near_singular:
        if singular == "raise":
            raise LinAlgError("near singular circulant matrix.")
        fc_re = torch.where(near, torch.ones_like(fc_re), fc_re)
        fc_im = torch.where(near, torch.zeros_like(fc_im), fc_im)
    fb_re, fb_im = _dft(_parts(bm), cos, sin)
    den = fc_re ** 2 + fc_im ** 2
    q_re = (fb_re * fc_re + fb_im * fc_im) / den
    q_im = (fb_im * fc_re - fb_re * fc_im) / den
    if is_near_singular:
        mask = near.expand(q_re.shape)
        q_re = torch.where(mask, torch.zeros_like(q_re), q_re)
        q_im = torch.where(mask, torch.zeros_like(q_im), q_im)
    x_re, x_im = _dft((q_re, q_im), cos, sin, inverse=True)
    if c.is_complex() or b.is_complex():
        # scaled parts combined through view_as_complex (torch.complex does not lower)
        x = torch.view_as_complex(torch.stack([x_re, x_im], -1).contiguous())
    else:
        x = x_re
    return x if outaxis == -1 else x.movedim(-1, outaxis)


# ----------------------------------------------------------------------------------------
# signm and fractional_matrix_power: SciPy's algorithms through trnscipy's routed funm,
# schur, rsf2csf, svdvals, inv and norm; the triangular work on the device

register("linalg.fractional_matrix_power", "cpu")(
    _on_views(_sl.fractional_matrix_power, finite_kw=False))


@register("linalg.signm", "cpu")
def _signm_cpu(a, disp=True):
    if disp:
        return _tensor(_sl.signm(_view(a)))
    with warnings.catch_warnings():  # (the caller has given the deprecation warning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _tensor(_sl.signm(_view(a), disp=False))


def _fetch_all(*values):
    """Several 0-d device values in one host read (as Python floats)."""
    first = values[0]
    return _k("linalg._fetch", first)(torch.stack(
        [v.reshape(()).to(first.real.dtype if first.is_complex() else first.dtype)
         for v in values]))


def _low_precision(dtype):
    return dtype in (torch.float32, torch.complex64)


@register("linalg.signm", "generic")
def signm(a, disp=True):
    """SciPy's route: funm with the rounded sign of the eigenvalues' real parts, then (where
    its error estimate is too large) the Newton iteration S <- (S + S^-1) / 2 from A + c I
    (one host read per iteration)."""
    def rounded_sign(x):
        rx = x.real if x.is_complex() else x
        # NumPy's amax of complex eigenvalues orders by real part first
        c = 1e3 * torch.finfo(rx.dtype).eps * rx.max()
        return torch.sign((rx.abs() > c).to(rx.dtype) * rx)

    lead, n = a.shape[:-2], a.shape[-1]
    result, errest = _funm(a, rounded_sign)
    errtol = 1e3 * torch.finfo(torch.float32 if _low_precision(result.dtype)
                               else torch.float64).eps
    errest = np.asarray(errest, np.float64).reshape(-1)
    done = errest < errtol
    if done.all():
        return result  # (SciPy returns no error estimate here, whatever disp says)
    vals = _svdvals(a)
    c = 0.5 / vals.amax(-1)
    # SciPy adds c * np.identity: float64 before 1.18, of A's dtype from 1.18 on
    dtype = torch.promote_types(a.dtype, vals.dtype if scipy_at_least(1, 18)
                                else torch.float64)
    eye = torch.eye(n, dtype=dtype, device=a.device)
    settled = torch.as_tensor(done.reshape(lead), device=a.device)[..., None, None]
    # (a matrix funm settled is never inverted, as in SciPy's loop: I in its place)
    s0 = torch.where(settled, eye, a.to(dtype) + c[..., None, None].to(dtype) * eye)
    prev, active = errest.copy(), ~done
    for _ in range(100):  # each matrix its own Newton iteration, one host read per step
        step = 0.5 * (s0 + _inv(s0))
        s0 = torch.where(torch.as_tensor(active.reshape(lead), device=a.device)[
            ..., None, None], step, s0)
        pp = 0.5 * (s0 @ s0 + s0)
        residual = pp @ pp - pp
        norm1 = _cabs(residual).sum(-2).amax(-1)
        est = np.asarray(_k("linalg._fetch", norm1)(norm1), np.float64).reshape(-1)
        errest = np.where(active, est, errest)
        stop = (est < errtol) | (prev == est)
        prev = np.where(active, est, prev)
        active = active & ~stop
        if not active.any():
            break
    out = torch.where(settled, result, s0.to(torch.promote_types(s0.dtype, result.dtype)))
    if disp:
        for e in errest[~done]:  # each Newton matrix's message, in the loop's order
            if not np.isfinite(e) or e >= errtol:
                print("signm result may be inaccurate, approximate err =", float(e))
        return out
    if done.any():  # (SciPy's loop zips the results: a settled matrix gave no estimate)
        return out
    return (out, float(errest[0])) if not lead else \
        (out, torch.as_tensor(errest.reshape(lead), device=a.device))


def _matrix_power(a, p):
    """np.linalg.matrix_power: binary powering (the inverse for p < 0)."""
    from trnscipy._kernels._generic import matmul  # (not at import: a circular import)

    if p < 0:
        a, p = _inv(a), -p
    result = None
    while p:
        if p & 1:
            result = a if result is None else matmul(result, a)  # (integer a on CUDA)
        p >>= 1
        if p:
            a = matmul(a, a)
    return result if result is not None else \
        torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape).clone()


def _cpow(w, p):
    """w ** p (principal branch) for a complex tensor, in real pairs (complex pow and log
    do not lower on XLA)."""
    re, im = w.real, w.imag
    r = torch.exp(p * 0.5 * torch.log(re ** 2 + im ** 2))
    th = p * torch.atan2(im, re)
    return torch.view_as_complex(torch.stack([r * torch.cos(th), r * torch.sin(th)], -1))


# Higham and Lin's bounds on ||T - I||_1 for the [m/m] Pade approximant of (I + X)^p
_PADE_THETA = (1.51e-5, 2.24e-3, 1.88e-2, 6.04e-2, 1.24e-1, 2.00e-1, 2.79e-1)


def _pade_constant(i, p):
    if i == 1:
        return -p
    j = i // 2
    return (-j + p) / (2 * (2 * j - 1)) if i % 2 == 0 else (-j - p) / (2 * (2 * j + 1))


def _remainder_power_triu(t, p):
    """T^p for each upper triangular T of the stack ``t`` (B, n, n) with no eigenvalue on
    the closed negative real axis (real T: positive diagonal), -1 < p < 1: Higham and
    Lin's Schur-Pade method (square roots until ||T - I||_1 <= theta_7, the [m/m] Pade
    approximant by its continued fraction, squaring back with the diagonal recomputed
    exactly), each matrix its own number of roots and degree m (one host read per round
    for the stack); SciPy also recomputes the superdiagonal, this does not (differences
    at rounding level)."""
    n = t.shape[-1]
    eye = torch.eye(n, dtype=t.dtype, device=t.device)
    d0 = t.diagonal(0, -2, -1)
    power = (lambda w, q: _cpow(w, q)) if t.is_complex() else (lambda w, q: w ** q)
    r, s = t, np.zeros(t.shape[0], dtype=int)
    active = np.ones(t.shape[0], dtype=bool)
    while True:
        gap = abs_max(_cabs(r - eye).sum(-2), -1)
        gap = np.asarray(_k("linalg._fetch", gap)(gap), np.float64).reshape(-1)
        active &= ~((gap <= _PADE_THETA[-1]) | (s >= 64))
        if not active.any():
            break
        r = torch.where(_rows(active, t), sqrtm_triu(r), r)
        s += active
    degrees = np.asarray([next(k for k, theta in enumerate(_PADE_THETA, 1)
                               if g <= theta or k == 7) for g in gap])
    x = eye - r  # the continued fraction of (1 - x)^p
    trsm = _k("linalg._trsm", t)
    u = None
    for m in np.unique(degrees):  # (each degree the stack's matrices take, at most 7)
        y = x * _pade_constant(2 * m, p)
        for j in range(2 * m - 1, 0, -1):
            y = trsm(eye + y, x * _pade_constant(j, p), upper=True)
        u = eye + y if u is None else torch.where(_rows(degrees == m, t), eye + y, u)
    for i in range(s.max(), -1, -1):
        if i < s.max():
            u = torch.where(_rows(i < s, t), u @ u, u)
        exact = u - torch.diag_embed(u.diagonal(0, -2, -1)) + torch.diag_embed(
            power(d0, p * 2.0 ** -i))
        u = torch.where(_rows(i <= s, t), exact, u)
    return u


def _rows(mask, t):
    """A (B,) host mask as a (B, 1, 1) device mask for the stack ``t``."""
    return torch.as_tensor(mask, device=t.device)[:, None, None]


def _flat(a):
    """A matrix or a stack of one batch dimension as it is; more: (B, n, n)."""
    return a if a.ndim <= 3 else a.reshape(-1, *a.shape[-2:])


@register("linalg.fractional_matrix_power", "generic")
def fractional_matrix_power(a, p):
    """SciPy's algorithm (integer p: matrix_power; else A^floor/ceil(p) times the Schur-Pade
    remainder power, chosen by the condition number from trnscipy's svdvals; singular A:
    funm of x^b, or NaN for p < 0), in double precision as SciPy's result.  A stack: one
    computation where its matrices take the same branch (else PerMatrix)."""
    if p == int(p):
        return _matrix_power(a, int(p))
    a = _wide(a)
    s = _svdvals(_flat(a))
    ends = torch.stack([s[..., 0], s[..., -1]], -1)
    smax, smin = np.asarray(_k("linalg._fetch", ends)(ends), np.float64).reshape(-1, 2).T
    if smin.all():
        k2 = smax / smin
        p1, p2 = p - np.floor(p), p - np.ceil(p)
        floor = p1 * k2 ** (1 - p1) <= -p2 * k2
        if floor.any() and not floor.all():
            raise PerMatrix  # (its matrices' powers split between floor and ceil)
        ia, b = (int(np.floor(p)), p1) if floor[0] else (int(np.ceil(p)), p2)
        r = _remainder_power(a, b)
        if r is not None:
            q = _matrix_power(a, ia)
            return q.to(r.dtype) @ r
    elif smin.any():
        raise PerMatrix  # (singular and nonsingular matrices: two routes)
    if p < 0:
        return torch.full_like(a, float("nan"))
    ia, b = int(np.floor(p)), p - np.floor(p)
    r, _ = _funm(a, lambda w: _cpow(w, b) if w.is_complex() else w ** b)
    return _matrix_power(a, ia).to(r.dtype) @ r


def _remainder_power(a, p):
    """SciPy's _remainder_matrix_power of a matrix or a stack, or None where it raises (a
    zero eigenvalue); each matrix real or complex as its single call (PerMatrix where the
    stack's matrices are triangular and not, or singular and not)."""
    lead, n = a.shape[:-2], a.shape[-1]
    flags = (a.tril(-1) == 0).flatten(-2).all(-1)
    triu = np.asarray(_k("linalg._fetch", flags)(flags.reshape(-1)), dtype=bool)
    if triu.any() and not triu.all():
        raise PerMatrix
    z = None
    t = a
    real = np.ones(triu.shape, dtype=bool)  # each matrix's result is real (real input)
    if not triu.all():
        if a.is_complex():
            t, z = _schur(_flat(a), "complex")
        else:
            t, z = _uniform_schur(_flat(a), "real")
            sub = (t.diagonal(-1, -2, -1) == 0).all(-1)
            real = np.asarray(_k("linalg._fetch", sub)(sub.reshape(-1)), dtype=bool)
            if not real.all():
                t, z = _rsf2csf(t, z)
        z = z.reshape(-1, n, n)
    t = t.reshape(-1, n, n)
    d = t.diagonal(0, -2, -1)
    zero = (d == 0).any(-1)
    negative = (d.real if d.is_complex() else d).amin(-1) < 0  # (real T: made complex)
    flags = torch.stack([zero, negative], -1)
    zero, negative = np.asarray(_k("linalg._fetch", flags)(flags), dtype=bool).reshape(-1, 2).T
    if zero.all():
        return None
    if zero.any():
        raise PerMatrix
    if negative.any() and not t.is_complex():
        t = t.to(_complex(t.dtype))
    u = _remainder_power_triu(t, p)
    x = u if z is None else z.to(u.dtype) @ u @ z.to(u.dtype).mH
    if not a.is_complex() and x.is_complex():  # (NumPy's stacking of SciPy's loop)
        x = _real_where(x, real & ~negative)
    return x.reshape(*lead, n, n)


# ----------------------------------------------------------------------------------------
# matrix_balance: LAPACK's ?gebal (3.12).  The permutation depends only on the zero pattern:
# read once and searched on the host as gebal does, then applied on the device by a
# gather.  The scaling sweeps read the four norms of row/column i (one host read per i),
# choose gebal's power of 2 on the host in the matrix's precision, and scale on the device.

register("linalg.matrix_balance", "cpu")(_on_views(_sl.matrix_balance, finite_kw=False))


def _gebal_permutation(nz):
    """gebal's search for rows and columns isolating eigenvalues on the pattern ``nz``
    (n x n bool ndarray): (k, l, ps, order), 0-based k..l, ps gebal's SCALE entries for
    the isolated positions (1-based indices), order the permuted positions' original
    indices."""
    n = nz.shape[0]
    nz = nz.copy()
    np.fill_diagonal(nz, False)
    order, ps = np.arange(n), np.ones(n)

    def swap(i, j):
        nz[[i, j]] = nz[[j, i]]
        nz[:, [i, j]] = nz[:, [j, i]]
        order[[i, j]] = order[[j, i]]

    k, l = 0, n - 1
    noconv = True
    while noconv:
        noconv = False
        for i in range(l, -1, -1):
            if not nz[i, :l + 1].any():
                ps[l] = i + 1
                if i != l:
                    swap(i, l)
                noconv = True
                if l == 0:
                    return 0, 0, ps, order
                l -= 1
    noconv = True
    while noconv:
        noconv = False
        for j in range(k, l + 1):
            if not nz[k:l + 1, j].any():
                ps[k] = j + 1
                if j != k:
                    swap(j, k)
                noconv = True
                k += 1
    return k, l, ps, order


def _gebal_factor(c, r, ca, ra, scale, real):
    """gebal's power of 2 for one row/column (None: leave it), in ``real`` arithmetic."""
    one, two = real(1), real(2)
    info = np.finfo(real)
    sfmin1 = real(info.tiny) / real(info.eps)
    sfmax1 = one / sfmin1
    sfmin2 = sfmin1 * two
    sfmax2 = one / sfmin2
    c, r, ca, ra = real(c), real(r), real(ca), real(ra)
    if c == 0 or r == 0:
        return None
    if np.isnan(c + ca + r + ra):
        raise ValueError('xGEBAL exited with the internal error "illegal value in argument '
                         'number 3.". See LAPACK documentation for the xGEBAL error codes.')
    g, f, s = r / two, one, c + r
    while c < g and max(f, c, ca) < sfmax2 and min(r, g, ra) > sfmin2:
        f, c, ca, r, g, ra = f * two, c * two, ca * two, r / two, g / two, ra / two
    g = c / two
    while g >= r and max(r, ra) < sfmax2 and min(f, c, g, ca) > sfmin2:
        f, c, g, ca, r, ra = f / two, c / two, g / two, ca / two, r * two, ra * two
    if c + r >= real(0.95) * s:
        return None
    if f < one and scale < one and f * scale <= sfmin1:
        return None
    if f > one and scale > one and scale >= sfmax1 / f:
        return None
    return f


def _amax_entry(x, mask):
    """|x[b, i]| at gebal's i?amax over ``mask`` per row b (complex: largest |re| + |im|,
    first)."""
    key = (x.real.abs() + x.imag.abs()) if x.is_complex() else x.abs()
    idx = torch.where(mask, key, torch.full_like(key, -1.0)).argmax(-1, keepdim=True)
    return _cabs(x.gather(-1, idx))[..., 0]


def _gebal_norms(a, hot, inner, upto_l, from_k):
    """gebal's (c, r, ca, ra) of row/column ``hot`` (a one-hot (n,) mask) of each matrix of
    the stack ``a`` (B, n, n) as one (B, 4) tensor: the 2-norms of the column and row over
    k..l, |the largest entry| of the column over rows 0..l and of the row over columns
    k..n-1 (the masks (B, n): each matrix its own k, l)."""
    col = torch.where(hot[None, None, :], a, torch.zeros_like(a)).sum(-1)
    row = torch.where(hot[None, :, None], a, torch.zeros_like(a)).sum(-2)
    return torch.stack([
        torch.sqrt((torch.where(inner, _cabs(col), 0) ** 2).sum(-1)),
        torch.sqrt((torch.where(inner, _cabs(row), 0) ** 2).sum(-1)),
        _amax_entry(col, upto_l), _amax_entry(row, from_k)], -1)


def _gebal_rescale(a, hot, f):
    """Row ``hot`` of each matrix of the stack a divided by its f (B,), its column
    multiplied (powers of two: exact)."""
    real_t = a.real.dtype if a.is_complex() else a.dtype
    fs = torch.where(hot, torch.as_tensor(f, dtype=real_t).to(a.device)[:, None],
                     torch.ones((), dtype=real_t, device=a.device))
    return a / fs[:, :, None] * fs[:, None, :]


@register("linalg.matrix_balance", "generic")
def matrix_balance(a, permute=True, scale=True, separate=False):
    return gebal(a, permute, scale, separate)


def _gebal_search(a, pattern):
    """Each matrix's (k, l, ps, order) of gebal's permutation search (one host read), and
    the stack permuted."""
    count, n = a.shape[0], a.shape[-1]
    ks, ls = np.zeros(count, dtype=int), np.full(count, n - 1)
    ps, orders = np.ones((count, n)), np.tile(np.arange(n), (count, 1))
    nz = a != 0 if pattern is None else pattern(a)
    for b, m in enumerate(np.asarray(_k("linalg._fetch", nz)(nz))):
        ks[b], ls[b], ps[b], orders[b] = _gebal_permutation(m)
    index = torch.as_tensor(orders, device=a.device)
    a = a.gather(-2, index[:, :, None].expand(count, n, n))
    a = a.gather(-1, index[:, None, :].expand(count, n, n))
    backend(a.device).sync()  # (the norms' graph then starts from data)
    return a, ks, ls, ps


def _gebal_result(ps, k, l):
    """SciPy's scaling vector and permutation of one matrix's gebal (lo, hi, scale)."""
    n = ps.shape[0]
    scaling = np.ones(n)
    scaling[k:l + 1] = ps[k:l + 1]
    perm = np.arange(n)
    lapack_ps = ps.astype(int) - 1
    for ind, x in enumerate(lapack_ps[l + 1:][::-1], 1):
        if n - ind != x:
            perm[[x, n - ind]] = perm[[n - ind, x]]
    for ind, x in enumerate(lapack_ps[:k]):
        if ind != x:
            perm[[x, ind]] = perm[[ind, x]]
    return scaling, perm


def gebal(a, permute, scale, separate, norms=_gebal_norms, rescale=_gebal_rescale,
          pattern=None):
    """LAPACK's gebal and SciPy's form of its result, for a matrix or a stack (..., n, n):
    each matrix its own permutation, k, l and scaling, one host read per row and sweep
    for the whole stack (a matrix whose sweep changed nothing sweeps on unchanged while
    others go on).  ``norms`` ((B, 4) numbers, or (B, 4, parts) float32 parts),
    ``rescale`` and ``pattern`` (a's nonzero pattern, default ``a != 0``) are the
    matrix's arithmetic (the double-float method passes its own)."""
    lead, n = a.shape[:-2], a.shape[-1]
    a = a.reshape(-1, n, n)
    count = a.shape[0]
    real_t = a.real.dtype if a.is_complex() else a.dtype
    real = np.float32 if real_t == torch.float32 else np.float64
    if permute:
        a, ks, ls, ps = _gebal_search(a, pattern)
    else:
        ks, ls, ps = np.zeros(count, dtype=int), np.full(count, n - 1), np.ones((count, n))
    pos = np.arange(n)
    inside = (pos >= ks[:, None]) & (pos <= ls[:, None])
    ps[inside] = 1.0
    if scale and (ls > ks).any():
        # the masks as device data (host-built): the norms' graph is the same for every
        # row and sweep, and for every (k, l)
        inner, upto_l, from_k = (torch.as_tensor(m, device=a.device) for m in (
            inside, pos <= ls[:, None], pos >= ks[:, None]))
        noconv = True
        while noconv:
            noconv = False
            for i in range(ks.min(), ls.max() + 1):
                rows = np.flatnonzero((ks <= i) & (i <= ls) & (ls > ks))
                if not rows.size:
                    continue
                hot = torch.as_tensor(pos == i, device=a.device)
                four = norms(a, hot, inner, upto_l, from_k)
                # (B, 4, parts) from a method that computes in parts: their sum in float64
                fours = np.asarray(_k("linalg._fetch", four)(four), np.float64).reshape(
                    count, 4, -1).sum(-1)
                fs, changed = np.ones(count), False
                for b in rows:
                    f = _gebal_factor(*fours[b], real(ps[b, i]), real)
                    if f is not None:
                        ps[b, i], fs[b], changed = real(ps[b, i]) * f, f, True
                if changed:
                    noconv = True
                    a = rescale(a, hot, fs)
    results = [_gebal_result(ps[b], ks[b], ls[b]) for b in range(count)]
    a = a.reshape(*lead, n, n)
    if separate and not lead:
        return a, (tensor_on(results[0][0], a.device),
                   torch.as_tensor(results[0][1], device=a.device))
    if separate:  # a stack: each (scale, perm) as one float64 (2, n) array, as SciPy's loop
        pairs = np.stack([np.stack([s, p.astype(np.float64)]) for s, p in results])
        return a, tensor_on(pairs.reshape(*lead, 2, n), a.device)
    transforms = []
    for scaling, perm in results:
        iperm = np.empty_like(perm)
        iperm[perm] = pos
        transforms.append(np.diag(scaling)[iperm, :])
    return a, tensor_on(np.stack(transforms).reshape(*lead, n, n), a.device)
