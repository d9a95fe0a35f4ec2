"""Running the suite, the coverage table (docs/conformance.md), the committed baseline
(conformance/baseline.json) and the regression check against it."""

import datetime
import importlib
import json
import os
import platform
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from conformance.harness import STATUSES, name_status, run_lane
from conformance.lanes import available_lanes
from conformance.registry import PROFILES, all_cases, public_names

__all__ = ["Results", "run", "write_markdown", "write_baseline", "load_baseline",
           "compare_to_baseline", "ROOT", "BASELINE", "DOC"]

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "conformance" / "baseline.json"
DOC = ROOT / "docs" / "conformance.md"

# A name/lane whose baseline status is one of these and whose new status is not is a
# regression.
_GOOD = ("conforms", "host")


@dataclass
class Results:
    profile: str
    lanes: list
    routes: dict  # name -> 'device' / 'host' / 'scipy'
    status: dict  # name -> lane -> (status, detail)
    outcomes: dict  # lane -> {case id: Outcome}
    seconds: dict  # lane -> seconds
    cases_per_name: dict = field(default_factory=dict)
    case_ids: dict = field(default_factory=dict)  # name -> case ids

    def totals(self, lane):
        return Counter(self.status[name][lane][0] for name in self.status)

    def float64_on_device(self, lane):
        """Public names with a float64 case that ran on ``lane``'s device and matched SciPy
        (on xla-neuron: a float64-accurate method with float32 arithmetic only)."""
        ids = {case for name, cases in self.case_ids.items() for case in cases}
        done = {case for case, o in self.outcomes.get(lane, {}).items()
                if o.status == "conforms" and o.dtype == "float64" and case in ids}
        return sorted(name for name, cases in self.case_ids.items() if done & set(cases))


def _route(module, attr):
    from trnscipy._mirror import route_of

    return route_of(getattr(importlib.import_module(f"trnscipy.{module}"), attr))


def run(profile="fast", lanes=None, progress=None):
    """Run every case of ``profile`` on the available ``lanes`` (names; None: all)."""
    prof = PROFILES[profile]
    cases = all_cases(prof)
    names = public_names()
    by_name = defaultdict(list)
    for case in cases:
        if case.name not in names:
            raise ValueError(f"case {case.id} is for {case.name}, not a public SciPy name")
        by_name[case.name].append(case.id)
    routes = {name: _route(*names[name]) for name in names}
    lane_objs = available_lanes(lanes)
    outcomes, seconds = {}, {}
    for lane in lane_objs:
        outcomes[lane.name], seconds[lane.name] = run_lane(cases, lane, prof, progress)
    status = {
        name: {lane.name: name_status(by_name.get(name, []), outcomes[lane.name], routes[name])
               for lane in lane_objs}
        for name in names
    }
    return Results(profile, [lane.name for lane in lane_objs], routes, status, outcomes,
                   seconds, {n: len(c) for n, c in by_name.items()}, dict(by_name))


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _versions():
    import numpy
    import scipy

    out = {"python": platform.python_version(), "numpy": numpy.__version__,
           "scipy": scipy.__version__}
    try:
        import torch

        out["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        import torch_xla

        out["torch_xla"] = torch_xla.__version__
    except ImportError:
        pass
    return out


def write_baseline(results, path=BASELINE):
    data = {
        "profile": results.profile,
        "lanes": results.lanes,
        "status": {name: {lane: {"status": s, "detail": d}
                          for lane, (s, d) in per_lane.items()}
                   for name, per_lane in sorted(results.status.items())},
    }
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


def load_baseline(path=BASELINE):
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def compare_to_baseline(results, baseline):
    """(regressions, improvements): lists of 'name [lane]: old -> new (detail)'."""
    regressions, improvements = [], []
    for name, per_lane in results.status.items():
        old_lanes = baseline["status"].get(name, {})
        for lane, (new, detail) in per_lane.items():
            if lane not in old_lanes:
                continue
            old = old_lanes[lane]["status"]
            if old == new:
                continue
            line = f"{name} [{lane}]: {old} -> {new}" + (f" ({detail})" if detail else "")
            if old in _GOOD and new not in _GOOD:
                regressions.append(line)
            else:
                improvements.append(line)
    return regressions, improvements


_CELL = {"conforms": "conforms", "host": "host", "differs": "**differs**",
         "not-implemented": "not implemented", "untested": "untested", "scipy-object": "N/A"}

_LEGEND = "\n".join([
    "| status | meaning |",
    "|---|---|",
    "| conforms | every case ran on the lane's device and matched SciPy (same exception type,"
    " or same result kind and values within tolerance); `*`: some dtypes (listed under"
    " Details) ran on the host with a DeviceFallbackWarning |",
    "| host | not on device: every case ran on the host with a DeviceFallbackWarning and"
    " matched SciPy; `host†`: no case, the name is a host-only wrapper by its route |",
    "| **differs** | at least one case did not match SciPy; case id and reason under Details |",
    "| not implemented | the inputs could not be put on the lane, the name is SciPy's own"
    " object with no device route and did not conform, or (no array input) it has no"
    " `device=` keyword to build on the lane |",
    "| untested | has a device route but no case ran on this lane |",
    "| N/A | SciPy's own class, module, exception or constant, with no case |",
    "",
])


def _cell(status, detail):
    text = _CELL[status]
    if status == "conforms" and "host (warned)" in detail:
        text += "*"
    if status == "host" and "no case" in detail:
        text += "†"
    return text


def _xla_costs(results, top=15):
    """The cases with the most XLA graph compilations per XLA lane (measured in the run)."""
    lines = []
    for lane in results.lanes:
        counted = [o for o in results.outcomes[lane].values() if o.compilations is not None]
        if not counted:
            continue
        counted.sort(key=lambda o: (-o.compilations, -o.executions))
        total = sum(o.compilations for o in counted)
        lines += [f"### XLA cost on {lane}", "",
                  f"{total} graph compilations over {len(counted)} cases; the most:", "",
                  "| case | compilations | executions | seconds |", "|---|---|---|---|"]
        lines += [f"| `{o.case}` | {o.compilations} | {o.executions} | {o.seconds:.1f} |"
                  for o in counted[:top]]
        lines.append("")
    return (["## XLA graph compilations", "",
             "Counted with `trnscipy._metrics.xla_counts` around each trnscipy call "
             "(seconds are wall time on the machine of the run, for orientation only).", ""]
            + lines) if lines else []


def write_markdown(results, path=DOC, command="python -m conformance --write"):
    lanes = results.lanes
    lines = [
        "# Conformance with SciPy",
        "",
        "<!-- Generated by `python -m conformance --write`; do not edit by hand. -->",
        "",
        "Every public name of `scipy.sparse`, `scipy.sparse.linalg` and `scipy.linalg`, with its",
        "status on each lane, from one run of the conformance suite (`conformance/`): each case",
        "is called through SciPy and through trnscipy with the inputs on the lane, and the two",
        "are compared (exception type, result kind, values; float32 by backward error where",
        "the function has one). See `conformance/harness.py` for the rules.",
        "",
        f"- Command: `{command}` (profile `{results.profile}`)",
        f"- Commit: `{_git('rev-parse', 'HEAD')}`"
        + (" (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no")
           else ""),
        f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in _versions().items())}",
        f"- PJRT_DEVICE={os.environ.get('PJRT_DEVICE', '')}",
        "- Lanes run: " + ", ".join(f"{lane} ({results.seconds[lane]:.0f} s, "
                                   f"{len(results.outcomes[lane])} cases)" for lane in lanes),
        "- Lanes absent on this machine: "
        + (", ".join(x for x in ("cpu", "xla", "xla-neuron", "cuda", "offload")
                     if x not in lanes) or "none"),
        "",
        "Run it: `python -m conformance` (fast profile: fixed seed, about a minute of CPU; "
        "compares with `conformance/baseline.json` and exits 1 on a regression), "
        "`--profile nightly` (ten times the generated examples, every case on the XLA "
        "lanes), `--lanes cpu,xla,...` (a subset), `--write` (rewrite this file and the "
        "baseline), `-v` (print each case that does not conform). "
        "`pytest conformance` runs the `ci` profile against the baseline: the fast one "
        "less the float64 cases on xla-neuron whose double-float methods compile longest "
        "(`CI_SKIP_NEURON` in `conformance/registry.py`; their names keep a float32 case).",
        "",
        "Lanes: `cpu` (torch CPU tensors), `xla` (torch-xla device), `xla-neuron` (xla with "
        "`TRNSCIPY_EMULATE=neuron`: arithmetic on float64/complex values must fall back to "
        "the host with a warning, moving them may stay on the device; the judge records "
        "the torch calls made, see docs/design.md), `cuda`, `offload` (NumPy inputs in "
        "`trnscipy.offload(\"cpu\")`, SciPy's result types expected). In the fast profile "
        "each name runs one device case on the XLA lanes (plus its bad-input cases and a "
        "few sparse methods), since every op and shape compiles there.",
        "",
        "## Totals",
        "",
        "| lane | " + " | ".join(_CELL[s].strip("*") for s in STATUSES) + " |",
        "|---|" + "---|" * len(STATUSES),
    ]
    for lane in lanes:
        t = results.totals(lane)
        lines.append(f"| {lane} | " + " | ".join(str(t.get(s, 0)) for s in STATUSES) + " |")
    if "xla-neuron" in lanes:
        names = results.float64_on_device("xla-neuron")
        lines += ["", f"float64 on the xla-neuron device (float32 storage of float64 "
                  f"emulated): names with a float64 case that ran there with no host fallback "
                  f"(data movement, or a double-float method) and matched SciPy: "
                  f"{len(names)} names" + (": " + ", ".join(f"`{n}`" for n in names)
                                          if names else "")]
    lines += ["", "## Legend", "", _LEGEND]
    details = []
    for module in ("sparse", "sparse.linalg", "linalg"):
        prefix = f"scipy.{module}."
        names = [n for n in results.status if n.startswith(prefix) and "." not in n[len(prefix):]]
        lines += [f"## scipy.{module}", "",
                  "| name | route | cases | " + " | ".join(lanes) + " |",
                  "|---|---|---|" + "---|" * len(lanes)]
        for name in names:
            short = name[len(prefix):]
            cells = [_cell(*results.status[name][lane]) for lane in lanes]
            lines.append(f"| `{short}` | {results.routes[name]} | "
                         f"{results.cases_per_name.get(name, 0)} | " + " | ".join(cells) + " |")
            for lane in lanes:
                status, detail = results.status[name][lane]
                if status in ("differs", "not-implemented") or (
                        status == "conforms" and "host (warned)" in detail):
                    details.append(f"- `{name}` [{lane}] {status}: {detail}")
        lines.append("")
    lines += ["## Details", "", "Differences, missing device routes and host dtypes, per lane:",
              ""] + (details or ["none"]) + [""]
    lines += _xla_costs(results)
    text = "\n".join(lines)
    # keep the SciPy-test section (python -m conformance.scipy_tests --write) of the old file
    old = Path(path).read_text() if Path(path).exists() else ""
    begin, end = "<!-- scipy-tests:begin", "<!-- scipy-tests:end -->"
    if begin in old and end in old:
        block = begin + old.split(begin, 1)[1].split(end, 1)[0] + end
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
