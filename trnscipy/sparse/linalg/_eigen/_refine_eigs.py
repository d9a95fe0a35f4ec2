"""float64 eigs on a Neuron device: the float32 Krylov-Schur iteration finds the wanted
invariant subspace, double-float Newton steps on that subspace refine it.

A real matrix's wanted eigenvalues span a real invariant subspace (a complex pair by the
real and imaginary parts of its vector), so every step is real arithmetic:

1. the basis S (n x m double-float pairs; at first the float32 Ritz vectors' parts, one
   column per real eigenvalue, two per complex pair) and A S in double-float; G = S^T S
   and H = S^T A S (Ozaki GEMMs) read to the host as float64, with the previous step's
   residual norms;
2. on the host: G = L L^T, W = L^-T, C = W^T H W (the projection on the orthonormal basis
   U = S W, m x m); on the device U = S W, A U = (A S) W and R = A U - U C in
   double-float;
3. converged when ||R||_F <= max(tol min |lambda|, 2**-44 ||A||_F) (ARPACK's test for
   every Ritz pair x = U y: ||A x - lambda x|| <= ||R||), or when ||R|| stops shrinking;
4. otherwise the Newton correction of the invariant subspace: D with U^T D = 0 and
   P (A D - D C) = -R (P = I - U U^T), a Sylvester equation solved by float32 GMRES on its
   n m unknowns (the Arnoldi steps one device loop, the small least-squares problem on
   the host), and S = U + D.  Each step shrinks the residual by about GMRES's relative
   residual (``_INNER_RTOL``) or quadratically.

Then the Ritz pairs of C (LAPACK on the host, m x m, as ARPACK's dneupd), the k wanted
ones x = U y in double-float, the complex results assembled from their parts by data
movement (``df_complex``).  sigma, M, Minv, OPinv, OPpart and operators given by functions
run SciPy on the host, announced.
"""

import warnings

import numpy as np
import scipy.linalg as _sl
import scipy.sparse.linalg as _scipy

from trnscipy import _transfer
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import (
    _FLOOR,
    _STALL,
    _WRONG,
    _frobenius,
    _host_f64,
    _is_matrix,
    _on_host,
    _operator,
    _parts,
    _seed,
    _t,
)
from trnscipy.sparse.linalg._eigen.arpack._krylov_schur import wanted_order
from trnscipy.sparse.linalg._interface import MatrixLinearOperator

__all__ = ["eigs"]

_MAX_STEPS = 12
_INNER_RTOL = 1e-3
_INNER_STEPS = 40  # Arnoldi steps of a GMRES cycle
_INNER_CYCLES = 4


def eigs(device_func, p):
    A, k, which = p["A"], int(p["k"]), p["which"]
    n = A.shape[0]
    if any(p[name] is not None for name in ("sigma", "M", "Minv", "OPinv", "OPpart")):
        return _on_host(_scipy.eigs, p, "shift-invert and generalized eigs (sigma, M, Minv, "
                        "OPinv, OPpart) have no double-float method")
    if not 0 < k < n - 1 or which not in ("LM", "SM", "LR", "SR", "LI", "SI"):
        return device_func(**p)  # the dense route (double-float eig) or SciPy's errors
    if type(A) is MatrixLinearOperator:  # aslinearoperator of a device matrix
        A = A.A
    if not _is_matrix(A):
        return _on_host(_scipy.eigs, p, "an operator given by functions has no double-float "
                        "product")
    op, product = _operator(A)
    device = op.float32.device
    v0 = p["v0"]
    if v0 is not None:
        v0 = v0 if isinstance(v0, torch.Tensor) else _transfer.tensor_on(
            np.asarray(v0, dtype=np.float64), device)
        v0 = _parts(v0.reshape(-1))[0]
    kw = {name: p[name] for name in ("ncv", "maxiter", "rng")}
    try:
        theta, (Xr, Xi) = _seed(device_func, p["tol"], op.float32, k=k, which=which, v0=v0,
                                basis=True, **kw)
    except _scipy.ArpackNoConvergence:
        return _on_host(_scipy.eigs, p, "the float32 solve that seeds the double-float "
                        "refinement did not converge")
    S32 = _real_basis(theta, Xr, Xi)
    A32 = op.float32
    try:
        lam, U, C = _refine(product, lambda w: A32 @ w, _frobenius(A32), S32,
                            float(p["tol"]))
    except _Stalled as stalled:
        return _on_host(_scipy.eigs, p, str(stalled))
    w, Y = np.linalg.eig(C)
    order = wanted_order(w, which, True)[:k]
    values = _df_complex_host(w[order], device)
    if not p["return_eigenvectors"]:
        return values
    Y = Y[:, order]
    xr, xi = (_df.gemm(U, _df.from_host(np.ascontiguousarray(part), device))
              for part in (Y.real, Y.imag))
    vectors = _transfer.df_complex(xr, xi)
    backend(device).materialize([values, vectors])
    return values, vectors


class _Stalled(Exception):
    """The refinement stalled far above float64 accuracy."""


def _df_complex_host(z, device):
    """A host complex128 array as a complex128 device tensor (parts exact, assembled by
    data movement)."""
    return _transfer.df_complex(_df.from_host(np.ascontiguousarray(z.real), device),
                                _df.from_host(np.ascontiguousarray(z.imag), device))


def _real_basis(theta, Xr, Xi):
    """float32 columns spanning the real invariant subspace of the Ritz values ``theta``:
    Re x for a real one, Re x and Im x once per complex pair (a lone member of a pair the
    k wanted split brings its partner)."""
    k = len(theta)
    cols = []
    for i, t in enumerate(theta):
        if t.imag == 0:
            cols.append(i)
        elif not any(theta[j].imag != 0 and np.isclose(theta[j], np.conj(t), rtol=1e-5)
                     for j in range(i)):
            cols += [i, k + i]
    index = torch.as_tensor(np.asarray(cols, dtype=np.int64)).to(Xr.device)
    return torch.cat([Xr, Xi], dim=1).index_select(1, index)


def _refine(product, matvec32, anorm, S32, tol):
    """(the Ritz values' host array, U, C): an orthonormal double-float basis U of the
    invariant subspace near span(S32) with A U = U C to double-float accuracy (see the
    module's docstring)."""
    device = S32.device
    S = (S32, torch.zeros_like(S32))
    best = np.inf
    norms = None
    res = target = np.inf
    U = C = None
    for step in range(_MAX_STEPS + 1):
        AS = product(S)
        more = anorm.reshape(1, 1) if norms is None else norms.reshape(1, -1)
        G, H, rest = _host_f64(_df.gemm(_t(S), S), _df.gemm(_t(S), AS),
                               (more, torch.zeros_like(more)))
        if U is None:
            anorm_h = float(rest[0, 0])
            floor = _FLOOR * anorm_h
        else:
            res = float(np.sqrt(np.sum(rest ** 2)))
            lam = np.linalg.eigvals(C)
            target = max(tol * float(np.min(np.abs(lam))), floor)
            if res <= target or res > _STALL * best or step == _MAX_STEPS:
                break
            best = res
        L = _sl.cholesky((G + G.T) / 2, lower=True)
        W = _sl.solve_triangular(L, np.eye(L.shape[0]), lower=True).T
        C = W.T @ H @ W
        Wp = _df.from_host(np.ascontiguousarray(W), device)
        U, AU = _df.gemm(S, Wp), _df.gemm(AS, Wp)
        R = _df.sub(AU, _df.gemm(U, _df.from_host(np.ascontiguousarray(C), device)))
        norms = torch.linalg.vector_norm(R[0], dim=0)
        D = _sylvester(matvec32, U[0], C, R[0])
        S = _df.add_f(U, D)
    if res > target and res > _WRONG * anorm_h:
        raise _Stalled(f"the double-float refinement stalled at residual {res:.1e} "
                       f"(||A||_F {anorm_h:.1e}), far above float64's level")
    if res > target:  # never silently less accurate than asked
        warnings.warn(f"double-float eigs refinement stopped at residual {res:.1e} above its "
                      f"target {target:.1e}: the eigenpairs may be less accurate than "
                      "float64", _sl.LinAlgWarning, stacklevel=5)
    return lam, U, C


def _sylvester(matvec32, Q, C, R):
    """D (n x m float32) with Q^T D = 0 and P (A D - D C) = -R, P = I - Q Q^T, by restarted
    float32 GMRES on the n m unknowns: each cycle's Arnoldi steps one device loop (Q and C
    in its carry), its least-squares problem on the host (``_INNER_STEPS`` + 1 rows)."""
    n, m = R.shape
    device = R.device
    size = n * m
    steps = min(_INNER_STEPS, size - 1)
    C32 = torch.as_tensor(np.ascontiguousarray(C, dtype=np.float32)).to(device)
    tiny = torch.finfo(torch.float32).tiny

    def project(X, Q):
        return X - Q @ (Q.mT @ X)

    def apply(x, Q, C):
        X = project(x.reshape(n, m), Q)
        return project(matvec32(X) - X @ C, Q).reshape(-1)

    def step(state, j):
        V, H, Q, C = state
        rows = torch.arange(steps + 1, device=device)
        w = apply(V.index_select(0, j.reshape(1))[0], Q, C)
        upto = (rows <= j).to(w.dtype)
        h1 = (V @ w) * upto
        w = w - h1 @ V
        h2 = (V @ w) * upto
        w = w - h2 @ V
        beta = torch.linalg.vector_norm(w)
        live = beta > tiny
        V = torch.where((rows == j + 1)[:, None] & live,
                        (w / torch.where(live, beta, torch.ones_like(beta)))[None, :], V)
        column = h1 + h2 + (rows == j + 1).to(w.dtype) * beta
        H = torch.where(rows[None, :steps] == j, column[:, None], H)
        return V, H, Q, C

    loop = backend(device).device_loop
    x = torch.zeros(size, dtype=torch.float32, device=device)
    b = -R.reshape(-1)
    r = b
    bnorm = None
    for _ in range(_INNER_CYCLES):
        rnorm = torch.linalg.vector_norm(r)
        V = torch.zeros((steps + 1, size), dtype=torch.float32, device=device)
        V[0] = r / torch.clamp(rnorm, min=tiny)
        H = torch.zeros((steps + 1, steps), dtype=torch.float32, device=device)
        V, H, _, _ = loop(step, (V, H, Q, C32), 0, steps)
        (Hh, beta), = [_host_small(torch.cat([H.reshape(-1), rnorm.reshape(1)]),
                                   H.shape)]
        if bnorm is None:
            bnorm = beta
        e1 = np.zeros(steps + 1)
        e1[0] = beta
        y, *_ = np.linalg.lstsq(Hh, e1, rcond=None)
        x = x + V[:steps].mT @ torch.as_tensor(y.astype(np.float32)).to(device)
        if np.linalg.norm(e1 - Hh @ y) <= _INNER_RTOL * bnorm:
            break
        r = b - apply(x, Q, C32)
    return project(x.reshape(n, m), Q)


def _host_small(flat, shape):
    """(the matrix of ``shape`` at the head of ``flat``, its last number) on the host."""
    from trnscipy.sparse.linalg._eigen._common import read_small

    h = read_small(flat)
    return h[:-1].reshape(shape), float(h[-1])
