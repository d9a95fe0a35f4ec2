"""Sparse linear algebra: ``scipy.sparse.linalg`` name for name, on device data too."""

import scipy.sparse.linalg as _scipy_sparse_linalg

from trnscipy._mirror import mirror

__all__ = mirror(globals(), _scipy_sparse_linalg)
