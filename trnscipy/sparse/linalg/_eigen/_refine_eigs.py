"""float64 eigs on a Neuron device: Krylov-Schur with its basis and projection in
double-float, started from the float32 solve's wanted Ritz vectors.

The device has no float64 or complex arithmetic; a float64 matrix there is held exactly
as double-float pairs.  First the float32 Krylov-Schur iteration (``_krylov_schur``, as on
XLA, on the float32 copy of A) finds the wanted Ritz vectors; their real and imaginary
parts summed are the start vector of the second stage, rich in every wanted vector.
The second stage is the same restarted Arnoldi in Krylov-Schur form with every vector in
double-float: each Arnoldi step (a device loop over the steps of a cycle) is the
double-float product A v, classical Gram-Schmidt twice against the basis with
double-float dot products, and the double-float norm; the (ncv + 1) x ncv projection H is
read to the host as float64 once per cycle, and the host solves its eigenproblem and
computes the restart (the rotation to the kept Ritz vectors' real invariant subspace, as
``_krylov_schur``), which the device applies to the basis by an Ozaki GEMM.  A float32
correction scheme cannot replace this stage: the Newton correction of the invariant
subspace (a Sylvester equation) by float32 GMRES stalls where the remaining spectrum
surrounds the wanted eigenvalues (a random matrix's disk), and a subspace expanded by
blocks of float32 Krylov vectors converged several times slower than the restarted
Arnoldi (its polynomial degree grows by one per block, not per vector).

The convergence test is ARPACK's, ``|h_ncv^T y| <= tol max(eps**(2/3), |theta|)``, at
most down to 2**-46 max |theta| (double-float's rounding), and at most ``_LATE`` restarts
past the coarser floor 2**-44 ||A||_F.  The k wanted Ritz vectors are V y in
double-float, the complex results assembled from their parts by data movement
(``df_complex``).  sigma (float32's too), M, Minv, OPinv, OPpart and operators given by
functions run SciPy on the host, announced; as do solves the float32 stage or this one
cannot finish.
"""


import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _transfer
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import (
    _FLOOR,
    _dtype,
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

# the convergence test's floor: 2**-46 max |theta| (double-float's rounding of the
# projection, 2**-48, with room); _LATE restarts more at most once the wanted bounds
# meet the coarser 2**-44 ||A||_F (``_FLOOR``, eigsh's refinement floor)
_FINE = 2.0 ** -46
_LATE = 5
_STALLED = 50  # restarts without a smaller largest wanted bound: no convergence


def eigs(device_func, p, float64):
    """eigs on Neuron: float64 as the module's docstring says; float32 as on XLA, but
    shift-invert (sigma) on the host, announced (its inner gmres does not reach eps**0.75
    in float32, and its shifted operator of Python functions is a host operator)."""
    A, k, which = p["A"], int(p["k"]), p["which"]
    n = A.shape[0]
    if p["sigma"] is not None:
        return _on_host(_scipy.eigs, p, "shift-invert eigs (sigma) has no Neuron method")
    if any(x is not None and getattr(_dtype(x), "kind", "") == "c" for x in (A, p["M"])):
        # (an operator's dtype: the dispatcher's dtype check sees arrays only)
        return _on_host(_scipy.eigs, p, "complex A has no method without complex arithmetic")
    if not float64:
        return device_func(**p)
    if any(p[name] is not None for name in ("M", "Minv", "OPinv", "OPpart")):
        return _on_host(_scipy.eigs, p, "generalized eigs (M, Minv, OPinv, OPpart) has no "
                        "double-float method")
    if not 0 < k < n - 1 or which not in ("LM", "SM", "LR", "SR", "LI", "SI"):
        return device_func(**p)  # the dense route (double-float eig) or SciPy's errors
    if type(A) is MatrixLinearOperator:  # aslinearoperator of a device matrix
        A = A.A
    if not _is_matrix(A):
        return _on_host(_scipy.eigs, p, "an operator given by functions has no double-float "
                        "product")
    op, _ = _operator(A)
    product = op.product  # (of one vector: the Arnoldi steps')
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
        return _on_host(_scipy.eigs, p, "the double-float Krylov-Schur iteration did not "
                        "converge")
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
    convergence in ``maxiter`` restarts or ``_STALLED`` restarts without progress."""
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
    late = 0  # restarts since the wanted bounds met the coarse floor
    best, since = np.inf, 0
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
        wanted = order[:k]
        # ARPACK's test, at most down to double-float's rounding of the projection
        fine = np.maximum(tol * np.maximum(eps ** (2 / 3), np.abs(th)),
                          _FINE * np.abs(th).max())
        near = bounds[wanted] <= np.maximum(fine, floor)[wanted]
        late += bool(near.all())
        if (bounds[wanted] <= fine[wanted]).all() or late > _LATE:
            Vt = (V[0][:ncv].mT.contiguous(), V[1][:ncv].mT.contiguous())
            return th[wanted], Vt, Y[:, wanted]
        worst = float(bounds[wanted].max())
        best, since = (worst, 0) if worst < best else (best, since + 1)
        if since > _STALLED:
            return None
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
