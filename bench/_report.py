"""The printed / Markdown tables from the results dict."""

from bench._double_float import double_float_table
from bench._model import MODEL

__all__ = ["markdown"]

_SECTION_TITLES = {
    "spmv": "SpMV / SpMM (CSR)",
    "bsr": "BSR SpMV / SpMM (128x128 blocks)",
    "solvers": "Krylov solvers",
    "dense": "Dense linear algebra",
    "batch": "Batched dense linear algebra (SciPy's batch rule: leading dimensions)",
    "lsq": "Least squares and matrix functions (lsqr, lsmr, expm_multiply)",
    "dsolve": "Sparse direct solvers (spsolve, splu, the solve with its factors)",
    "eigen": "Eigensolvers (eigsh, lobpcg, svds)",
    "double_float": "float64 on an emulated Neuron device (double-float) vs float32",
    "double_float_families": "float64 on an emulated Neuron device: sparse direct, "
                             "eigensolvers, least squares, expm_multiply (double-float) vs float32",
    "defer": "Defer path: trnscipy called with NumPy/SciPy inputs vs SciPy directly",
    "cold_start": "Cold start: first calls on the XLA lane in a fresh process",
}


class _Notes:
    def __init__(self):
        self.items = []

    def ref(self, text):
        if text not in self.items:
            self.items.append(text)
        return f"[{self.items.index(text) + 1}]"


def _fmt_time(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _fmt_bytes(b):
    if b is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def _cell(entry, notes, ratio=True):
    status = entry.get("status")
    if status == "ok":
        text = _fmt_time(entry["median_s"])
        if ratio and entry.get("ratio_vs_scipy") is not None:
            text += f" ({entry['ratio_vs_scipy']:.2f}x)"
        return text
    return f"{status} {notes.ref(entry.get('reason', ''))}"


def _params(row, skip=()):
    return ", ".join(f"{k}={v}" for k, v in row["params"].items() if k not in skip)


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _time_table(rows, lanes, notes):
    header = ["workload", "parameters"] + [lanes[n] for n in lanes]
    body = [[row["workload"], _params(row)]
            + [_cell(row["lanes"].get(n, {"status": "n/a", "reason": "not run"}), notes)
               for n in lanes] for row in rows]
    return _table(header, body)


def _memory_table(rows, lanes):
    header = ["workload", "parameters"] + [f"{lanes[n]} peak" for n in lanes]
    body = [[row["workload"], _params(row)]
            + [_fmt_bytes(row["lanes"].get(n, {}).get("peak_mem_bytes"))
               if row["lanes"].get(n, {}).get("status") == "ok" else "-" for n in lanes]
            for row in rows]
    return _table(header, body)


def _counts(c):
    return f"{c['compilations']} / {c['executions']} / {c['transfers_to_device']}+" \
           f"{c['transfers_from_device']} / {c.get('scalar_reads', '-')} / " \
           f"{c.get('aten_cpu_fallbacks', '-')}"


def _xla_table(rows):
    header = ["workload", "parameters",
              "cold: compiles / executions / transfers in+out / scalar reads / aten CPU "
              "fallbacks",
              "warm: same counts", "MODEL trn1 cold (low-high)",
              "MODEL trn1 warm (low-high)"]
    body = []
    for row in rows:
        e = row["lanes"].get("trn_xla", {})
        if e.get("status") != "ok" or "xla" not in e:
            continue
        model = e.get("model_s", {})

        def span(phase, model=model):
            m = model.get(phase)
            return f"{_fmt_time(m['low'])} - {_fmt_time(m['high'])}" if m else "-"

        body.append([row["workload"], _params(row), _counts(e["xla"]["cold"]),
                     _counts(e["xla"]["warm"]) if "warm" in e["xla"] else "-",
                     span("cold"), span("warm")])
    return _table(header, body) if body else ["(no XLA-lane rows measured)"]


def _roofline_table(rows, lanes, copy_bw):
    header = ["workload", "parameters", "bytes moved"] + [
        f"{lanes[n]} GB/s (% of copy)" for n in lanes]
    body = []
    for row in rows:
        if row["params"].get("N") != 1 or not row.get("bytes_moved"):
            continue
        cells = []
        for n in lanes:
            e = row["lanes"].get(n, {})
            if e.get("status") == "ok":
                gbps = row["bytes_moved"] / e["median_s"] / 1e9
                cells.append(f"{gbps:.3g} ({100 * gbps * 1e9 / copy_bw:.0f}%)")
            else:
                cells.append("-")
        body.append([row["workload"], _params(row, ("N",)), _fmt_bytes(row["bytes_moved"])]
                    + cells)
    return _table(header, body)


def _solver_table(rows, lanes):
    header = ["workload", "iterations (SciPy)"] + [f"{lanes[n]} info / relres" for n in lanes]
    body = []
    for row in rows:
        cells = []
        for n in lanes:
            e = row["lanes"].get(n, {})
            cells.append(f"{e['info']} / {e['relres']:.1e}" if "relres" in e else "-")
        body.append([row["workload"], row["params"]["iterations"]] + cells)
    return _table(header, body)


def _defer_table(rows, notes):
    header = ["call", "size", "SciPy", "trnscipy (NumPy/SciPy inputs)", "overhead"]
    body = []
    for row in rows:
        s, t = row["lanes"]["scipy"], row["lanes"]["trn_host"]
        if s.get("status") == "ok" and t.get("status") == "ok":
            over = t["median_s"] / s["median_s"] - 1
            extra = t["median_s"] - s["median_s"]
            body.append([row["workload"], row["params"]["size"], _fmt_time(s["median_s"]),
                         _fmt_time(t["median_s"]),
                         f"{100 * over:+.1f}% ({extra * 1e6:+.2f} us)"])
        else:
            body.append([row["workload"], row["params"]["size"], _cell(s, notes),
                         _cell(t, notes), "-"])
    return _table(header, body)


def _cold_start_table(rows, notes):
    header = ["workload", "SciPy", "first call (x SciPy)", "compiles / compile s",
              "largest graph (HLO instr.)", "peak RSS", "warm call (executions)",
              "cache process: first call", "its compiles / cache hits / failed loads"]
    body = []
    for row in rows:
        scipy = row["lanes"]["scipy"]
        cold, cache = row["lanes"]["cold"], row["lanes"]["cache"]
        cells = [row["workload"], _fmt_time(scipy["median_s"])]
        if cold.get("status") == "ok" or "first" in cold:
            f, w = cold["first"], cold["second"]
            cells += [f"{_fmt_time(f['wall_s'])} ({f['wall_s'] / scipy['median_s']:.0f}x)"
                      + ("" if cold["status"] == "ok" else f" {cold['status']} "
                         + notes.ref(cold.get("reason", ""))),
                      f"{f['compilations']} / {f['compile_s']:.1f}",
                      f"{cold['largest_graph_hlo']:,} (of {cold['graphs_dumped']})",
                      _fmt_bytes(cold["peak_rss_bytes"]),
                      f"{_fmt_time(w['wall_s'])} ({w['executions']})"]
        else:
            cells += [f"{cold['status']} {notes.ref(cold.get('reason', ''))}", "-",
                      f"{cold['largest_graph_hlo']:,} (of {cold['graphs_dumped']}, "
                      "when killed)" if cold.get("graphs_dumped") else "-",
                      _fmt_bytes(cold.get("observed_peak_rss_bytes")), "-"]
        if "first" in cache:
            f = cache["first"]
            cells += [_fmt_time(f["wall_s"]) + ("" if cache["status"] == "ok" else
                                                f" {cache['status']} "
                                                + notes.ref(cache.get("reason", ""))),
                      f"{f['compilations']} / {f['cache_hits']} / {f['cache_load_failures']}"]
        else:
            cells += [f"{cache['status']} {notes.ref(cache.get('reason', ''))}", "-"]
        body.append(cells)
    return _table(header, body)


def _targets(sections):
    """Issue 7's targets, checked row by row: (target, met, missed workloads)."""
    checks = []

    def add(text, rows, ok):
        met, missed = 0, []
        for row in rows:
            verdict = ok(row)
            if verdict is None:
                continue
            if verdict:
                met += 1
            else:
                missed.append(f"{row['workload']} ({_params(row)})")
        if met or missed:
            checks.append((text, met, missed))

    def lane(row, name):
        e = row["lanes"].get(name, {})
        return e if e.get("status") == "ok" else None

    def ratio_at_most(limit):
        def ok(row):
            e = lane(row, "trn_cpu")
            return None if e is None else e["ratio_vs_scipy"] <= limit
        return ok

    def compiles(phase, limit):
        def ok(row):
            e = lane(row, "trn_xla")
            if e is None or phase not in e.get("xla", {}):
                return None
            return e["xla"][phase]["compilations"] <= limit
        return ok

    def defer_ok(row):
        s, t = lane(row, "scipy"), lane(row, "trn_host")
        return None if not (s and t) else t["median_s"] <= 1.05 * s["median_s"]

    sparse = sections.get("spmv", []) + sections.get("bsr", [])
    add("defer path within 5% of SciPy", sections.get("defer", []), defer_ok)
    add("trnscipy CPU tensors at or under SciPy's time: SpMV/SpMM",
        sparse, ratio_at_most(1.0))
    add("trnscipy CPU tensors at or under SciPy's time: cg/gmres",
        sections.get("solvers", []), ratio_at_most(1.0))
    add("trnscipy CPU tensors within 1.2x SciPy: dense", sections.get("dense", []),
        ratio_at_most(1.2))
    add("XLA: at most one compilation for a new shape (SpMV/SpMM)", sparse, compiles("cold", 1))
    every = [row for rows in sections.values() for row in rows]
    add("XLA: zero compilations for a repeated shape", every, compiles("warm", 0))
    return checks


_PLOT_TITLES = {"ratio": "time ratio to SciPy per workload and lane",
                "gbps": "effective GB/s against the copy roofline",
                "xla": "XLA graph executions per solve"}


def markdown(results):
    meta = results["meta"]
    lanes = {lane["name"]: lane["label"] for lane in meta["lanes"] if lane["name"] != "trn_host"}
    notes = _Notes()
    load_end = meta.get("loadavg_end", float("nan"))
    # a run cut short (a lent GPU's time limit) has no elapsed time, only its finished sections
    took = (f"{results['elapsed_s']:.0f} s" if "elapsed_s" in results else
            "cut short; these sections finished: " + ", ".join(results["sections"]))
    out = ["# trnscipy benchmarks", "",
           f"Generated by `{meta['command']}` on {meta['date']} (profile `{meta['profile']}`, "
           f"{took}). Do not edit by hand: re-run the command.", "",
           "## Machine and lanes", "",
           f"- CPU: {meta['machine']['cpu_model']}, {meta['machine']['cores']} cores, "
           f"{meta['machine']['memory_gb']:.0f} GB RAM; torch threads "
           f"{meta['machine']['torch_threads']}, BLAS threads "
           f"{meta['machine'].get('blas_threads', 'library default')}.",
           f"- Versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}.",
           f"- Load: 1-minute load average {meta['loadavg_start']:.1f} at the start, "
           f"{load_end:.1f} at the end, on {meta['machine']['cores']} cores"
           + (" (other work was running: figures are noisy, and multi-threaded lanes stall "
              "in their thread pools)"
              if max(meta["loadavg_start"], load_end) > 0.5 * meta["machine"]["cores"]
              else "") + (f". {meta['load_note']}" if meta["load_note"] else ".")]
    runs = {}
    for name, origin in sorted(results.get("merged", {}).items()):
        runs.setdefault(tuple(origin[k] for k in ("command", "date", "commit")), []).append(name)
    for (command, date, commit), names in runs.items():
        out.append(f"- From an earlier run (`{command}` on {date}, trnscipy {commit}): the "
                   f"sections {', '.join(f'`{n}`' for n in names)}.")
    for lane in meta["lanes"]:
        out.append(f"- **{lane['label']}**: {lane['where']}")
    if "trn_cuda" not in lanes:
        gpu = meta["machine"].get("gpu")
        out.append("- CUDA lanes (torch CUDA, trnscipy CUDA tensors, cupyx.scipy): not measured "
                   "in this run; " + (f"`--cuda` adds them on this machine's {gpu}." if gpu else
                                      "this machine has no GPU (`--cuda` adds them where "
                                      "torch.cuda is available)."))
    if "trn_xla" not in lanes:
        out.append("- XLA lane: not measured in this run (torch-xla missing or --no-xla).")
    out += ["", "## Method", "",
            f"- Timing: {meta['timing_method']}",
            "- Ratios in parentheses: lane time / SciPy time (lower is better).",
            f"- Peak memory: {meta['memory_method']}",
            "- n/a = trnscipy has no device route for it on this build, or it fell back to the "
            "host (DeviceFallbackWarning is an error in the bench): never timed as if it ran "
            "on the device. cut = left out for time; wrong = result differs from SciPy "
            "(not timed). Reasons in the notes at the end.", ""]
    plots = results.get("plots")
    if plots is not None:
        out += ["## Plots", ""]
        out += ([f"![{title}]({plots[kind]})" for kind, title in _PLOT_TITLES.items()
                 if kind in plots] if plots else
                ["Not drawn: matplotlib is not installed (`pip install matplotlib`, or "
                 "`python -m bench._plots bench/results.json docs` after a run)."])
        out.append("")
    copy = results.get("copy_bandwidth")
    if copy:
        out += ["## Copy bandwidth", "",
                f"NumPy copy of {_fmt_bytes(copy['array_bytes'])} (read + write counted): "
                f"**{copy['GBps']:.1f} GB/s** (median of {copy['reps']}). "
                "This is the roofline for the SpMV rows below.", ""]
    sections = results["sections"]
    for name, title in _SECTION_TITLES.items():
        rows = sections.get(name)
        if not rows:
            continue
        out += [f"## {title}", ""]
        if name == "defer":
            out += ["Median time per call; target: overhead within 5%.", ""]
            out += _defer_table(rows, notes) + [""]
            continue
        if name == "cold_start":
            out += [f"Method: {meta.get('cold_start_method', '')}", "",
                    "Targets (issue 26): first call within 60 s and 4 GB; Krylov solvers "
                    "with or without ILU compile within 15 s; the cache process's first "
                    "call within 2x of the warm call.", ""]
            out += _cold_start_table(rows, notes) + [""]
            continue
        out += ["Median time per call (ratio to SciPy):", ""]
        out += _time_table(rows, lanes, notes) + [""]
        if name in ("spmv", "bsr") and copy:
            out += ["Roofline (N=1): effective GB/s = compulsory bytes (data + indices + indptr "
                    "+ x + y) / time, against the copy bandwidth above (over 100%: the working set "
                    "fits in the CPU caches):", ""]
            out += _roofline_table(rows, lanes, copy["GBps"] * 1e9) + [""]
        if name in ("double_float", "double_float_families"):
            out += ["Modelled trn1 time, float64 through double-float / the float32 solve "
                    "(bench/_double_float.py):", ""] + double_float_table(rows) + [""]
        if name == "solvers":
            out += ["Solver outcome per lane (info / true relative residual ||b-Ax||/||b||):",
                    ""]
            out += _solver_table(rows, lanes) + [""]
        out += ["XLA lane: graph counts per call (cold = first call of this case, warm = "
                "repeat; scalar reads = .item()-style reads of a device value into Python; aten "
                "CPU fallbacks = other ops torch-xla silently ran on the host; both from its "
                "aten:: counters) and the MODELLED trn1 time (see the model section; "
                "not a measurement):", ""]
        out += _xla_table(rows) + [""]
        out += ["Peak memory per call:", ""]
        out += _memory_table(rows, lanes) + [""]
    checks = _targets(sections)
    if checks:
        out += ["## Targets (issue 7), row by row", "",
                "Measured rows only (n/a and cut rows are not counted); executions per "
                "Krylov solve are in the solvers' XLA table beside the iteration count.", ""]
        out += _table(["target", "rows met", "rows missed"],
                      [[text, met, len(missed)] for text, met, missed in checks]) + [""]
        for text, _, missed in checks:
            if missed:
                out += [f"- Missed, {text}: " + "; ".join(missed[:12])
                        + (f"; and {len(missed) - 12} more" if len(missed) > 12 else "")]
        out += [""]
    out += ["## Trainium time model (a model, not a measurement)", "",
            f"- Formula: `{MODEL['formula']}`; dispatch {MODEL['dispatch_s']['low'] * 1e3:g}-"
            f"{MODEL['dispatch_s']['high'] * 1e3:g} ms, compile {MODEL['compile_s']['low']:g}-"
            f"{MODEL['compile_s']['high']:g} s, HBM {MODEL['hbm_Bps'] / 1e9:g} GB/s.",
            f"- Sources: {MODEL['sources']}",
            f"- Bytes moved: {MODEL['bytes_moved']}.",
            f"- Not modelled: {MODEL['not_modelled']}. float64 rows would not run on a "
            "NeuronCore (no float64 there): their model only shows the graph structure.",
            "- Counts come from `trnscipy._metrics.xla_counts` (torch_xla.debug.metrics) on "
            "the XLA lane; all inputs are in results.json.", ""]
    if results.get("cut"):
        out += ["## Left out of this run", ""] + [f"- {c}" for c in results["cut"]] + [""]
    if notes.items:
        out += ["## Notes", ""] + [f"{i + 1}. {t}" for i, t in enumerate(notes.items)] + [""]
    return "\n".join(out)
