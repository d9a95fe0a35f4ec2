"""Direct sparse solvers on device data (scipy.sparse.linalg._dsolve)."""

from trnscipy.sparse.linalg._dsolve.linsolve import (
    factorized,
    spilu,
    splu,
    spsolve,
    spsolve_triangular,
)

__all__ = ["factorized", "spilu", "splu", "spsolve", "spsolve_triangular"]
