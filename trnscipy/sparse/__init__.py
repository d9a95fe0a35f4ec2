"""Sparse arrays and matrices: ``scipy.sparse`` name for name, on device data too."""

import scipy.sparse as _scipy_sparse

from trnscipy._mirror import mirror
from trnscipy.sparse import linalg  # noqa: F401  (replaces scipy.sparse.linalg)

__all__ = mirror(globals(), _scipy_sparse)
