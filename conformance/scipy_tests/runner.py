"""Select SciPy's test files, copy and rewrite them, run them under pytest in each mode,
and collect per-test outcomes."""

import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from conformance.scipy_tests.rewrite import copy_tests, package_name

__all__ = ["MODES", "PROFILES", "available_modes", "select_files", "run", "ModeResult"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# mode -> environment of the pytest subprocess
MODES = {
    "defer": {},
    "cpu": {"TRNSCIPY_OFFLOAD": "cpu"},
    "xla": {"TRNSCIPY_OFFLOAD": "xla", "PJRT_DEVICE": "CPU"},
    "xla-neuron": {"TRNSCIPY_OFFLOAD": "xla", "PJRT_DEVICE": "CPU",
                   "TRNSCIPY_EMULATE": "neuron"},
    "cuda": {"TRNSCIPY_OFFLOAD": "cuda"},
}

# linalg test files that test SciPy's BLAS/LAPACK/Cython wrappers, not public functions
LINALG_EXCLUDED = {"test_blas.py", "test_fblas.py", "test_lapack.py", "test_cython_blas.py",
                   "test_cython_lapack.py", "test_cythonized_array_utils.py",
                   "test_extending.py"}
# scipy.sparse test files for the formats trnscipy mirrors (csr, csc, coo, bsr, dia, 1-D)
SPARSE_FILES = ["test_base.py", "test_csr.py", "test_csc.py", "test_coo.py",
                "test_construct.py", "test_extract.py", "test_arithmetic1d.py",
                "test_common1d.py", "test_indexing1d.py", "test_minmax1d.py",
                "test_array_api.py", "test_matrix_io.py"]
# node id prefixes left out: test_base's lil and dok classes (TestLIL, TestLILMatrix, ...)
# test formats trnscipy does not mirror
DESELECT = ["scipy/sparse/tests/test_base.py::TestLIL", "scipy/sparse/tests/test_base.py::TestDOK"]


def _sparse_linalg_test_packages():
    root = os.path.dirname(importlib.import_module("scipy.sparse.linalg").__file__)
    pkgs = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        if os.path.basename(dirpath) == "tests":
            rel = os.path.relpath(dirpath, os.path.dirname(os.path.dirname(root)))
            pkgs.append("scipy." + rel.replace(os.sep, "."))
    return pkgs


def all_files():
    """Every SciPy test file the runner covers, as ``scipy/.../tests/test_x.py``."""
    files = []
    for pkg in _sparse_linalg_test_packages() + ["scipy.linalg.tests"]:
        d = os.path.dirname(importlib.import_module(pkg).__file__)
        for f in sorted(os.listdir(d)):
            if f.startswith("test_") and f.endswith(".py") and not (
                    pkg == "scipy.linalg.tests" and f in LINALG_EXCLUDED):
                files.append(pkg.replace(".", "/") + "/" + f)
    d = os.path.dirname(importlib.import_module("scipy.sparse.tests").__file__)
    files += ["scipy/sparse/tests/" + f for f in SPARSE_FILES if os.path.exists(
        os.path.join(d, f))]
    return files


# Profiles: mode -> files (None: every file) for the pytest subprocesses.
# "ci" is what conformance/test_scipy_tests.py runs in CI; "full" is the nightly run.
# CI leaves out the files whose tests take longest and mostly repeat functions other files
# cover (batched linalg, the Krylov matrix functions, interpolative, qr_update's 665
# cases, cossin) and sparse's test_base (3,000 tests of the sparse containers).
CI_LEFT_OUT = {
    "scipy/linalg/tests/test_batch.py",
    "scipy/linalg/tests/test_matfuncs.py",
    "scipy/linalg/tests/test_decomp_cossin.py",
    "scipy/linalg/tests/test_decomp_update.py",
    "scipy/linalg/tests/test_interpolative.py",
    "scipy/sparse/linalg/tests/test_expm_multiply.py",
    "scipy/sparse/linalg/tests/test_funm_multiply_krylov.py",
    "scipy/sparse/tests/test_base.py",
}
# every shape compiles on the XLA lanes: small files of the central functions (gcrotmk's
# and lgmres' files take minutes a test there under load; minres' test_x0_is_used_by
# (a callback per iteration) sat idle over 4 minutes on xla, not yet understood; lsqr's
# and onenormest's files took 80-120 s of the xla lane's 573 s under load: full profile).
# Plain xla leaves out norm's and lsmr's files (123 s and 84 s of compiles there);
# xla-neuron leaves out polar's and procrustes' (their float64 tests compile a double-float
# method per shape: 291 s and 182 s of the lane's 806 s under load, 2026-11-27; the
# conformance suite pairs both in float64 there).  The full profile runs them all.
XLA_CI_FILES = [
    "scipy/linalg/tests/test_decomp_cholesky.py",
    "scipy/linalg/tests/test_decomp_polar.py",
    "scipy/linalg/tests/test_procrustes.py",
    "scipy/linalg/tests/test_solve_toeplitz.py",
    "scipy/sparse/linalg/tests/test_interface.py",
]
XLA_NEURON_CI_FILES = [
    "scipy/linalg/tests/test_decomp_cholesky.py",
    "scipy/linalg/tests/test_solve_toeplitz.py",
    "scipy/sparse/linalg/_isolve/tests/test_lsmr.py",
    "scipy/sparse/linalg/tests/test_interface.py",
    "scipy/sparse/linalg/tests/test_norm.py",
]


def _ci_files():
    return [f for f in all_files() if f not in CI_LEFT_OUT]


# pytest arguments per profile: CI runs SciPy's "fast" label (what scipy.test() runs)
PROFILE_ARGS = {"ci": ("-m", "not slow"), "full": ()}
PROFILES = {
    # (defer mode, NumPy inputs handed to SciPy, is nightly: its 9,000 tests take 2 of CI's
    # minutes and see SciPy's own code; the routing of NumPy inputs is tests/test_routing.py)
    "ci": {"cpu": _ci_files, "xla": XLA_CI_FILES,
           "xla-neuron": XLA_NEURON_CI_FILES, "cuda": _ci_files},
    "full": {m: all_files for m in MODES},
}


def available_modes():
    have_torch = importlib.util.find_spec("torch") is not None
    have_xla = have_torch and importlib.util.find_spec("torch_xla") is not None
    have_cuda = False
    if have_torch:
        import torch

        have_cuda = torch.cuda.is_available()
    return [m for m, ok in [("defer", True), ("cpu", have_torch), ("xla", have_xla),
                            ("xla-neuron", have_xla), ("cuda", have_cuda)] if ok]


def select_files(mode, profile="ci", only=None):
    files = PROFILES[profile][mode]
    files = files() if callable(files) else list(files)
    if only:
        files = [f for f in files if any(o in f for o in only)]
    return files


class ModeResult:
    """Outcomes of one mode: ``tests`` node id -> outcome, ``messages`` node id -> the
    failure line, ``fallbacks`` node id -> DeviceFallbackWarning count, ``collect``
    file -> collection error, ``seconds`` wall time, ``cpu_seconds`` the pytest
    process's CPU time."""

    def __init__(self, mode):
        self.mode = mode
        self.tests, self.messages, self.fallbacks, self.collect = {}, {}, {}, {}
        self.seconds = self.cpu_seconds = 0.0
        self.file_seconds = {}  # file -> seconds its tests ran (pytest's durations)
        self.notes = []

    def to_json(self):
        return {"seconds": round(self.seconds, 1), "cpu_seconds": round(self.cpu_seconds, 1),
                "file_seconds": {f: round(t, 1) for f, t in self.file_seconds.items()},
                "tests": self.tests,
                "messages": self.messages, "fallbacks": self.fallbacks,
                "collect": self.collect, "notes": self.notes}

    @classmethod
    def from_json(cls, mode, data):
        r = cls(mode)
        r.tests, r.messages = data["tests"], data.get("messages", {})
        r.fallbacks, r.collect = data.get("fallbacks", {}), data.get("collect", {})
        r.seconds, r.notes = data.get("seconds", 0.0), data.get("notes", [])
        r.cpu_seconds = data.get("cpu_seconds", 0.0)
        r.file_seconds = data.get("file_seconds", {})
        return r


def _scipy_nodeid(nodeid, dirs):
    """``scipy_linalg_tests/test_x.py::T::t`` -> ``scipy/linalg/tests/test_x.py::T::t``."""
    head, sep, rest = nodeid.partition("/")
    return dirs.get(head, head) + sep + rest if sep else nodeid


_CONFTEST = '''\
# SciPy's own fixtures and hooks (markers, xslow skips, thread limits)
from scipy.conftest import *  # noqa: F401,F403
'''
_INI = "[pytest]\n"


def _prepare(dest, files):
    pkgs = sorted({os.path.dirname(f).replace("/", ".") for f in files})
    # sibling test packages a file may import from (test_64bit -> test_base): copy them all
    copy_tests(pkgs, dest)
    with open(os.path.join(dest, "conftest.py"), "w") as fh:
        fh.write(_CONFTEST)
    with open(os.path.join(dest, "pytest.ini"), "w") as fh:
        fh.write(_INI)
    return {package_name(p): p.replace(".", "/") for p in pkgs}


def _copy_path(f):
    """``scipy/linalg/tests/test_x.py[::T]`` -> its path in the copy."""
    d, name = f.split("::")[0].rsplit("/", 1)
    return package_name(d.replace("/", ".")) + "/" + f[len(d) + 1:]


def _args(files):
    """pytest arguments: the copies of ``files`` and the deselections that apply."""
    args = [_copy_path(f) for f in files]
    for prefix in DESELECT:
        if prefix.split("::")[0] in files:
            args += ["--deselect", _copy_path(prefix)]
    return args


def run_mode(mode, files, workdir, dirs, *, timeout=3600, stall=300, extra=(), log=None,
             max_restarts=5):
    """Run ``files`` in ``mode`` under pytest in ``workdir``; a test that crashes the
    process or runs past ``stall`` seconds is recorded ('crashed'/'timeout') and the run
    resumes without it."""
    result = ModeResult(mode)
    record = os.path.join(workdir, f"record-{mode}.jsonl")
    deselect = os.path.join(workdir, f"deselect-{mode}.txt")
    for p in (record, deselect):
        if os.path.exists(p):
            os.remove(p)
    env = dict(os.environ)
    for k in ("TRNSCIPY_OFFLOAD", "TRNSCIPY_EMULATE", "TRNSCIPY_STRICT"):
        env.pop(k, None)
    env.update(MODES[mode])
    env.setdefault("XLA_COMPILATION_CACHE_SIZE", "256")
    env["SCIPY_TESTS_RECORD"] = record
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "pytest", "-p", "conformance.scipy_tests.plugin",
           "-p", "no:cacheprovider", "-q", "--continue-on-collection-errors", "--tb=line",
           "-W", "default::trnscipy.DeviceFallbackWarning", *extra, *_args(files)]
    start = time.monotonic()
    done = set()
    logfh = open(log or os.devnull, "a")  # noqa: SIM115
    for _attempt in range(max_restarts + 1):
        if done:
            env["SCIPY_TESTS_DESELECT"] = deselect
            with open(deselect, "w") as fh:
                fh.write("\n".join(done))
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=logfh,
                                stderr=subprocess.STDOUT, start_new_session=True)
        killed = None
        last_size, last_change = -1, time.monotonic()
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:  # wait4, not poll: the child's CPU time comes with its status
                proc.returncode = os.waitstatus_to_exitcode(status)
                result.cpu_seconds += usage.ru_utime + usage.ru_stime
                break
            time.sleep(1.0)
            size = os.path.getsize(record) if os.path.exists(record) else 0
            now = time.monotonic()
            if size != last_size:
                last_size, last_change = size, now
            if now - start > timeout:
                killed = "timeout (whole run)"
            elif now - last_change > stall:
                killed = "timeout"
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)
        started = _read(record, result, dirs, done)
        if proc.returncode in (0, 1, 5) and not killed:
            break
        if started is None:
            result.notes.append(f"pytest exited with {proc.returncode} outside a test")
            break
        outcome = "timeout" if killed else "crashed"
        result.tests[_scipy_nodeid(started, dirs)] = outcome
        result.messages[_scipy_nodeid(started, dirs)] = (
            f"{outcome}: " + (killed or f"process ended with {proc.returncode}"))
        done.add(started)
        if killed == "timeout (whole run)":
            result.notes.append(f"stopped after {timeout} s; later tests not run")
            break
    logfh.close()
    result.seconds = time.monotonic() - start
    return result


def _read(record, result, dirs, done):
    """Fold the JSON lines of ``record`` into ``result``; returns the node id of a test
    that started and never reported (the crash/timeout), or None."""
    pending = None
    if not os.path.exists(record):
        return None
    with open(record, encoding="utf-8") as fh:
        lines = fh.readlines()
    open(record, "w").close()  # consumed; a resumed run appends afresh
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if "start" in e:
            pending = e["start"]
        elif "test" in e:
            nodeid = _scipy_nodeid(e["test"], dirs)
            if e.get("teardown") and result.tests.get(nodeid) not in ("passed", None):
                continue
            result.tests[nodeid] = e["outcome"]
            file = nodeid.partition("::")[0]
            result.file_seconds[file] = (result.file_seconds.get(file, 0.0)
                                         + e.get("seconds", 0))
            if "message" in e:
                result.messages[nodeid] = e["message"]
            done.add(e["test"])
            if not e.get("teardown"):
                pending = None
        elif "fallback" in e:
            nodeid = _scipy_nodeid(e["fallback"], dirs)
            result.fallbacks[nodeid] = result.fallbacks.get(nodeid, 0) + 1
        elif "collect" in e:
            result.collect[_scipy_nodeid(e["collect"], dirs)] = e["message"][:400]
    return pending


def run(profile="ci", modes=None, only=None, *, keep=None, timeout=3600, progress=print,
        extra=(), jobs=1, on_result=None):
    """Run the profile's files in ``modes`` (default: the profile's modes available
    here), ``jobs`` modes at a time (one pytest process each); ``on_result(mode, result)``
    is called as each mode ends.  Returns {mode: ModeResult}."""
    here = available_modes()
    modes = [m for m in (modes or PROFILES[profile]) if m in here]
    workdir = keep or tempfile.mkdtemp(prefix="trnscipy-scipy-tests-")
    os.makedirs(workdir, exist_ok=True)
    tests = os.path.join(workdir, "tests")
    try:
        every = sorted({f for m in modes for f in select_files(m, profile, only)})
        if os.path.exists(tests):
            shutil.rmtree(tests)
        dirs = _prepare(tests, every)

        def one(mode):
            files = select_files(mode, profile, only)
            progress(f"[{mode}] {len(files)} files ...")
            r = run_mode(mode, files, tests, dirs, timeout=timeout,
                         extra=(*PROFILE_ARGS.get(profile, ()), *extra),
                         log=os.path.join(workdir, f"pytest-{mode}.log"))
            counts = Counter(r.tests.values())
            progress(f"[{mode}] {r.seconds:.0f} s (CPU {r.cpu_seconds:.0f} s)  " + "  ".join(
                f"{k}={v}" for k, v in sorted(counts.items())))
            if on_result is not None:
                on_result(mode, r)
            return r

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return dict(zip(modes, pool.map(one, modes), strict=True))
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
