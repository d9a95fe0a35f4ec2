"""First call of float64 ``svd`` on the emulated Neuron lane, one fresh process per shape.

    PJRT_DEVICE=CPU python -m bench.svd_first_call [MxN[:full] ...]
    # default: 20x12 12x20:full 16x16:full

``scipy.linalg.svd(a, full_matrices=full)`` of a standard normal float64 matrix under
``offload("xla")``, TRNSCIPY_EMULATE=neuron (float64 held as double-float pairs, no
float64 op on the device: the double-float refinement of ``linalg/_refine_orth.py``) and
TRNSCIPY_STRICT=1.  Each shape runs in a child process under a wall limit and an RSS
watchdog (the child's process tree, polled every 0.25 s; killed past ``LIMIT_GB``) and
prints one JSON line: the first call's wall seconds, torch-xla's compilations and their
seconds (CompileTime), executions, the child's peak RSS (ru_maxrss: torch and torch-xla
included, about 1 GB after import) and the largest deviation from SciPy's singular
values relative to s_max.
"""

import json
import os
import resource
import subprocess
import sys
import time

from bench.ilu_first_call import _tree_rss

LIMIT_GB = 6.5
LIMIT_S = 900


def _child(spec):
    import numpy as np
    import scipy.linalg as sl
    import torch_xla.debug.metrics as met

    import trnscipy
    import trnscipy.linalg as tl
    from trnscipy._transfer import device_storage

    shape, _, full = spec.partition(":")
    m, n = (int(v) for v in shape.split("x"))
    a = np.random.default_rng(4).standard_normal((m, n))
    with device_storage(trnscipy.resolve_device("xla")), trnscipy.offload("xla"):
        t0 = time.perf_counter()
        u, s, vt = tl.svd(a, full_matrices=bool(full))
        wall = time.perf_counter() - t0
    ct = met.metric_data("CompileTime")
    ex = met.metric_data("ExecuteTime")
    want = sl.svdvals(a)
    print(json.dumps({
        "shape": [m, n], "full_matrices": bool(full), "wall_s": round(wall, 1),
        "compiles": ct[0] if ct else 0, "compile_s": round(ct[1] / 1e9, 1) if ct else 0.0,
        "executions": ex[0] if ex else 0,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "s_err_rel": float(np.abs(s - want).max() / want[0])}), flush=True)


def run_case(spec):
    env = dict(os.environ, TRNSCIPY_STRICT="1", TRNSCIPY_EMULATE="neuron", PJRT_DEVICE="CPU")
    proc = subprocess.Popen([sys.executable, "-m", "bench.svd_first_call", "--child", spec],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    t0, peak, why = time.monotonic(), 0, None
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        if peak > LIMIT_GB * 2**30:
            why = f"killed: RSS over {LIMIT_GB} GB after {time.monotonic() - t0:.0f} s"
        elif time.monotonic() - t0 > LIMIT_S:
            why = f"killed: over {LIMIT_S} s"
        if why:
            proc.kill()
            break
        time.sleep(0.25)
    out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {"case": spec, "error": why or err.strip().splitlines()[-1:],
            "peak_rss_gb": round(peak / 2**30, 2)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        for spec in sys.argv[1:] or ["20x12", "12x20:full", "16x16:full"]:
            print(json.dumps(run_case(spec)), flush=True)
