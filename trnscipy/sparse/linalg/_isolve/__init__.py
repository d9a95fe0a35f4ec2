"""Device implementations of scipy.sparse.linalg's iterative solvers."""

from trnscipy.sparse.linalg._isolve.iterative import cg

__all__ = ["cg"]
