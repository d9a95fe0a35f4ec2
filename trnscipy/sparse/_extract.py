"""find, tril, triu (``scipy.sparse._extract``) on device data.

Host inputs go to SciPy; device sparse objects and torch tensors give device
results (torch tensors for ``find``, trnscipy sparse objects for tril/triu) of
SciPy's kind, format, dtype and index dtype.
"""

import scipy.sparse as _sp

from trnscipy._dispatch import call_device
from trnscipy.sparse._construct import _as, _is_sparray, _routed

__all__ = ["find", "tril", "triu"]


@_routed(_sp.find)
def find(A):
    A = _as("coo", A, True, call_device((A,)), copy=True)
    A.sum_duplicates()
    nonzero = A.data != 0
    return A.row[nonzero], A.col[nonzero], A.data[nonzero]


def _triangle(A, k, format, keep):
    array = _is_sparray(A)
    A = _as("coo", A, array, call_device((A,)))
    mask = keep(A.row.long() + int(k), A.col.long())
    return type(A)((A.data[mask], (A.row[mask], A.col[mask])), shape=A.shape,
                   dtype=A.dtype).asformat(format)


@_routed(_sp.tril)
def tril(A, k=0, format=None):
    return _triangle(A, k, format, lambda row_k, col: row_k >= col)


@_routed(_sp.triu)
def triu(A, k=0, format=None):
    return _triangle(A, k, format, lambda row_k, col: row_k <= col)
