"""Compressed Sparse Column format on a device."""

import scipy.sparse as _sp

from trnscipy.sparse._base import _register, sparray, spmatrix
from trnscipy.sparse._compressed import _cs_matrix


class _csc_base(_cs_matrix):
    format = "csc"


class csc_array(_csc_base, sparray):
    """CSC sparse array on a device (SciPy's csc_array for host data)."""


class csc_matrix(spmatrix, _csc_base):
    """CSC sparse matrix on a device (SciPy's csc_matrix for host data)."""


_register(csc_array, _sp.csc_array)
_register(csc_matrix, _sp.csc_matrix)
