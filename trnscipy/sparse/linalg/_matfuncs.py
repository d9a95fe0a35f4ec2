"""matrix_power and inv of device sparse containers (SciPy 1.17's algorithms).

matrix_power: repeated squaring with the containers' own sparse products.  inv: SciPy's
spsolve(A, I) through the public routed ``trnscipy.sparse.linalg.spsolve``, so a device
sparse direct solver drops in; until trnscipy has one, that solve runs on the host
(DeviceFallbackWarning).
"""

import scipy.sparse.linalg as _spla

from trnscipy._dispatch import dispatch

__all__ = ["inv", "matrix_power"]


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


@dispatch(_spla.inv, composite=True)
def inv(A):
    if not (getattr(A, "_trnscipy_device_object", False) and hasattr(A, "tocsr")):
        raise TypeError("Input must be a sparse arrays")
    from trnscipy.sparse import eye
    from trnscipy.sparse.linalg import spsolve

    I = eye(A.shape[0], A.shape[1], dtype=A.dtype, format=A.format, device=A.device)  # noqa: E741
    return spsolve(A, I)
