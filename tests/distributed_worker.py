"""One rank of a tests/test_distributed.py scenario: ``python distributed_worker.py NAME``.

Launched with torchrun's environment variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT).
Every check compares the distributed result with the single-process trnscipy call on
the same data (CPU tensors); an AssertionError exits non-zero and fails the test.
"""

import os
import sys
import warnings
from datetime import timedelta

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch
import torch.distributed as dist

import trnscipy
import trnscipy.sparse.linalg as tsl
from trnscipy.distributed import (
    block_jacobi,
    comm_counts,
    distribute,
    gather,
    reset_comm_counts,
)

RTOL = 1e-10


def poisson(m1, m2):
    def lap(m):
        return sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))

    return (sp.kron(sp.eye(m2), lap(m1)) + sp.kron(lap(m2), sp.eye(m1))).tocsr()


def nonsymmetric(n, seed=3):
    """Diagonally dominant, nonsymmetric: gmres and bicgstab converge smoothly."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=4 / n, random_state=rng) + sp.diags_array(
        np.linspace(2.0, 3.0, n)) + sp.diags_array(np.full(n - 7, 0.4), offsets=7)
    return A.tocsr()


def close(a, b, what):
    err = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
    assert err <= RTOL, f"{what}: relative difference {err:.2e}"


def single(name, A, b, **kw):
    """The single-process trnscipy solve on CPU tensors: (x, info, callback calls)."""
    calls = []
    kw = dict(kw)
    if name == "gmres":
        kw.setdefault("callback_type", "legacy")
    x, info = getattr(tsl, name)(trnscipy.to_device(A, "cpu"), torch.from_numpy(b),
                                 callback=lambda *a: calls.append(1), **kw)
    return trnscipy.to_host(x), info, len(calls)


def solve(name, A, b, **kw):
    calls = []
    kw = dict(kw)
    if name == "gmres":
        kw.setdefault("callback_type", "legacy")
    x, info = getattr(tsl, name)(A, b, callback=lambda *a: calls.append(1), **kw)
    return gather(x), info, len(calls)


def check_solver(name, A, Ad, b, **kw):
    x, info, its = solve(name, Ad, b, **kw)
    xr, ir, itr = single(name, A, b, **kw)
    assert (info, its) == (ir, itr), f"{name}: info/iterations {info, its} != {ir, itr}"
    close(x, xr, name)


def raises_value_error(fn, what):
    try:
        fn()
    except ValueError:
        return
    raise AssertionError(f"{what}: no ValueError")


def scenario_solvers():
    rank, size = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)
    P = poisson(17, 13)
    n = P.shape[0]
    N = nonsymmetric(n)
    b = rng.standard_normal(n)
    uneven = [37, n - 37] if size == 2 else [0, n - 70] + [30, 40] + [0] * (size - 4)
    # uneven, empty ranks; the full set of checks on the default partition only
    for part in (None, uneven, [0] * (size - 1) + [n])[: 3 if size == 2 else 2]:
        full = part is None
        Pd = distribute(P, partition=part)
        Nd = distribute(N, partition=Pd)
        assert Pd.shape == P.shape and Pd.nnz == P.nnz and Pd.dtype == P.dtype
        bd = distribute(b, partition=Pd)
        X = rng.standard_normal((n, 3))
        close(gather(Nd @ bd), N @ b, "A @ x")
        close(gather(Nd.T @ bd), N.T @ b, "A.T @ x")
        close(gather(Nd @ X), N @ X, "A @ X")
        close(gather((Nd + Pd * 2.0) @ b), (N + 2.0 * P) @ b, "(A + 2 B) @ x")
        close(gather(2 * bd - bd / 4), 1.75 * b, "array arithmetic")
        for maxiter in (1, 3, None) if full else (None,):
            check_solver("cg", P, Pd, b, maxiter=maxiter)
            check_solver("minres", P, Pd, b, maxiter=maxiter)
            check_solver("gmres", N, Nd, b, maxiter=maxiter, restart=10)
            check_solver("bicgstab", N, Nd, b, maxiter=maxiter)
        if not full:
            continue
        check_solver("cg", P, Pd, b, x0=np.ones(n), atol=1e-3, rtol=0)
        check_solver("gmres", N, Nd, b, callback_type="pr_norm")
        # one all_reduce per cg iteration (plus one for ||b||)
        reset_comm_counts()
        x, info, its = solve("cg", Pd, bd)
        counts = comm_counts()
        assert counts["all_reduce"] == (its + 2 if size > 1 else 0), (counts, its)
        # bicgstab: ||r|| with (r~, r), (r~, v), ||s||, (t, s) with (t, t): four per
        # iteration, up to three in the last, one for ||b||
        reset_comm_counts()
        x, info, its = solve("bicgstab", Nd, bd)
        reduces = comm_counts()["all_reduce"]
        assert info == 0 and (4 * its + 1 < reduces < 4 * its + 5 if size > 1
                              else reduces == 0), (reduces, its)
        # minres: alpha, beta and ||x|| per iteration, beta1 and ||b|| first
        reset_comm_counts()
        x, info, its = solve("minres", Pd, bd)
        counts = comm_counts()
        assert counts["all_reduce"] == (3 * its + 2 if size > 1 else 0), (counts, its)
        # lobpcg against SciPy's (trnscipy's single-process lobpcg is SciPy's)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for largest in (True, False)[: 2 if size == 2 else 1]:
                lam, V, hist = tsl.lobpcg(Pd, X, largest=largest, maxiter=15,
                                          retResidualNormsHistory=True)
                lr, Vr, hr = sla.lobpcg(P, X, largest=largest, maxiter=15,
                                        retResidualNormsHistory=True)
                assert len(hist) == len(hr)
                close(lam, lr, "lobpcg eigenvalues")
                V = gather(V)
                assert np.allclose(np.abs(np.sum(V * Vr, 0)), 1, atol=1e-8)
    # block-Jacobi: the single-process solve with the same block-diagonal preconditioner
    Pd = distribute(P)
    lus = [sla.splu(P[a:b_, a:b_].tocsc()) for a, b_ in zip(Pd.offsets[:-1], Pd.offsets[1:],
                                                            strict=True) if b_ > a]
    starts = [a for a, b_ in zip(Pd.offsets[:-1], Pd.offsets[1:], strict=True) if b_ > a]

    def apply(r):
        r = trnscipy.to_host(r).ravel()
        return torch.from_numpy(np.concatenate(
            [lu.solve(r[a:a + lu.shape[0]]) for lu, a in zip(lus, starts, strict=True)]))

    M = tsl.LinearOperator(P.shape, matvec=apply, dtype=np.float64)
    for kind in ("lu", "ilu"):
        x, info, its = solve("cg", Pd, b, M=block_jacobi(Pd, kind, **(
            {"drop_tol": 0.0, "fill_factor": 100} if kind == "ilu" else {})))
        xr, ir, itr = single("cg", P, b, M=M)
        assert (info, its) == (ir, itr), (kind, info, its, ir, itr)
        close(x, xr, f"block-Jacobi {kind}")
    # ranks with no halo: a block-diagonal matrix aligned with the partition
    blocks = [poisson(5, 3 + r) for r in range(size)]
    D = sp.block_diag(blocks, format="csr")
    Dd = distribute(D, partition=[blk.shape[0] for blk in blocks])
    assert not Dd.halo.recv and not Dd.halo.send
    c = rng.standard_normal(D.shape[0])
    close(gather(Dd @ c), D @ c, "no-halo product")
    check_solver("cg", D, Dd, c)
    # the halo through one all_to_all per product (the xla backend's route)
    os.environ["TRNSCIPY_HALO"] = "alltoall"
    Nd = distribute(N, partition=uneven)
    del os.environ["TRNSCIPY_HALO"]
    assert Nd.halo.collective
    close(gather(Nd @ b), N @ b, "A @ x, all_to_all halo")
    close(gather(Nd.T @ b), N.T @ b, "A.T @ x, all_to_all halo")
    check_solver("gmres", N, Nd, b)
    # distributed from rank 0 only
    Sd = distribute(N if rank == 0 else None, src=0)
    close(gather(Sd @ b), N @ b, "src=0 matrix")
    bs = distribute(b if rank == 0 else None, src=0, partition=[0] * (size - 1) + [n])
    close(gather(bs), b, "src=0 vector")
    assert gather(Sd, dst=0) is None or rank == 0
    scenario_bad_input(P, Pd, b)


def scenario_bad_input(P, Pd, b):
    rank, size = dist.get_rank(), dist.get_world_size()
    n = P.shape[0]
    other = distribute(b, partition=[n] + [0] * (size - 1))
    raises_value_error(lambda: tsl.cg(Pd, other), "mismatched partitions")
    raises_value_error(lambda: Pd @ other, "mismatched partitions in @")
    group = dist.new_group(list(range(size)))
    foreign = distribute(b, group=group)
    raises_value_error(lambda: tsl.cg(Pd, foreign), "vector from another group")
    raises_value_error(lambda: Pd @ foreign, "vector from another group in @")
    raises_value_error(lambda: distribute(P if rank == 0 else P[:-1, :-1]),
                       "different matrices on different ranks")
    raises_value_error(lambda: distribute(P, partition=[1] * size), "bad partition")
    raises_value_error(lambda: distribute("x" if rank == 0 else None, src=0), "bad src object")
    raises_value_error(lambda: tsl.cg(Pd, torch.ones(n)), "a plain tensor with A")
    raises_value_error(lambda: tsl.spsolve(Pd, b), "no distributed implementation")
    # SciPy's make_system and atol tests (shared with the local solvers)
    raises_value_error(lambda: tsl.bicgstab(Pd, np.ones(n + 1)), "b of the wrong length")
    raises_value_error(lambda: tsl.minres(Pd, np.ones((n, 2))), "b with two columns")
    raises_value_error(lambda: tsl.cg(Pd, Pd @ np.ones((n, 2))), "distributed 2-D b")
    raises_value_error(lambda: tsl.gmres(Pd, b, x0=np.ones(n - 1)), "x0 of the wrong length")
    raises_value_error(lambda: tsl.bicgstab(Pd, b, atol=-1.0), "negative atol")
    for atol in ("legacy", "x"):  # SciPy: ValueError for 'legacy', TypeError for another str
        try:
            sla.bicgstab(P, b, atol=atol)
        except (ValueError, TypeError) as e:
            expected = type(e)
        try:
            tsl.bicgstab(Pd, b, atol=atol)
        except expected:
            pass
        else:
            raise AssertionError(f"atol={atol!r}: no {expected.__name__} as SciPy")
    # the group still works after all of these
    close(gather(Pd @ b), P @ b, "product after errors")


def scenario_raise():
    """Rank 1 fails before the solve; rank 0 must raise (exit 3), not hang."""
    P = poisson(30, 30)
    Pd = distribute(P)
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    try:
        tsl.cg(Pd, np.ones(P.shape[0]))
        dist.barrier()
    except Exception as exc:  # noqa: BLE001  (gloo reports the lost peer as RuntimeError)
        print(f"rank 0 raised {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        sys.exit(3)


def scenario_exit():
    """A script's ordinary end: no barrier, no destroy, no os._exit.  trnscipy's exit hook
    (registered when the group is first used) must destroy the group after a barrier;
    this check, registered before it, runs after it (atexit runs last-in first-out)."""
    import atexit

    atexit.register(lambda: print(f"group alive at exit: {dist.is_initialized()}",
                                  flush=True))
    P = poisson(12, 10)
    x, info = tsl.cg(distribute(P), np.ones(P.shape[0]))
    close(gather(x), tsl.cg(P, np.ones(P.shape[0]))[0], "cg before exit")


if __name__ == "__main__":
    if sys.argv[1] == "exit":
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
        scenario_exit()
        sys.exit(0)
    if sys.argv[1] != "raise":  # (that one lets distribute() initialise from the environment)
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    globals()["scenario_" + sys.argv[1]]()
    if sys.argv[1] != "raise":
        # every rank waits for the others, then leaves without tearing gloo down: a rank
        # that closes its connections while a peer's gloo thread still reads aborts that
        # peer, and even after the barrier a teardown aborted one rank in a CI run
        # ("terminate called without an active exception", exit -6)
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
