"""The capability table: what each kind of device can run.

One table, consulted by the dispatcher, the kernel seam and the device
implementations; nothing else decides where work runs.  An operation missing
from a kind's ``host_ops`` runs on the device.  What is in ``host_ops`` was
measured (docs/design.md, "torch-xla 2.9 behaviour the code relies on"), not guessed.
"""

from dataclasses import dataclass, field

import numpy as np

from trnscipy._errors import fallback

__all__ = ["Capability", "CAPABILITIES", "capability", "runs_on_device"]


@dataclass(frozen=True)
class Capability:
    kind: str
    float64: bool = True
    complex: bool = True
    # torch sparse layouts (sparse_csr_tensor ...) exist on this device
    sparse_layouts: bool = True
    # operations that have no device implementation here and run on the host
    host_ops: frozenset = field(default_factory=frozenset)
    # reading a device scalar on the host costs no graph execution or stream sync
    # (solvers then test convergence every iteration and update in place)
    host_reads_free: bool = False
    # operations with a float64-accurate method in double-float arithmetic (float32
    # operations only) where the device has no float64: they run on the device with
    # float64 data (the kernels registered for the kind do the double-float work)
    double_float_ops: frozenset = field(default_factory=frozenset)
    # device->host copies of complex128 lose the imaginary part (torch-xla 2.9,
    # measured): copy the real and imaginary parts separately
    split_complex128_to_host: bool = False
    # the device_loop kernel leaves its loop on a device flag (an XLA While whose
    # condition reads it): a Krylov solve then runs to its stop flag in one execution,
    # not one execution and host read per block of iterations
    device_while: bool = False


# scipy.linalg functions whose torch ops do not lower to XLA HLO (torch-xla 2.9,
# measured on PJRT_DEVICE=CPU by the aten:: fallback counters).  lu*, qr, expm:
# trnscipy/linalg/_xla_dense.py, eig/eigvals: trnscipy/linalg/_francis.py, from ops that
# lower (linalg_lu*, linalg_qr, geqrf, linalg_eig, linalg_matrix_exp do not).
# On Neuron eig/eigvals, rsf2csf and eigs stay on the host: their results are complex
# whatever the input's dtype (the dtype check sees only the real input); cdf2rdf computes
# with complex128 whatever its input.
_NEURON_HOST_EIG = frozenset(f"scipy.linalg.{name}" for name in (
    "_decomp.eig", "_decomp.eigvals", "_decomp_schur.rsf2csf", "_decomp.cdf2rdf")) | {
    "scipy.sparse.linalg._eigen.arpack.arpack.eigs"}

# Complex Schur routes (sqrtm, logm, funm, solve_sylvester, signm,
# fractional_matrix_power, and the Riccati solvers through solve_sylvester): complex
# arithmetic.
_COMPLEX_SCHUR = frozenset(f"scipy.linalg.{name}" for name in (
    "_matfuncs.sqrtm", "_matfuncs.logm", "_matfuncs.funm", "_solvers.solve_sylvester",
    "_matfuncs.signm", "_matfuncs.fractional_matrix_power", "_solvers.solve_continuous_are",
    "_solvers.solve_discrete_are"))

# SciPy's SuperLU object (to_device of one, or the host factorization of a dtype the
# device lacks): its solves run on the host, warned.  splu/spilu/spsolve factorize on the
# device (trnscipy/sparse/linalg/_dsolve/_blocklu.py).
# The L, U, perm_r, perm_c attributes of a device factorization are assembled on the
# host (SciPy's lu of each diagonal block), warned.
_HOST_SUPERLU = frozenset({"scipy.sparse.linalg.SuperLU.solve",
                           "scipy.sparse.linalg.SuperLU.L"})

# Operations with a double-float method on Neuron (sparse/linalg/_isolve/_refine.py,
# _refine_lsq.py, sparse/linalg/_dsolve/_refine.py, _eigen/_refine.py, linalg/_refine.py,
# linalg/_refine_orth.py: float32 factorizations and solves plus double-float refinement;
# sparse/linalg/_refine_expm.py, _refine_norm.py: the computation itself in double-float).
_DOUBLE_FLOAT = frozenset(
    [f"scipy.sparse.linalg._isolve.iterative.{name}"
     for name in ("cg", "bicg", "bicgstab", "cgs", "gmres", "qmr")]
    + ["scipy.sparse.linalg._isolve.minres.minres", "scipy.sparse.linalg._isolve.lgmres.lgmres",
       "scipy.sparse.linalg._isolve.tfqmr.tfqmr", "scipy.sparse.linalg._isolve._gcrotmk.gcrotmk",
       "scipy.linalg._basic.solve", "scipy.linalg._basic.matmul_toeplitz",
       "scipy.linalg._decomp_cholesky.cholesky",
       "scipy.linalg._decomp_cholesky.cho_factor", "scipy.linalg._decomp_cholesky.cho_solve",
       "scipy.linalg._decomp.eigh", "scipy.linalg._decomp.eigvalsh",
       "scipy.linalg._decomp_lu.lu_factor", "scipy.linalg._decomp_lu.lu_solve",
       "scipy.linalg._decomp_lu.lu", "scipy.linalg._basic.inv",
       "scipy.linalg._basic.solve_triangular", "scipy.linalg._basic.det",
       "scipy.linalg._decomp_qr.qr", "scipy.linalg._decomp_svd.svd",
       "scipy.linalg._decomp_svd.svdvals",
       "scipy.sparse.linalg._dsolve.linsolve.spsolve",
       "scipy.sparse.linalg._dsolve.linsolve.splu",
       "scipy.sparse.linalg._eigen.arpack.arpack.eigsh",
       "scipy.sparse.linalg._eigen.lobpcg.lobpcg.lobpcg",
       "scipy.sparse.linalg._eigen._svds.svds",
       "scipy.sparse.linalg._isolve.lsqr.lsqr", "scipy.sparse.linalg._isolve.lsmr.lsmr",
       "scipy.sparse.linalg._expm_multiply.expm_multiply",
       "scipy.sparse.linalg._norm.norm", "scipy.sparse.linalg._onenormest.onenormest"])

CAPABILITIES = {
    "cpu": Capability("cpu", host_reads_free=True),
    "cuda": Capability("cuda", host_ops=_HOST_SUPERLU),
    # torch-xla (PJRT CPU here): no torch sparse layouts.
    "xla": Capability("xla", sparse_layouts=False, host_ops=_HOST_SUPERLU,
                      split_complex128_to_host=True, device_while=True),
    # Trainium: no float64, no complex arithmetic, no torch sparse layouts.
    "neuron": Capability("neuron", float64=False, complex=False, sparse_layouts=False,
                         host_ops=_NEURON_HOST_EIG | _HOST_SUPERLU | _COMPLEX_SCHUR,
                         double_float_ops=_DOUBLE_FLOAT, split_complex128_to_host=True,
                         device_while=True),
}


_FLOAT64 = np.dtype(np.float64)


def capability(kind):
    return CAPABILITIES[kind]


def _dtype_problem(cap, dtype):
    """Why ``cap`` cannot compute in ``dtype`` (a NumPy dtype), or None."""
    if dtype is None:
        return None
    if not cap.complex and dtype.kind == "c":
        return f"{cap.kind} devices have no complex arithmetic ({dtype})"
    component_size = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    if not cap.float64 and dtype.kind in "fc" and component_size > 4:
        return f"{cap.kind} devices have no float64 arithmetic ({dtype})"
    return None


def runs_on_device(op, kind, dtype=None):
    """True if ``op`` can run on a device of ``kind`` in ``dtype``.

    When it cannot, announce the host fallback (DeviceFallbackWarning, or
    DeviceUnsupportedError under TRNSCIPY_STRICT=1) and return False.
    """
    cap = CAPABILITIES[kind]
    if op in cap.host_ops:
        fallback(op, f"no {kind} implementation", stacklevel=4)
        return False
    problem = _dtype_problem(cap, dtype)
    if problem is not None and not (op in cap.double_float_ops and dtype == _FLOAT64):
        fallback(op, problem, stacklevel=4)
        return False
    return True
