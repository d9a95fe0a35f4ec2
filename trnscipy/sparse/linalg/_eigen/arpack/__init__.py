"""ARPACK's eigsh (thick-restart Lanczos) and eigs (Krylov-Schur) on device data."""

from trnscipy.sparse.linalg._eigen.arpack.arpack import (
    ArpackError,
    ArpackNoConvergence,
    eigs,
    eigsh,
)

__all__ = ["eigs", "eigsh", "ArpackError", "ArpackNoConvergence"]
