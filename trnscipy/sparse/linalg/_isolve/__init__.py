"""Device implementations of scipy.sparse.linalg's iterative solvers."""

from trnscipy.sparse.linalg._isolve.iterative import bicg, bicgstab, cg, cgs, gmres, qmr

__all__ = ["bicg", "bicgstab", "cg", "cgs", "gmres", "qmr"]
