"""Compressed Sparse Row format on a device."""

import scipy.sparse as _sp

from trnscipy.sparse._base import _register, sparray, spmatrix
from trnscipy.sparse._compressed import _cs_matrix


class _csr_base(_cs_matrix):
    format = "csr"

    def tobsr(self, blocksize=None, copy=True):
        from trnscipy.sparse._bsr import bsr_from_coo, estimate_blocksize

        if blocksize is None:
            blocksize = estimate_blocksize(self)
        return bsr_from_coo(self.tocoo(copy=False), tuple(blocksize),
                            self._container("bsr"))


class csr_array(_csr_base, sparray):
    """CSR sparse array on a device (SciPy's csr_array for host data)."""


class csr_matrix(spmatrix, _csr_base):
    """CSR sparse matrix on a device (SciPy's csr_matrix for host data)."""


_register(csr_array, _sp.csr_array)
_register(csr_matrix, _sp.csr_matrix)
