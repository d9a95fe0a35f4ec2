"""``python -m conformance.scipy_tests``: run SciPy's own test files against trnscipy,
print counts per mode, compare with (or, with --write, rewrite) the baseline and the
docs/conformance.md section."""

import argparse
import json
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")


def main(argv=None):
    from conformance.scipy_tests.runner import MODES, PROFILES

    parser = argparse.ArgumentParser(prog="python -m conformance.scipy_tests",
                                     description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci",
                        help="ci: cpu on every file, the XLA lanes on a few; "
                             "full: every file on every mode (nightly)")
    parser.add_argument("--modes", default=None,
                        help=f"comma-separated subset of {','.join(MODES)} (default: the "
                             "profile's modes available here)")
    parser.add_argument("--files", default=None,
                        help="comma-separated substrings: run only the matching test files")
    parser.add_argument("--write", action="store_true",
                        help="rewrite the docs/conformance.md section and "
                             "conformance/scipy_baseline.json (the modes run)")
    parser.add_argument("--json", default=None, help="also save the full results here")
    parser.add_argument("--from-json", default=None,
                        help="report from results saved with --json instead of running")
    parser.add_argument("--keep", default=None,
                        help="work in this directory and keep it (rewritten files, logs)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="modes run at a time (one pytest process each)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds per mode before the run stops")
    opts = parser.parse_args(argv)

    from conformance.scipy_tests import report, runner

    modes = opts.modes.split(",") if opts.modes else None
    if opts.from_json:
        with open(opts.from_json) as fh:
            results = report.results_from_json(json.load(fh))
        if modes:
            results = {m: r for m, r in results.items() if m in modes}
    else:
        only = opts.files.split(",") if opts.files else None
        done = {}

        def save(mode, r):  # each mode's results as soon as it ends (a long run may stop)
            done[mode] = r.to_json()
            if opts.json:
                with open(opts.json, "w") as fh:
                    json.dump(done, fh)

        results = runner.run(opts.profile, modes, only, keep=opts.keep, timeout=opts.timeout,
                             jobs=opts.jobs, on_result=save,
                             progress=lambda s: print(s, flush=True))
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({m: r.to_json() for m, r in results.items()}, fh)
    for mode, rows in report.triage(results).items():
        where = " that pass in defer mode" if "defer" in results else ""
        print(f"[{mode}] {sum(r[1] for r in rows)} tests fail{where}")
        for c, count, nfiles, example in rows[:15]:
            print(f"  {count:5d} in {nfiles:2d} files  {c}\n         e.g. {example}")
    if opts.write:
        command = "python -m conformance.scipy_tests --write" + "".join(
            f" --{k.replace('_', '-')} {v}" for k, v in
            (("profile", opts.profile if opts.profile != "ci" else None),
             ("modes", opts.modes), ("files", opts.files)) if v)
        data = report.write_baseline(results, command)
        report.write_markdown(report.results_from_baseline(data), command, opts.profile)
        print(f"wrote {report.DOC} and {report.BASELINE}")
        return 0
    baseline = report.load_baseline()
    if baseline is None:
        print("no baseline: run with --write to create one")
        return 0
    regressions, notes = report.compare(results, baseline)
    for line in notes[:50]:
        print("note:", line)
    for line in regressions:
        print("REGRESSION:", line)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
