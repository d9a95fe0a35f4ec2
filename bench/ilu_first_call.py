"""First call of ILU-preconditioned gmres on the XLA lane, one fresh process per case.

    PJRT_DEVICE=CPU python -m bench.ilu_first_call [k ...]     # default: 40 100

``spilu(A, drop_tol=1e-4, fill_factor=10)``, ``M = LinearOperator(A.shape, ilu.solve)``,
``gmres(A, b, M=M, rtol=1e-10, restart=30)`` on convection-diffusion k x k
(``_problems.convdiff2d``) under TRNSCIPY_STRICT=1: float64 data under
``offload("xla")``, and float32 device data with ``maxiter=20`` (float32 cannot reach
rtol 1e-10: SciPy's own float32 solve then runs its default 10 k^2 restart cycles).
Each case runs in a child process under a wall limit and an RSS watchdog (the sum over
the child's process tree, polled; it is killed past ``LIMIT_GB``), with XLA's HLO dump
on, and prints one JSON line: for the spilu call and the gmres call (first, then the same
again warm) compilations, compile seconds, executions and seconds; the residual and the
backward error beside SciPy's on the same data; peak RSS; the HLO instruction count of
each compiled graph (loop bodies included).
"""

import glob
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

LIMIT_GB = 6.0
LIMIT_S = 600


def _tree_rss(pid):
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f
                             if line.startswith("VmRSS:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return total


def _hlo_sizes(folder):
    sizes = []
    for path in sorted(glob.glob(f"{folder}/*before_optimizations.txt"), key=os.path.getmtime):
        with open(path) as f:
            sizes.append(sum(1 for line in f if re.match(r"\s*(ROOT )?%?[\w.\-]+ = ", line)))
    return sizes


def run_case(k, mode):
    """One case in a fresh process; returns its JSON record (or the reason it died)."""
    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, TRNSCIPY_STRICT="1", PJRT_DEVICE="CPU",
                   XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text")
        proc = subprocess.Popen([sys.executable, "-m", "bench.ilu_first_call", "--child",
                                 str(k), mode], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        t0, peak, killed = time.time(), 0, None
        while proc.poll() is None:
            rss = _tree_rss(proc.pid)
            peak = max(peak, rss)
            if rss > LIMIT_GB * 2**30 or time.time() - t0 > LIMIT_S:
                killed = f"killed at {rss / 2**30:.1f} GB, {time.time() - t0:.0f} s"
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.25)
        lines = proc.stdout.read().strip().splitlines()
        record = json.loads(lines[-1]) if lines and not killed else {"k": k, "mode": mode}
        record.update(peak_rss_gb=round(peak / 2**30, 2), wall_s=round(time.time() - t0, 1),
                      hlo_per_graph=_hlo_sizes(dump))
        if killed or proc.returncode:
            record["failed"] = killed or f"exit status {proc.returncode}"
        return record


def _child(k, mode):
    import numpy as np
    import scipy.sparse.linalg as spla
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from bench._problems import convdiff2d

    def snap():
        torch_xla.sync()
        xm.wait_device_ops()
        c, e = met.metric_data("CompileTime"), met.metric_data("ExecuteTime")
        return time.time(), c[0] if c else 0, (c[1] if c else 0) / 1e9, e[0] if e else 0

    def cost(a, b):
        return {"s": round(b[0] - a[0], 2), "compilations": b[1] - a[1],
                "compile_s": round(b[2] - a[2], 2), "executions": b[3] - a[3]}

    dtype = np.float32 if mode == "float32" else np.float64
    maxiter = 20 if mode == "float32" else None
    A = convdiff2d(k, dtype=dtype).tocsc()
    b = np.random.default_rng(0).standard_normal(A.shape[0]).astype(dtype)
    A64 = A.astype(np.float64)

    def quality(x):
        x = np.asarray(x, dtype=np.float64)
        r = b - A64 @ x
        return {"relres": float(np.linalg.norm(r) / np.linalg.norm(b)),
                "berr": float(np.linalg.norm(r) / (abs(A64).sum(1).max() * np.linalg.norm(x)
                                                   + np.linalg.norm(b)))}

    t = time.time()
    ref_ilu = spla.spilu(A, drop_tol=1e-4, fill_factor=10)
    ref, ref_info = spla.gmres(A, b, M=spla.LinearOperator(A.shape, ref_ilu.solve, dtype=dtype),
                               rtol=1e-10, restart=30, maxiter=maxiter)
    record = {"k": k, "n": A.shape[0], "mode": mode, "maxiter": maxiter,
              "scipy": {"info": ref_info, "s": round(time.time() - t, 3), **quality(ref)}}

    def call():
        s0 = snap()
        if mode == "float32":
            dev = torch_xla.device()
            dA, db = trnscipy.to_device(A, dev), trnscipy.to_device(b, dev)
            ilu = tsl.spilu(dA, drop_tol=1e-4, fill_factor=10)
            s1 = snap()
            x, info = tsl.gmres(dA, db, M=tsl.LinearOperator(A.shape, ilu.solve), rtol=1e-10,
                                restart=30, maxiter=maxiter)
            x = trnscipy.to_host(x)
        else:
            with trnscipy.offload("xla"):
                ilu = tsl.spilu(A, drop_tol=1e-4, fill_factor=10)
                s1 = snap()
                x, info = tsl.gmres(A, b, M=tsl.LinearOperator(A.shape, ilu.solve),
                                    rtol=1e-10, restart=30)
        s2 = snap()
        return {"spilu": cost(s0, s1), "gmres": cost(s1, s2), "info": info, **quality(x)}

    record["first"] = call()
    record["warm"] = call()
    record["child_maxrss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                      / 2**20, 2)
    print(json.dumps(record), flush=True)


def main(argv):
    if argv[:1] == ["--child"]:
        return _child(int(argv[1]), argv[2])
    for k in [int(a) for a in argv] or [40, 100]:
        for mode in ("float64", "float32"):
            print(json.dumps(run_case(k, mode)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
