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


import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _transfer
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import (
    _FLOOR,
    _frobenius,
    _host_f64,
    _is_matrix,
    _on_host,
    _operator,
    _parts,
    _seed,
)
from trnscipy.sparse.linalg._eigen.arpack._krylov_schur import _keep, wanted_order
from trnscipy.sparse.linalg._interface import MatrixLinearOperator

__all__ = ["eigs"]



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
    start = (Xr + Xi).sum(1)  # rich in every wanted vector
    ncv = min(max(2 * k + 1, 20) if p["ncv"] is None else int(p["ncv"]), n)
    maxiter = n * 10 if p["maxiter"] is None else int(p["maxiter"])
    result = _krylov_schur_df(product, _frobenius(op.float32), start, k, ncv, which,
                              maxiter, float(p["tol"]))
    if result is None:
        return _on_host(_scipy.eigs, p, f"the double-float Krylov-Schur iteration did not "
                        f"converge in {maxiter} restarts")
    w, V, Y = result
    values = _df_complex_host(w, device)
    if not p["return_eigenvectors"]:
        return values
    xr, xi = (_df.gemm(V, _df.from_host(np.ascontiguousarray(part), device))
              for part in (Y.real, Y.imag))
    vectors = _transfer.df_complex(xr, xi)
    backend(device).materialize([values, vectors])
    return values, vectors


def _df_complex_host(z, device):
    """A host complex128 array as a complex128 device tensor (parts exact, assembled by
    data movement)."""
    return _transfer.df_complex(_df.from_host(np.ascontiguousarray(z.real), device),
                                _df.from_host(np.ascontiguousarray(z.imag), device))


def _krylov_schur_df(product, anorm, start, k, ncv, which, maxiter, tol):
    """Krylov-Schur (``_krylov_schur``'s restarts) with the basis and projection in
    double-float: (the k wanted Ritz values, host complex, most wanted first; the basis
    V^T as an (n, ncv) pair; their host Ritz vectors Y in it), or None without
    convergence in ``maxiter`` restarts."""
    device = start.device
    n = start.shape[0]
    V = (torch.zeros((ncv + 1, n), dtype=torch.float32, device=device),) * 2
    V = (V[0].clone(), V[1].clone())
    v = (start, torch.zeros_like(start))
    v = _df.div(v, _df.norm(v))
    V[0][0], V[1][0] = v[0], v[1]
    H = (torch.zeros((ncv + 1, ncv), dtype=torch.float32, device=device),) * 2
    H = (H[0].clone(), H[1].clone())
    rows = torch.arange(ncv + 1, device=device)

    def step(state, j):
        """Arnoldi step j (a device integer) in double-float: row j + 1 of V, column j
        of H (classical Gram-Schmidt twice)."""
        V0, V1, H0, H1 = state
        at = j.reshape(1)
        w = product((V0.index_select(0, at)[0], V1.index_select(0, at)[0]))
        upto = (rows <= j).to(torch.float32)
        h = None
        for _ in range(2):
            c = _df.dot((V0, V1), (w[0][None, :], w[1][None, :]))
            c = (c[0] * upto, c[1] * upto)
            w = _df.sub(w, _df.dot((c[0][:, None], c[1][:, None]), (V0, V1), dim=0))
            h = c if h is None else _df.add(h, c)
        beta = _df.norm(w)
        safe = tuple(torch.where(beta[0] > 0, b, torch.ones_like(b) if i == 0 else b)
                     for i, b in enumerate(beta))
        w = _df.div(w, safe)
        nxt = (rows == j + 1)
        V0 = torch.where(nxt[:, None], w[0][None, :], V0)
        V1 = torch.where(nxt[:, None], w[1][None, :], V1)
        col = nxt.to(torch.float32)
        column = (h[0] + col * beta[0], h[1] + col * beta[1])
        at_j = rows[None, :ncv] == j
        H0 = torch.where(at_j, column[0][:, None], H0)
        H1 = torch.where(at_j, column[1][:, None], H1)
        return V0, V1, H0, H1

    loop = backend(device).device_loop
    eps = np.finfo(np.float64).eps
    tol = eps if tol == 0 else tol
    p0 = k + (ncv - k) // 2
    first = True
    floor = None
    begin = 0
    for _ in range(maxiter):
        V0, V1, H0, H1 = loop(step, (*V, *H), begin, ncv)
        V, H = (V0, V1), (H0, H1)
        more = anorm.reshape(1) if first else torch.zeros(1, device=device)
        Hh, extra = _host_f64(H, (more, torch.zeros_like(more)))
        if first:
            floor = _FLOOR * float(extra[0])
            first = False
        th, Y = np.linalg.eig(Hh[:ncv])
        bounds = np.abs(Hh[ncv] @ Y)
        order = wanted_order(th, which, True)
        conv = bounds <= np.maximum(tol * np.maximum(eps ** (2 / 3), np.abs(th)), floor)
        wanted = order[:k]
        if conv[wanted].all():
            Vt = (V[0][:ncv].mT.contiguous(), V[1][:ncv].mT.contiguous())
            return th[wanted], Vt, Y[:, wanted]
        keep = _keep(th, order, p0, True)
        cols = []
        for i in keep:  # real and imaginary parts of the kept Ritz vectors (pairs whole)
            if th[i].imag == 0:
                cols.append(Y[:, i].real)
            elif th[i].imag > 0:
                cols += [Y[:, i].real, Y[:, i].imag]
        Q = np.linalg.qr(np.stack(cols, 1))[0]
        p = Q.shape[1]
        G = np.zeros((ncv + 1, ncv + 1))
        G[:p, :ncv] = Q.T  # the rows of (V^T Q)^T
        G[p, ncv] = 1  # the residual direction
        V = _df.gemm(_df.from_host(G, device), V)
        Hn = np.zeros((ncv + 1, ncv))
        Hn[:p, :p] = Q.T @ Hh[:ncv] @ Q
        Hn[p, :p] = Hh[ncv] @ Q
        H = _df.from_host(Hn, device)
        begin = p
    return None
