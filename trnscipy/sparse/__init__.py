"""Sparse arrays and matrices: ``scipy.sparse`` name for name, on device data too."""

import scipy.sparse as _scipy_sparse

from trnscipy._mirror import mirror
from trnscipy.sparse import linalg

# sparse constructors (device implementations; SciPy's for host inputs)
from trnscipy.sparse._construct import (  # noqa: F401
    block_array,
    block_diag,
    bmat,
    diags,
    diags_array,
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
from trnscipy.sparse._extract import find, tril, triu  # noqa: F401

__all__ = mirror(globals(), _scipy_sparse)
