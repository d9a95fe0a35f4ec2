"""Device implementations of scipy.sparse.linalg's eigensolvers."""

from trnscipy.sparse.linalg._eigen.arpack import ArpackError, ArpackNoConvergence, eigsh

__all__ = ["eigsh", "ArpackError", "ArpackNoConvergence"]
