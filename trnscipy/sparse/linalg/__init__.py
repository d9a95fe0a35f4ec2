"""Sparse linear algebra: ``scipy.sparse.linalg`` name for name, on device data too."""

import scipy.sparse.linalg as _scipy_sparse_linalg

from trnscipy._mirror import mirror
from trnscipy.sparse.linalg._dsolve import (  # noqa: F401
    factorized,
    spilu,
    splu,
    spsolve,
    spsolve_triangular,
)
from trnscipy.sparse.linalg._dsolve._structure import is_sptriangular, spbandwidth  # noqa: F401
from trnscipy.sparse.linalg._eigen import (  # noqa: F401
    ArpackError,
    ArpackNoConvergence,
    eigs,
    eigsh,
    lobpcg,
    svds,
)
from trnscipy.sparse.linalg._expm_multiply import expm_multiply  # noqa: F401
from trnscipy.sparse.linalg._funm_multiply_krylov import funm_multiply_krylov  # noqa: F401
from trnscipy.sparse.linalg._interface import LinearOperator, aslinearoperator  # noqa: F401
from trnscipy.sparse.linalg._isolve import (  # noqa: F401
    bicg,
    bicgstab,
    cg,
    cgs,
    gcrotmk,
    gmres,
    lgmres,
    lsmr,
    lsqr,
    minres,
    qmr,
    tfqmr,
)
from trnscipy.sparse.linalg._matfuncs import expm, inv, matrix_power  # noqa: F401
from trnscipy.sparse.linalg._norm import norm  # noqa: F401
from trnscipy.sparse.linalg._onenormest import onenormest  # noqa: F401

__all__ = mirror(globals(), _scipy_sparse_linalg)

# trnscipy's extensions: attributes of the namespace, not in SciPy's __all__
from trnscipy.sparse.linalg._isolve._batched import cg_batched  # noqa: E402,F401
