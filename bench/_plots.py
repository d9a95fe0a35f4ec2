"""PNG charts of a results.json: time ratio to SciPy, effective GB/s against the copy
roofline, XLA graph executions per solve.

``python -m bench`` writes them next to the Markdown; ``python -m bench._plots
results.json DIR`` redraws them from a saved run.  matplotlib is optional: without it
``write_plots`` returns no files and the report says so.
"""

import json
import sys
from pathlib import Path

__all__ = ["write_plots", "PLOT_FILES"]

PLOT_FILES = {"ratio": "bench-ratio.png", "gbps": "bench-gbps.png",
              "xla": "bench-xla-executions.png"}
_SECTIONS = ("spmv", "bsr", "solvers", "dense")
_MARKERS = "os^Dv<>P*X"


def _label(row):
    params = row.get("params", {})
    shown = [f"{k}={v}" for k, v in params.items()
             if k in ("N", "dtype", "n", "maxiter", "blocks", "density")]
    return f"{row['workload']} " + " ".join(shown)


def _ok(row, lane):
    entry = row["lanes"].get(lane, {})
    return entry if entry.get("status") == "ok" else None


def _lanes(results):
    return [(lane["name"], lane["label"]) for lane in results["meta"]["lanes"]
            if lane["name"] not in ("scipy", "trn_host")]


def _ratio_figure(plt, results):
    sections = [s for s in _SECTIONS if results["sections"].get(s)]
    if not sections:
        return None
    heights = [max(1.5, 0.22 * len(results["sections"][s])) for s in sections]
    fig, axes = plt.subplots(len(sections), 1, figsize=(10, sum(heights) + 1.5),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, section in zip(axes[:, 0], sections, strict=True):
        rows = results["sections"][section]
        for k, (name, label) in enumerate(_lanes(results)):
            pts = [(i, _ok(r, name)["ratio_vs_scipy"]) for i, r in enumerate(rows)
                   if _ok(r, name) and _ok(r, name).get("ratio_vs_scipy")]
            if pts:
                ax.scatter([p[1] for p in pts], [p[0] for p in pts], label=label,
                           marker=_MARKERS[k % len(_MARKERS)], color=f"C{k}", s=22)
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yticks(range(len(rows)), [_label(r) for r in rows], fontsize=6)
        ax.invert_yaxis()
        ax.set_title(f"{section}: time / SciPy's time (left of the line: faster)", fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _gbps_figure(plt, results):
    rows = [r for s in ("spmv", "bsr") for r in results["sections"].get(s, [])
            if r.get("bytes_moved")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.22 * len(rows) + 1.5)))
    lanes = [("scipy", "SciPy")] + _lanes(results)
    for k, (name, label) in enumerate(lanes):
        pts = [(i, r["bytes_moved"] / _ok(r, name)["median_s"] / 1e9)
               for i, r in enumerate(rows) if _ok(r, name)]
        if pts:
            ax.scatter([p[1] for p in pts], [p[0] for p in pts], label=label,
                       marker=_MARKERS[k % len(_MARKERS)], color=f"C{k}", s=22)
    copy = results.get("copy_bandwidth", {}).get("GBps")
    if copy:
        ax.axvline(copy, color="red", lw=1, label=f"copy roofline {copy:.1f} GB/s")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [f"{r['section']}: {_label(r)}" for r in rows],
                  fontsize=6)
    ax.invert_yaxis()
    ax.set_title("SpMV / SpMM effective GB/s (compulsory bytes / median time)", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _xla_figure(plt, results):
    rows = [r for r in results["sections"].get("solvers", [])
            if _ok(r, "trn_xla") and "xla" in _ok(r, "trn_xla")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.3 * len(rows) + 1.5)))
    ys = range(len(rows))
    for offset, phase, key in ((-0.2, "warm", "executions"), (0.0, "cold", "executions"),
                               (0.2, "cold", "compilations")):
        ax.barh([y + offset for y in ys],
                [_ok(r, "trn_xla")["xla"][phase][key] for r in rows], height=0.2,
                label=f"{key} ({phase} solve)")
    ax.set_yticks(list(ys), [_label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_title("XLA lane: graph executions and compilations per solve", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def write_plots(results, out_dir):
    """Write the PNGs for ``results`` into ``out_dir``; returns {kind: path} ({} without
    matplotlib; a chart with no rows in this run is left out)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for kind, draw in (("ratio", _ratio_figure), ("gbps", _gbps_figure),
                       ("xla", _xla_figure)):
        fig = draw(plt, results)
        if fig is None:
            continue
        path = out_dir / PLOT_FILES[kind]
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written[kind] = path
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m bench._plots results.json OUT_DIR")
    for path in write_plots(json.loads(Path(sys.argv[1]).read_text()), sys.argv[2]).values():
        print(f"wrote {path}")
