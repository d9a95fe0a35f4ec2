"""svds on device data: SciPy's construction (eigsh of X^H X on the smaller side).

On CPU tensors the ``eigen`` kernel runs SciPy's svds on zero-copy views.  Elsewhere
every ``solver`` ('arpack', 'lobpcg', 'propack') runs trnscipy's device eigsh (results
equal within tolerance, as SciPy's solvers are); the small ``(n, k)`` SVD of ``A V`` is
done through the eigh of its Gram matrix (refined, see ``small_eigh``) instead of
LAPACK's SVD, and the eigenvectors are not re-orthonormalised by QR (Lanczos vectors
are orthonormal to rounding; QR does not lower on XLA).
"""

import math

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._common import always, eigen_kernel, operator, small_eigh
from trnscipy.sparse.linalg._eigen.arpack.arpack import (
    _device_of,
    _is_matrix,
    _operand_dtype,
    eigsh,
)

__all__ = ["svds"]


def _validate(A, k, ncv, tol, which, v0, maxiter, return_singular, solver):
    """SciPy's _iv on device operands."""
    solver = str(solver).lower()
    solvers = {"arpack", "lobpcg", "propack"}
    if solver not in solvers:
        raise ValueError(f"solver must be one of {solvers}.")
    if math.prod(A.shape) == 0:
        raise ValueError("`A` must not be empty.")
    kmax = min(A.shape) if solver == "propack" else min(A.shape) - 1
    if int(k) != k or not (0 < k <= kmax):
        raise ValueError("`k` must be an integer satisfying `0 < k < min(A.shape)`.")
    if solver == "arpack" and ncv is not None:
        if int(ncv) != ncv or not (k < ncv < min(A.shape)):
            raise ValueError("`ncv` must be an integer satisfying `k < ncv < min(A.shape)`.")
    if tol < 0 or not np.isfinite(tol):
        raise ValueError("`tol` must be a non-negative floating point value.")
    which = str(which).upper()
    if which not in {"LM", "SM"}:
        raise ValueError(f"`which` must be in { {'LM', 'SM'} }.")
    if v0 is not None:
        v0 = torch.atleast_1d(torch.as_tensor(v0))
        if not v0.dtype.is_floating_point and not v0.dtype.is_complex:
            raise ValueError("`v0` must be of floating or complex floating data type.")
        shape = (A.shape[0],) if solver == "propack" else (min(A.shape),)
        if tuple(v0.shape) != shape:
            raise ValueError(f"`v0` must have shape {shape}.")
    if maxiter is not None and (int(maxiter) != maxiter or maxiter <= 0):
        raise ValueError("`maxiter` must be a positive integer.")
    if return_singular not in {True, False, "vh", "u"}:
        raise ValueError(f"`return_singular_vectors` must be in { {True, False, 'vh', 'u'} }.")
    return int(k), which, v0, solver


@dispatch(_scipy.svds, double_float=("neuron",), grad=_autograd.eigen)
@eigen_kernel(_scipy.svds, operators=always)
def svds(A, k=6, ncv=None, tol=0, which="LM", v0=None, maxiter=None,
         return_singular_vectors=True, solver="arpack", rng=None, options=None, *,
         random_state=None):
    from trnscipy.sparse.linalg._interface import LinearOperator

    device = _device_of(A, v0)
    op = operator(A, device)
    k, which, v0, solver = _validate(op, k, ncv, tol, which, v0, maxiter,
                                     return_singular_vectors, solver)
    dtype = _operand_dtype(op, device)
    n, m = op.shape
    transpose = n < m
    X_mat, XH_mat = (op.rmatmat, op.matmat) if transpose else (op.matmat, op.rmatmat)
    X_vec, XH_vec = (op.rmatvec, op.matvec) if transpose else (op.matvec, op.rmatvec)
    small = min(op.shape)
    XH_X = LinearOperator((small, small), matvec=lambda x: XH_vec(X_vec(x)),
                          matmat=lambda x: XH_mat(X_mat(x)), dtype=op.dtype)
    XH_X.pure_tensor_code = _is_matrix(A)  # eigsh may trace it into a device loop
    if v0 is None or solver == "propack":
        host = np.random.default_rng(rng if rng is not None else random_state)
        v0 = torch.as_tensor(host.standard_normal(size=(small,))).to(device=device, dtype=dtype)
    else:
        v0 = v0.to(device=device, dtype=dtype)
    _, V = eigsh(XH_X, k=k, tol=tol ** 2, maxiter=maxiter, ncv=ncv, which=which, v0=v0)
    Av = X_mat(V)
    # SVD of the tall (., k) matrix Av from its Gram matrix: Av = U diag(s) W^H
    _, W = small_eigh(Av.mH @ Av)  # eigh's ascending order: s ascending, as SciPy's
    AW = Av @ W
    s = (AW.conj() * AW).real.sum(dim=0).sqrt() if AW.is_complex() else (AW * AW).sum(0).sqrt()
    if not return_singular_vectors:
        return s
    U = AW / torch.where(s > 0, s, torch.ones_like(s)).to(AW.dtype)
    jobu = return_singular_vectors in {True, "u"}
    jobv = return_singular_vectors in {True, "vh"}
    right = V @ W  # right singular vectors (columns) of X
    if transpose:
        return (right if jobu else None), s, (U.mH if jobv else None)
    return (U if jobu else None), s, (right.mH if jobv else None)
