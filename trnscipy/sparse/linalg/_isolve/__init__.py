"""Device implementations of scipy.sparse.linalg's iterative solvers."""

from trnscipy.sparse.linalg._isolve.iterative import cg, gmres

__all__ = ["cg", "gmres"]
