"""The conformance suite: every public name of scipy.sparse, scipy.sparse.linalg and
scipy.linalg, run through SciPy and through trnscipy on every available lane, compared.

    python -m conformance [--profile fast|nightly] [--lanes cpu,xla,...] [--write]

``--write`` regenerates docs/conformance.md and conformance/baseline.json; without it the
run is compared with the committed baseline and exits 1 on a regression.
"""
