"""spsolve, splu, spilu, factorized and spsolve_triangular on device data.

CPU tensors keep SciPy's SuperLU, on host copies of the sparse structure (SciPy sorts
and sums its input in place) and views of the dense operands: the CPU kernels below.
Every other device factorizes and solves on the device (``_multifrontal``: symbolic analysis
on the host once per sparsity pattern, numeric work as batched dense operations; the
triangular solves level-scheduled, ``_triangular``).  What differs from SciPy there:

* ``splu``/``spilu`` return a ``DeviceLU``/``DeviceILU``: its factors and permutations
  are this factorization's (see ``_multifrontal``); all options are validated as SciPy
  does (SciPy's own check on a 1x1 matrix); ``diag_pivot_thresh``, ``relax``,
  ``panel_size``, ``drop_rule`` and ``options`` do not change the result (pivoting is
  static).  splu's and spsolve's ``permc_spec="NATURAL"`` keeps the columns' order
  (perm_c the identity, as SciPy's); every other spec is a nested dissection; spilu
  keeps the matrix's own order whatever the spec.
* ``spilu`` is an ILU(k) on a level-of-fill pattern sized by ``fill_factor``, computed by
  fine-grained parallel sweeps, with ``drop_tol`` applied inside the pattern
  (``_ilu``), not SuperLU's ILUTP: comparable fill and preconditioning quality, not the
  same factors.
* On Neuron, ``spilu`` of float64 data is the same ILU with double-float factors and a
  refined solve (``_refine.Float64ILU``): its ``solve`` applies its own L U to float64
  accuracy (SciPy's where both are a complete LU).
* ``spsolve`` ignores ``use_umfpack`` (as SciPy does without scikits.umfpack).
"""

import warnings

import numpy as np
import scipy.sparse as _sp
import scipy.sparse.linalg as _spla
from array_api_compat import is_torch_array
from scipy.sparse import SparseEfficiencyWarning
from scipy.sparse.linalg import MatrixRankWarning

from trnscipy import _autograd
from trnscipy._dispatch import call_device, dispatch, offloading
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import _to_host
from trnscipy.sparse.linalg._dsolve import _triangular
from trnscipy.sparse.linalg._dsolve._superlu import SuperLU

__all__ = ["factorized", "spilu", "splu", "spsolve", "spsolve_triangular"]


def _is_sparse(x):
    return getattr(x, "_trnscipy_device_object", False) and hasattr(x, "format")


def _as_compressed(A, formats, message):
    """A device CSR/CSC container of floating dtype (SciPy's conversion and warning)."""
    from trnscipy.sparse import csc_array

    if not (_is_sparse(A) and A.format in formats):
        A = csc_array(A, device=call_device(A))  # a host array-like (offload) too
        warnings.warn(message, SparseEfficiencyWarning, stacklevel=4)
    if to_numpy_dtype(A.dtype).kind not in "fc":
        A = A.astype(np.float64)
    return A


# ---- splu / spilu -----------------------------------------------------------------------------

@register("sparse.linalg.splu", "cpu")
def _splu_cpu(scipy_func, A, **options):
    """SciPy's splu/spilu on the CPU data: a dense tensor's memory as it is, a sparse
    container's arrays copied (SciPy may sort the indices of its input in place)."""
    return SuperLU(scipy_func(_to_host(A, strict=False), **options), A.device)


@register("sparse.linalg.splu", "generic")
def _splu_device(scipy_func, A, **options):
    A = _as_compressed(A, ("csc",), f"{scipy_func.__name__} converted its input to CSC format")
    if A.shape[0] != A.shape[1]:
        raise ValueError("can only factor square matrices")
    scipy_func(_sp.csc_array(np.ones((1, 1))), **options)  # SciPy's errors for bad options
    if scipy_func is _spla.spilu:
        drop_tol = 1e-4 if options["drop_tol"] is None else float(options["drop_tol"])
        fill_factor = 10.0 if options["fill_factor"] is None else float(options["fill_factor"])
        return kernel("sparse.linalg.ilu", A.device)(A, drop_tol, fill_factor)
    return kernel("sparse.linalg.factor", A.device)(A, options["permc_spec"] == "NATURAL")


@dispatch(_spla.splu, double_float=("neuron",), grad=_autograd.splu)
def splu(A, permc_spec=None, diag_pivot_thresh=None, relax=None, panel_size=None,
         options=None):
    return kernel("sparse.linalg.splu", call_device((A,)))(
        _spla.splu, A, permc_spec=permc_spec, diag_pivot_thresh=diag_pivot_thresh,
        relax=relax, panel_size=panel_size, options=options)


@dispatch(_spla.spilu, double_float=("neuron",))
def spilu(A, drop_tol=None, fill_factor=None, drop_rule=None, permc_spec=None,
          diag_pivot_thresh=None, relax=None, panel_size=None, options=None):
    return kernel("sparse.linalg.splu", call_device((A,)))(
        _spla.spilu, A, drop_tol=drop_tol, fill_factor=fill_factor, drop_rule=drop_rule,
        permc_spec=permc_spec, diag_pivot_thresh=diag_pivot_thresh, relax=relax,
        panel_size=panel_size, options=options)


@dispatch(_spla.factorized, composite=True)
def factorized(A):
    lu = splu(A)  # routed: the capability table decides where the factorization runs
    return lu.to_scipy().solve if offloading() else lu.solve


# ---- spsolve ----------------------------------------------------------------------------------

@register("sparse.linalg.spsolve", "cpu")
def _spsolve_cpu(A, b, permc_spec, use_umfpack):
    """SciPy's spsolve on host copies of the sparse operands and views of dense ones."""
    from trnscipy.sparse._base import from_scipy

    x = _spla.spsolve(_to_host(A, strict=False), _to_host(b, strict=False),
                      permc_spec=permc_spec, use_umfpack=use_umfpack)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return from_scipy(x, A.device)


@register("sparse.linalg.spsolve", "generic")
def _spsolve_device(A, b, permc_spec, use_umfpack):
    A = _as_compressed(A, ("csc", "csr"), "spsolve requires A be CSC or CSR matrix format")
    b_sparse = _is_sparse(b)
    if not (b_sparse or is_torch_array(b)):
        b = torch.as_tensor(np.asarray(b), device=A.device)
    b_vector = b.ndim == 1 or (b.ndim == 2 and b.shape[1] == 1)
    dtype = np.promote_types(to_numpy_dtype(A.dtype), to_numpy_dtype(b.dtype))
    if to_numpy_dtype(A.dtype) != dtype:
        A = A.astype(dtype)
    M, N = A.shape
    if M != N:
        raise ValueError(f"matrix must be square (has shape {(M, N)})")
    if M != b.shape[0]:
        raise ValueError(f"matrix - rhs dimension mismatch ({A.shape} - {b.shape[0]})")
    if b_sparse:
        if not b_vector and b.format != "csc":
            warnings.warn("spsolve is more efficient when sparse b is in the CSC matrix "
                          "format", SparseEfficiencyWarning, stacklevel=4)
        b = b.toarray()
    b = b.to(to_torch_dtype(dtype))
    # SciPy's ValueError for a bad permc_spec (its own check on a 1x1 matrix)
    _spla.spsolve(_sp.csc_array(np.ones((1, 1))), np.ones(1), permc_spec=permc_spec)
    try:
        lu = kernel("sparse.linalg.factor", A.device)(A, permc_spec == "NATURAL")
    except RuntimeError:
        warnings.warn("Matrix is exactly singular", MatrixRankWarning, stacklevel=4)
        x = torch.full(b.shape, float("nan"), dtype=b.dtype, device=b.device)
    else:
        x = lu.solve(b)
    if b_vector and x.ndim > 1:
        return x.reshape(-1)
    if b_sparse:
        return type(A)(x)
    return x


@dispatch(_spla.spsolve, double_float=("neuron",), grad=_autograd.spsolve)
def spsolve(A, b, permc_spec=None, use_umfpack=True):
    return kernel("sparse.linalg.spsolve", call_device((A, b)))(A, b, permc_spec, use_umfpack)


# ---- spsolve_triangular -----------------------------------------------------------------------

@register("sparse.linalg.spsolve_triangular", "cpu")
def _triangular_cpu(A, b, lower, overwrite_A, overwrite_b, unit_diagonal):
    """SciPy's spsolve_triangular on a host copy of A and a view of b."""
    return torch.from_numpy(np.asarray(_spla.spsolve_triangular(
        _to_host(A, strict=False), _to_host(b, strict=False), lower=lower,
        overwrite_A=overwrite_A, overwrite_b=overwrite_b, unit_diagonal=unit_diagonal)))


@register("sparse.linalg.spsolve_triangular", "generic")
def _triangular_device(A, b, lower, overwrite_A, overwrite_b, unit_diagonal):
    A = _as_compressed(A, ("csc", "csr"),
                       "CSC or CSR matrix format is required. Converting to CSC matrix.")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix but its shape is {A.shape}.")
    sched = _triangular.schedule(A, lower)
    if not is_torch_array(b):
        b = torch.as_tensor(np.asarray(b), device=A.device)
    dtype = np.promote_types(np.promote_types(to_numpy_dtype(A.dtype), np.float32),
                             to_numpy_dtype(b.dtype))
    tdtype = to_torch_dtype(dtype)
    # LinAlgError for a zero diagonal entry here, before b's checks (SciPy's order)
    solve = kernel("sparse.linalg.triangular", A.device)(A, sched, lower, unit_diagonal,
                                                          tdtype)
    if b.ndim not in (1, 2):
        raise ValueError(f"b must have 1 or 2 dims but its shape is {tuple(b.shape)}.")
    if A.shape[0] != b.shape[0]:
        raise ValueError("The size of the dimensions of A must be equal to the size of the "
                         f"first dimension of b but the shape of A is {A.shape} and the "
                         f"shape of b is {tuple(b.shape)}.")
    return solve(b.to(tdtype).reshape(b.shape[0], -1)).reshape(b.shape)


@dispatch(_spla.spsolve_triangular, double_float=("neuron",))
def spsolve_triangular(A, b, lower=True, overwrite_A=False, overwrite_b=False,
                       unit_diagonal=False):
    return kernel("sparse.linalg.spsolve_triangular", call_device((A, b)))(
        A, b, lower, overwrite_A, overwrite_b, unit_diagonal)
