"""find, tril, triu (``scipy.sparse._extract``) on device data.

Host inputs go to SciPy; device sparse objects and torch tensors give device
results (torch tensors for ``find``, trnscipy sparse objects for tril/triu) of
SciPy's kind, format, dtype and index dtype.  On a device without float64 (Neuron)
float64 values move as their exact float32 parts: the entries are selected by index
masks, the zero test reads the high parts (zero iff the value is); duplicates that
``find`` and a conversion to CSR/CSC sum are added in double-float (``segment_sum``).
"""

import scipy.sparse as _sp

from trnscipy._dispatch import call_device
from trnscipy._double_float import high_part
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._construct import _DOUBLE_FLOAT, _as, _is_sparray, _routed

__all__ = ["find", "tril", "triu"]


@_routed(_sp.find, _DOUBLE_FLOAT)
def find(A):
    A = _as("coo", A, True, call_device((A,)), copy=True)
    A.sum_duplicates()
    nonzero = high_part(A.data) != 0
    return su.compact(nonzero, A.row, A.col, A.data)


def _triangle(A, k, format, keep):
    array = _is_sparray(A)
    A = _as("coo", A, array, call_device((A,)))
    mask = keep(A.row.long() + int(k), A.col.long())
    row, col, data = su.compact(mask, A.row, A.col, A.data)
    return type(A)((data, (row, col)), shape=A.shape, dtype=A.dtype).asformat(format)


@_routed(_sp.tril, _DOUBLE_FLOAT)
def tril(A, k=0, format=None):
    return _triangle(A, k, format, lambda row_k, col: row_k >= col)


@_routed(_sp.triu, _DOUBLE_FLOAT)
def triu(A, k=0, format=None):
    return _triangle(A, k, format, lambda row_k, col: row_k <= col)
