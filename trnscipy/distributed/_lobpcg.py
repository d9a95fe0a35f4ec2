"""LOBPCG on a DistributedMatrix: SciPy 1.17's iteration with distributed Gram matrices.

Block vectors are row-partitioned (each rank holds its rows as a torch tensor); every
Gram matrix X^H Y is a local product plus an all_reduce, and the products one step
needs travel together: four all_reduces per iteration (residual norms; X^H R; the
Cholesky Grams of R and P; all Rayleigh-Ritz Grams).  The small dense work (Cholesky,
inverse, generalized eigh) runs with SciPy on every rank on identical data, so every
rank takes the same branches.  Supported: ``B=None`` and ``Y=None`` (a generalized or
constrained distributed problem raises ValueError); ``M`` a DistributedMatrix or
``block_jacobi``.  Returns ``(lambda, X)``: NumPy eigenvalues (the same on every rank)
and a DistributedArray of eigenvectors, plus SciPy's histories when asked.
"""

import warnings

import numpy as np
import scipy.sparse.linalg as _scipy
from scipy.linalg import LinAlgError, cholesky, eigh, inv

from trnscipy._dispatch import register_distributed
from trnscipy._torch import torch
from trnscipy.distributed import _comm
from trnscipy.distributed._array import DistributedArray, check_same
from trnscipy.distributed._matrix import DistributedMatrix, gather

__all__ = ["lobpcg"]


class _Grams:
    """Local X^H Y products of several pairs, summed over ranks in one all_reduce."""

    def __init__(self, where):
        self.where = where

    def __call__(self, *pairs):
        parts = [a.conj().T @ b for a, b in pairs]
        flat = torch.cat([p.reshape(-1) for p in parts]) if parts else None
        _comm.allsum_tensor(self.where, flat)
        out, at = [], 0
        host = flat.cpu().numpy()
        for p in parts:
            size = p.numel()
            out.append(host[at:at + size].reshape(p.shape))
            at += size
        return out


def _colnorms(where, R, dtype):
    """The 2-norm of each column of the row-partitioned block R (one all_reduce)."""
    sums = _comm.allsum_tensor(where, (R.conj() * R).sum(0))
    return np.sqrt(np.abs(sums.cpu().numpy())).astype(dtype)


def _t(a, like):
    return torch.as_tensor(np.ascontiguousarray(a), dtype=like.dtype, device=like.device)


def _chol_inv(gram):
    """SciPy's _b_orthonormalize on a reduced Gram matrix: inv(cholesky(VBV)), or None."""
    try:
        return inv(cholesky(gram, overwrite_a=True), overwrite_a=True)
    except LinAlgError:
        return None


def _get_indx(lam, num, largest):
    ii = np.argsort(lam)
    return ii[:-num - 1:-1] if largest else ii[:num]


@register_distributed(_scipy.lobpcg)
def lobpcg(A, X, B=None, M=None, Y=None, tol=None, maxiter=None, largest=True,
           verbosityLevel=0, retLambdaHistory=False, retResidualNormsHistory=False,
           restartControl=20):
    if not isinstance(A, DistributedMatrix):
        raise ValueError(f"expected a DistributedMatrix A, got {type(A).__name__}")
    if B is not None or Y is not None:
        raise ValueError("distributed lobpcg supports B=None and Y=None only")
    where = A.placement
    if isinstance(X, DistributedArray):
        check_same(A, X, "A and X")
    elif isinstance(X, np.ndarray):
        X = A._vector(X, A.offsets)
        X = DistributedArray(X, A.offsets, where, (A.shape[0],) + tuple(X.shape[1:]))
    else:
        raise ValueError("X must be a DistributedArray partitioned like A or a NumPy array "
                         "given whole on every rank")
    if X.ndim != 2:
        raise ValueError("expected rank-2 array for argument X")
    n, sizeX = X.shape
    blockX = X.local
    if not blockX.dtype.is_floating_point and not blockX.is_complex():
        warnings.warn(f"Data type for argument X is {X.dtype}, which is not inexact, so "
                      "casted to np.float32.", UserWarning, stacklevel=3)
        blockX = blockX.to(torch.float32)
    dtype = np.dtype(str(blockX.dtype).replace("torch.", ""))
    maxiter = 20 if maxiter is None else maxiter
    if n < 5 * sizeX:
        return _dense(A, X, largest, where)
    if M is not None:
        if getattr(M, "_trnscipy_placement", None) != where or M.offsets != A.offsets:
            raise ValueError("M must be a distributed operator partitioned like A")
    tol = np.sqrt(np.finfo(dtype).eps) * n if tol is None or tol <= 0.0 else tol
    matmul = A.matvec_local
    grams = _Grams(where)
    lamHist = np.zeros((maxiter + 3, sizeX), dtype=dtype) if retLambdaHistory else None
    resHist = np.zeros((maxiter + 3, sizeX), dtype=dtype) if retResidualNormsHistory else None

    (gXX,) = grams((blockX, blockX))
    invR = _chol_inv(gXX)
    if invR is None:
        raise ValueError("Linearly dependent initial approximations")
    blockX = blockX @ _t(invR, blockX)
    blockAX = matmul(blockX)
    (gXAX,) = grams((blockX, blockAX))
    lam, vecs = eigh(gXAX, check_finite=False)
    ii = _get_indx(lam, sizeX, largest)
    lam = lam[ii]
    if retLambdaHistory:
        lamHist[0] = lam
    vecs = _t(vecs[:, ii], blockX)
    blockX, blockAX = blockX @ vecs, blockAX @ vecs

    active = np.ones(sizeX, dtype=bool)
    blockP = blockAP = None
    smallest = np.abs(np.finfo(dtype).max)
    it = -1
    best_it, bestX = maxiter, blockX
    restart, forced, explicit = True, False, False
    while it < maxiter:
        it += 1
        blockR = blockAX - blockX * _t(lam, blockX)[None, :]
        resNorms = _colnorms(where, blockR, dtype)
        if retResidualNormsHistory:
            resHist[it] = resNorms
        resNorm = np.sum(np.abs(resNorms)) / sizeX
        if resNorm < smallest:
            smallest, best_it, bestX = resNorm, it, blockX
        elif resNorm > 2 ** restartControl * smallest:
            forced = True
            blockAX = matmul(blockX)
        active = active & (resNorms > tol)
        size = int(active.sum())
        if verbosityLevel and where.rank == 0:
            print(f"iteration {it}\ncurrent block size: {size}\neigenvalue(s):\n{lam}\n"
                  f"residual norm(s):\n{resNorms}")
        if size == 0:
            break
        idx = torch.as_tensor(np.flatnonzero(active), device=blockX.device)
        R = blockR.index_select(1, idx)
        if it > 0:
            P, AP = blockP.index_select(1, idx), blockAP.index_select(1, idx)
        if M is not None:
            R = M.matvec_local(R)
        (XR,) = grams((blockX, R))
        R = R - blockX @ _t(XR, R)
        pairs = [(R, R)] + ([(P, P)] if it > 0 else [])
        g = grams(*pairs)
        invRR = _chol_inv(g[0])
        if invRR is None:
            warnings.warn(f"Failed at iteration {it} with accuracies {resNorms}\n not "
                          f"reaching the requested tolerance {tol}.", UserWarning,
                          stacklevel=3)
            break
        R = R @ _t(invRR, R)
        AR = matmul(R)
        if it > 0:
            invP = _chol_inv(g[1])
            if invP is not None:
                P, AP = P @ _t(invP, P), AP @ _t(invP, AP)
                restart = forced
            else:
                restart = True
        myeps = 1 if AR.dtype == torch.float32 else np.sqrt(np.finfo(dtype).eps)
        explicit = not (resNorms.max() > myeps and not explicit)
        pairs = [(blockX, AR), (R, AR)]
        if explicit:
            pairs += [(blockX, blockAX), (blockX, blockX), (R, R), (blockX, R)]
        if not restart:
            pairs += [(blockX, AP), (R, AP), (P, AP), (blockX, P), (R, P)]
            if explicit:
                pairs += [(P, P)]
        g = iter(grams(*pairs))
        gXAR, gRAR = next(g), next(g)
        gdtype = gRAR.dtype
        if explicit:
            gRAR = (gRAR + gRAR.T.conj()) / 2
            gXAX = next(g)
            gXAX = (gXAX + gXAX.T.conj()) / 2
            gXBX, gRBR, gXBR = next(g), next(g), next(g)
        else:
            gXAX = np.diag(lam).astype(gdtype)
            gXBX = np.eye(sizeX, dtype=gdtype)
            gRBR = np.eye(size, dtype=gdtype)
            gXBR = np.zeros((sizeX, size), dtype=gdtype)
        if not restart:
            gXAP, gRAP, gPAP, gXBP, gRBP = (next(g) for _ in range(5))
            if explicit:
                gPAP = (gPAP + gPAP.T.conj()) / 2
                gPBP = next(g)
            else:
                gPBP = np.eye(size, dtype=gdtype)
            gramA = np.block([[gXAX, gXAR, gXAP], [gXAR.T.conj(), gRAR, gRAP],
                              [gXAP.T.conj(), gRAP.T.conj(), gPAP]])
            gramB = np.block([[gXBX, gXBR, gXBP], [gXBR.T.conj(), gRBR, gRBP],
                              [gXBP.T.conj(), gRBP.T.conj(), gPBP]])
            try:
                lam, vecs = eigh(gramA, gramB, check_finite=False)
            except LinAlgError:
                restart = True
        if restart:
            gramA = np.block([[gXAX, gXAR], [gXAR.T.conj(), gRAR]])
            gramB = np.block([[gXBX, gXBR], [gXBR.T.conj(), gRBR]])
            try:
                lam, vecs = eigh(gramA, gramB, check_finite=False)
            except LinAlgError as e:
                warnings.warn(f"eigh failed at iteration {it} with error\n{e}\n",
                              UserWarning, stacklevel=3)
                break
        ii = _get_indx(lam, sizeX, largest)
        lam, vecs = lam[ii], vecs[:, ii]
        if retLambdaHistory:
            lamHist[it + 1] = lam
        eX = _t(vecs[:sizeX], blockX)
        eR = _t(vecs[sizeX:sizeX + size], blockX)
        pp, app = R @ eR, AR @ eR
        if not restart:
            eP = _t(vecs[sizeX + size:], blockX)
            pp, app = pp + P @ eP, app + AP @ eP
        blockX = blockX @ eX + pp
        blockAX = blockAX @ eX + app
        blockP, blockAP = pp, app

    blockR = blockAX - blockX * _t(lam, blockX)[None, :]
    resNorms = _colnorms(where, blockR, dtype)
    if retLambdaHistory:
        lamHist[it + 1] = lam
    if retResidualNormsHistory:
        resHist[it + 1] = resNorms
    resNorm = np.sum(np.abs(resNorms)) / sizeX
    if resNorm < smallest:
        smallest, best_it, bestX = resNorm, it + 1, blockX
    if np.max(np.abs(resNorms)) > tol:
        warnings.warn(f"Exited at iteration {it} with accuracies \n{resNorms}\nnot reaching "
                      f"the requested tolerance {tol}.\nUse iteration {best_it} instead "
                      f"with accuracy \n{smallest}.\n", UserWarning, stacklevel=3)
    blockX = bestX
    blockAX = matmul(blockX)
    gXAX, gXBX = grams((blockX, blockAX), (blockX, blockX))
    gXAX = (gXAX + gXAX.T.conj()) / 2
    gXBX = (gXBX + gXBX.T.conj()) / 2
    try:
        lam, vecs = eigh(gXAX, gXBX, check_finite=False)
    except LinAlgError as e:
        raise ValueError("eigh has failed in lobpcg postprocessing") from e
    ii = _get_indx(lam, sizeX, largest)
    lam = lam[ii]
    vecs = _t(vecs[:, ii], blockX)
    blockX, blockAX = blockX @ vecs, blockAX @ vecs
    blockR = blockAX - blockX * _t(lam, blockX)[None, :]
    resNorms = _colnorms(where, blockR, dtype)
    if retLambdaHistory:
        lamHist[best_it + 1] = lam
        lamHist = [np.squeeze(h) for h in np.vsplit(lamHist[:best_it + 2],
                                                    best_it + 2)]
    if retResidualNormsHistory:
        resHist[best_it + 1] = resNorms
        resHist = [np.squeeze(h) for h in np.vsplit(resHist[:best_it + 2], best_it + 2)]
    if np.max(np.abs(resNorms)) > tol:
        warnings.warn(f"Exited postprocessing with accuracies \n{resNorms}\nnot reaching the "
                      f"requested tolerance {tol}.", UserWarning, stacklevel=3)
    out = DistributedArray(blockX, A.offsets, where, (n, sizeX))
    result = (lam, out)
    if retLambdaHistory:
        result += (lamHist,)
    if retResidualNormsHistory:
        result += (resHist,)
    return result


def _dense(A, X, largest, where):
    """SciPy's dense path for small problems: every rank solves the gathered problem."""
    full = gather(A).toarray()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lam, vecs = _scipy.lobpcg(full, gather(X), largest=largest)
    warnings.warn("The problem size is too small relative to the block size: every rank "
                  "solved the gathered problem with a dense eigensolver.", UserWarning,
                  stacklevel=4)
    r = where.rank
    local = torch.as_tensor(np.ascontiguousarray(vecs[A.offsets[r]:A.offsets[r + 1]]),
                            device=X.local.device)
    return lam, DistributedArray(local, A.offsets, where, vecs.shape)
