"""``python -m bench``: run the benchmarks, print the tables, write the Markdown + JSON.

    python -m bench                 # full run (about half an hour on 2 cores)
    python -m bench --smoke         # tiny sizes, well under a minute (CI)
    python -m bench --only spmv,solvers
    python -m bench --cuda          # add CUDA lanes (torch CUDA, trnscipy CUDA, cupyx.scipy)
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings

# one process compiles a few hundred XLA graphs, and torch-xla's default cache of 2048
# keeps every executable's JIT code mapped: a long process can pass vm.max_map_count (LLVM
# "Cannot allocate memory", then a segfault; docs/design.md, "a capped compilation
# cache").  A graph is reused only within its case here.  (Session 9's two segfaults in
# the double-float eigh rows were a float32 eigh whose one call added 16,000 memory maps; the
# cap alone did not prevent them.)
os.environ.setdefault("XLA_COMPILATION_CACHE_SIZE", "256")
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

SECTIONS = ("copy", "spmv", "bsr", "solvers", "dense", "batch", "lsq", "dsolve", "eigen",
            "double_float", "double_float_families", "defer", "cold_start")
ROOT = Path(__file__).resolve().parent.parent

# Sizes per profile.  "xla_max_work" / "xla_max_n" are the XLA-lane cuts (see the doc).
PROFILES = {
    "full": {
        "timing": {"budget_s": 2.0, "min_reps": 3, "max_reps": 25},
        "copy": {"bytes": 256 * 2**20, "reps": 7},
        "spmv": {"poisson_k": [100, 1000], "random": [(50_000, 1e-3), (10_000, 1e-2)],
                 "N": [1, 16, 128], "xla_max_work": 1e8},
        "bsr": {"block": 128, "shapes": [(4, 4), (4, 8), (8, 4)], "densities": [0.25, 0.5],
                "N": [1, 16, 128], "xla_max_work": 1e8},
        "solvers": {
            "rtol": 1e-5, "xla_max_work": 1e5,
            "cases": [
            # problem, grid k, solver, dtype, maxiter (None: SciPy's default)
            ("poisson2d", 100, "cg", "float64", None),
            ("poisson2d", 100, "cg", "float32", None),
            ("poisson2d", 100, "gmres", "float64", None),
            ("convdiff2d", 100, "gmres", "float64", None),
            ("poisson2d", 1000, "cg", "float64", 100),
            ("poisson2d", 1000, "gmres", "float64", 5),
        ]},
        "dense": {"dtypes": ["float32", "float64"],
                  "ops": {"cholesky": [256, 1024, 2048], "eigh": [256, 1024, 2048],
                          "solve": [256, 1024, 2048], "lu": [256, 1024, 2048],
                          "qr": [256, 1024], "svd": [256, 1024]},
                  "xla_max_n": {"cholesky": 1024, "solve": 1024, "eigh": 256, "svd": 1024,
                                "qr": 1024, "lu": 1024}},
        # (batch, n): one batched call against a Python loop of single solves
        "batch": {"dtypes": ["float32", "float64"], "solve": [(256, 64)]},
        "lsq": {"lsq": [(3000, 800, 0.005)], "expm_grid": [100]},
        "dsolve": {"problems": [("poisson2d", 100), ("poisson2d", 316), ("poisson3d", 20)],
                   "xla_max_work": 2e4},
        "eigen": {"eigsh_grid": [100, 1000], "eigsh_la_max_n": 1e4, "timed_once_above_n": 1e5,
                  "lobpcg_grid": [100], "svds": [(3000, 800, 0.005)],
                  "xla_max_work": 1e4, "xla_shift_invert_max_n": 1e4, "tol": 1e-6},
        "double_float": {"krylov": [("cg", 100), ("gmres", 100)],
                         "dense": {"solve": [256, 1024], "cholesky": [256, 1024],
                                   "eigh": [256, 1024]}},
        # the other families of float64 on Neuron (issue 27), a section of their own
        "double_float_families": {"poisson": [100], "lsq": [(3000, 800, 0.005)],
                                  "expm_grid": [100]},
        "defer": {"n": 4, "grid": 4},
        # first calls in fresh processes (bench/_cold_start.py); per child a wall-clock
        # limit and an RSS cap: spilu + gmres at 10^4 outgrew 24 GB (issue 26), its row
        # reports the kill
        "cold_start": {"timeout_s": 300, "rss_cap_gb": 6, "workloads": [
            {"name": "cg poisson2d 100x100", "kind": "cg", "k": 100},
            {"name": "gmres poisson2d 100x100", "kind": "gmres", "k": 100},
            {"name": "spsolve poisson2d 100x100", "kind": "spsolve", "k": 100},
            {"name": "eigsh k=6 sigma=0 poisson2d 100x100", "kind": "eigsh", "k": 100},
            {"name": "lsqr 3000x800", "kind": "lsqr", "shape": [3000, 800]},
            {"name": "cholesky n=256", "kind": "cholesky", "n": 256},
            {"name": "solve n=256", "kind": "solve", "n": 256},
            {"name": "eigh n=256", "kind": "eigh", "n": 256},
            {"name": "spilu+gmres convdiff2d 4x4", "kind": "ilu_gmres", "k": 4},
            {"name": "spilu+gmres convdiff2d 20x20", "kind": "ilu_gmres", "k": 20},
            {"name": "spilu+gmres convdiff2d 100x100", "kind": "ilu_gmres", "k": 100},
        ]},
    },
    "smoke": {
        "timing": {"budget_s": 0.05, "min_reps": 2, "max_reps": 3},
        "copy": {"bytes": 8 * 2**20, "reps": 3},
        "spmv": {"poisson_k": [8], "random": [(200, 5e-2)], "N": [1, 4]},
        "bsr": {"block": 8, "shapes": [(2, 2)], "densities": [0.5], "N": [4]},
        # one solver keeps the CI smoke run short (each XLA solver compiles a few graphs)
        "solvers": {"rtol": 1e-5, "cases": [("poisson2d", 8, "cg", "float64", None)]},
        "dense": {"dtypes": ["float64"], "ops": {"cholesky": [16], "solve": [16]}},
        "batch": {"dtypes": ["float64"], "solve": [(4, 8)]},
        "dsolve": {"problems": [("poisson2d", 3)]},
        # (smoke: the eigensolvers' XLA first calls compile for 10-30 s whatever n: lobpcg's
        # iteration graphs, eigsh's cycle; the XLA lane's eigen path is in tests/sparse/linalg)
        "eigen": {"eigsh_grid": [6], "lobpcg_grid": [8], "svds": [(60, 30, 0.1)], "tol": 1e-6,
                  "xla_max_work": 0, "xla_shift_invert_max_n": 0},
        "double_float": {"dense": {"solve": [16]}},
        "defer": {"n": 4, "grid": 4},
        "cold_start": {"timeout_s": 240, "rss_cap_gb": 4, "workloads": [
            {"name": "cg poisson2d 8x8", "kind": "cg", "k": 8}]},
    },
}

# what each profile leaves out on purpose (printed in the doc)
CUTS = {
    "full": [
        "svd at n=2048 and qr at n=2048 (SciPy alone needs seconds per call on 2 cores).",
        "Poisson 10^6 solves are capped (cg maxiter=100, gmres maxiter=5 restarts of 20) so "
        "every lane does the same, affordable number of iterations; the true residual per "
        "lane is reported.",
        "cg on convection-diffusion: the matrix is nonsymmetric, cg does not apply; gmres "
        "only.",
        "XLA lane (PJRT CPU) above its size limits: nnz x N (stored values x N for BSR) > "
        "1e8 for SpMV/SpMM (the N=128 rows of the large CSR matrices), more than "
        "10^5 unknowns for solvers, cholesky/solve/lu/qr/svd n > 1024, eigh n > 256: "
        "marked cut in the tables.",
        "eigsh k=6 LA on Poisson 10^6: ARPACK itself needs about 400 restarts at 10^4 "
        "(5.8 s); at 10^6 it had converged none of the 6 after 20 restarts (88 s): far "
        "beyond the budget. The shift-invert row at 10^6 (SuperLU's factorization: about "
        "100 s) is one timed call per lane. XLA lane: the eigensolvers above 10^4 unknowns "
        "(the device LU's dense w x w blocks: w = 1000 at 10^6, 10^3 blocks of 8 MB each "
        "per stack; beyond PJRT CPU's time and this machine's memory).",
    ],
    "smoke": ["smoke profile: tiny sizes and few cases for CI (no gmres, no eigh); the "
              "figures mean nothing."],
}

LANE_WHERE = {
    "scipy": "SciPy on NumPy arrays / SciPy sparse, this machine's CPU.",
    "jax": "JAX on its XLA CPU backend (the backend the XLA lane compiles for): "
           "jax.scipy.sparse.linalg.cg on a BCOO matrix, the whole solve under one jax.jit; "
           "float32 cg rows only (JAX's default precision).",
    "torch": "hand-written torch on CPU tensors: torch.sparse_csr_tensor / "
             "sparse_bsr_tensor @ dense (int32 indices) for products, torch.linalg for "
             "dense; no torch solver exists for cg/gmres.",
    "trn_cpu": "trnscipy public API on CPU torch tensors (trnscipy.sparse.csr_array((data, "
               "indices, indptr)), A @ x, trnscipy.sparse.linalg.cg, trnscipy.linalg.*).",
    "trn_xla": "the same trnscipy calls on torch_xla.device() with PJRT_DEVICE=CPU "
               "(the lazy-tensor route torch-neuronx uses; runs on this CPU, not Trainium). "
               "Each timed call ends with torch_xla.sync() + wait_device_ops().",
    "torch_cuda": "hand-written torch on CUDA tensors.",
    "trn_cuda": "trnscipy on CUDA tensors.",
    "cupy": "cupyx.scipy on CUDA.",
    "trn_host": "trnscipy called with NumPy/SciPy inputs (it defers to SciPy).",
}


def _versions():
    import numpy
    import scipy
    import torch

    versions = {"python": platform.python_version(), "numpy": numpy.__version__,
                "scipy": scipy.__version__, "torch": torch.__version__}
    try:
        import torch_xla

        versions["torch_xla"] = torch_xla.__version__
    except ImportError:
        versions["torch_xla"] = "not installed"
    import trnscipy

    versions["trnscipy"] = trnscipy.__version__
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        versions["trnscipy"] += f" (git {commit})"
    except (OSError, subprocess.CalledProcessError):
        pass
    return versions


def _machine():
    import torch

    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = 0.0
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu_model": model, "cores": cores, "memory_gb": memory,
            "torch_threads": torch.get_num_threads(), "gpu": gpu,
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "library default"),
            "platform": platform.platform()}


def copy_bandwidth(cfg):
    import numpy as np

    src = np.ones(cfg["bytes"] // 8)
    dst = np.empty_like(src)
    times = []
    for _ in range(cfg["reps"]):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    median = float(np.median(times))
    return {"array_bytes": src.nbytes, "reps": cfg["reps"], "median_s": median,
            "samples_s": times, "GBps": 2 * src.nbytes / median / 1e9,
            "method": "np.copyto of a float64 array; bytes read + bytes written / time"}


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (CI), seconds")
    p.add_argument("--only", default=",".join(SECTIONS),
                   help=f"comma-separated sections out of {', '.join(SECTIONS)}")
    p.add_argument("--no-xla", action="store_true", help="leave out the XLA lane")
    p.add_argument("--cuda", action="store_true",
                   help="add CUDA lanes (only where torch.cuda.is_available())")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every lane: torch.set_num_threads and OMP/OpenBLAS/MKL "
                        "thread counts (default: the libraries' own). On a machine shared "
                        "with other work, --threads 1 avoids thread-pool stalls")
    p.add_argument("--md", default=str(ROOT / "docs" / "benchmarks.md"),
                   help="Markdown output (default docs/benchmarks.md)")
    p.add_argument("--json", default=str(ROOT / "bench" / "results.json"),
                   help="JSON output (default bench/results.json)")
    p.add_argument("--merge", action="store_true",
                   help="keep the sections of the existing --json that this run does not "
                        "measure (the report names the run each came from)")
    args = p.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def _shown_args(argv):
    """The command-line arguments worth recording (output paths left out)."""
    shown, skip = [], False
    for a in sys.argv[1:] if argv is None else argv:
        if skip:
            skip = False
        elif a in ("--md", "--json"):
            skip = True
        elif not a.startswith(("--md=", "--json=")):
            shown.append(a)
    return shown


def _merge(results, old):
    """Sections (and the copy bandwidth) of an earlier run that this run did not measure,
    each with the run it came from."""
    merged = dict(old.get("merged", {}))
    origin = {k: old["meta"][k] for k in ("command", "date")}
    origin["commit"] = old["meta"]["versions"].get("trnscipy", "")
    for name, rows in old.get("sections", {}).items():
        if name not in results["sections"]:
            results["sections"][name] = rows
            merged.setdefault(name, origin)
    if "copy_bandwidth" not in results and "copy_bandwidth" in old:
        results["copy_bandwidth"] = old["copy_bandwidth"]
        merged.setdefault("copy", origin)
    results["merged"] = {k: v for k, v in merged.items() if k in results["sections"]
                         or (k == "copy" and "copy_bandwidth" in results)}
    if "cold_start" in merged and "cold_start_method" in old["meta"]:  # (its rows' method)
        results["meta"].setdefault("cold_start_method", old["meta"]["cold_start_method"])
    names = {lane["name"] for lane in results["meta"]["lanes"]}  # (the merged rows' lanes)
    results["meta"]["lanes"] += [lane for lane in old["meta"].get("lanes", [])
                                 if lane["name"] not in names]


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.threads:
        if "numpy" in sys.modules:
            print("warning: numpy already imported; --threads may not reach OpenBLAS")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    warnings.filterwarnings("ignore", message="Sparse (CSR|BSR) tensor support is in beta")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from bench import _lsq, _sections
    from bench._double_float import double_float_cases, family_cases
    from bench._dsolve import dsolve_cases
    from bench._eigen import eigen_cases
    from bench._harness import MEMORY_METHOD, Lane, Profile, lanes_for, measure
    from bench._model import MODEL, add_model
    from bench._plots import write_plots
    from bench._report import markdown

    # read before the run: each finished section rewrites --json
    previous = json.loads(Path(args.json).read_text()) if args.merge and \
        Path(args.json).exists() else None
    profile_name = "smoke" if args.smoke else "full"
    cfg = PROFILES[profile_name]
    profile = Profile(profile_name, **cfg["timing"])
    lanes = lanes_for(with_xla=not args.no_xla, with_cuda=args.cuda)
    started = time.perf_counter()
    command = "python -m bench" + "".join(f" {shlex.quote(a)}" for a in _shown_args(argv))
    meta = {
        "command": command, "profile": profile_name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(), "versions": _versions(),
        "lanes": [{"name": lane.name, "label": lane.label, "where": LANE_WHERE[lane.name]}
                  for lane in lanes],
        "timing_method": (
            "per case, each lane makes one cold call (XLA counts, result checked against "
            "SciPy), one warm call (memory probe; XLA counts), then "
            f"{profile.min_reps}-{profile.max_reps} interleaved repetitions (the lane order "
            "rotates, and reverses every other repetition, so no lane always runs after the same "
            "one; calls under 2 ms are batched; a 5 ms pause before each "
            "batch lets the previous lane's thread pools go idle); the median per call is "
            "reported. Every call of a device lane includes its synchronisation."),
        "memory_method": MEMORY_METHOD,
        "loadavg_start": os.getloadavg()[0],
        "load_note": os.environ.get("BENCH_LOAD_NOTE", ""),
    }
    if not any(lane.name == "jax" for lane in lanes):
        meta["jax"] = "jax is not installed: the JAX lane (cg against JAX) is skipped"
    if args.cuda and not any(lane.name == "trn_cuda" for lane in lanes):
        meta["cuda"] = "requested, but torch.cuda is not available here: no CUDA lanes"
    results = {"meta": meta, "model": MODEL, "cut": CUTS[profile_name], "sections": {}}
    print(f"trnscipy bench ({profile_name}); lanes: {', '.join(lane.name for lane in lanes)}")

    if "copy" in args.only:
        results["copy_bandwidth"] = copy_bandwidth(cfg["copy"])
        print(f"copy bandwidth: {results['copy_bandwidth']['GBps']:.1f} GB/s")
    makers = {"spmv": lambda: _sections.spmv_cases(cfg["spmv"], lanes),
              "bsr": lambda: _sections.bsr_cases(cfg["bsr"], lanes),
              "solvers": lambda: _sections.solver_cases(cfg["solvers"], lanes),
              "dense": lambda: _sections.dense_cases(cfg["dense"], lanes),
              "batch": lambda: _sections.batch_cases(cfg["batch"], lanes),
              "lsq": lambda: _lsq.lsq_cases(cfg["lsq"], lanes),
              "dsolve": lambda: dsolve_cases(cfg["dsolve"], lanes),
              "eigen": lambda: eigen_cases(cfg["eigen"], lanes),
              "double_float": lambda: double_float_cases(cfg["double_float"], lanes),
              "double_float_families": lambda: family_cases(cfg["double_float_families"],
                                                            lanes)}
    for section in ("spmv", "bsr", "solvers", "dense", "batch", "lsq", "dsolve", "eigen",
                    "double_float", "double_float_families"):
        if section not in args.only or section not in cfg:  # (smoke: no lsq)
            continue
        print(f"[{section}]")
        rows = results["sections"][section] = []
        for case in makers[section]():
            row = measure(case, lanes, profile)
            add_model(row)
            rows.append(row)
        # a long run cut short (a lent GPU's time limit) keeps the sections it finished
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    if "defer" in args.only:
        print("[defer]")
        defer_lanes = [Lane("scipy", "SciPy"),
                       Lane("trn_host", "trnscipy with NumPy/SciPy inputs")]
        defer_profile = Profile(profile_name, budget_s=2 * profile.budget_s,
                                min_reps=max(5, profile.min_reps),
                                max_reps=4 * profile.max_reps, batch_s=20e-3)
        results["sections"]["defer"] = [measure(case, defer_lanes, defer_profile)
                                        for case in _sections.defer_cases(cfg["defer"])]
        meta["lanes"].append({"name": "trn_host", "label": "trnscipy with NumPy/SciPy inputs",
                              "where": LANE_WHERE["trn_host"]})

    if "cold_start" in args.only and not args.no_xla and importlib.util.find_spec("torch_xla"):
        from bench._cold_start import COLD_START_METHOD, cold_start_rows

        print("[cold_start]")
        meta["cold_start_method"] = COLD_START_METHOD
        results["sections"]["cold_start"] = cold_start_rows(cfg["cold_start"])

    results["elapsed_s"] = time.perf_counter() - started
    meta["loadavg_end"] = os.getloadavg()[0]
    if previous is not None:
        _merge(results, previous)
    md_dir = Path(args.md).parent
    results["plots"] = {kind: str(path.relative_to(md_dir))
                        for kind, path in write_plots(results, md_dir / "img").items()}
    text = markdown(results)
    for path, content in ((args.md, text + "\n"),
                          (args.json, json.dumps(results, indent=1, default=str) + "\n")):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content)
    print(text)
    print(f"wrote {args.md} and {args.json} ({results['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
