"""Sparse arrays and matrices: ``scipy.sparse`` name for name, on device data too."""

import scipy.sparse as _scipy_sparse

from trnscipy._mirror import mirror
from trnscipy.sparse import (
    _oned,  # noqa: F401  (registers the 1-D arrays)
    linalg,  # noqa: F401  (replaces scipy.sparse.linalg)
)
from trnscipy.sparse._base import (  # noqa: F401
    issparse,
    isspmatrix,
    isspmatrix_bsr,
    isspmatrix_coo,
    isspmatrix_csc,
    isspmatrix_csr,
    isspmatrix_dia,
    isspmatrix_dok,
    isspmatrix_lil,
    sparray,
    spmatrix,
)
from trnscipy.sparse._bsr import bsr_array, bsr_matrix  # noqa: F401

# sparse constructors (device implementations; SciPy's for host inputs)
from trnscipy.sparse._construct import (  # noqa: F401
    block_array,
    block_diag,
    bmat,
    diags,
    diags_array,
    expand_dims,
    eye,
    eye_array,
    hstack,
    identity,
    kron,
    kronsum,
    rand,
    random,
    random_array,
    spdiags,
    vstack,
)
from trnscipy.sparse._coo import coo_array, coo_matrix  # noqa: F401
from trnscipy.sparse._csc import csc_array, csc_matrix  # noqa: F401
from trnscipy.sparse._csr import csr_array, csr_matrix  # noqa: F401
from trnscipy.sparse._dia import dia_array, dia_matrix  # noqa: F401
from trnscipy.sparse._extract import find, tril, triu  # noqa: F401

__all__ = mirror(globals(), _scipy_sparse)
