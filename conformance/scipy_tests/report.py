"""The SciPy-test table (a marked section of docs/conformance.md), the baseline
(conformance/scipy_baseline.json), the regression check and the triage of failures."""

import datetime
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from conformance.report import DOC, ROOT, _git, _versions
from conformance.scipy_tests.runner import ModeResult

__all__ = ["BASELINE", "load_baseline", "write_baseline", "compare", "write_markdown",
           "triage", "BEGIN", "END"]

BASELINE = ROOT / "conformance" / "scipy_baseline.json"
BEGIN = "<!-- scipy-tests:begin (python -m conformance.scipy_tests --write) -->"
END = "<!-- scipy-tests:end -->"
_BAD = ("failed", "error", "crashed", "timeout")
_GOOD = ("passed", "xfailed", "xpassed")  # a test in one of these that turns _BAD regressed
MODE_ORDER = ["defer", "cpu", "xla", "xla-neuron", "cuda"]


def _split(nodeid):
    file, _, name = nodeid.partition("::")
    return file, name


# --- baseline ---------------------------------------------------------------------------

def load_baseline(path=BASELINE):
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def write_baseline(results, command, path=BASELINE):
    """Merge ``results`` into the baseline and return it.

    Layout: ``tests`` (file -> every test name, once for all modes) and per mode, per file
    the outcomes other than 'passed', their messages, the tests not run, the seconds its
    tests took and its DeviceFallbackWarnings ([tests, warnings]).  The files a run
    covered replace theirs; other files and modes keep their entries, so a partial run
    (``--modes cpu --files test_iterative``) updates just its part.  A baseline of another
    SciPy version is started afresh."""
    import scipy

    old = load_baseline(path) or {}
    if old.get("scipy") != scipy.__version__:
        old = {}
    tests = dict(old.get("tests", {}))
    modes = dict(old.get("modes", {}))
    for mode, r in results.items():
        per_file = defaultdict(dict)
        for nodeid, outcome in r.tests.items():
            file, name = _split(nodeid)
            per_file[file][name] = outcome
        fallbacks = defaultdict(lambda: [0, 0])
        for nodeid, n in r.fallbacks.items():
            fallbacks[_split(nodeid)[0]][0] += 1
            fallbacks[_split(nodeid)[0]][1] += n
        entry = modes.get(mode, {"files": {}})
        files = dict(entry["files"])
        for file in sorted(set(per_file) | set(r.collect)):
            outcomes = per_file[file]
            known = set(tests.get(file, ())) | set(outcomes)
            tests[file] = sorted(known)
            fe = {"seconds": round(r.file_seconds.get(file, 0.0), 1),
                  # tests of the file this run did not reach (a crash, a stop, a new name)
                  "not_run": sorted(known - set(outcomes)),
                  "not_passed": {n: o for n, o in sorted(outcomes.items()) if o != "passed"},
                  "messages": {n: r.messages[f"{file}::{n}"] for n in sorted(outcomes)
                               if f"{file}::{n}" in r.messages}}
            if file in r.collect:
                fe["collect_error"] = r.collect[file]
            if file in fallbacks:
                fe["fallbacks"] = fallbacks[file]
            files[file] = fe
        whole = set(per_file) >= set(entry["files"])
        modes[mode] = {
            "seconds": round(r.seconds, 1) if whole else entry.get("seconds", 0.0),
            "cpu_seconds": round(r.cpu_seconds, 1) if whole else entry.get("cpu_seconds", 0.0),
            "command": command if whole else entry.get("command", command),
            "commit": _git("rev-parse", "HEAD"),
            "files": {f: files[f] for f in sorted(files)},
        }
    data = {"scipy": scipy.__version__, "tests": {f: tests[f] for f in sorted(tests)},
            "modes": {m: modes[m] for m in sorted(modes, key=_mode_key)}}
    Path(path).write_text(json.dumps(data, indent=0) + "\n")
    return data


def _mode_key(m):
    return MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER)


def baseline_outcomes(baseline, mode):
    """{node id: outcome} of ``mode`` in the baseline."""
    out = {}
    for file, fe in baseline["modes"][mode]["files"].items():
        skip = set(fe.get("not_run", ()))
        for name in baseline["tests"].get(file, ()):
            if name not in skip:
                out[f"{file}::{name}"] = fe["not_passed"].get(name, "passed")
    return out


def results_from_baseline(baseline):
    """The baseline as {mode: ModeResult} (for the table)."""
    out = {}
    for mode, entry in baseline["modes"].items():
        r = ModeResult(mode)
        r.tests = baseline_outcomes(baseline, mode)
        for file, fe in entry["files"].items():
            r.messages.update({f"{file}::{n}": m for n, m in fe.get("messages", {}).items()})
            if "collect_error" in fe:
                r.collect[file] = fe["collect_error"]
            if "fallbacks" in fe:
                r.fallbacks[file] = fe["fallbacks"]
            r.file_seconds[file] = fe.get("seconds", 0.0)
        r.seconds, r.cpu_seconds = entry.get("seconds", 0.0), entry.get("cpu_seconds", 0.0)
        r.command = entry.get("command", "")
        out[mode] = r
    return out


def compare(results, baseline):
    """(regressions, notes): a regression is a test that passed (or xfailed) in the
    baseline and now fails, errors, crashes or times out, named with its message; notes
    list tests that now pass where the baseline had them failing, and tests that went
    missing (a regenerated baseline records both)."""
    regressions, notes = [], []
    for mode, r in results.items():
        if mode not in baseline.get("modes", {}):
            notes.append(f"[{mode}] not in the baseline")
            continue
        old = baseline_outcomes(baseline, mode)
        files = {_split(n)[0] for n in r.tests}
        for nodeid, outcome in sorted(r.tests.items()):
            before = old.get(nodeid)
            if before in _GOOD and outcome in _BAD:
                regressions.append(f"[{mode}] {nodeid}: {before} -> {outcome}: "
                                   f"{r.messages.get(nodeid, '')[:300]}")
            elif before in _BAD and outcome == "passed":
                notes.append(f"[{mode}] {nodeid}: now passes ({before} in the baseline)")
        for file, message in r.collect.items():
            regressions.append(f"[{mode}] {file}: collection error: {message[:300]}")
        missing = [n for n in old if _split(n)[0] in files and n not in r.tests]
        if missing:
            notes.append(f"[{mode}] {len(missing)} baseline tests not run, e.g. {missing[0]}")
    return regressions, notes


# --- triage -----------------------------------------------------------------------------

_NUM = re.compile(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?(e[-+]?\d+)?")
_DTYPE = re.compile(r"\b(u?int|float|complex|bool|longdouble|clongdouble)(\d+)?\b")


def cause(message):
    """A failure message reduced to its cause: the exception type and the first line of
    its text with numbers and dtype names replaced, so that one cause is one group."""
    lines = [x.strip() for x in (message or "").splitlines() if x.strip()]
    if not lines:
        return "(no message)"
    head = lines[0]
    if head.endswith(":") and len(lines) > 1:  # "AssertionError:" then numpy's text
        head += " " + lines[1]
    head = _DTYPE.sub("<dtype>", head)
    head = _NUM.sub("N", head)
    head = re.sub(r"0x[0-9a-f]+", "0x…", head)
    return head[:160]


def triage(results, against="defer"):
    """For each offload mode: the tests that fail there but pass in ``against`` mode,
    grouped by cause.  {mode: [(cause, count, files, example node id)]} (largest first)."""
    ref = results.get(against) if against else None
    out = {}
    for mode, r in results.items():
        if mode == against:
            continue
        groups = defaultdict(list)
        for nodeid, outcome in r.tests.items():
            if outcome in _BAD and (ref is None or ref.tests.get(nodeid) in _GOOD):
                groups[cause(r.messages.get(nodeid, outcome))].append(nodeid)
        rows = [(c, len(ids), len({_split(n)[0] for n in ids}), sorted(ids)[0])
                for c, ids in groups.items()]
        out[mode] = sorted(rows, key=lambda row: (-row[1], row[0]))
    return out


# --- the table --------------------------------------------------------------------------

def _counts(r, file=None):
    c = Counter(o for n, o in r.tests.items() if file is None or _split(n)[0] == file)
    return c


def _cell(c):
    if not c:
        return "–"
    bad = c["failed"] + c["error"] + c["crashed"] + c["timeout"]
    skip = c["skipped"] + c["xfailed"]
    return f"{c['passed'] + c['xpassed']} / {bad} / {skip}"


def markdown(results, command, profile):
    modes = sorted(results, key=_mode_key)
    files = sorted({_split(n)[0] for r in results.values() for n in r.tests}
                   | {f for r in results.values() for f in r.collect})
    lines = [
        BEGIN,
        "## SciPy's own test suites",
        "",
        "<!-- Generated; do not edit by hand. -->",
        "",
        "SciPy's test files for `scipy.sparse.linalg` (every `tests/` directory), `scipy.linalg`",
        "(less its BLAS/LAPACK/Cython wrapper files) and `scipy.sparse` (the files for the",
        "formats trnscipy mirrors; test_base's LIL and DOK classes left out), copied from the",
        "installed SciPy with their imports of public names rewritten to trnscipy (SciPy's",
        "private helpers and test utilities stay SciPy's): `conformance/scipy_tests/`.",
        "Modes: `defer` (no offload: NumPy inputs go to SciPy through trnscipy's names),",
        "`cpu`, `xla`, `xla-neuron`, `cuda` (`TRNSCIPY_OFFLOAD=<device>`; xla-neuron adds",
        "`TRNSCIPY_EMULATE=neuron`). DeviceFallbackWarnings are shown, not errors.",
        "",
        f"- Last command: `{command}`; each mode's last whole run: " + "; ".join(
            f"{m}: `{getattr(results[m], 'command', '') or command}`" for m in modes),
        f"- Commit: `{_git('rev-parse', 'HEAD')}`"
        + (" (with uncommitted changes)" if _git("status", "--porcelain",
                                                 "--untracked-files=no") else ""),
        f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in _versions().items())}",
        "- Time per mode (one pytest process; wall, and CPU of the process, which depends "
        "less on the machine's load): " + ", ".join(
            f"{m} {results[m].seconds:.0f} s / CPU "
            f"{f'{results[m].cpu_seconds:.0f} s' if results[m].cpu_seconds else 'not measured'} "
            f"({len(results[m].tests)} tests)" for m in modes),
        "",
        "Regenerate (table and baseline `conformance/scipy_baseline.json`, merged per "
        "mode and file: the files a run covers replace theirs): `python -m "
        "conformance.scipy_tests --write --profile full --modes defer,cpu --jobs 2` (every "
        "file; about 8 minutes of CPU per mode), then `python -m conformance.scipy_tests "
        "--write --modes xla,xla-neuron --jobs 2` (the CI files of the XLA lanes). "
        "`--files test_iterative,linalg/tests/test_basic` runs a part; `--profile full` on "
        "the XLA lanes is the nightly run (hours). "
        "`pytest conformance/test_scipy_tests.py` runs the CI subset (profile `ci`: cpu on "
        "every file but the eight longest (`CI_LEFT_OUT` in "
        "`conformance/scipy_tests/runner.py`), xla and xla-neuron on a few small files, "
        "SciPy's `slow` tests left out) and fails on a test that passed in the baseline "
        "and fails now, naming it; `pytest -m slow conformance/test_scipy_tests.py` runs "
        "the full profile.",
        "",
        "Cells: passed / failed+errors / skipped+xfailed.",
        "",
        "| file | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    total = {m: Counter() for m in modes}
    for f in files:
        row = []
        for m in modes:
            r = results[m]
            c = _counts(r, f)
            total[m] += c
            row.append("collection error" if f in r.collect else _cell(c))
        lines.append(f"| {f.removeprefix('scipy/')} | " + " | ".join(row) + " |")
    lines.append("| **total** | " + " | ".join(f"**{_cell(total[m])}**" for m in modes) + " |")
    fb = {}
    for m in modes:
        for v in results[m].fallbacks.values():  # per file [tests, warnings] or per test n
            t, w = fb.get(m, (0, 0))
            fb[m] = (t + v[0], w + v[1]) if isinstance(v, list) else (t + 1, w + v)
    if fb:
        lines += ["", "DeviceFallbackWarnings seen by pytest (tests, warnings): " + ", ".join(
            f"{m} {t} tests, {w}" for m, (t, w) in fb.items()) + "."]
    lines += ["", "### What fails with the device on (triage)", "",
              "Tests that fail (or error, crash, time out) in an offload mode and pass in "
              "defer mode, grouped by cause (exception type and message, numbers and dtypes "
              "masked). Known limit: SciPy's `type(x) is csr_matrix` identity checks.", ""]
    groups = triage(results)
    if "defer" in results:  # defer mode's own failures: trnscipy's names differ from SciPy's
        groups = {"defer (failures of defer mode itself)":
                  triage({"all": results["defer"]}, against=None)["all"], **groups}
    for mode, rows in groups.items():
        n = sum(row[1] for row in rows)
        lines += [f"#### {mode}: {n} tests", ""]
        if not rows:
            lines += ["None.", ""]
            continue
        lines += ["| tests | files | cause | example |", "|---:|---:|---|---|"]
        for c, count, nfiles, example in rows[:40]:
            c = c.replace("|", "\\|")
            lines.append(f"| {count} | {nfiles} | `{c}` | {example.removeprefix('scipy/')} |")
        if len(rows) > 40:
            lines.append(f"| {sum(r[1] for r in rows[40:])} | | {len(rows) - 40} more causes "
                         "| |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_markdown(results, command, profile, path=DOC):
    """Put the section between BEGIN and END in ``path`` (appended the first time)."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    section = markdown(results, command, profile)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def results_from_json(data):
    return {m: ModeResult.from_json(m, d) for m, d in data.items()}
