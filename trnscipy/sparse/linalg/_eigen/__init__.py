"""Device implementations of scipy.sparse.linalg's eigensolvers."""

from trnscipy.sparse.linalg._eigen._svds import svds
from trnscipy.sparse.linalg._eigen.arpack import ArpackError, ArpackNoConvergence, eigs, eigsh

__all__ = ["eigs", "eigsh", "svds", "ArpackError", "ArpackNoConvergence"]
