"""Test matrices: 2-D Poisson, 2-D convection-diffusion, random CSR, random BSR."""

import numpy as np
import scipy.sparse as sp

__all__ = ["poisson2d", "convdiff2d", "random_csr", "random_bsr", "spd_matrix", "general_matrix"]


def _canonical(A, dtype):
    A = sp.csr_array(A, dtype=dtype)
    A.sum_duplicates()
    A.sort_indices()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


def _tridiag(k, lower, diag, upper):
    return sp.diags_array([np.full(k - 1, lower), np.full(k, diag), np.full(k - 1, upper)],
                          offsets=[-1, 0, 1], shape=(k, k), dtype=np.float64)


def poisson2d(k, dtype=np.float64):
    """5-point Laplacian on a k x k grid (k**2 rows, SPD), CSR with int32 indices."""
    T = _tridiag(k, -1.0, 2.0, -1.0)
    I = sp.eye_array(k, dtype=np.float64)
    return _canonical(sp.kron(I, T) + sp.kron(T, I), dtype)


def convdiff2d(k, peclet=10.0, dtype=np.float64):
    """-laplace(u) + peclet * (du/dx + du/dy) on a k x k grid, first-order upwind
    differences (k**2 rows, nonsymmetric, an M-matrix), CSR with int32 indices."""
    h = 1.0 / (k + 1)
    c = peclet * h
    T = _tridiag(k, -1.0 - c, 2.0 + c, -1.0)
    I = sp.eye_array(k, dtype=np.float64)
    return _canonical(sp.kron(I, T) + sp.kron(T, I), dtype)


def random_csr(m, density, seed=0, dtype=np.float64):
    """Uniformly random m x m CSR with the given density, values in [-1, 1)."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, m), density=density, format="csr", rng=rng,
                        data_sampler=lambda size: rng.uniform(-1, 1, size))
    return _canonical(A, dtype)


def random_bsr(mb, nb, block=128, density=0.25, seed=0, dtype=np.float64):
    """BSR with (mb x nb) blocks of size block x block; a fraction ``density`` of
    the blocks (at least one per block row) is stored, each dense random."""
    rng = np.random.default_rng(seed)
    per_row = max(1, round(density * nb))
    indices = np.concatenate([np.sort(rng.choice(nb, per_row, replace=False))
                              for _ in range(mb)]).astype(np.int32)
    indptr = (np.arange(mb + 1) * per_row).astype(np.int32)
    data = rng.uniform(-1, 1, (len(indices), block, block)).astype(dtype)
    return sp.bsr_array((data, indices, indptr), shape=(mb * block, nb * block))


def spd_matrix(n, dtype, seed=0):
    """Well-conditioned symmetric positive definite n x n matrix."""
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((n, n))
    return ((G @ G.T) / n + np.eye(n)).astype(dtype)


def general_matrix(n, dtype, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)) + np.sqrt(n) * np.eye(n)).astype(dtype)
