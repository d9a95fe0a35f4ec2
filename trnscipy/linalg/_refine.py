"""float64 dense linear algebra on a Neuron device: float32 factorizations plus
double-float refinement (the 'neuron' registrations of the linalg kernels).

A float64 matrix there is held exactly as double-float pairs
(``trnscipy._transfer.df_parts``); all arithmetic is float32 (``trnscipy._kernels._df``).

- ``solve``: the float32 approximate solver (Cholesky for ``assume_a='pos'``,
  triangular solves for triangular kinds, else the float32 inverse: no LU lowers on
  XLA; a device LU drops in as ``_approx_solver``) and LAPACK DSGESV/DSPOSV-style
  refinement: r = b - A x in double-float, x += S(r), until the correction is below
  2**-48 of x or stops shrinking below 2**-36 of x (at most 30 steps; a LinAlgWarning
  if that is not reached).
- ``cholesky``: the float32 factor refined to double-float by two Newton steps,
  L += L0 Phi(L0^-1 (A - L L^T) L0^-T) (Phi: the lower triangle, half diagonal),
  A - L L^T by Ozaki GEMMs.
- ``cho_solve``: refinement with the double-float factor's products.
- ``eigh``: float32 eigh plus Ogita-Aishima refinement (matrix products only, Ozaki
  GEMMs): eigenvalues and vectors to double-float accuracy for well-separated
  eigenvalues; clustered eigenvalues keep double-float eigenvalues, their vectors
  span the cluster's subspace.
"""

import warnings

from trnscipy import _transfer
from trnscipy._kernels import _df, kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels as _k

_MAX_STEPS = 30
_EPS_DF = 2.0 ** -48
_NOISE = 2.0 ** -36
_EIGH_STEPS = 6


def _parts(t):
    if t.dtype == torch.float32:
        return t, torch.zeros_like(t)
    return _transfer.df_parts(t)


def _df64(*tensors):
    return any(t.dtype == torch.float64 for t in tensors)


def _sym(p, lower):
    """Both parts symmetrized from one triangle (exact: the triangles do not overlap)."""
    return _k.hermitian(p[0], lower), _k.hermitian(p[1], lower)


def _t(p):
    return p[0].mT, p[1].mT


def _fetch(t):
    return kernel("linalg._fetch", t.device)(t)


@register("linalg._all_finite", "neuron")
def _all_finite(*tensors):
    """Finite iff the float32 high part is (float64 tensors through their parts)."""
    return _k._all_finite(*(_parts(t)[0] if t.dtype == torch.float64 else t
                            for t in tensors))


def _refine(product, b, approx):
    """x with A x = b to double-float accuracy: ``product(x)`` = A x on pairs, b a 2-D
    pair, ``approx`` a float32 approximate solver.  Returns the pair x."""
    x = (approx(b[0]), torch.zeros_like(b[0]))
    prev = float("inf")
    for _ in range(_MAX_STEPS):
        r = _df.sub(b, product(x))
        d = approx(r[0])
        x = _df.add_f(x, d)
        # max(), not amax(): torch-xla 2.9's amax() with no dim does not reduce
        dn, xn = _fetch(torch.stack([d.abs().max(), x[0].abs().max()]))
        # converged: the correction is at double-float rounding level, or it stopped
        # shrinking near it (the residual is then rounding noise)
        if dn <= _EPS_DF * xn or (dn > 0.5 * prev and dn <= _NOISE * xn):
            return x
        if dn != dn or xn != xn:  # NaN
            break
        prev = dn
    warnings.warn("double-float refinement did not converge: the result may have only "
                  "float32 accuracy (ill-conditioned matrix)", _k._sl.LinAlgWarning,
                  stacklevel=6)
    return x


def _trsm(a, b, upper, trans=0):
    return kernel("linalg._trsm", a.device)(a, b, upper=upper, trans=trans)


def _cho32(L):
    return lambda r: _trsm(L, _trsm(L, r, upper=False), upper=False, trans=1)


def _approx_solver(a32, kind):
    """A float32 solver for a32 (the refinement's preconditioner)."""
    if kind == "pos":
        return _cho32(_k.potrf(a32, lower=True))
    if kind in ("upper", "lower"):
        _k.solve_triangular(a32, a32[..., :1], lower=kind == "lower")  # singularity check
        return lambda r: _trsm(a32, r, upper=kind == "upper")
    ainv, info = kernel("linalg._inv", a32.device)(a32)
    _k._singular(info, a32)
    return lambda r: ainv @ r


@register("linalg.solve", "neuron")
def solve(a, b, lower=False, assume_a=None, transposed=False):
    if not _df64(a, b) or a.ndim != 2:
        return _k.solve(a, b, lower=lower, assume_a=assume_a, transposed=transposed)
    kind = _k._SOLVE_KINDS[assume_a]
    A, B = _parts(a), _parts(b)
    if transposed:
        A, lower = _t(A), not lower
        kind = {"upper": "lower", "lower": "upper"}.get(kind, kind)
    if kind in ("pos", "sym", "her"):
        A = _sym(A, lower)
    elif kind in ("upper", "lower"):
        A = (A[0].triu(), A[1].triu()) if kind == "upper" else (A[0].tril(), A[1].tril())
    elif kind == "diagonal":
        A = (torch.diag_embed(A[0].diagonal()), torch.diag_embed(A[1].diagonal()))
    elif kind == "tridiagonal":
        A = (A[0].triu(-1).tril(1), A[1].triu(-1).tril(1))
    approx = _approx_solver(A[0], kind if kind in ("pos", "upper", "lower") else "gen")
    return _transfer.df_tensor(*_refine(lambda x: _df.gemv(A, x), B, approx))


@register("linalg.cholesky", "neuron")
def cholesky(a, lower=False):
    if not _df64(a) or a.ndim != 2:
        return _k.cholesky(a, lower=lower)
    A = _sym(_parts(a), lower)
    L0 = _k.potrf(A[0], lower=True)
    L = (L0, torch.zeros_like(L0))
    for _ in range(2):
        R = _df.sub(A, _df.gemm(L, _t(L)))
        F = _trsm(L0, _trsm(L0, R[0], upper=False).mT, upper=False)
        phi = F.tril(-1) + torch.diag_embed(F.diagonal() * 0.5)
        L = _df.add_f(L, L0 @ phi)
    L = (L[0].tril(), L[1].tril())
    return _transfer.df_tensor(*(L if lower else _t(L)))


@register("linalg.cho_solve", "neuron")
def cho_solve(c_and_lower, b):
    c, lower = c_and_lower
    if not _df64(c, b) or c.ndim != 2:
        return _k.cho_solve(c_and_lower, b)
    C = _parts(c)
    L = (C[0].tril(), C[1].tril()) if lower else _t((C[0].triu(), C[1].triu()))
    Lt = _t(L)

    x = _refine(lambda x: _df.gemv(L, _df.gemv(Lt, x)), _parts(b), _cho32(L[0]))
    return _transfer.df_tensor(*x)


@register("linalg.eigh", "neuron")
def eigh(a, b=None, lower=True, eigvals_only=False, type=1, subset_by_index=None,
         subset_by_value=None, driver=None):
    if not _df64(a) or a.ndim != 2 or b is not None:
        return _k.eigh(a, b, lower=lower, eigvals_only=eigvals_only, type=type,
                       subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                       driver=driver)
    A = _sym(_parts(a), lower)
    with _k.linalg_errors():
        _, X0 = torch.linalg.eigh(A[0])
    X = (X0, torch.zeros_like(X0))
    n = A[0].shape[-1]
    eye = torch.eye(n, dtype=X0.dtype, device=X0.device)
    materialize = kernel("materialize", X0.device)
    # quadratic convergence once the error is small against the eigenvalue gaps: float32
    # vectors (1e-7 / gap) take 2 steps for well separated eigenvalues, more for close
    # ones (2 left n = 256 at 4e-9: measured); stop when the correction is at 2**-44
    for _ in range(_EIGH_STEPS):
        w, X, size = _ogita_aishima(A, X, eye)
        materialize([*w, *X, size])
        if not float(size) > 2.0 ** -44:  # (NaN stops too)
            break
    w, _ = _ogita_aishima(A, X, eye, vectors=False)
    lo, hi = 0, n
    if subset_by_index is not None:
        lo, hi = int(subset_by_index[0]), int(subset_by_index[1]) + 1
    elif subset_by_value is not None:
        vlo, vhi = subset_by_value
        counts = _fetch(torch.stack([(w[0] <= vlo).sum(), (w[0] <= vhi).sum()]))
        lo, hi = int(counts[0]), int(counts[1])
    w = _transfer.df_tensor(w[0][lo:hi].clone(), w[1][lo:hi].clone())
    if eigvals_only:
        return w
    return w, _transfer.df_tensor(X[0][:, lo:hi].clone(), X[1][:, lo:hi].clone())


def _ogita_aishima(A, X, eye, vectors=True):
    """One step of Ogita & Aishima's refinement (2018): (eigenvalues, refined X), pairs."""
    R = _df.sub((eye, torch.zeros_like(eye)), _df.gemm(_t(X), X))
    S = _df.gemm(_t(X), _df.gemm(A, X))
    r, s = (R[0].diagonal(), R[1].diagonal()), (S[0].diagonal(), S[1].diagonal())
    lam = _df.div(s, _df.sub((torch.ones_like(r[0]), torch.zeros_like(r[0])), r))
    if not vectors:
        return lam, X
    lh = lam[0]
    anorm = torch.linalg.matrix_norm(A[0])
    delta = 2 * (torch.linalg.matrix_norm(S[0] - torch.diag_embed(lh))
                 + anorm * torch.linalg.matrix_norm(R[0]))
    gap = lh[None, :] - lh[:, None]
    far = gap.abs() > delta
    safe = torch.where(far, gap, torch.ones_like(gap))
    E = torch.where(far, (S[0] + lh[None, :] * R[0]) / safe, R[0] * 0.5)
    return lam, _df.add(X, _df.gemm(X, (E, torch.zeros_like(E)))), E.abs().max()

