"""Dense linear algebra: ``scipy.linalg`` name for name, on device tensors too."""

import scipy.linalg as _scipy_linalg

from trnscipy._mirror import mirror
from trnscipy.linalg._basic import (  # noqa: F401
    det,
    inv,
    lstsq,
    pinv,
    pinvh,
    solve,
    solve_banded,
    solve_triangular,
    solveh_banded,
)
from trnscipy.linalg._decomp import (  # noqa: F401
    eig,
    eigh,
    eigh_tridiagonal,
    eigvals,
    eigvalsh,
    eigvalsh_tridiagonal,
)
from trnscipy.linalg._decomp_cholesky import (  # noqa: F401
    cho_factor,
    cho_solve,
    cho_solve_banded,
    cholesky,
    cholesky_banded,
)
from trnscipy.linalg._decomp_lu import lu, lu_factor, lu_solve  # noqa: F401
from trnscipy.linalg._decomp_polar import polar  # noqa: F401
from trnscipy.linalg._decomp_qr import qr, qr_multiply  # noqa: F401
from trnscipy.linalg._decomp_schur import hessenberg, rsf2csf, schur  # noqa: F401
from trnscipy.linalg._decomp_svd import null_space, orth, svd, svdvals  # noqa: F401
from trnscipy.linalg._matfuncs import expm, expm_frechet, funm, logm, sqrtm  # noqa: F401
from trnscipy.linalg._misc import norm  # noqa: F401
from trnscipy.linalg._solvers import solve_sylvester  # noqa: F401
from trnscipy.linalg._special_matrices import (  # noqa: F401
    block_diag,
    circulant,
    companion,
    convolution_matrix,
    dft,
    fiedler,
    fiedler_companion,
    hadamard,
    hankel,
    helmert,
    hilbert,
    invhilbert,
    invpascal,
    khatri_rao,
    leslie,
    pascal,
    toeplitz,
)

__all__ = mirror(globals(), _scipy_linalg)
