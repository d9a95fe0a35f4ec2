"""Value judges for functions with a natural backward error or non-unique outputs.

Each judge is ``judge(case, expected, actual)`` (actual already on the host) and returns
None or a reason.  Bounds are DESIGN.md's, with the unit roundoff of the case's dtype:
    solve:     ||b - A x|| <= C n eps (||A|| ||x|| + ||b||)
    cholesky:  ||L L^H - A|| <= 30 n eps ||A||
    eigh:      residual, orthogonality and eigenvalue error <= 60 n eps ||A||
float64 results are also compared with SciPy's, with a tolerance scaled by the
condition number of A (the forward error of a backward-stable method).
"""

import numpy as np
import scipy.sparse as sp

from conformance.compare import RTOL, values_diff

__all__ = ["solve", "solve_for", "cholesky", "eigh", "eigvalsh", "qr", "svd", "lu", "lu_factor",
           "inverse", "krylov", "least_squares", "cond_rtol", "C_SOLVE", "angles"]

C_SOLVE = 10


def _dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def _eps(case):
    return float(np.finfo(case.dtype).eps)


def _norm(a):
    return float(np.linalg.norm(np.asarray(a, dtype=np.complex128)))


def cond_rtol(a, dtype):
    """Normwise tolerance for comparing two backward-stable results computed from ``a``."""
    a = _dense(a)
    cond = np.linalg.cond(a.astype(np.complex128)) if a.size and a.shape[0] == a.shape[1] \
        else 1.0
    eps = float(np.finfo(dtype).eps)
    return max(RTOL.get(np.dtype(dtype), 1e-10), 10 * a.shape[0] * eps * float(cond))


def _forward(case, expected, actual, a):
    if np.dtype(case.dtype).itemsize // (2 if np.dtype(case.dtype).kind == "c" else 1) < 8:
        return None
    return values_diff(expected, actual, cond_rtol(a, case.dtype))


def _backward(a, x, b, eps, what="solve"):
    a, x, b = (np.asarray(v, dtype=np.complex128) for v in (_dense(a), x, b))
    n = max(a.shape[0], 1)
    res = _norm(b - a @ x)
    bound = C_SOLVE * n * eps * (_norm(a) * _norm(x) + _norm(b))
    if res > bound:
        return f"{what}: backward error ||b - Ax|| = {res:.3g} > {C_SOLVE} n eps " \
               f"(||A|| ||x|| + ||b||) = {bound:.3g}"
    return None


def solve(case, expected, actual):
    """x = solve(A, b): backward error, and forward error against SciPy for float64."""
    a, b = case.args[0], case.args[1]
    return _backward(a, actual, b, _eps(case)) or _forward(case, expected, actual, a)


def solve_for(a):
    """Judge of a solve from a factorization of ``a`` (cho_solve, lu_solve): x = A^-1 b with
    b the case's last argument."""

    def judge(case, expected, actual):
        return _backward(a, actual, case.args[-1], _eps(case)) or _forward(case, expected,
                                                                          actual, a)

    return judge


def _tri(m, lower, what):
    off = np.triu(m, 1) if lower else np.tril(m, -1)
    if np.any(off != 0):
        return f"{what} factor is not {'lower' if lower else 'upper'} triangular"
    return None


def cholesky(case, expected, actual):
    """cholesky(A, lower=...): triangularity and ||L L^H - A|| <= 30 n eps ||A||."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    lower = case.kwargs.get("lower", False)
    c = actual[0] if isinstance(actual, tuple) else actual  # cho_factor: (c, lower)
    if isinstance(actual, tuple):
        if bool(actual[1]) != bool(expected[1]):
            return f"lower flag {actual[1]}, expected {expected[1]}"
        lower = bool(actual[1])
        c = np.tril(c) if lower else np.triu(c)
    else:
        reason = _tri(c, lower, "Cholesky")
        if reason:
            return reason
    c = np.asarray(c, dtype=np.complex128)
    rec = c @ c.conj().T if lower else c.conj().T @ c
    n = max(a.shape[0], 1)
    err, bound = _norm(rec - a), 30 * n * _eps(case) * _norm(a)
    if err > bound:
        return f"||L L^H - A|| = {err:.3g} > 30 n eps ||A|| = {bound:.3g}"
    exp_c = expected[0] if isinstance(expected, tuple) else expected
    exp_c = (np.tril(exp_c) if lower else np.triu(exp_c)) if isinstance(expected, tuple) \
        else exp_c
    return _forward(case, exp_c, c, a)


def _eig_bound(case, a):
    return 60 * max(a.shape[0], 1) * _eps(case) * max(_norm(a), np.finfo(float).tiny)


def eigvalsh(case, expected, actual):
    """Eigenvalues of a Hermitian matrix: |w - w_scipy| <= 60 n eps ||A||, ascending."""
    a = np.asarray(_dense(case.args[0]), dtype=np.complex128)
    w, we = np.asarray(actual), np.asarray(expected)
    if np.any(np.diff(w) < 0):
        return "eigenvalues not in ascending order"
    err, bound = float(np.max(np.abs(w - we), initial=0.0)), _eig_bound(case, a)
    if err > bound:
        return f"max |w - w_scipy| = {err:.3g} > 60 n eps ||A|| = {bound:.3g}"
    return None


def eigh(case, expected, actual):
    """(w, v) = eigh(A): eigenvalues, residual ||A v - v w|| and ||v^H v - I|| <= 60 n eps."""
    if not isinstance(expected, tuple):
        return eigvalsh(case, expected, actual)
    reason = eigvalsh(case, expected[0], actual[0])
    if reason:
        return reason
    a = np.asarray(_dense(case.args[0]), dtype=np.complex128)
    w, v = np.asarray(actual[0]), np.asarray(actual[1], dtype=np.complex128)
    bound = _eig_bound(case, a)
    res = _norm(a @ v - v * w)
    if res > bound:
        return f"eigh residual ||A v - v w|| = {res:.3g} > 60 n eps ||A|| = {bound:.3g}"
    n = max(a.shape[0], 1)
    orth, obound = _norm(v.conj().T @ v - np.eye(v.shape[1])), 60 * n * _eps(case)
    if orth > obound:
        return f"eigh orthogonality ||V^H V - I|| = {orth:.3g} > 60 n eps = {obound:.3g}"
    return None


def _orth(q, case, what):
    q = np.asarray(q, dtype=np.complex128)
    err = _norm(q.conj().T @ q - np.eye(q.shape[1]))
    bound = 60 * max(q.shape[0], 1) * _eps(case)
    return f"{what} not orthonormal: {err:.3g} > {bound:.3g}" if err > bound else None


def _recon(case, rec, a, what):
    err = _norm(rec - a)
    bound = 30 * max(a.shape[0], a.shape[1], 1) * _eps(case) * max(_norm(a), 1e-300)
    return f"{what}: ||reconstruction - A|| = {err:.3g} > {bound:.3g}" if err > bound else None


def qr(case, expected, actual):
    """QR (any mode but 'raw'): R upper triangular, Q orthonormal, Q R = A; mode 'r': |R|
    equal to SciPy's (R is unique up to row signs)."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    mode = case.kwargs.get("mode", "full")
    if mode == "r":
        r, re = np.asarray(actual[0]), np.asarray(expected[0])
        return _tri(r, False, "R") or values_diff(np.abs(re), np.abs(r),
                                                  cond_rtol(case.args[0], case.dtype))
    q, r = actual[0], actual[1]
    return (_tri(r, False, "R") or _orth(q, case, "Q")
            or _recon(case, np.asarray(q, dtype=np.complex128) @ r, a, "Q R"))


def svd(case, expected, actual):
    """svd: singular values as SciPy's, U diag(s) Vh = A, U and Vh^H orthonormal."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    # singular values: 60 n eps relative to ||A||, and never tighter than the dtype's rtol
    rtol = max(60 * max(a.shape) * _eps(case), RTOL.get(np.dtype(case.dtype), 0.0))
    if not isinstance(expected, tuple):
        return values_diff(expected, actual, rtol)
    u, s, vh = (np.asarray(x) for x in actual)
    reason = values_diff(expected[1], s, rtol)
    if reason:
        return reason
    k = s.shape[0]
    return (_orth(u[:, :k], case, "U") or _orth(vh[:k].conj().T, case, "Vh^H")
            or _recon(case, (u[:, :k] * s) @ vh[:k], a, "U S Vh"))


def lu(case, expected, actual):
    """lu(A): P L U = A (30 n eps), L unit lower, U upper; float64 pivots as SciPy's."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    if case.kwargs.get("permute_l"):
        pl, u = actual
        return _tri(u, False, "U") or _recon(case, np.asarray(pl) @ u, a, "PL U")
    p, l, u = actual
    reason = _tri(l, True, "L") or _tri(u, False, "U")
    if reason:
        return reason
    if not np.allclose(np.diag(l), 1):
        return "L does not have a unit diagonal"
    pm = p if np.asarray(p).ndim == 2 else np.eye(a.shape[0])[:, p]
    reason = _recon(case, np.asarray(pm) @ l @ u, a, "P L U")
    if reason or np.dtype(case.dtype).itemsize < 8:
        return reason
    return None if np.array_equal(p, expected[0]) else "pivots differ from SciPy's (float64)"


def lu_factor(case, expected, actual):
    """(lu, piv) = lu_factor(A): P L U = A within 30 n eps ||A||; float64 pivots as SciPy's."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    lu_, piv = np.asarray(actual[0]), np.asarray(actual[1])
    n = a.shape[0]
    perm = np.arange(n)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    l = np.tril(lu_, -1) + np.eye(n)
    reason = _recon(case, (l @ np.triu(lu_)), a[perm], "L U = P^T A")
    if reason or np.dtype(case.dtype).itemsize < 8:
        return reason
    return None if np.array_equal(piv, expected[1]) else "pivots differ from SciPy's (float64)"


def inverse(case, expected, actual):
    """inv(A): ||A X - I|| <= C n eps ||A|| ||X||, and the float64 forward error."""
    a = np.asarray(case.args[0], dtype=np.complex128)
    x = np.asarray(actual, dtype=np.complex128)
    n = max(a.shape[0], 1)
    err = _norm(a @ x - np.eye(a.shape[0]))
    bound = C_SOLVE * n * _eps(case) * _norm(a) * _norm(x)
    if err > bound:
        return f"||A X - I|| = {err:.3g} > {C_SOLVE} n eps ||A|| ||X|| = {bound:.3g}"
    return _forward(case, expected, actual, a)


def krylov(case, expected, actual):
    """(x, info) of an iterative solver.

    At a small fixed maxiter the iterate must equal SciPy's to rounding (same algorithm);
    at the default maxiter, ``info`` must match and x satisfy SciPy's stopping test
    ||b - A x|| <= max(atol, rtol ||b||), or, in float32, the float32 floor
    C n eps (||A|| ||x|| + ||b||).
    """
    x, info = actual[0], actual[1]
    if int(info) != int(expected[1]):
        return f"info {int(info)}, expected {int(expected[1])}"
    if "maxiter" in case.kwargs:
        single = np.dtype(case.dtype).itemsize // (2 if np.dtype(case.dtype).kind == "c"
                                                   else 1) < 8
        return values_diff(expected[0], x, 1e-3 if single else 1e-8, "iterate")
    a, b = _dense(case.args[0]), np.asarray(case.args[1])
    res = _norm(b - a.astype(np.complex128) @ np.asarray(x, dtype=np.complex128))
    rtol, atol = case.kwargs.get("rtol", 1e-5), case.kwargs.get("atol", 0.0)
    target = max(atol, rtol * _norm(b)) * 1.01
    floor = C_SOLVE * a.shape[0] * _eps(case) * (_norm(a) * _norm(x) + _norm(b))
    if res > max(target, floor):
        return f"residual ||b - Ax|| = {res:.3g} > max(atol, rtol ||b||) = {target:.3g}"
    return None


def least_squares(case, expected, actual):
    """lsqr/lsmr run to tight atol/btol: x as SciPy's within the case's rtol, the same
    ``istop``.  ``itn`` and the norm estimates are not compared: a float64 solve on Neuron
    counts its float32 iterations and refinement steps, and estimates from them."""
    if int(actual[1]) != int(expected[1]):
        return f"istop {int(actual[1])}, expected {int(expected[1])}"
    return values_diff(expected[0], actual[0], case.rtol, "x")


def angles(case, expected, actual):
    """subspace_angles: SciPy takes the arccos of a cosine near 1 for some angles, whose
    value is then known only to sqrt(2 eps) (an angle of 0 comes out as about 1.5e-8 in
    float64); compare at 4 sqrt(eps) absolute, plus the dtype's relative tolerance."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return f"result: shape {actual.shape}, expected {expected.shape}"
    atol = 4 * np.sqrt(_eps(case))
    rtol = RTOL.get(np.dtype(case.dtype), 1e-10)
    err = np.abs(actual - expected)
    if np.any(err > atol + rtol * np.abs(expected)):
        return f"result: max |trn - scipy| = {err.max():.3g} > {atol:.2g} + {rtol:g} |scipy|"
    return None
