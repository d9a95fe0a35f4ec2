"""Lanes, interleaved timing, peak memory and XLA counts for one benchmark case.

A case gives, per lane, a builder: ``build() -> run`` does the untimed setup
(moving data to the lane's device) and returns a zero-argument callable that
performs one call and returns its result.  ``measure`` then makes, per lane:
one cold call (XLA counts, correctness check against the SciPy lane), one
warm call under the memory probe (and the XLA counters), and
``reps`` interleaved timed repetitions (the lane order rotates, and reverses
every other repetition); the reported time is the median.
"""

import ctypes
import gc
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["Lane", "NotAvailable", "Cut", "Case", "Profile", "lanes_for", "measure"]


class NotAvailable(Exception):
    """The lane has no route for this workload (reported as 'n/a', never faked)."""


class Cut(Exception):
    """The lane could run this workload but it was left out to fit the time budget."""


@dataclass
class Lane:
    name: str
    label: str
    device: object = None  # torch.device for torch lanes
    xla: bool = False

    def sync(self):
        if self.xla:
            import torch_xla
            import torch_xla.core.xla_model as xm

            torch_xla.sync()
            xm.wait_device_ops()
        elif self.device is not None and self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        elif self.name == "cupy":
            import cupy

            cupy.cuda.Device().synchronize()


def lanes_for(with_xla=True, with_cuda=False):
    """The lanes of this run, in column order."""
    import torch

    lanes = [Lane("scipy", "SciPy"),
             Lane("torch", "torch (hand-written)", torch.device("cpu")),
             Lane("trn_cpu", "trnscipy CPU tensors", torch.device("cpu"))]
    if with_xla:
        try:
            import torch_xla

            lanes.append(Lane("trn_xla", "trnscipy XLA (PJRT CPU)", torch_xla.device(), xla=True))
        except ImportError:
            pass
    if with_xla:
        try:
            import jax  # noqa: F401

            lanes.append(Lane("jax", "JAX (XLA CPU)"))
        except ImportError:
            pass
    if with_cuda and torch.cuda.is_available():
        cuda = torch.device("cuda")
        lanes += [Lane("torch_cuda", "torch CUDA (hand-written)", cuda),
                  Lane("trn_cuda", "trnscipy CUDA tensors", cuda)]
        try:
            import cupyx.scipy.sparse  # noqa: F401

            lanes.append(Lane("cupy", "cupyx.scipy (CUDA)"))
        except ImportError:
            pass
    return lanes


@dataclass
class Profile:
    name: str
    budget_s: float  # target timed seconds per case (all lanes together)
    min_reps: int
    max_reps: int
    batch_s: float = 2e-3  # calls shorter than this are timed in batches


@dataclass
class Case:
    section: str
    workload: str
    params: dict
    builders: dict  # lane name -> build()
    check: object = None  # (reference host result, lane host result) -> relative error
    tol: float = 1e-8
    bytes_moved: float | None = None  # compulsory memory traffic of one call (model, roofline)
    describe: object = None  # lane host result -> extra fields for the row (e.g. solver info)
    extra: dict = field(default_factory=dict)  # "reps": that many single timed calls, no
    # memory probe or batch sizing (rows whose call takes minutes)


# ---------------------------------------------------------------- host views


def to_host(obj):
    """A lane's result as NumPy/SciPy (for checks): tensors, cupy arrays, device sparse."""
    if isinstance(obj, (tuple, list)):
        return tuple(to_host(x) for x in obj)
    if isinstance(obj, (np.ndarray, np.generic, int, float, complex)) or sp.issparse(obj):
        return obj
    if getattr(obj, "_trnscipy_device_object", False):
        return obj.to_scipy()
    if hasattr(obj, "detach"):
        return obj.detach().cpu().resolve_conj().numpy()
    if hasattr(obj, "get"):  # cupy
        return obj.get()
    return obj


def _device_types(obj, out):
    if isinstance(obj, (tuple, list)):
        for x in obj:
            _device_types(x, out)
    elif hasattr(obj, "detach") or getattr(obj, "_trnscipy_device_object", False):
        out.add(obj.device.type)
    elif isinstance(obj, np.ndarray) or sp.issparse(obj):
        out.add("host")
    return out


# ---------------------------------------------------------------- memory


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
        except OSError:
            _LIBC = False
    return _LIBC


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


MEMORY_METHOD = (
    "peak resident-set growth of the process during one warm call: free heap returned to "
    "the OS (malloc_trim), VmHWM reset through /proc/self/clear_refs, then VmHWM - VmRSS "
    "before the call, from /proc/self/status. Same probe for every CPU-side lane (NumPy, "
    "torch CPU, the PJRT CPU device's buffers all live in this process; the XLA lane's "
    "probe includes its graph syncs); memory the allocators already held is not counted, "
    "so small figures are lower bounds. CUDA lanes: torch.cuda.max_memory_allocated growth.")


def peak_memory(lane, run):
    """Bytes of peak memory growth during ``run()`` (None where it cannot be measured)."""
    if lane.device is not None and lane.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = run()
        lane.sync()
        del result
        return torch.cuda.max_memory_allocated() - base
    if lane.name == "cupy":
        return None
    gc.collect()
    libc = _libc()
    if libc:
        libc.malloc_trim(0)
    if not _reset_peak():
        return None
    base = _status_kb("VmRSS")
    result = run()
    lane.sync()
    peak = _status_kb("VmHWM")
    del result
    return max(0, peak - base) * 1024


# ---------------------------------------------------------------- timing


# Pause before each timed batch: OpenMP/OpenBLAS worker threads spin for a while after a
# threaded call, and on 2 cores the previous lane's spinning pool slowed the next lane's
# single-threaded kernel (the same SciPy kernel measured 1.6-2.9x apart in one run).
SETTLE_S = 5e-3


def _timed(lane, run, number):
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    for _ in range(number):
        result = run()
        lane.sync()
    dt = time.perf_counter() - t0
    del result
    return dt / number


def _per_call(lane, run, batch_s):
    """Seconds per call, from batches grown until one lasts a quarter of ``batch_s`` (the
    memory probe's own cost must not size the timed batches: a 15 us call timed one at a
    time is mostly noise)."""
    number = 1
    while True:
        per_call = max(_timed(lane, run, number), 1e-7)
        if per_call * number >= batch_s / 4 or number >= 1000:
            return per_call
        number = min(1000, number * 8)


def _xla_counts(lane, run):
    from trnscipy._metrics import xla_counts

    # wait for the execution inside the block: torch_xla.sync() alone returns before an
    # asynchronous execution finishes, and its ExecuteTime sample would then be missed
    lane.sync()
    reads, fallbacks = _aten_counts()
    with xla_counts() as counts:
        result = run()
        lane.sync()
    reads_after, fallbacks_after = _aten_counts()
    return result, {"compilations": counts.compilations, "executions": counts.executions,
                    "transfers_to_device": counts.transfers_to_device,
                    "transfers_from_device": counts.transfers_from_device,
                    "scalar_reads": reads_after - reads,
                    "aten_cpu_fallbacks": fallbacks_after - fallbacks}


_SCALAR_READ = "aten::_local_scalar_dense"  # .item() / bool(t) / float(t) on a device tensor


def _aten_counts():
    """(scalar reads to Python, other ops torch-xla ran on the host CPU because they do not
    lower to XLA), from torch-xla's aten:: counters: host work on Trainium too."""
    import torch_xla.debug.metrics as met

    names = [n for n in met.counter_names() if n.startswith("aten::")]
    reads = met.counter_value(_SCALAR_READ) or 0 if _SCALAR_READ in names else 0
    others = sum(met.counter_value(n) or 0 for n in names if n != _SCALAR_READ)
    return reads, others


def _first_call(lane, run, entry):
    t0 = time.perf_counter()
    if lane.xla:
        result, counts = _xla_counts(lane, run)
        entry["xla"] = {"cold": counts}
    else:
        result = run()
        lane.sync()
    entry["cold_s"] = time.perf_counter() - t0
    return result


def _error_text(exc):
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:160]


def measure(case, lanes, profile, log=print):
    """Run ``case`` on every lane; return the row (a JSON-ready dict)."""
    from trnscipy import DeviceFallbackWarning

    row = {"section": case.section, "workload": case.workload, "params": case.params,
           "bytes_moved": case.bytes_moved, "lanes": {}}
    runs, reference = {}, None
    for lane in lanes:
        entry = row["lanes"][lane.name] = {}
        build = case.builders.get(lane.name)
        if build is None:
            entry.update(status="n/a", reason="does not apply")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeviceFallbackWarning)
                run = build()
                result = _first_call(lane, run, entry)
        except Cut as exc:
            entry.update(status="cut", reason=str(exc))
            continue
        except NotAvailable as exc:
            entry.update(status="n/a", reason=str(exc))
            continue
        except DeviceFallbackWarning as exc:
            entry.update(status="n/a", reason=f"host fallback: {exc}".splitlines()[0][:160])
            continue
        except Exception as exc:  # a failing route is reported, not hidden
            entry.update(status="error", reason=_error_text(exc))
            continue
        kinds = _device_types(result, set())
        expected = "host" if lane.device is None else lane.device.type
        if lane.name != "cupy" and kinds != {expected}:
            entry.update(status="wrong", reason=f"result on {sorted(kinds)}, not {expected}")
            continue
        host = to_host(result)
        del result
        if lane.name == "scipy":
            reference = host
        if case.describe is not None:
            entry.update(case.describe(host))
        if case.check is not None and reference is not None:
            err = float(case.check(reference, host))
            entry["check_relerr"] = err
            if not err <= case.tol:
                entry.update(status="wrong", reason=f"differs from SciPy: relerr {err:.2e}")
                continue
        entry["status"] = "ok"
        runs[lane.name] = (lane, run)

    # warm call: under the memory probe (and the XLA counters: a repeated shape)
    estimate = {}
    for name, (lane, run) in runs.items() if not case.extra.get("reps") else ():
        entry = row["lanes"][name]
        warm = {}

        def probed(lane=lane, run=run, warm=warm):
            if lane.xla:
                result, warm["counts"] = _xla_counts(lane, run)
                return result
            return run()

        entry["peak_mem_bytes"] = peak_memory(lane, probed)
        estimate[name] = _per_call(lane, run, profile.batch_s)
        if lane.xla:
            entry["xla"]["warm"] = warm["counts"]

    if runs:
        number = {n: max(1, min(1000, math.ceil(profile.batch_s / estimate[n])))
                  if estimate else 1 for n in runs}
        per_rep = sum(estimate[n] * number[n] for n in estimate)
        reps = case.extra.get("reps") or int(
            min(profile.max_reps, max(profile.min_reps, profile.budget_s // per_rep)))
        samples = {n: [] for n in runs}
        names = list(runs)
        for r in range(reps):
            for name in _lane_order(names, r):
                lane, run = runs[name]
                samples[name].append(_timed(lane, run, number[name]))
        for name in runs:
            entry = row["lanes"][name]
            entry.update(median_s=float(np.median(samples[name])), reps=reps,
                         calls_per_rep=number[name], samples_s=samples[name])
    base = row["lanes"].get("scipy", {}).get("median_s")
    for entry in row["lanes"].values():
        if base and entry.get("median_s"):
            entry["ratio_vs_scipy"] = entry["median_s"] / base
    log(_one_line(row))
    return row


def _lane_order(names, r):
    """Repetition ``r``'s lane order: rotated, and reversed every other repetition, so
    each lane follows a different lane from one repetition to the next (a plain rotation
    keeps the cyclic order: the lane after torch's always ran in the wake of torch's
    spinning thread pools, and the SciPy lane never did)."""
    k = (r // 2) % len(names)
    order = names[k:] + names[:k]
    return order[::-1] if r % 2 else order


def _one_line(row):
    parts = []
    for name, e in row["lanes"].items():
        if e.get("status") == "ok":
            parts.append(f"{name}={e['median_s'] * 1e3:.3g}ms")
        else:
            parts.append(f"{name}={e.get('status')}")
    params = " ".join(f"{k}={v}" for k, v in row["params"].items())
    return f"  {row['workload']} {params}: " + " ".join(parts)
