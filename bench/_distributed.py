"""Distributed cg: measured strong scaling here, and a communication MODEL for Trainium.

    python -m bench._distributed [--m 700] [--iters 100] [--procs 1,2,4]

Run it on its own (it launches torchrun once per process count; not part of
``python -m bench``).  Measured rows: distributed cg on the 2-D Poisson matrix
(m x m unknowns), a fixed number of iterations (rtol=0, maxiter=iters), gloo on the
CPU, OMP_NUM_THREADS=1 per process: time per iteration (median of 3 solves on rank 0),
parallel efficiency t1 / (p * tp), halo bytes sent (all ranks) and all_reduce calls
per iteration counted by trnscipy.distributed.comm_counts (all ranks' bytes; rank 0's
all_reduce calls, including the one for ||b||), and the load average.
Process counts above the core count are labelled oversubscribed.

The model rows (``model_rows``) are a MODEL, not a measurement: per-iteration halo bytes
and reductions of cg for 2-D (5-point) and 3-D (7-point) Poisson on P NeuronCores,
with the inputs listed in ``MODEL``.
"""

import json
import math
import os
import subprocess
import sys
import time

MODEL = {
    "what": "a MODEL of one distributed cg iteration on Trainium (trn1), not a measurement",
    "per_iteration": "1 SpMV halo exchange + 1 all_reduce of 3 scalars (Chronopoulos-Gear cg)",
    "t_iter": "max(local_bytes / hbm_Bps, halo_exchange) + allreduce, halo_exchange = "
              "neighbours * latency + halo_bytes / link_Bps (overlapped with the diagonal "
              "block's product, so the max); allreduce = 2 * (log2(min(P, 32)) * NeuronLink "
              "latency + log2(P / 32) * EFA latency) (recursive doubling, 3 scalars)",
    "local_bytes": "rows/P * (8 * nnz_per_row + 4 + 20 * 4) bytes: float32 values and int32 "
                   "indices of the CSR rows, indptr, and about 20 vector passes of one "
                   "Chronopoulos-Gear iteration (Trainium has no float64)",
    "halo_link": "NeuronLink-v2 per device shared by its 2 cores within an instance; across "
                 "instances the 2 boundary ranks of an instance share its EFA bandwidth",
    "hbm_Bps": 820 * 2**30 / 2,
    "neuronlink_Bps": 384 * 2**30,
    "efa_Bps": 800e9 / 8,
    "cores_per_instance": 32,
    "latency_s": {"neuronlink": 10e-6, "efa": 25e-6},
    "sources": "AWS Neuron documentation, 'AWS Trn1/Trn1n Architecture' (awsdocs-neuron."
               "readthedocs-hosted.com, general/arch/neuron-hardware/trn1-arch): trn1.32xlarge "
               "= 16 Trainium devices, 2 NeuronCore-v2 each, 820 GiB/s device memory "
               "bandwidth per device (shared by its 2 cores), NeuronLink-v2 384 GiB/s per "
               "device, EFA 800 Gbps per instance (trn1n: 768 GiB/s and 1600 Gbps).",
    "assumed": "latencies: 10 us per NeuronLink message and 25 us per EFA message are "
               "ASSUMPTIONS (no published per-message figure was found; EFA's SRD transport "
               "is characterised in Chakraborty et al., HOTI 2019); a halo neighbour on "
               "another instance uses EFA, shared by the instance's 32 cores",
    "partition": "contiguous rows in natural (lexicographic) order, as distribute() splits "
                 "them: a rank's ghosts are the rows within the stencil's reach (offsets "
                 "1, m, m^2) before and after its block",
}


def _ghosts_one_side(rows, offsets):
    """Ghost entries on one side of a contiguous block of ``rows`` rows of a banded
    stencil matrix with the given positive column offsets (union of the reach)."""
    spans = sorted((-o, -o + min(o, rows)) for o in offsets)
    total, end = 0, -math.inf
    for a, b in spans:
        a = max(a, end)
        if b > a:
            total += b - a
            end = b
    return total


def model_rows():
    rows = []
    for dim, offsets_of, nnz_row in ((2, lambda m: (1, m), 5), (3, lambda m: (1, m, m * m), 7)):
        for n in (10**6, 10**7, 10**8, 10**9):
            m = round(n ** (1 / dim))
            for P in (32, 128, 512):
                local = n / P
                ghosts = 2 * _ghosts_one_side(local, offsets_of(m))
                halo_bytes = ghosts * 4
                neighbours = 2 * max(1, math.ceil(offsets_of(m)[-1] / local))
                cores, lat = MODEL["cores_per_instance"], MODEL["latency_s"]
                cross = P > cores
                link = MODEL["efa_Bps"] / 2 if cross else MODEL["neuronlink_Bps"] / 2
                t_local = local * (8 * nnz_row + 4 + 20 * 4) / MODEL["hbm_Bps"]
                t_halo = neighbours * lat["efa" if cross else "neuronlink"] + halo_bytes / link
                t_red = 2 * (math.log2(min(P, cores)) * lat["neuronlink"]
                             + math.log2(max(P / cores, 1)) * lat["efa"])
                t = max(t_local, t_halo) + t_red
                rows.append({"model": True, "poisson": f"{dim}-D", "unknowns": n,
                             "neuroncores": P, "halo_bytes_per_rank": int(halo_bytes),
                             "halo_neighbours": neighbours, "all_reduce_per_iter": 1,
                             "t_local_us": t_local * 1e6, "t_halo_us": t_halo * 1e6,
                             "t_allreduce_us": t_red * 1e6, "t_iter_us": t * 1e6,
                             "comm_fraction": 1 - t_local / t})
    return rows


def _worker(m, iters):
    """One rank: cg with a fixed iteration count, timed on every rank, reported by rank 0."""
    import numpy as np
    import scipy.sparse as sp
    import torch.distributed as dist

    import trnscipy.sparse.linalg as tsl
    from trnscipy.distributed import comm_counts, distribute, reset_comm_counts

    lap = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    A = (sp.kron(sp.eye(m), lap) + sp.kron(lap, sp.eye(m))).tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    Ad = distribute(A)
    bd = distribute(b, partition=Ad)
    tsl.cg(Ad, bd, rtol=0, maxiter=5)  # warm up
    times = []
    for _ in range(3):
        dist.barrier()
        reset_comm_counts()
        start = time.perf_counter()
        tsl.cg(Ad, bd, rtol=0, maxiter=iters)
        times.append(time.perf_counter() - start)
    counts = comm_counts()
    total = [counts["halo_bytes"], counts["all_reduce"]]
    import torch

    t = torch.tensor(total, dtype=torch.float64)
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
    if dist.get_rank() == 0:
        print(json.dumps({"seconds": sorted(times)[1], "halo_bytes": float(t[0]),
                          "all_reduce_rank0": counts["all_reduce"]}))


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(m, iters, procs):
    rows = []
    cores = os.cpu_count()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for p in procs:
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run",
                              f"--nproc_per_node={p}", f"--master_port={_free_port()}",
                              "-m", "bench._distributed",
                              "--worker", str(m), str(iters)],
                             env=env, cwd=root, capture_output=True, text=True, check=True)
        result = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
        per_iter = result["seconds"] / iters
        rows.append({"processes": p, "oversubscribed": p > cores, "unknowns": m * m,
                     "iterations": iters, "s_per_iter": per_iter,
                     "halo_bytes_per_iter": result["halo_bytes"] / iters,
                     "all_reduce_per_iter": result["all_reduce_rank0"] / iters,
                     "load_before": load, "load_after": os.getloadavg()[0]})
    t1 = rows[0]["s_per_iter"] if rows and rows[0]["processes"] == 1 else None
    for row in rows:
        row["efficiency"] = t1 / (row["processes"] * row["s_per_iter"]) if t1 else None
    return rows


def main(argv):
    if argv[:1] == ["--worker"]:
        _worker(int(argv[1]), int(argv[2]))
        return
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    m, iters = int(args.get("--m", 700)), int(args.get("--iters", 100))
    procs = [int(p) for p in args.get("--procs", "1,2,4").split(",")]
    print(f"measured: distributed cg, 2-D Poisson {m}x{m} = {m * m} unknowns, {iters} "
          f"iterations, gloo, {os.cpu_count()} cores")
    print("procs  s/iter      efficiency  halo B/iter  all_reduce/iter  load")
    for r in measure(m, iters, procs):
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        label = " (oversubscribed)" if r["oversubscribed"] else ""
        print(f"{r['processes']:5d}  {r['s_per_iter'] * 1e3:7.3f} ms  {eff:10s}  "
              f"{r['halo_bytes_per_iter']:11.0f}  {r['all_reduce_per_iter']:15.2f}  "
              f"{r['load_before']:.1f}-{r['load_after']:.1f}{label}")
    print("\nMODEL (not measured): one cg iteration on trn1 NeuronCores, float32; inputs in "
          "bench/_distributed.py MODEL")
    print("Poisson  unknowns  cores  halo B/rank  nbrs  local us  halo us  allred us  "
          "iter us  comm %")
    for r in model_rows():
        print(f"{r['poisson']:7s}  {r['unknowns']:8.0e}  {r['neuroncores']:5d}  "
              f"{r['halo_bytes_per_rank']:11d}  {r['halo_neighbours']:4d}  "
              f"{r['t_local_us']:8.1f}  {r['t_halo_us']:7.1f}  {r['t_allreduce_us']:9.1f}  "
              f"{r['t_iter_us']:7.1f}  {100 * r['comm_fraction']:5.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
