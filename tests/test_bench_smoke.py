"""The benchmark's smoke profile runs end to end and writes well-formed output.

No timings are asserted: only that every case produced a row whose lanes are
either measured (positive median, checked against SciPy) or marked with a reason.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATUSES = {"ok", "n/a", "cut", "wrong", "error"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    md, js = out / "benchmarks.md", out / "results.json"
    env = dict(os.environ, PJRT_DEVICE="CPU")
    proc = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--md", str(md),
                           "--json", str(js)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(js.read_text()), md.read_text()


def test_every_section_has_rows(smoke):
    results, _ = smoke
    assert set(results["sections"]) == {"spmv", "bsr", "solvers", "dense", "batch", "dsolve",
                                       "eigen", "double_float", "defer", "cold_start"}
    for rows in results["sections"].values():
        assert rows
    assert results["copy_bandwidth"]["GBps"] > 0


def test_lanes_are_measured_or_explained(smoke):
    results, _ = smoke
    for rows in results["sections"].values():
        for row in rows:
            scipy_lane = row["lanes"]["scipy"]
            assert scipy_lane["status"] == "ok", row
            for name, lane in row["lanes"].items():
                assert lane["status"] in STATUSES, (name, lane)
                if lane["status"] == "ok":
                    assert lane["median_s"] > 0 and len(lane["samples_s"]) == lane["reps"]
                    assert lane["ratio_vs_scipy"] > 0
                else:
                    assert lane["reason"], (name, lane)


def test_xla_rows_carry_counts_and_model(smoke):
    results, _ = smoke
    assert set(results["model"]["dispatch_s"]) == {"low", "high"}
    for rows in results["sections"].values():
        for row in rows:
            lane = row["lanes"].get("trn_xla", {})
            if lane.get("status") != "ok":
                continue
            assert set(lane["xla"]) == {"cold", "warm"}
            for phase in ("cold", "warm"):
                assert lane["xla"][phase]["executions"] >= 0
                low, high = lane["model_s"][phase]["low"], lane["model_s"][phase]["high"]
                assert 0 <= low <= high


def test_cold_start_rows_come_from_fresh_processes(smoke):
    """Each cold-start row ran its first call in two child processes (empty cache, then
    the cache the first left) and reports their counts, or why a child failed."""
    results, md = smoke
    for row in results["sections"]["cold_start"]:
        for name in ("cold", "cache"):
            lane = row["lanes"][name]
            if lane["status"] == "ok":
                first = lane["first"]
                assert first["wall_s"] > 0 and first["compilations"] >= 0
                assert lane["peak_rss_bytes"] >= lane["rss_before_bytes"] > 0
                assert first["check"] <= 1e-4
            else:
                assert lane["reason"]
        assert row["lanes"]["cold"]["status"] == "ok", row
        assert row["lanes"]["cold"]["first"]["compilations"] > 0  # an empty cache
    assert "Cold start: first calls" in md


def test_markdown_names_machine_lanes_and_sections(smoke):
    results, md = smoke
    assert "python -m bench --smoke" in md
    assert results["meta"]["machine"]["cpu_model"] in md
    for title in ("SpMV / SpMM", "Krylov solvers", "Dense linear algebra", "Defer path",
                  "Trainium time model"):
        assert title in md
    for lane in results["meta"]["lanes"]:
        assert lane["label"] in md


def test_plots_are_written_and_linked(smoke, tmp_path):
    """The smoke run draws the PNGs next to its Markdown and links them; the same code
    redraws them from a saved results.json."""
    pytest.importorskip("matplotlib")
    from bench._plots import PLOT_FILES, write_plots

    results, md = smoke
    assert set(results["plots"]) == set(PLOT_FILES)
    for rel in results["plots"].values():
        assert f"]({rel})" in md
    written = write_plots(json.loads(json.dumps(results)), tmp_path)
    assert set(written) == set(PLOT_FILES)
    for path in written.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
