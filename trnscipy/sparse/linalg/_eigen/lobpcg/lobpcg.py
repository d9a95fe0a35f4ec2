"""lobpcg on device data: SciPy 1.17's iteration, every block and small matrix on the device.

The blocks X, AX, BX, R, P are dense ``(n, k)`` tensors, so the work is GEMM; the
Rayleigh-Ritz problems (size up to ``3k``) are solved on the device too: Cholesky of
the B-Gram matrix (``linalg._potrf``), its inverse by a triangular solve
(``linalg._trsm``), and the refined ``small_eigh`` of the reduced matrix.

SciPy's control flow needs the residual norms on the host once per iteration (the active
mask, the explicit-Gram switch, the restart test).  Everything an iteration computes is
one graph; its Cholesky/eigh failure flags travel with the next residual norms, so an
iteration costs one graph execution: a failure is acted on one read later (the
iteration is then redone or abandoned exactly as SciPy would have, from the kept
state).  A call costs ``iterations + 2`` executions (setup with the first residuals,
the iterations, the postprocessing).

On CPU tensors the ``eigen`` kernel runs
SciPy's own lobpcg on zero-copy views.  What differs from SciPy elsewhere: the small
generalized eigenproblems are solved as Cholesky + refined eigh rather than LAPACK's
``sygvd``; eigenvalue histories and returned values are device tensors.
"""

import warnings

import numpy as np
import scipy.sparse.linalg as _scipy
from array_api_compat import is_torch_array

from trnscipy import _autograd
from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import dispatch
from trnscipy._kernels import backend, kernel
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._eigen._common import eigen_kernel, operator, real_dtype, small_eigh

__all__ = ["lobpcg"]


def _gram(a, b):
    return a.mH @ b


def _colsq(R):
    return (R.conj() * R).real.sum(0) if R.is_complex() else (R * R).sum(0)


def _linalg(name, device):
    return kernel(f"linalg.{name}", device)


def _chol_inv(G):
    """(inverse of the upper Cholesky factor U of G = U^H U, failure flag), SciPy's
    ``inv(cholesky(G))``; where G is not positive definite the flag is set and the
    inverse is replaced by the identity (no NaN enters later graphs)."""
    L, info = _linalg("_potrf", G.device)(G, False)
    eye = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    fail = (info != 0) | ~torch.isfinite(L).all()
    L = torch.where(fail, eye, L)
    Linv = _linalg("_trsm", G.device)(L, eye, False)
    return Linv.mH, fail


def _eigh_gen(gA, gB):
    """SciPy's ``eigh(gA, gB)`` on the device: ascending values, B-orthonormal vectors,
    and a failure flag (gB not positive definite)."""
    gA = (gA + gA.mH) * 0.5
    invU, fail = _chol_inv((gB + gB.mH) * 0.5)
    C = invU.mH @ gA @ invU
    C = torch.where(torch.isfinite(C).all(), (C + C.mH) * 0.5, torch.eye(C.shape[0], dtype=C.dtype,
                                                                      device=C.device))
    w, Z = small_eigh(C)
    # orthonormal to rounding (the refinement leaves pairs of a cluster 1e-6 apart)
    invZ, _ = _chol_inv(Z.mH @ Z)
    return w, invU @ (Z @ invZ), fail | ~torch.isfinite(w).all()


def _report_nonhermitian(M, name):
    """SciPy's verbose check of a Gram matrix (read to the host: verbose runs only)."""
    M = to_host(M)
    nmd = np.linalg.norm(M - M.T.conj(), 1)
    tol = 10 * np.finfo(M.dtype).eps
    tol = max(tol, tol * np.linalg.norm(M, 1))
    if nmd > tol:
        warnings.warn(f"Matrix {name} of the type {M.dtype} is not Hermitian: condition: "
                      f"{nmd} < {tol} fails.", UserWarning, stacklevel=7)


def _report_grams(gA, gB, verbosityLevel):
    if verbosityLevel:
        _report_nonhermitian(gA, "gramA")
        _report_nonhermitian(gB, "gramB")


def _select(w, V, k, largest):
    """SciPy's ``_get_indx`` on eigh's ascending order: the k largest (descending) or
    smallest."""
    if largest:
        return w.flip(0)[:k], V.flip(1)[:, :k]
    return w[:k], V[:, :k]


def _matmul(A, device, n, name):
    """A block product for ``A`` (tensor, sparse container, LinearOperator, callable)."""
    if A is None:
        return None
    if is_torch_array(A):
        return lambda V: A @ V
    if callable(A) and not isinstance(A, _scipy.LinearOperator) and not hasattr(A, "shape"):
        return A
    op = operator(A, device)
    if op.shape != (n, n):
        raise ValueError(f"The shape {op.shape} of the {name} matrix does not match "
                         f"X's {n} rows.")
    return op.matmat


def _checked(f, V, what, name):
    out = f(V)
    if out.shape != V.shape:
        raise ValueError(f"The shape {tuple(V.shape)} of the {what} not preserved\nand "
                         f"changed to {tuple(out.shape)} after multiplying by the {name} "
                         "matrix.\n")
    return out


@dispatch(_scipy.lobpcg, double_float=("neuron",), grad=_autograd.eigen)
def lobpcg(A, X, B=None, M=None, Y=None, tol=None, maxiter=None, largest=True,
           verbosityLevel=0, retLambdaHistory=False, retResidualNormsHistory=False,
           restartControl=20):
    if X is not None and is_torch_array(X) and X.ndim == 2:
        # user functions see tensors on every route (SciPy's route included)
        A, B, M = (_as_operator(f, X) for f in (A, B, M))
    return _lobpcg(A, X, B=B, M=M, Y=Y, tol=tol, maxiter=maxiter, largest=largest,
                   verbosityLevel=verbosityLevel, retLambdaHistory=retLambdaHistory,
                   retResidualNormsHistory=retResidualNormsHistory,
                   restartControl=restartControl)


def _as_operator(f, X):
    """A plain callable as a device LinearOperator taking tensors (its dtype X's)."""
    if f is None or is_torch_array(f) or hasattr(f, "shape") or not callable(f):
        return f
    from trnscipy.sparse.linalg._interface import LinearOperator

    n = X.shape[0]
    return LinearOperator((n, n), matvec=lambda v: f(v.reshape(n, 1)).reshape(v.shape),
                          matmat=f, dtype=_dtype_name(X.dtype))


def _torch_dtype(A, default):
    dtype = getattr(A, "dtype", None)
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype or default
    from trnscipy._dtypes import to_torch_dtype

    dtype = np.dtype(dtype)
    return to_torch_dtype(dtype) if dtype.kind in "fc" else default


def _dtype_name(dtype):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(dtype if dtype.is_floating_point or dtype.is_complex
                          else torch.float32)


@eigen_kernel(_scipy.lobpcg)
def _lobpcg(A, X, B=None, M=None, Y=None, tol=None, maxiter=None, largest=True,
            verbosityLevel=0, retLambdaHistory=False, retResidualNormsHistory=False,
            restartControl=20):
    """SciPy's lobpcg on torch blocks."""
    gram, stacklevel = _gram, 5
    if X is None:
        raise ValueError("The mandatory initial matrix X cannot be None")
    if len(X.shape) != 2:
        raise ValueError("expected rank-2 array for argument X")
    if Y is not None and len(Y.shape) != 2:
        warnings.warn(f"Expected rank-2 array for argument Y, instead got {len(Y.shape)}, so "
                      "ignore it and use no constraints.", UserWarning, stacklevel=stacklevel)
        Y = None
    sizeY = 0 if Y is None else Y.shape[1]
    n, sizeX = X.shape
    device = X.device
    if not (X.dtype.is_floating_point or X.dtype.is_complex):
        warnings.warn(f"Data type for argument X is {str(X.dtype).replace('torch.', '')}, "
                      "which is not inexact, so casted to np.float32.", UserWarning,
                      stacklevel=stacklevel)
        X = X.to(torch.float32)
    X = X.to(torch.promote_types(X.dtype, _torch_dtype(A, X.dtype)))  # as A @ X computes
    dtype = X.dtype
    rdtype = real_dtype(dtype)
    maxiter = 20 if maxiter is None else maxiter
    if verbosityLevel:
        print(_banner(B, M, Y, n, sizeX, sizeY))
    if n - sizeY < 5 * sizeX:
        warnings.warn(f"The problem size {n} minus the constraints size {sizeY} is too "
                      f"small relative to the block size {sizeX}. Using a dense eigensolver "
                      "instead of LOBPCG iterations.No output of the history of the "
                      "iterations.", UserWarning, stacklevel=stacklevel)
        if Y is not None:
            raise NotImplementedError("The dense eigensolver does not support constraints.")
        return _dense(A, B, n, min(sizeX, n), largest, dtype, device)
    eps = float(torch.finfo(rdtype).eps)
    tol = np.sqrt(eps) * n if tol is None or tol <= 0.0 else float(tol)

    A = _matmul(A, device, n, "primary")
    B = _matmul(B, device, n, "secondary")
    M = _matmul(M, device, n, "preconditioner")
    materialize = backend(device).materialize

    def bmul(V):
        return V if B is None else B(V)

    flags = []  # device failure flags read with the first residual norms
    constrain = None
    if Y is not None:
        Y = Y.to(device=device, dtype=dtype)
        BY = Y if B is None else _checked(B, Y, "constraint", "secondary")
        invU_Y, failY = _chol_inv(gram(Y, BY))
        flags.append((failY, "Linearly dependent constraints"))

        def constrain(V):  # V - Y (Y^H B Y)^-1 (BY)^H V
            return V - Y @ (invU_Y @ (invU_Y.mH @ gram(BY, V)))

        X = constrain(X)

    BX = bmul(X)
    if B is not None and BX.shape != X.shape:
        raise ValueError(f"The shape {tuple(X.shape)} of the orthogonalized matrix not "
                         f"preserved\nand changed to {tuple(BX.shape)} after multiplying by "
                         "the secondary matrix.\n")
    invU, failX = _chol_inv(gram(X, BX))
    flags.append((failX, "Linearly dependent initial approximations"))
    X = X @ invU
    BX = X if B is None else BX @ invU
    AX = _checked(A, X, "initial approximations", "primary")
    gXAX = gram(X, AX)
    w, V = small_eigh((gXAX + gXAX.mH) * 0.5)
    lam, V = _select(w, V, sizeX, largest)
    X, AX = X @ V, AX @ V
    BX = X if B is None else BX @ V

    def residual(X, AX, BX, lam):
        R = AX - BX * lam.to(dtype)[None, :]
        return R, _colsq(R).abs().sqrt().to(rdtype)

    R, res = residual(X, AX, BX, lam)
    res_h, failed = _read(materialize, [X, AX, BX, lam, R], res, [f for f, _ in flags])
    for bad, (_, message) in zip(failed, flags, strict=True):
        if bad:
            raise ValueError(message)

    lamHist = {0: lam}
    resHist = {}
    active = np.ones(sizeX, dtype=bool)
    P = AP = BP = None
    smallest = float(np.abs(np.finfo(to_numpy(rdtype)).max))
    best_it, bestX = maxiter, X
    it = -1
    forced, explicit = False, False
    stale = False  # AX/BX recomputed after the current residual was formed
    while it < maxiter:
        it += 1
        stale = False
        resHist[it] = res
        resnorm = float(np.sum(np.abs(res_h)) / sizeX)
        if resnorm < smallest:
            smallest, best_it, bestX = resnorm, it, X
        elif resnorm > 2 ** restartControl * smallest:
            forced, stale = True, True
            AX = _checked(A, X, "restarted iterate", "primary")
            BX = X if B is None else _checked(B, X, "restarted iterate", "secondary")
        active = active & (res_h > tol)
        size = int(active.sum())
        if verbosityLevel:
            print(f"iteration {it}\ncurrent block size: {size}\neigenvalue(s):\n"
                  f"{to_host(lam)}\nresidual norm(s):\n{res_h}")
        if size == 0:
            break
        if size == sizeX:  # all active: no index to send
            def pick(V):
                return V
        else:
            idx = torch.as_tensor(np.flatnonzero(active), device=device)

            def pick(V, idx=idx):
                return V.index_select(1, idx)
        myeps = 1 if dtype == torch.float32 else np.sqrt(eps)  # SciPy's test (not complex64)
        explicit = not (res_h.max() > myeps and not explicit)

        # the residual block: preconditioned, constrained, B-orthonormal to X
        Ra = pick(R)
        if M is not None:
            Ra = M(Ra)
        if constrain is not None:
            Ra = constrain(Ra)
        Ra = Ra - X @ gram(BX, Ra)
        BRa = bmul(Ra)
        invU, failR = _chol_inv(gram(Ra, BRa))
        Ra = Ra @ invU
        BRa = Ra if B is None else BRa @ invU
        ARa = A(Ra)
        failP = torch.zeros((), dtype=torch.bool, device=device)
        Pa = APa = BPa = None
        if it > 0:
            Pa, APa = pick(P), pick(AP)
            BPa = Pa if B is None else pick(BP)
            invU, failP = _chol_inv(gram(Pa, BPa))
            Pa, APa = Pa @ invU, APa @ invU
            BPa = Pa if B is None else BPa @ invU
        try_restart = True if it == 0 else forced
        blocks = (X, AX, BX, Ra, ARa, BRa, Pa, APa, BPa)
        new = _rayleigh_ritz(gram, blocks, lam, explicit, try_restart, sizeX, largest,
                             verbosityLevel)
        new_res = residual(*new[:3], new[6])
        kept = [t for t in blocks if t is not None]
        new_res_h, (failR, failP, failE) = _read(materialize, list(new[:7]) + [new_res[0]] + kept,
                                                 new_res[1], [failR, failP, new[7]])
        if failR:
            warnings.warn(f"Failed at iteration {it} with accuracies {res_h}\n not reaching "
                          f"the requested tolerance {tol}.", UserWarning, stacklevel=stacklevel)
            break
        if not try_restart and (failP or failE):
            if verbosityLevel and not failP:
                warnings.warn(f"eigh failed at iteration {it} \nwith error the leading minor "
                              "is not positive definite causing a restart.\n", UserWarning,
                              stacklevel=stacklevel)
            new = _rayleigh_ritz(gram, blocks, lam, explicit, True, sizeX, largest,
                                 verbosityLevel)
            new_res = residual(*new[:3], new[6])
            new_res_h, (failE,) = _read(materialize, list(new[:7]) + [new_res[0]], new_res[1],
                                        [new[7]])
        if failE:
            warnings.warn(f"eigh failed at iteration {it} with error\nthe leading minor is not "
                          "positive definite\n", UserWarning, stacklevel=stacklevel)
            break
        X, AX, BX, P, AP, BP, lam = new[:7]
        R, res = new_res
        res_h = new_res_h
        lamHist[it + 1] = lam

    if stale:
        R, res = residual(X, AX, BX, lam)
        res_h = to_host(res)
    lamHist[it + 1] = lam
    resHist[it + 1] = res
    resnorm = float(np.sum(np.abs(res_h)) / sizeX)
    if resnorm < smallest:
        smallest, best_it, bestX = resnorm, it + 1, X
    if np.max(np.abs(res_h)) > tol:
        warnings.warn(f"Exited at iteration {it} with accuracies \n{res_h}\nnot reaching the "
                      f"requested tolerance {tol}.\nUse iteration {best_it} instead with "
                      f"accuracy \n{smallest}.\n", UserWarning, stacklevel=stacklevel)
    if verbosityLevel:
        print(f"Final iterative eigenvalue(s):\n{to_host(lam)}")
        print(f"Final iterative residual norm(s):\n{res_h}")

    # postprocessing: an "exact" Rayleigh-Ritz on the best iterate
    X = bestX
    if constrain is not None:
        X = constrain(X)
    AX = _checked(A, X, "postprocessing iterate", "primary")
    BX = X if B is None else _checked(B, X, "postprocessing iterate", "secondary")
    gXAX, gXBX = gram(X, AX), gram(X, BX)
    _report_grams(gXAX, gXBX, verbosityLevel)
    w, V, failE = _eigh_gen(gXAX, gXBX)
    lam, V = _select(w, V, sizeX, largest)
    X, AX = X @ V, AX @ V
    BX = X if B is None else BX @ V
    R, res = residual(X, AX, BX, lam)
    res_h, (failed,) = _read(materialize, [X, lam], res, [failE])
    if failed:
        raise ValueError("eigh has failed in lobpcg postprocessing")
    lamHist[best_it + 1] = lam
    resHist[best_it + 1] = res
    if np.max(np.abs(res_h)) > tol:
        warnings.warn(f"Exited postprocessing with accuracies \n{res_h}\nnot reaching the "
                      f"requested tolerance {tol}.", UserWarning, stacklevel=stacklevel)
    if verbosityLevel:
        print(f"Final postprocessing eigenvalue(s):\n{to_host(lam)}")
        print(f"Final residual norm(s):\n{res_h}")
    result = (lam, X)
    if retLambdaHistory:
        result += (_history(lamHist, best_it + 2, sizeX, dtype, device),)
    if retResidualNormsHistory:
        result += (_history(resHist, best_it + 2, sizeX, dtype, device),)
    return result


def _read(materialize, tensors, res, flags):
    """Compute ``tensors`` and the residual norms ``res`` in one graph and read the norms
    and the failure ``flags`` in one transfer: (norms as NumPy, flags as bools)."""
    probe = torch.cat([res, torch.stack(flags).to(res.dtype)])
    materialize(list(tensors) + [res, probe])
    host = to_host(probe)
    k = res.shape[0]
    return host[:k], [bool(f) for f in host[k:]]


def _rayleigh_ritz(gram, blocks, lam, explicit, restart, sizeX, largest, verbosityLevel=0):
    """SciPy's Rayleigh-Ritz step on [X, R(, P)]: the new X, AX, BX, P, AP, BP, lambda and
    the eigh failure flag (all device tensors)."""
    X, AX, BX, R, AR, BR, P, AP, BP = blocks
    size = R.shape[1]
    dtype, device = X.dtype, X.device
    gXAR, gRAR = gram(X, AR), gram(R, AR)
    if explicit:
        gRAR = (gRAR + gRAR.mH) * 0.5
        gXAX = gram(X, AX)
        gXAX = (gXAX + gXAX.mH) * 0.5
        gXBX, gRBR, gXBR = gram(X, BX), gram(R, BR), gram(X, BR)
    else:
        gXAX = torch.diag(lam.to(dtype))
        gXBX = torch.eye(sizeX, dtype=dtype, device=device)
        gRBR = torch.eye(size, dtype=dtype, device=device)
        gXBR = torch.zeros((sizeX, size), dtype=dtype, device=device)
    if restart:
        gA = torch.cat([torch.cat([gXAX, gXAR], 1), torch.cat([gXAR.mH, gRAR], 1)])
        gB = torch.cat([torch.cat([gXBX, gXBR], 1), torch.cat([gXBR.mH, gRBR], 1)])
    else:
        gXAP, gRAP, gPAP, gXBP, gRBP = (gram(X, AP), gram(R, AP), gram(P, AP), gram(X, BP),
                                        gram(R, BP))
        if explicit:
            gPAP = (gPAP + gPAP.mH) * 0.5
            gPBP = gram(P, BP)
        else:
            gPBP = torch.eye(size, dtype=dtype, device=device)
        gA = torch.cat([torch.cat([gXAX, gXAR, gXAP], 1), torch.cat([gXAR.mH, gRAR, gRAP], 1),
                        torch.cat([gXAP.mH, gRAP.mH, gPAP], 1)])
        gB = torch.cat([torch.cat([gXBX, gXBR, gXBP], 1), torch.cat([gXBR.mH, gRBR, gRBP], 1),
                        torch.cat([gXBP.mH, gRBP.mH, gPBP], 1)])
    _report_grams(gA, gB, verbosityLevel)
    w, V, fail = _eigh_gen(gA, gB)
    lam, V = _select(w, V, sizeX, largest)
    eX, eR = V[:sizeX], V[sizeX:sizeX + size]
    pp, app, bpp = R @ eR, AR @ eR, BR @ eR
    if not restart:
        eP = V[sizeX + size:]
        pp, app, bpp = pp + P @ eP, app + AP @ eP, bpp + BP @ eP
    X_new, AX_new = X @ eX + pp, AX @ eX + app
    BX_new = X_new if BX is X else BX @ eX + bpp
    bpp = pp if BX is X else bpp
    return X_new, AX_new, BX_new, pp, app, bpp, lam, fail


def _history(entries, length, sizeX, dtype, device):
    """SciPy's history: rows 0..length-1 (zeros where never written), each squeezed."""
    zero = torch.zeros(sizeX, dtype=dtype, device=device)
    return [entries.get(i, zero).to(dtype).squeeze() for i in range(length)]


def _dense(A, B, n, sizeX, largest, dtype, device):
    """SciPy's dense path for small problems: the whole (generalized) eigenproblem."""
    eye = torch.eye(n, dtype=dtype, device=device)

    def full(F, name):
        try:
            if is_torch_array(F):
                return F.to(dtype)
            if hasattr(F, "toarray") and not isinstance(F, _scipy.LinearOperator):
                return torch.as_tensor(F.toarray(), device=device).to(dtype)
            out = _matmul(F, device, n, name)(eye)
        except Exception as e:
            raise Exception(f"{name.capitalize()} MatMul call failed with error\n{e}\n") from e
        if tuple(out.shape) != (n, n):
            raise ValueError(f"The shape {tuple(out.shape)} of the {name} matrix\ndefined by a "
                             "callable object is wrong.\n")
        return out.to(dtype)

    Ad = full(A, "primary")
    Bd = eye if B is None else full(B, "secondary")
    if dtype == torch.float64 and not capability(device_kind(device)).float64:
        # float64 stored as double-float (Neuron): the routed eigh's double-float method
        # (the torch ops below would compute in float32)
        from trnscipy.linalg import eigh

        lo, hi = (n - sizeX, n - 1) if largest else (0, sizeX - 1)
        w, V = eigh(Ad, None if B is None else Bd, subset_by_index=(lo, hi),
                    check_finite=False)
        return (w.flip(0), V.flip(1)) if largest else (w, V)
    w, V, fail = _eigh_gen(Ad, Bd)
    lam, V = _select(w, V, sizeX, largest)
    backend(device).materialize([lam, V, fail])
    if bool(to_host(fail)):
        raise Exception("Dense eigensolver failed with error\nthe leading minor is not "
                        "positive definite\n")
    return lam, V


def _banner(B, M, Y, n, sizeX, sizeY):
    aux = "Solving " + ("standard" if B is None else "generalized") + " eigenvalue problem with"
    aux += ("out" if M is None else "") + " preconditioning\n\n"
    aux += f"matrix size {n}\nblock size {sizeX}\n\n"
    if Y is None:
        aux += "No constraints\n\n"
    else:
        aux += f"{sizeY} constraint{'s' if sizeY > 1 else ''}\n\n"
    return aux


def to_numpy(dtype):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(dtype)
