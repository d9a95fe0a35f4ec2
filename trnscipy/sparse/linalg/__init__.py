"""Sparse linear algebra: ``scipy.sparse.linalg`` name for name, on device data too."""

import scipy.sparse.linalg as _scipy_sparse_linalg

from trnscipy._mirror import mirror
from trnscipy.sparse.linalg._dsolve import factorized, spilu, splu  # noqa: F401
from trnscipy.sparse.linalg._eigen import (  # noqa: F401
    ArpackError,
    ArpackNoConvergence,
    eigsh,
    svds,
)
from trnscipy.sparse.linalg._interface import LinearOperator, aslinearoperator  # noqa: F401
from trnscipy.sparse.linalg._isolve import (  # noqa: F401
    bicg,
    bicgstab,
    cg,
    cgs,
    gcrotmk,
    gmres,
    lgmres,
    minres,
    qmr,
    tfqmr,
)

__all__ = mirror(globals(), _scipy_sparse_linalg)
