"""trnscipy.distributed with 2 and 4 processes (gloo on the CPU).

Each test launches tests/distributed_worker.py once per rank with torchrun's
environment variables; the workers compare every distributed result with the
single-process trnscipy call and exit non-zero on a mismatch.  A timeout kills them, so
a hang fails the test instead of stalling CI.
"""

import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
import torch.distributed  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
pytestmark = pytest.mark.skipif(not torch.distributed.is_available()
                                or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo not available")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario, nprocs, timeout, collective_timeout=60):
    """Run ``scenario`` on ``nprocs`` ranks; returns [(returncode, output)] per rank."""
    port = _free_port()
    procs = []
    for rank in range(nprocs):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs),
                   LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   TRNSCIPY_DIST_TIMEOUT=str(collective_timeout),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), scenario], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            tails = [p.communicate()[0][-1500:] for p in procs]
            pytest.fail(f"{scenario} on {nprocs} ranks did not finish in {timeout} s:\n"
                        + "\n".join(tails))
        results.append((proc.returncode, out))
    return results


@pytest.mark.parametrize("nprocs", [2, 4])
def test_distributed_matches_single_process(nprocs):
    """Products, cg/gmres/bicgstab/minres/lobpcg (iterates at maxiter 1 and 3, full
    solves, iteration counts), uneven partitions, empty ranks, ranks with no halo,
    distribution from one rank, block-Jacobi, and bad input raising ValueError on every
    rank."""
    for rank, (code, out) in enumerate(launch("solvers", nprocs, timeout=300)):
        assert code == 0, f"rank {rank} failed:\n{out[-3000:]}"


def test_ranks_tear_the_group_down_at_exit():
    """Issue 25: a script ending with the group alive aborted one rank in about ten at
    teardown (SIGABRT after correct results).  trnscipy's exit hook destroys the group."""
    for rank, (code, out) in enumerate(launch("exit", 2, timeout=120)):
        assert code == 0, f"rank {rank} failed:\n{out[-3000:]}"
        assert "group alive at exit: False" in out, out[-2000:]


def test_a_failing_rank_makes_the_others_raise():
    start = time.monotonic()
    (code0, out0), (code1, out1) = launch("raise", 2, timeout=120, collective_timeout=10)
    assert code1 != 0 and "fails on purpose" in out1, out1[-2000:]
    assert code0 == 3, f"rank 0 did not raise:\n{out0[-2000:]}"
    assert time.monotonic() - start < 90


def test_routing_rule_sends_distributed_operands_to_their_implementation():
    """No processes: the dispatcher's half of the contract."""
    import numpy as np

    import trnscipy.distributed  # noqa: F401  (registers the implementations)
    import trnscipy.sparse.linalg as tsl

    class Where:
        distributed = True

    class Fake:
        _trnscipy_placement = Where()

    import scipy.sparse.linalg as sla

    from trnscipy._dispatch import _DISTRIBUTED

    assert {sla.cg, sla.gmres, sla.bicgstab, sla.minres, sla.lobpcg} <= set(_DISTRIBUTED)
    with pytest.raises(ValueError, match="expected a DistributedMatrix"):
        tsl.cg(Fake(), np.ones(3))
    with pytest.raises(ValueError, match="no distributed implementation"):
        tsl.spsolve(Fake(), np.ones(3))
    with pytest.raises(ValueError, match="two devices"):
        tsl.cg(Fake(), torch.ones(3))
