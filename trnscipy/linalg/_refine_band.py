"""float64 banded and tridiagonal functions on a Neuron device (see ``_refine``): the band
storage expanded exactly to the dense matrix (gathers: data movement, the double-float
parts kept), then the dense double-float methods (``_refine``'s solve, cholesky,
cho_solve, eigh).  O(n^2) memory and O(n^3) work instead of LAPACK's band algorithms:
up to ``_MAX_N``; beyond it SciPy's banded routines run on the exact host values,
announced."""

from trnscipy._batch import PerMatrix
from trnscipy._kernels import kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels as _k
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._kernels_struct import band_to_dense, dense_to_band

_MAX_N = 2048  # dense n x n double-float work: 32 MiB per part, n^3 flops per Ozaki slice
_TOO_BIG = f"band of order n > {_MAX_N}: the double-float method works on the dense " \
    "matrix (n^2 memory, n^3 work)"


def _plain(*tensors):
    """True where the call has no double-float work (float32, complex, empty)."""
    return not _r._df64(*tensors) or any(t.is_complex() or t.numel() == 0 for t in tensors)


def _big(ab):
    return ab.shape[-1] > _MAX_N


@register("linalg.solve_banded", "neuron")
def solve_banded(l_and_u, ab, b):
    if _plain(ab, b):
        return kind_kernel("linalg.solve_banded", "xla")(l_and_u, ab, b)
    if _big(ab):
        return _r._on_host("scipy.linalg.solve_banded", _TOO_BIG, lambda x, y: _k._sl.
                           solve_banded(l_and_u, x, y, check_finite=False), ab, b)
    return _r.solve(band_to_dense(ab, *l_and_u), b)  # (a stack: one refinement)


@register("linalg.solveh_banded", "neuron")
def solveh_banded(ab, b, lower=False):
    if _plain(ab, b):
        return kind_kernel("linalg.solveh_banded", "xla")(ab, b, lower=lower)
    if _big(ab):
        if ab.ndim > 2 or b.ndim > 2:
            raise PerMatrix  # (each matrix to the host as its single call)
        return _r._on_host("scipy.linalg.solveh_banded", _TOO_BIG, lambda x, y: _k._sl.
                           solveh_banded(x, y, lower=lower, check_finite=False), ab, b)
    # (a stack: one refinement for the batch)
    c = _r.cholesky(_triangle(ab, lower), lower=lower)  # SciPy's LinAlgError
    return _r.cho_solve((c, lower), b)


@register("linalg.cholesky_banded", "neuron")
def cholesky_banded(ab, lower=False):
    if _plain(ab):
        return kind_kernel("linalg.cholesky_banded", "xla")(ab, lower=lower)
    if _big(ab):
        if ab.ndim > 2:
            raise PerMatrix  # (each matrix to the host as its single call)
        return _r._on_host("scipy.linalg.cholesky_banded", _TOO_BIG, lambda x: _k._sl.
                           cholesky_banded(x, lower=lower, check_finite=False), ab)
    rows = ab.shape[-2]  # (a stack: one refinement for the batch)
    c = _r.cholesky(_triangle(ab, lower), lower=lower)
    return dense_to_band(c, ab, rows - 1, 0) if lower else dense_to_band(c, ab, 0, rows - 1)


@register("linalg.cho_solve_banded", "neuron")
def cho_solve_banded(cb_and_lower, b):
    cb, lower = cb_and_lower
    if _plain(cb, b):
        return kind_kernel("linalg.cho_solve_banded", "xla")(cb_and_lower, b)
    if _big(cb):
        return _r._on_host("scipy.linalg.cho_solve_banded", _TOO_BIG, lambda x, y: _k._sl.
                           cho_solve_banded((x, lower), y, check_finite=False), cb, b)
    return _r.cho_solve((_triangle(cb, lower), lower), b)  # (a stack: one refinement)


def _triangle(ab, lower):
    """The dense triangle of symmetric band storage (the dense double-float methods read
    that one triangle: no arithmetic to symmetrize)."""
    rows = ab.shape[-2]
    return band_to_dense(ab, rows - 1, 0) if lower else band_to_dense(ab, 0, rows - 1)


def _subset(select, select_range):
    return {"subset_by_value": select_range} if select == 1 else (
        {"subset_by_index": select_range} if select == 2 else {})


@register("linalg.eig_banded", "neuron")
def eig_banded(a_band, lower=False, eigvals_only=False, select=0, select_range=None):
    if _plain(a_band):
        return kind_kernel("linalg.eig_banded", "xla")(
            a_band, lower=lower, eigvals_only=eigvals_only, select=select,
            select_range=select_range)
    if _big(a_band) and a_band.ndim > 2:
        raise PerMatrix  # (each matrix to the host as its single call)
    if _big(a_band):
        return _r._on_host("scipy.linalg.eig_banded", _TOO_BIG, lambda x: _k._sl.
                           eig_banded(x, lower=lower, eigvals_only=eigvals_only,
                                      select="avi"[select], select_range=select_range,
                                      check_finite=False), a_band)
    return _r.eigh(_triangle(a_band, lower), lower=lower, eigvals_only=eigvals_only,
                   **_subset(select, select_range))  # (a stack: one refinement)


@register("linalg.eigh_tridiagonal", "neuron")
def eigh_tridiagonal(d, e, eigvals_only=False, select=0, select_range=None, tol=0.0,
                     lapack_driver="auto"):
    if _plain(d, e):
        return kind_kernel("linalg.eigh_tridiagonal", "xla")(
            d, e, eigvals_only=eigvals_only, select=select, select_range=select_range,
            tol=tol, lapack_driver=lapack_driver)
    if d.shape[-1] > _MAX_N and d.ndim > 1:
        raise PerMatrix  # (each matrix to the host as its single call)
    if d.shape[-1] > _MAX_N:
        return _r._on_host("scipy.linalg.eigh_tridiagonal", _TOO_BIG,
                           lambda x, y: _k._sl.eigh_tridiagonal(
                               x, y, eigvals_only=eigvals_only, select="avi"[select],
                               select_range=select_range, check_finite=False, tol=tol,
                               lapack_driver=lapack_driver), d, e)
    # the upper band [[0, e], [d]]: concatenation only, the parts exact (a stack: e and d
    # broadcast to one batch, one refinement)
    batch = torch.broadcast_shapes(d.shape[:-1], e.shape[:-1])
    d, e = d.expand(batch + d.shape[-1:]), e.expand(batch + e.shape[-1:])
    band = torch.stack([torch.cat([torch.zeros_like(e[..., :1]), e], -1), d], -2)
    a = band_to_dense(band, 0, 1)
    return _r.eigh(a, lower=False, eigvals_only=eigvals_only,
                   **_subset(select, select_range))
