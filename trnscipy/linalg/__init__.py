"""Dense linear algebra: ``scipy.linalg`` name for name, on device tensors too."""

import scipy.linalg as _scipy_linalg

from trnscipy._mirror import mirror

__all__ = mirror(globals(), _scipy_linalg)
