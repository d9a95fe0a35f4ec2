"""expm, matrix_power and inv of device sparse containers (SciPy 1.17's algorithms for
matrix_power and inv; expm through the dense matrix exponential).

matrix_power: repeated squaring with the containers' own sparse products.  inv: SciPy's
spsolve(A, I) through the public routed ``trnscipy.sparse.linalg.spsolve``, so a device
sparse direct solver drops in; until trnscipy has one, that solve runs on the host
(DeviceFallbackWarning).
"""

import numpy as np
import scipy.sparse.linalg as _spla

from trnscipy._dispatch import call_device, dispatch
from trnscipy._double_float import is_exact
from trnscipy._dtypes import absolute, to_numpy_dtype, to_torch_dtype
from trnscipy._torch import torch
from trnscipy._transfer import df_parts, tensor_on

__all__ = ["expm", "inv", "matrix_power"]


def _isintlike(x):
    from scipy.sparse._sputils import isintlike

    return isintlike(x)


@dispatch(_spla.matrix_power, double_float=("neuron",))
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


@dispatch(_spla.expm, double_float=("neuron",))
def expm(A):
    """Differs from SciPy: the exponential of the densified matrix by trnscipy.linalg.expm
    (n^2 memory, n^3 work: SciPy's sparse Pade products are not used), returned in SciPy's
    sparse format (without the explicit zeros SciPy's result may store)."""
    if isinstance(A, list | tuple):  # SciPy's np.asarray of these (offloaded array-likes)
        A = tensor_on(A, call_device(A))
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected a square matrix")
    sparse = getattr(A, "_trnscipy_device_object", False) and hasattr(A, "tocsr")
    if A.shape[0] <= 1:  # SciPy: exp of the entry A[0, 0], in NumPy's exp dtype; 0 x 0
        if A.shape[0] == 0:
            X = torch.zeros((0, 0), dtype=to_torch_dtype(A.dtype), device=A.device)
        else:
            x = A[0, 0]  # (SciPy's TypeError for formats without indexing)
            dtype = np.exp(np.zeros(1, to_numpy_dtype(x.dtype))).dtype
            X = torch.exp(x.to(to_torch_dtype(dtype))).reshape(1, 1)
        return A.__class__(X) if sparse else X
    X = A.toarray() if sparse else A
    if not (X.is_floating_point() or X.is_complex()):
        X = X.to(torch.float64)
    if X.dtype == torch.float64 and is_exact(X):  # double-float: the high parts' flags
        hi = df_parts(X)[0]
        nan, inf = (bool(f) for f in torch.stack([(hi != hi).any(), hi.isinf().any()]).cpu())
        size = float("nan") if nan else float("inf") if inf else 0.0
    else:
        size = float(absolute(X).sum())  # SciPy's scaling step fails on non-finite norms
    if size != size:
        raise ValueError("cannot convert float NaN to integer")
    if size == float("inf"):
        if sparse:
            raise OverflowError("cannot convert float infinity to integer")
        raise ValueError("cannot convert float NaN to integer")
    from trnscipy.linalg import expm as dense_expm

    X = dense_expm(X)
    if not sparse:
        return X
    if A.format in ("bsr", "dia"):  # SciPy's result: csc_array, for matrices too
        from trnscipy.sparse import csc_array

        return csc_array(X)
    return A._container("csc" if A.format == "csc" else "csr")(X)
