"""Distributed cg, gmres and lobpcg on a 2-D Poisson matrix, checked against one process.

    torchrun --nproc_per_node=2 examples/distributed_poisson.py [m1 m2]

Every rank builds the same SciPy matrix (or pass it on rank 0 only with ``src=0``), the
solvers run on the row blocks, and rank 0 repeats each solve in a single process
(trnscipy on CPU tensors, which is SciPy's own loop) and prints the relative
difference and both iteration counts.  Runs unchanged with --nproc_per_node=1.
"""

import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist

import trnscipy
import trnscipy.sparse.linalg as tsl
from trnscipy.distributed import comm_counts, distribute, gather, reset_comm_counts


def poisson(m1, m2):
    def lap(m):
        return sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))

    return (sp.kron(sp.eye(m2), lap(m1)) + sp.kron(lap(m2), sp.eye(m1))).tocsr()


def counted(solver, *args, **kwargs):
    """Run a solver with a callback that counts iterations; returns (result, count, s)."""
    calls = []
    start = time.perf_counter()
    out = solver(*args, callback=lambda *a: calls.append(1), **kwargs)
    return out, len(calls), time.perf_counter() - start


def main():
    m1, m2 = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (400, 300)
    A = poisson(m1, m2)
    n = A.shape[0]
    b = np.random.default_rng(0).standard_normal(n)
    X = np.random.default_rng(1).standard_normal((n, 4))

    Ad = distribute(A)                      # default: rows balanced by nonzeros
    bd = distribute(b, partition=Ad)        # the vector split like A's rows
    rank, size = dist.get_rank(), dist.get_world_size()
    report = rank == 0
    if report:
        print(f"{size} process(es), 2-D Poisson {m1}x{m2}: n = {n}, nnz = {Ad.nnz}, "
              f"rows per rank {Ad.counts}")

    At, bt = trnscipy.to_device(A, "cpu"), torch.from_numpy(b)
    cases = [("cg", {}), ("gmres", {"restart": 30, "maxiter": 90, "callback_type": "legacy"})]
    for name, kw in cases:
        reset_comm_counts()
        (x, info), its, secs = counted(getattr(tsl, name), Ad, bd, **kw)
        counts = comm_counts()
        x = gather(x)
        if report:
            (xr, ir), itr, secs1 = counted(getattr(tsl, name), At, bt, **kw)
            xr = xr.numpy()
            rel = np.linalg.norm(x - xr) / np.linalg.norm(xr)
            print(f"{name:8s} info {info} (1 process: {ir}), iterations {its} (1 process: "
                  f"{itr}), relative difference {rel:.1e}; {secs:.2f} s ({secs1:.2f} s in one "
                  f"process); per iteration {counts['all_reduce'] / max(its, 1):.2f} "
                  f"all_reduce, {counts['halo_bytes'] / max(its, 1):.0f} halo bytes sent")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # lobpcg: not converged in 20 iterations
        reset_comm_counts()
        start = time.perf_counter()
        lam, V, hist = tsl.lobpcg(Ad, X, largest=False, retResidualNormsHistory=True)
        secs = time.perf_counter() - start
        V = gather(V)
        if report:
            import scipy.sparse.linalg as sla

            lr, Vr, hr = sla.lobpcg(A, X, largest=False, retResidualNormsHistory=True)
            rel = np.abs(lam - lr).max() / np.abs(lr).max()
            signs = np.sign(np.sum(V * Vr, axis=0))
            vrel = np.linalg.norm(V * signs - Vr) / np.linalg.norm(Vr)
            print(f"lobpcg   eigenvalues {np.array2string(lam, precision=6)}, iterations "
                  f"{len(hist) - 1} (1 process: {len(hr) - 1}), relative difference "
                  f"{rel:.1e} (eigenvectors {vrel:.1e}); {secs:.2f} s")


if __name__ == "__main__":
    main()
