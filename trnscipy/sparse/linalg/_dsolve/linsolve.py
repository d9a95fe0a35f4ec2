"""splu, spilu and factorized on device data.

The factorization is SciPy's SuperLU (there is no sparse LU in torch): on the CPU
kind it runs where the data is (host memory), elsewhere on a host copy with a
DeviceFallbackWarning (the capability table's ``host_ops``).  The result is a
``SuperLU`` whose ``solve`` takes and returns tensors on the input's device.
``factorized`` on device data always uses SuperLU (SciPy uses UMFPACK when
scikits.umfpack is installed).
"""

import scipy.sparse.linalg as _spla

from trnscipy._dispatch import dispatch, find_device, offloading
from trnscipy._kernels import kernel
from trnscipy.sparse.linalg._dsolve._superlu import SuperLU

__all__ = ["factorized", "spilu", "splu"]


@dispatch(_spla.splu)
def splu(A, permc_spec=None, diag_pivot_thresh=None, relax=None, panel_size=None,
         options=None):
    device = find_device((A,))
    lu = kernel("sparse.linalg.superlu", device)(
        _spla.splu, A, permc_spec=permc_spec, diag_pivot_thresh=diag_pivot_thresh,
        relax=relax, panel_size=panel_size, options=options)
    return SuperLU(lu, device)


@dispatch(_spla.spilu)
def spilu(A, drop_tol=None, fill_factor=None, drop_rule=None, permc_spec=None,
          diag_pivot_thresh=None, relax=None, panel_size=None, options=None):
    device = find_device((A,))
    lu = kernel("sparse.linalg.superlu", device)(
        _spla.spilu, A, drop_tol=drop_tol, fill_factor=fill_factor, drop_rule=drop_rule,
        permc_spec=permc_spec, diag_pivot_thresh=diag_pivot_thresh, relax=relax,
        panel_size=panel_size, options=options)
    return SuperLU(lu, device)


@dispatch(_spla.factorized, composite=True)
def factorized(A):
    lu = splu(A)  # routed: the capability table decides where the factorization runs
    return lu.to_scipy().solve if offloading() else lu.solve
