"""``python -m conformance``: run the suite, report, compare with or rewrite the baseline."""

import argparse
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
# every lane in one process: past about 256 cached XLA CPU executables the process meets
# vm.max_map_count, LLVM reports "Cannot allocate memory" and it segfaults (tests/conftest.py)
os.environ.setdefault("XLA_COMPILATION_CACHE_SIZE", "256")


def main(argv=None):
    from conformance.lanes import lane_names
    from conformance.registry import PROFILES

    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="fast")
    parser.add_argument("--lanes", default=None,
                        help=f"comma-separated subset of {','.join(lane_names())} "
                             "(default: every lane available here)")
    parser.add_argument("--write", action="store_true",
                        help="rewrite docs/conformance.md and conformance/baseline.json")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every case that does not conform")
    opts = parser.parse_args(argv)

    from conformance.report import (
        BASELINE,
        DOC,
        compare_to_baseline,
        load_baseline,
        run,
        write_baseline,
        write_markdown,
    )

    def progress(lane, outcome):
        if opts.verbose and outcome.status not in ("conforms", "host"):
            print(f"  [{lane.name}] {outcome.case}: {outcome.status}: {outcome.reason}")

    lanes = opts.lanes.split(",") if opts.lanes else None
    results = run(opts.profile, lanes, progress)
    for lane in results.lanes:
        totals = results.totals(lane)
        print(f"{lane:11s} {results.seconds[lane]:6.1f} s  "
              + "  ".join(f"{s}={n}" for s, n in sorted(totals.items())))
    if "xla-neuron" in results.lanes:
        print(f"float64 cases conforming on the xla-neuron device (data movement or "
              f"double-float methods): "
              f"{len(results.float64_on_device('xla-neuron'))} names")
    if opts.write:
        command = "python -m conformance --write" + (
            f" --profile {opts.profile}" if opts.profile != "fast" else "") + (
            f" --lanes {opts.lanes}" if opts.lanes else "")
        write_markdown(results, command=command)
        write_baseline(results)
        print(f"wrote {DOC} and {BASELINE}")
        return 0
    baseline = load_baseline()
    if baseline is None:
        print("no baseline: run with --write to create one")
        return 0
    regressions, improvements = compare_to_baseline(results, baseline)
    for line in improvements:
        print(f"changed (not a regression): {line}")
    if improvements:
        print("statuses improved or changed: regenerate with `python -m conformance --write`")
    for line in regressions:
        print(f"REGRESSION: {line}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
