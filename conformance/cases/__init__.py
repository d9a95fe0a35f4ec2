"""Conformance cases, one module per SciPy module; each exposes ``cases(profile)``."""

CASE_MODULES = ("sparse", "sparse_linalg", "linalg")
