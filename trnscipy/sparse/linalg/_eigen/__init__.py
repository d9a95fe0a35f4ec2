"""Device implementations of scipy.sparse.linalg's eigensolvers."""

from trnscipy.sparse.linalg._eigen._svds import svds
from trnscipy.sparse.linalg._eigen.arpack import ArpackError, ArpackNoConvergence, eigsh
from trnscipy.sparse.linalg._eigen.lobpcg import lobpcg

__all__ = ["eigsh", "lobpcg", "svds", "ArpackError", "ArpackNoConvergence"]
