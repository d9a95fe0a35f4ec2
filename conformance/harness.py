"""Running cases: paired execution through SciPy and trnscipy, one lane at a time.

Outcome of one case on one lane:
    conforms         same exception type, or same result kind and values within tolerance,
                     computed on the lane's device
    host             conforms, but the work ran on the host with a DeviceFallbackWarning
                     (or DeviceUnsupportedError under TRNSCIPY_STRICT=1)
    differs          anything else, including arithmetic on the device in a dtype the lane's
                     device has not (xla-neuron: float64, complex) without a
                     DeviceFallbackWarning (conformance.device_ops); the reason says what
    not-implemented  the inputs cannot be put on the lane, or the name is SciPy's own
                     object (no device route) and does not conform

Status of a public name on a lane: ``differs`` if any of its cases differs, else
``not-implemented`` if any case is, else ``host`` if every case ran on the host, else
``conforms`` (the dtypes that went to the host are listed).  Names without a case take
their status from their route: ``host`` (host-only wrapper), ``untested`` (device route
without a case), ``scipy-object`` (classes, modules, constants: N/A).
"""

import contextlib
import dataclasses
import time
import traceback
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from conformance.compare import RTOL, kind_diff, to_host, values_diff
from conformance.device_ops import DeviceArithmetic

__all__ = ["Outcome", "run_case", "run_lane", "name_status", "STATUSES"]

STATUSES = ("conforms", "host", "differs", "not-implemented", "untested", "scipy-object")


@dataclass
class Outcome:
    case: str
    status: str
    reason: str = ""
    dtype: str = ""
    seconds: float = 0.0
    compilations: int | None = None  # XLA graph compilations of the trnscipy call
    executions: int | None = None  # XLA graph executions of the trnscipy call


def _call(case, fn, args, kwargs):
    np.random.seed(0)  # functions that draw from NumPy's global generator (onenormest)
    if case.call is not None:
        return case.call(fn, *args, **kwargs)
    return fn(*args, **kwargs)


def _describe(exc):
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def _route(case):
    from trnscipy._mirror import route_of

    return route_of(case.function("trnscipy"))


def run_case(case, lane):
    """Run ``case`` through SciPy and through trnscipy on ``lane``; an Outcome."""
    from trnscipy import DeviceFallbackWarning, DeviceUnsupportedError, Float32StorageWarning

    dtype = "" if case.dtype is None else np.dtype(case.dtype).name
    args, kwargs = case.inputs()
    expected = exp_err = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = _call(case, case.function("scipy"), args, kwargs)
        except Exception as exc:  # SciPy's exception is part of the spec
            exp_err = exc

    args, kwargs = case.inputs()
    if case.device_kwarg and not lane.host_results:
        if _route(case) != "device":
            return Outcome(case.id, "not-implemented",
                           "no device= keyword: with no array input it builds only on the host",
                           dtype)
        kwargs["device"] = lane.device
    try:
        with lane.context():
            args = lane.put(args)
            kwargs = {k: lane.put(v) for k, v in kwargs.items()}
    except Exception as exc:
        return Outcome(case.id, "not-implemented",
                       f"inputs cannot be put on the lane: {_describe(exc)}", dtype)

    actual = act_err = counts = None
    counter = contextlib.nullcontext()
    if lane.device_type == "xla":
        from trnscipy._metrics import xla_counts

        counter = xla_counts()  # syncs after the call: lazy XLA errors surface here
    arithmetic = contextlib.nullcontext()
    if lane.host_dtypes and not lane.host_results:
        from trnscipy._dtypes import to_torch_dtype

        arithmetic = DeviceArithmetic(lane.device_type,
                                      [to_torch_dtype(d) for d in lane.host_dtypes])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with lane.context(), counter as counts, arithmetic:
                actual = _call(case, case.function("trnscipy"), args, kwargs)
        except DeviceUnsupportedError:
            return Outcome(case.id, "host", "DeviceUnsupportedError (strict mode)", dtype)
        except Exception as exc:
            act_err = exc
    with lane.context(), warnings.catch_warnings():  # read back as the lane's device holds them
        warnings.simplefilter("ignore", DeviceFallbackWarning)
        result = _judge(case, lane, dtype, expected, exp_err, actual, act_err,
                        any(issubclass(w.category, DeviceFallbackWarning) for w in caught),
                        getattr(arithmetic, "ops", ()))
    if any(issubclass(w.category, Float32StorageWarning) for w in caught):
        if result.status == "conforms":
            result = Outcome(case.id, "differs", "computed from float64 data held as "
                             "float32 (Float32StorageWarning)", dtype)
        elif result.status == "differs":
            result.reason += " (announced: Float32StorageWarning)"
    if counts is not None:
        result.compilations, result.executions = counts.compilations, counts.executions
    return result


def _judge(case, lane, dtype, expected, exp_err, actual, act_err, warned, arithmetic=()):
    """The Outcome of a paired call from SciPy's and trnscipy's results or exceptions;
    ``arithmetic``: the ops the call computed on the device in dtypes it cannot compute
    in (conformance.device_ops)."""
    def outcome(status, reason=""):
        if status != "conforms" and status != "host" and _route(case) == "scipy":
            status = "not-implemented"
            reason = f"SciPy's own object, no device route: {reason}"
        return Outcome(case.id, status, reason, dtype)

    if exp_err is not None or act_err is not None:
        if exp_err is None:
            return outcome("differs", f"trnscipy raised {_describe(act_err)}; SciPy returned "
                                      f"{type(expected).__name__}" + _where(act_err))
        if act_err is None:
            return outcome("differs", f"SciPy raised {_describe(exp_err)}; trnscipy returned "
                                      f"{type(actual).__name__}")
        if not isinstance(act_err, type(exp_err)):
            return outcome("differs", f"trnscipy raised {_describe(act_err)}; SciPy raised "
                                      f"{_describe(exp_err)}" + _where(act_err))
        return outcome("host" if warned else "conforms")

    if arithmetic and not warned and _route(case) != "scipy":
        return outcome("differs", f"computed on a {lane.name} device in a dtype it has not, "
                                  f"without a DeviceFallbackWarning: {', '.join(arithmetic)}")
    if warned and _beyond_2d(expected, actual):  # no device container holds it: SciPy's
        reason = values_diff(expected, actual, _rtol(case))  # object, announced
        return outcome("differs", reason) if reason else outcome(
            "host", f"SciPy's {expected.ndim}-D {type(expected).__name__} on the host "
                    "(device sparse containers are 1-D or 2-D)")
    try:
        reason = kind_diff(expected, actual, lane)
        if reason is None:
            host = to_host(actual)
            if case.judge is not None:
                reason = case.judge(case, expected, host)
            else:
                reason = values_diff(expected, host, _rtol(case))
    except Exception as exc:
        reason = f"comparing results raised {_describe(exc)}" + _where(exc)
    if reason:
        return outcome("differs", reason)
    if warned:
        return outcome("host")
    if arithmetic and _route(case) != "scipy":
        return outcome("differs", f"computed on a {lane.name} device in a dtype it has not, "
                                  f"without a DeviceFallbackWarning: {', '.join(arithmetic)}")
    return outcome("conforms")


def _beyond_2d(expected, actual):
    """A sparse result of more than 2 dimensions returned as SciPy's own host object."""
    return (sp.issparse(expected) and expected.ndim > 2 and type(actual) is type(expected))


def _rtol(case):
    """The case's rtol; by default a float32 (complex64) case is judged at float32's
    tolerance even where SciPy returns float64 (its det, expm_cond ... of float32 input are
    float32-accurate), else the result dtype's."""
    if case.rtol is not None:
        return case.rtol
    dtype = np.dtype(case.dtype) if case.dtype is not None else None
    return RTOL[dtype] if dtype in (np.dtype(np.float32), np.dtype(np.complex64)) else None


def _where(exc):
    """' (at file:line)' of the innermost trnscipy frame of a traceback, for triage."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "trnscipy" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename.split('trnscipy/', 1)[-1]}:{f.lineno})"


def xla_selection(cases, lane, profile):
    """The cases that run on an XLA lane (every op and shape compiles there).

    Those marked ``xla``; with ``profile.xla_per_name`` set, at most that many per public
    name of the dtypes the lane computes on device, plus, on a lane with host dtypes
    (xla-neuron), one case of a host dtype (cheap: it checks the fallback warning).
    Bad-input cases and cases marked ``xla_always`` always run.  The profile's ``skip``
    for the lane is taken out of the selection last (no other case stands in).
    """
    skip = profile.skip.get(lane.name, ())
    if skip:
        return [case for case in xla_selection(cases, lane, dataclasses.replace(
            profile, skip={})) if case.id not in skip]
    if profile.xla_per_name is None:
        return [case for case in cases if case.xla]
    chosen, device_count, host_seen = [], {}, set()
    for case in cases:
        if not case.xla:
            continue
        if not (case.tag.startswith("bad-") or case.xla_always):
            if lane.expects_host(case.dtype):
                if case.name in host_seen:
                    continue
                host_seen.add(case.name)
            else:
                if device_count.get(case.name, 0) >= profile.xla_per_name:
                    continue
                device_count[case.name] = device_count.get(case.name, 0) + 1
        chosen.append(case)
    return chosen


def run_lane(cases, lane, profile, progress=None):
    """Outcomes of ``cases`` on ``lane`` ({case id: Outcome}) and the seconds it took."""
    start = time.perf_counter()
    out = {}
    if lane.device_name == "xla":
        cases = xla_selection(cases, lane, profile)
    for case in cases:
        t0 = time.perf_counter()
        out[case.id] = run_case(case, lane)
        out[case.id].seconds = time.perf_counter() - t0
        if progress:
            progress(lane, out[case.id])
    return out, time.perf_counter() - start


def name_status(name_cases, outcomes, route):
    """(status, detail) of a public name on a lane from its cases' outcomes."""
    ran = [outcomes[c] for c in name_cases if c in outcomes]
    if not ran:
        if route == "host":
            return "host", "host-only wrapper (route; no case)"
        if route == "device":
            return "untested", "device route; no case ran on this lane in this profile"
        return "scipy-object", ""
    differs = [o for o in ran if o.status == "differs"]
    if differs:
        return "differs", f"{differs[0].case}: {differs[0].reason}" + (
            f" (+{len(differs) - 1} more cases)" if len(differs) > 1 else "")
    missing = [o for o in ran if o.status == "not-implemented"]
    if missing:
        return "not-implemented", f"{missing[0].case}: {missing[0].reason}"
    host = [o for o in ran if o.status == "host"]
    if len(host) == len(ran):
        return "host", f"{len(ran)} cases, all on the host with a DeviceFallbackWarning"
    detail = f"{len(ran)} cases"
    if host:
        dtypes = sorted({o.dtype for o in host if o.dtype})
        detail += f"; host (warned) for {', '.join(dtypes) or 'some cases'}"
    return "conforms", detail
