"""Benchmarks: trnscipy against SciPy and hand-written torch, side by side in one run.

Run ``python -m bench`` (see bench/__main__.py); it writes docs/benchmarks.md and
bench/results.json.
"""
