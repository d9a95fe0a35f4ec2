"""Dense linear algebra: ``scipy.linalg`` name for name, on device tensors too."""

import scipy.linalg as _scipy_linalg

from trnscipy._mirror import mirror
from trnscipy.linalg._array_utils import bandwidth, ishermitian, issymmetric  # noqa: F401
from trnscipy.linalg._basic import (  # noqa: F401
    det,
    inv,
    lstsq,
    matmul_toeplitz,
    matrix_balance,
    pinv,
    pinvh,
    solve,
    solve_banded,
    solve_circulant,
    solve_toeplitz,
    solve_triangular,
    solveh_banded,
)
from trnscipy.linalg._decomp import (  # noqa: F401
    cdf2rdf,
    eig,
    eig_banded,
    eigh,
    eigh_tridiagonal,
    eigvals,
    eigvals_banded,
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
from trnscipy.linalg._decomp_ldl import ldl  # noqa: F401
from trnscipy.linalg._decomp_lu import lu, lu_factor, lu_solve  # noqa: F401
from trnscipy.linalg._decomp_polar import polar  # noqa: F401
from trnscipy.linalg._decomp_qr import qr, qr_multiply, rq  # noqa: F401
from trnscipy.linalg._decomp_qz import ordqz, qz  # noqa: F401
from trnscipy.linalg._decomp_schur import hessenberg, rsf2csf, schur  # noqa: F401
from trnscipy.linalg._decomp_svd import (  # noqa: F401
    diagsvd,
    null_space,
    orth,
    subspace_angles,
    svd,
    svdvals,
)
from trnscipy.linalg._decomp_update import qr_delete, qr_insert, qr_update  # noqa: F401
from trnscipy.linalg._matfuncs import (  # noqa: F401
    coshm,
    cosm,
    expm,
    expm_cond,
    expm_frechet,
    fractional_matrix_power,
    funm,
    logm,
    signm,
    sinhm,
    sinm,
    sqrtm,
    tanhm,
    tanm,
)
from trnscipy.linalg._misc import norm  # noqa: F401
from trnscipy.linalg._procrustes import orthogonal_procrustes  # noqa: F401
from trnscipy.linalg._sketches import clarkson_woodruff_transform  # noqa: F401
from trnscipy.linalg._solvers import (  # noqa: F401
    solve_continuous_are,
    solve_continuous_lyapunov,
    solve_discrete_are,
    solve_discrete_lyapunov,
    solve_lyapunov,
    solve_sylvester,
)
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
