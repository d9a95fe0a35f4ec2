"""matrix_power of device sparse containers (SciPy 1.17's repeated squaring with the
containers' own sparse products)."""

import scipy.sparse.linalg as _spla

from trnscipy._dispatch import dispatch

__all__ = ["matrix_power"]


def _isintlike(x):
    from scipy.sparse._sputils import isintlike

    return isintlike(x)


@dispatch(_spla.matrix_power)
def matrix_power(A, power):
    M, N = A.shape
    if M != N:
        raise TypeError("sparse matrix is not square")
    if not _isintlike(power):
        raise ValueError("exponent must be an integer")
    power = int(power)
    if power < 0:
        raise ValueError("exponent must be >= 0")
    if power == 0:
        from trnscipy.sparse import eye_array

        return eye_array(M, dtype=A.dtype, device=A.device)
    if power == 1:
        return A.copy()
    tmp = matrix_power(A, power // 2)
    if power % 2:
        return A @ tmp @ tmp
    return tmp @ tmp
