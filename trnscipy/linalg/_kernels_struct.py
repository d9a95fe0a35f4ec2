"""Kernels of the banded, tridiagonal and structured functions and the matrix functions
(``trnscipy.linalg._kernels`` holds the primitives they are built from).

- cpu: SciPy's own function on zero-copy views, as for the other linalg kernels.
- generic (CUDA, XLA, Neuron): composites of the primitives behind the seam
  (``linalg._potrf``, ``linalg._trsm``, ``linalg._solve``, ``linalg.eigh``), so each
  kind runs the ones that lower there.  Band storage is expanded to the dense matrix by
  a gather (O(n^2) memory, O(n^3) work: a dense factorization, not LAPACK's banded one).
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy._kernels import register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _bad_slices, _broadcast, _k, _on_views, cho_solve, hermitian
from trnscipy.linalg._validate import LinAlgError

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
    """SciPy's numerical rank of singular values ``s`` (one host read)."""
    if s.shape[-1] == 0:
        return 0
    if rcond is None:
        rcond = np.finfo(str(s.dtype).removeprefix("torch.")).eps * max(m, n)
    num = (s > s.amax() * rcond).sum()
    return int(_k("linalg._fetch", num)(num))
