"""svd and svdvals on device tensors (``lapack_driver`` checked, used on the CPU only)."""

import scipy.linalg as _sl

from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch
from trnscipy._kernels import _df, kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import df_tensor, tensor_on
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._kernels import _on_views
from trnscipy.linalg._refine_funcs import arcsin_arccos
from trnscipy.linalg._validate import as_matrix, device_of, empty

__all__ = ["svd", "svdvals", "orth", "null_space", "diagsvd", "subspace_angles"]


def _eye(n, a):
    return torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape[:-2] + (n, n)).clone()


@dispatch(_sl.svd, stacks=True, double_float=("neuron",))
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    if not isinstance(lapack_driver, str):
        raise TypeError("lapack_driver must be a string")
    if lapack_driver not in ("gesdd", "gesvd"):
        raise ValueError(f'lapack_driver must be "gesdd" or "gesvd", not "{lapack_driver}"')
    a = as_matrix(a, device_of(a), check_finite)
    m, n = a.shape[-2:]
    if a.numel() == 0:
        s = empty(a.shape[:-2] + (0,), a, a.real.dtype if a.is_complex() else a.dtype)
        if not compute_uv:
            return s
        if full_matrices:
            return _eye(m, a), s, _eye(n, a)
        return empty(a.shape[:-2] + (m, 0), a), s, empty(a.shape[:-2] + (0, n), a)
    return kernel("linalg.svd", a.device)(a, full_matrices=full_matrices,
                                           compute_uv=compute_uv, lapack_driver=lapack_driver)


@dispatch(_sl.svdvals, stacks=True, double_float=("neuron",))
def svdvals(a, overwrite_a=False, check_finite=True):
    return svd(a, compute_uv=False, check_finite=check_finite)


@dispatch(_sl.orth, stacks=True, double_float=("neuron",))
def orth(A, rcond=None):
    """Through trnscipy's svd (one host read for the rank)."""
    from trnscipy.linalg._kernels_struct import rank_of

    a = as_matrix(A, device_of(A), True, name="A")
    u, s, _ = svd(a, full_matrices=False, check_finite=False)
    return u[..., :rank_of(s, rcond, *a.shape[-2:])].clone()


@dispatch(_sl.null_space, stacks=True, double_float=("neuron",))
def null_space(A, rcond=None, *, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """Through trnscipy's svd (one host read for the rank)."""
    from trnscipy.linalg._kernels_struct import rank_of

    a = as_matrix(A, device_of(A), check_finite, name="A")
    u, s, vh = svd(a, full_matrices=True, check_finite=False, lapack_driver=lapack_driver)
    return vh[..., rank_of(s, rcond, *a.shape[-2:]):, :].mH.clone()


@dispatch(_sl.diagsvd, composite=True, stacks=True)
def diagsvd(s, M, N):
    """Data movement: s on the diagonal of an M x N zero matrix (each vector of a stack,
    the dispatcher's broadcast batch)."""
    if getattr(s, "ndim", 0) < 2:
        s = as_matrix(s.reshape(1, -1) if hasattr(s, "reshape") else [s], device_of(s),
                      False)[0]
    else:
        s = as_matrix(s, device_of(s), False)
    k = s.shape[-1]
    if k not in (M, N):
        raise ValueError("Length of s must be M or N.")
    out = torch.zeros(s.shape[:-1] + (M, N), dtype=s.dtype, device=s.device)
    idx = torch.arange(k, device=s.device)
    out[..., idx, idx] = s
    return out


@dispatch(_sl.subspace_angles, stacks=True, double_float=("neuron",))
def subspace_angles(A, B):
    """SciPy's algorithm (Knyazev & Argentati) through trnscipy's orth and svdvals (CPU
    tensors: SciPy on views, so that angles at rounding level equal SciPy's)."""
    device = device_of(A, B)
    return kernel("linalg.subspace_angles", device)(as_matrix(A, device, True, name="A"),
                                                    as_matrix(B, device, True, name="B"))


register("linalg.subspace_angles", "cpu")(_on_views(_sl.subspace_angles, finite_kw=False))


def _orth_both(a, b):
    """SciPy's checks and orth(A), orth(B) in its order (stacks: the dispatcher's broadcast
    batch; matrices of different ranks raise PerMatrix in orth)."""
    if a.ndim < 2:
        raise ValueError(f"expected 2D array, got shape {tuple(a.shape)}")
    qa = orth(a)
    if b.ndim < 2:
        raise ValueError(f"expected 2D array, got shape {tuple(b.shape)}")
    if b.shape[-2] != qa.shape[-2]:
        raise ValueError("A and B must have the same number of rows, got "
                         f"{qa.shape[-2]} and {b.shape[-2]}")
    return qa, orth(b)


@register("linalg.subspace_angles", "generic")
def _subspace_angles(a, b):
    qa, qb = _orth_both(a, b)
    dtype = torch.promote_types(qa.dtype, qb.dtype)
    qa, qb = qa.to(dtype), qb.to(dtype)
    qaqb = qa.mH @ qb
    sigma = svdvals(qaqb, check_finite=False)
    rest = qb - qa @ qaqb if qa.shape[-1] >= qb.shape[-1] else qa - qb @ qaqb.mH
    mask = sigma ** 2 >= 0.5
    mu = torch.arcsin(torch.clamp(svdvals(rest, check_finite=False), -1.0, 1.0)) \
        if bool(mask.any()) else torch.zeros_like(sigma)
    return torch.where(mask, mu, torch.arccos(torch.clamp(sigma.flip(-1), -1.0, 1.0)))


@register("linalg.subspace_angles", "neuron")
def _subspace_angles_df(a, b):
    """float64: SciPy's algorithm with the double-float orth and the singular values of
    its two matrices from one double-float eigh (``_refine.eigh``, which takes repeated
    eigenvalues: intersecting subspaces, the rule in dimensions k + l > m): with N = QA^T
    QB (or its transpose: p x q, p >= q) and N^T N = W diag(cos^2) W^T, the cosines are
    the column norms of N W and the sines those of R W (R = QB - QA N, or QA - QB N^T:
    R^T R = I - N^T N), all in double-float; arcsin/arccos by Newton steps in double-float
    (``_refine_funcs.arcsin_arccos``)."""
    if not _r._df64(a, b) or a.is_complex() or b.is_complex() or not a.numel() * b.numel():
        return _subspace_angles(a, b)
    if a.ndim > 2 or b.ndim > 2:
        raise PerMatrix  # (the double-float method is written for one pair)
    a, b = (tensor_on(t, t.device, torch.float64) for t in (a, b))  # exact
    qa, qb = _orth_both(a, b)
    QA, QB = _r._parts(qa), _r._parts(qb)
    N = _df.gemm(_r._t(QA), QB)
    if QA[0].shape[1] >= QB[0].shape[1]:
        R = _df.sub(QB, _df.gemm(QA, N))
    else:
        N = _r._t(N)
        R = _df.sub(QA, _df.gemm(QB, N))
    _, w = _r.eigh(df_tensor(*_df.gemm(_r._t(N), N)))  # cos^2 ascending
    W = _r._parts(w)

    def norms(X):
        return tuple(p.flip(-1) for p in _df.norm(_df.gemm(X, W), dim=0))

    sigma = norms(N)  # descending, as SciPy's svdvals
    sines = tuple(p.flip(-1) for p in norms(R))  # descending: ascending cosines' order
    mask = _df.add_f(_df.mul(sigma, sigma), -0.5)[0] >= 0  # SciPy's sigma**2 >= 0.5
    mu = arcsin_arccos(sines, True)
    nu = arcsin_arccos(tuple(p.flip(-1) for p in sigma), False)
    return df_tensor(*(torch.where(mask, p, q) for p, q in zip(mu, nu, strict=True)))
