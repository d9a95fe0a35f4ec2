"""Cold start: each workload's first call on the XLA lane, in a fresh process.

Per workload, two child processes (``python -m bench._cold_start CHILD-JSON``) share one
empty persistent-cache directory (trnscipy/_cache.py, forced on with TRNSCIPY_CACHE=1):
the first meets an empty cache, the second the cache the first left.  Each child
imports, moves the data to the device (not timed), then times the first call and a
second (warm, in-process) call, and reports torch-xla's counters for the first call:
compilations and their seconds (CompileTime), executions, persistent-cache hits and
failed loads, the largest compiled graph (HLO instructions of the unoptimized module,
from XLA's --xla_dump_to dump: what neuronx-cc would receive) and the process's peak
RSS (VmHWM, the whole process: torch and torch-xla included).  SciPy's
time is the median of a few warm calls in the parent.

A child runs under a wall-clock limit and an RSS cap, watched from the parent (every
0.25 s from /proc): a runaway compile is killed and reported as such, never left to hang
the bench or to meet the kernel's OOM killer.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["cold_start_rows", "COLD_START_METHOD"]

ROOT = Path(__file__).resolve().parent.parent

COLD_START_METHOD = (
    "each workload's first call in a fresh process (python -m bench._cold_start), "
    "PJRT_DEVICE=CPU, float64; data moved to the device before the timer starts; 'cold' = "
    "an empty persistent-cache directory, 'cache' = a second fresh process given the "
    "directory the first one filled (TRNSCIPY_CACHE=1 forces torch-xla's persistent cache "
    "on). Compile seconds = torch-xla's CompileTime total for the first call, including "
    "XLA's HLO dump (--xla_dump_to, used to count HLO instructions of the unoptimized "
    "modules: the largest of all graphs the process compiled, setup included, of how "
    "many). Peak RSS = the child process's VmHWM (torch and torch-xla "
    "included; about 0.8 GB after import). SciPy: median of warm calls in the parent.")

_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?[\w.\-]+ = ")


# ------------------------------------------------------------------ the workloads


def _poisson(k):
    from bench._problems import poisson2d

    return poisson2d(k)


def _problem(spec):
    """Host data of one workload: (scipy_call, device_call_builder, check)."""
    import scipy.linalg as sla
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from bench._problems import convdiff2d, spd_matrix

    kind = spec["kind"]

    def relres(A, b):
        return lambda x: float(np.linalg.norm(b - A @ np.asarray(x[0], dtype=np.float64))
                               / np.linalg.norm(b))

    if kind in ("cg", "gmres"):
        A = _poisson(spec["k"])
        b = np.ones(A.shape[0])
        solver = getattr(spla, kind)

        def device(dev, tsp, tspla, to_t):
            At = tsp.csr_array((to_t(A.data), to_t(A.indices), to_t(A.indptr)), shape=A.shape)
            bt = to_t(b)
            f = getattr(tspla, kind)
            return lambda: f(At, bt, rtol=1e-5)

        return (lambda: solver(A, b, rtol=1e-5)), device, relres(A, b), 1e-4
    if kind == "spsolve":
        A = sp.csc_array(_poisson(spec["k"]))
        b = np.random.default_rng(0).standard_normal(A.shape[0])

        def device(dev, tsp, tspla, to_t):
            At = tsp.csc_array((to_t(A.data), to_t(A.indices), to_t(A.indptr)), shape=A.shape)
            bt = to_t(b)
            return lambda: tspla.spsolve(At, bt)

        return (lambda: spla.spsolve(A, b)), device, relres(A, b), 1e-10
    if kind == "eigsh":
        A = _poisson(spec["k"])
        v0 = np.ones(A.shape[0])
        ref = np.sort(spla.eigsh(A, k=6, sigma=0.0, v0=v0)[0])

        def device(dev, tsp, tspla, to_t):
            import trnscipy

            At, v0t = trnscipy.to_device(A, dev), to_t(v0)
            return lambda: tspla.eigsh(At, k=6, sigma=0.0, v0=v0t)

        def check(out):
            return float(np.abs(np.sort(np.asarray(out[0])) - ref).max() / np.abs(ref).max())

        return (lambda: spla.eigsh(A, k=6, sigma=0.0, v0=v0)), device, check, 1e-8
    if kind == "lsqr":
        m, n = spec["shape"]
        A = sp.csr_array(sp.random(m, n, density=0.005, random_state=0, format="csr")
                         + sp.eye(m, n))
        b = np.random.default_rng(0).standard_normal(m)
        tols = {"atol": 1e-10, "btol": 1e-10}
        ref = spla.lsqr(A, b, **tols)[0]

        def device(dev, tsp, tspla, to_t):
            import trnscipy

            At, bt = trnscipy.to_device(A, dev), to_t(b)
            return lambda: tspla.lsqr(At, bt, **tols)

        def check(out):
            return float(np.linalg.norm(np.asarray(out[0]) - ref) / np.linalg.norm(ref))

        return (lambda: spla.lsqr(A, b, **tols)), device, check, 1e-8
    if kind in ("cholesky", "solve", "eigh"):
        n = spec["n"]
        A = spd_matrix(n, np.float64)
        b = np.ones(n)
        args = (A, b) if kind == "solve" else (A,)
        scipy_f = getattr(sla, kind)
        ref = scipy_f(*args)
        ref0 = ref[0] if kind == "eigh" else ref

        def device(dev, tsp, tspla, to_t):
            import trnscipy.linalg as tla

            f, targs = getattr(tla, kind), tuple(to_t(a) for a in args)
            return lambda: f(*targs)

        def check(out):
            got = np.asarray(out[0])
            return float(np.linalg.norm(got - ref0) / np.linalg.norm(ref0))

        return (lambda: scipy_f(*args)), device, check, 1e-10
    if kind == "ilu_gmres":
        A = sp.csc_array(convdiff2d(spec["k"]))
        b = np.ones(A.shape[0])
        opts = {"drop_tol": 1e-4, "fill_factor": 10}

        def scipy_call():
            ilu = spla.spilu(A, **opts)
            M = spla.LinearOperator(A.shape, ilu.solve)
            return spla.gmres(A, b, M=M, rtol=1e-10, restart=30)

        def device(dev, tsp, tspla, to_t):
            import trnscipy

            At, bt = trnscipy.to_device(A, dev), to_t(b)

            def run():
                ilu = tspla.spilu(At, **opts)
                M = tspla.LinearOperator(At.shape, ilu.solve, dtype=At.dtype)
                return tspla.gmres(At, bt, M=M, rtol=1e-10, restart=30)

            return run

        return scipy_call, device, relres(A, b), 1e-8
    raise ValueError(f"unknown cold-start workload {kind!r}")


# ------------------------------------------------------------------ the child process


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _largest_graph(dump_dir):
    """(modules compiled, HLO instructions of the largest unoptimized module)."""
    sizes = []
    for path in Path(dump_dir).glob("*before_optimizations.txt"):
        with open(path) as f:
            sizes.append(sum(1 for line in f if _INSTRUCTION.match(line)))
    return len(sizes), max(sizes, default=0)


def _child(spec):
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    import trnscipy
    import trnscipy.sparse as tsp
    import trnscipy.sparse.linalg as tspla
    from trnscipy._metrics import _flush, xla_counts

    dev = trnscipy.resolve_device("xla")
    _, build, check, _ = _problem(spec)

    def to_t(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

    call = build(dev, tsp, tspla, to_t)
    _flush()
    rss_before = _peak_rss_bytes()

    def compile_ns():
        data = met.metric_data("CompileTime")
        return data[1] if data else 0.0

    def counter(name):
        return met.counter_value(name) or 0

    out = {}
    for phase in ("first", "second"):
        ns0 = compile_ns()
        hits0, fails0 = counter("PersistentCacheHit"), counter("PersistentCacheDeserializeFailure")
        t0 = time.perf_counter()
        with xla_counts() as counts:
            result = call()
        wall = time.perf_counter() - t0
        host = tuple(r.cpu().numpy() if hasattr(r, "cpu") else r for r in _as_tuple(result))
        out[phase] = {"wall_s": wall, "compilations": counts.compilations,
                      "executions": counts.executions,
                      "compile_s": (compile_ns() - ns0) / 1e9,
                      "cache_hits": counter("PersistentCacheHit") - hits0,
                      "cache_load_failures":
                          counter("PersistentCacheDeserializeFailure") - fails0,
                      "check": check(host)}
    out["rss_before_bytes"] = rss_before
    out["peak_rss_bytes"] = _peak_rss_bytes()
    out["torch_xla"] = torch_xla.__version__
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------ the parent side


def _rss_bytes(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _peak_rss_bytes():
    """This process's peak RSS.  Not ru_maxrss: Linux carries that over from the parent
    that forked the child (across exec), so every child reported the bench's own peak."""
    return _rss_bytes("self", "VmHWM")


def _run_child(spec, cache_dir, dump_dir, timeout_s, rss_cap):
    env = dict(os.environ, PJRT_DEVICE="CPU", TRNSCIPY_CACHE="1",
               TRNSCIPY_CACHE_DIR=str(cache_dir), TRNSCIPY_STRICT="1",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump_dir} "
                         "--xla_dump_hlo_as_text".strip())
    env.pop("XLA_PERSISTENT_CACHE_PATH", None)
    env.pop("TRNSCIPY_EMULATE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    shutil.rmtree(dump_dir, ignore_errors=True)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "bench._cold_start", json.dumps(spec)],
                                cwd=ROOT, env=env, stdout=out, stderr=err)
        peak, killed = 0, None
        while proc.poll() is None:
            time.sleep(0.25)
            peak = max(peak, _rss_bytes(proc.pid))
            elapsed = time.perf_counter() - t0
            if peak > rss_cap:
                killed = f"killed at {peak / 1e9:.1f} GB RSS (cap {rss_cap / 1e9:.0f} GB)"
            elif elapsed > timeout_s:
                killed = f"killed at the {timeout_s:.0f} s limit ({peak / 1e9:.1f} GB RSS)"
            if killed:
                proc.kill()
                proc.wait()
                break
        elapsed = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    modules, largest = _largest_graph(dump_dir)
    shutil.rmtree(dump_dir, ignore_errors=True)
    entry = {"process_s": elapsed, "graphs_dumped": modules, "largest_graph_hlo": largest}
    if killed:
        entry.update(status="error", reason=f"{killed}, after {elapsed:.0f} s",
                     observed_peak_rss_bytes=peak)
        return entry
    if proc.returncode != 0 or not stdout.strip():
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        entry.update(status="error", reason=f"exit {proc.returncode}: "
                     + (lines[-1][:160] if lines else "no output"))
        return entry
    entry.update(json.loads(stdout.strip().splitlines()[-1]))
    entry["status"] = "ok"
    return entry


def _scipy_time(call, reps=5):
    call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times


def cold_start_rows(cfg, log=print):
    """The cold-start rows of this profile (each a JSON-ready dict)."""
    rows = []
    timeout_s, rss_cap = cfg.get("timeout_s", 300), cfg.get("rss_cap_gb", 6) * 1e9
    for spec in cfg["workloads"]:
        spec = dict(spec)
        name = spec.pop("name")
        scipy_call, _, check, tol = _problem(spec)
        median, samples = _scipy_time(scipy_call)
        scipy_check = check(_as_tuple(scipy_call()))
        row = {"section": "cold_start", "workload": name, "params": dict(spec),
               "lanes": {"scipy": {"status": "ok", "median_s": median, "reps": len(samples),
                                   "samples_s": samples, "check": scipy_check}}}
        with tempfile.TemporaryDirectory(prefix="trnscipy-cold-") as tmp:
            cache, dump = Path(tmp) / "cache", Path(tmp) / "dump"
            limit = spec.get("timeout_s", timeout_s)
            cold = _run_child(spec, cache, dump, limit, rss_cap)
            row["lanes"]["cold"] = cold
            if cold["status"] == "ok":
                row["lanes"]["cache"] = _run_child(spec, cache, dump, limit, rss_cap)
            else:
                row["lanes"]["cache"] = {"status": "n/a", "reason": "the cold process failed"}
            row["cache_files"] = sum(1 for p in cache.rglob("*") if p.is_file())
        for lane in ("cold", "cache"):
            e = row["lanes"][lane]
            if e["status"] != "ok":
                continue
            e.update(median_s=e["first"]["wall_s"], reps=1, samples_s=[e["first"]["wall_s"]],
                     ratio_vs_scipy=e["first"]["wall_s"] / median)
            if not e["first"]["check"] <= tol:
                e.update(status="wrong", reason=f"differs from SciPy: check "
                         f"{e['first']['check']:.2e} > {tol:g}")
        row["lanes"]["scipy"]["ratio_vs_scipy"] = 1.0
        rows.append(row)
        log(_one_line(row))
    return rows


def _one_line(row):
    parts = [f"scipy={row['lanes']['scipy']['median_s'] * 1e3:.3g}ms"]
    for lane in ("cold", "cache"):
        e = row["lanes"][lane]
        if e["status"] == "ok":
            f = e["first"]
            parts.append(f"{lane}={f['wall_s']:.2f}s ({f['compilations']} compiles, "
                         f"{f['compile_s']:.1f}s; hits {f['cache_hits']}, "
                         f"rss {e['peak_rss_bytes'] / 1e9:.2f}GB)")
        else:
            parts.append(f"{lane}={e['status']}: {e.get('reason', '')}")
    return f"  {row['workload']}: " + " ".join(parts)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
