"""ARPACK's eigsh on device data (thick-restart Lanczos)."""

from trnscipy.sparse.linalg._eigen.arpack.arpack import ArpackError, ArpackNoConvergence, eigsh

__all__ = ["eigsh", "ArpackError", "ArpackNoConvergence"]
