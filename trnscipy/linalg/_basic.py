"""solve, solve_triangular, inv, pinv, det, lstsq on device tensors.

Differences from SciPy off the CPU: no LinAlgWarning for ill-conditioned
(but not singular) systems; ``assume_a='sym'/'her'`` and 'banded' use an LU
solve of the symmetrized / full matrix.
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _autograd
from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch, requires_grad
from trnscipy._dtypes import divide
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on, to_host
from trnscipy.linalg._inplace import into, result_in, reusable, solved_in
from trnscipy.linalg._kernels import _SOLVE_KINDS
from trnscipy.linalg._kernels_struct import _wide  # noqa: F401  (_matfuncs takes it from here)
from trnscipy.linalg._validate import (
    LinAlgError,
    as_matrix,
    as_rhs,
    as_square,
    as_tensor,
    common_dtype,
    device_of,
    empty,
)
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["solve", "solve_triangular", "inv", "pinv", "det", "lstsq", "solve_banded",
           "solve_toeplitz", "matmul_toeplitz",
           "solveh_banded", "pinvh", "solve_circulant", "matrix_balance"]


@dispatch(_sl.solve, double_float=("neuron",))
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
    """With ``overwrite_a`` (a general ``a`` in LAPACK's layout) ``a`` holds its LU
    factors afterwards, as SciPy's; computing them is an extra factorization here."""
    if assume_a not in _SOLVE_KINDS:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    given_a, given_b = a, b
    device = device_of(a, b)
    # SciPy's shapes: a at least 2-D, b at least 1-D, and a 1x1 a divides any b
    a = as_tensor(a, device, False, small_ints=torch.float64)
    a = a.reshape((1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a
    b = as_tensor(b, device, False, small_ints=torch.float64)
    b = b.reshape(1) if b.ndim == 0 else b
    if a.numel() == 1:
        return _solve_scalar(a, b, check_finite)
    a = as_square(a, device, False)
    b, vec, dtype = as_rhs(b, a, device, False, small_ints=torch.float64)
    if check_finite:
        check_finite_(a, b)
    a = a.to(dtype)
    if a.is_complex() and transposed:
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    if a.numel() == 0 or b.numel() == 0:
        x = empty(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], b)
        return x[..., 0] if vec else x
    def run(a, b, transposed, structure=None):
        return kernel("linalg.solve", device)(a, b, lower=lower,
                                              assume_a=structure or assume_a,
                                              transposed=transposed)

    if requires_grad(a, b):  # implicit differentiation (trnscipy._autograd)
        x = _autograd.dense_solve(run, a, b, lower, _SOLVE_KINDS[assume_a], transposed)
    else:
        x = run(a, b, transposed)
    if (overwrite_a and _SOLVE_KINDS[assume_a] == "gen"
            and reusable(given_a, a.dtype, ndims=(2,))):
        into(given_a, kernel("linalg.lu_factor", device)(a)[0])
    return solved_in(overwrite_b, given_b, x[..., 0] if vec else x)


def _solve_scalar(a, b, check_finite):
    """SciPy's solve for a 1x1 ``a``: b / a, whatever b's length."""
    if check_finite:
        check_finite_(a, b)
    vec = b.ndim == 1
    bm = b.unsqueeze(-1) if vec else b
    dtype = common_dtype(a, bm, small_ints=torch.float64)
    batch = torch.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    if bm.numel() == 0:
        x = empty(batch + bm.shape[-2:], bm, dtype)
    else:
        if a.item() == 0:
            raise LinAlgError("A singular matrix detected.")
        a, bm = a.to(dtype), bm.to(dtype)
        x = kernel("linalg._divide", a.device)(bm, a)
    return x[..., 0] if vec else x


@register("linalg._divide", "generic")
def _divide(b, a):
    """b / a elementwise (broadcast), in the device's arithmetic for the dtype."""
    return divide(b, a)


@dispatch(_sl.solve_triangular, stacks=True, double_float=("neuron",))
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    trans = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if trans not in (0, 1, 2):
        raise ValueError("The trans argument must be 0, 1, 2, 'N', 'T' or 'C'")
    device = device_of(a, b)
    given = b
    a = as_square(a, device, False)
    b, vec, dtype = as_rhs(b, a, device, False)
    if check_finite:
        check_finite_(a, b)
    if a.numel() == 0 or b.numel() == 0:
        return b[..., 0].clone() if vec else b.clone()
    x = kernel("linalg.solve_triangular", device)(a.to(dtype), b, trans=trans, lower=lower,
                                                   unit_diagonal=unit_diagonal)
    return solved_in(overwrite_b, given, x[..., 0] if vec else x)


@dispatch(_sl.inv, double_float=("neuron",))
def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    given = a
    a = as_square(a, device_of(a), check_finite)
    if a.numel() == 0:
        return a.clone()
    if assume_a not in _SOLVE_KINDS:  # SciPy looks the structure up after the checks
        raise KeyError(assume_a)
    x = kernel("linalg.inv", a.device)(a, assume_a=assume_a, lower=lower)
    return result_in(overwrite_a, given, x)


def _wide_result(t):
    """``t`` in double precision, SciPy's result dtype: a device without float64 holds its
    (float32-computed) values exactly, as double-float."""
    return tensor_on(t, t.device, torch.complex128 if t.is_complex() else torch.float64)


@dispatch(_sl.det, double_float=("neuron",))
def det(a, overwrite_a=False, check_finite=True):
    """Returns a 0-d tensor for a single matrix (SciPy: a NumPy scalar).  With
    ``overwrite_a`` (a C-ordered ``a``, as SciPy's own LU takes it) ``a`` holds its LU
    factors afterwards; computing them is an extra factorization here."""
    given = a
    a = as_tensor(a, device_of(a), check_finite)
    if a.ndim < 2:  # SciPy's messages (its tests match them)
        raise ValueError("The input array must be at least two-dimensional.")
    if a.shape[-1] != a.shape[-2]:
        raise ValueError("Last 2 dimensions of the array must be square but received "
                         f"shape {tuple(a.shape)}.")
    if a.shape[-1] == 0:
        return _wide_result(torch.ones(a.shape[:-2], dtype=a.dtype, device=a.device))
    d = _wide_result(kernel("linalg.det", a.device)(a))
    if overwrite_a and reusable(given, a.dtype, "C", ndims=None):
        into(given, kernel("linalg.lu_factor", a.device)(a)[0])
    return d


# (batch declared: SciPy 1.18 batches pinv and lstsq natively, without the wrapper that
# core_dims reads)
@dispatch(_sl.pinv, stacks=True, double_float=("neuron",), batch=(("a", 2),))
def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    a = as_matrix(a, device_of(a), check_finite)
    if (atol is not None and atol < 0) or (rtol is not None and rtol < 0):
        raise ValueError("atol and rtol values must be positive.")
    if a.numel() == 0:
        x = empty(a.shape[:-2] + a.shape[-2:][::-1], a)
        return (x, _no_rank(a)) if return_rank else x
    return kernel("linalg.pinv", a.device)(a, atol=atol, rtol=rtol, return_rank=return_rank)


def _no_rank(a):
    """The rank of empty matrices: 0, one per matrix of a stack (SciPy's loop's array)."""
    return 0 if a.ndim == 2 else torch.zeros(a.shape[:-2], dtype=torch.int64, device=a.device)


@dispatch(_sl.lstsq, stacks=True, double_float=("neuron",), batch=(("a", 2), ("b", "1|2")))
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None):
    """A stack (the dispatcher's broadcast; an operand without batch dimensions stays as
    it is) runs at once, but for empty matrices and gelsy (SciPy's loop)."""
    if lapack_driver not in (None, "gelsy", "gelsd", "gelss"):
        raise ValueError(f'LAPACK driver "{lapack_driver}" is not found')
    device = device_of(a, b)
    a = as_matrix(a, device, check_finite)
    b = as_tensor(b, device, check_finite)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if b.ndim == 0:
        raise ValueError("lstsq takes a 2-D a and a 1-D or 2-D b")
    if b.shape[-2 if b.ndim > 1 else 0] != a.shape[-2]:
        raise ValueError(f"Shape mismatch: a and b must have the same number of rows "
                         f"({a.shape[-2]} != {b.shape[-2 if b.ndim > 1 else 0]}).")
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype).expand(batch + a.shape[-2:]), b.to(dtype)  # (a rank per matrix)
    if batch and (a.numel() == 0 or b.numel() == 0 or lapack_driver == "gelsy"):
        raise PerMatrix  # (gelsy: no singular values, None per matrix)
    if a.numel() == 0 or b.numel() == 0:
        x = torch.zeros((a.shape[1],) + tuple(b.shape[1:]), dtype=dtype, device=device)
        real = a.real.dtype if a.is_complex() else a.dtype
        # SciPy: with no unknowns the residues are |b|^2 per column
        res = (b.abs() ** 2).sum(0).to(real) if a.shape[1] == 0 else \
            empty((0,), a, real)
        return x, res, 0, empty((0,), a, real)
    return kernel("linalg.lstsq", device)(a, b, cond=cond, lapack_driver=lapack_driver)


def _banded_rhs(ab, b, name):
    """SciPy's shape rule for the banded solvers: b's first (core) axis matches n (b of
    two or more dimensions a matrix, SciPy's "1|2" core: so with a stack of ab)."""
    vec = b.ndim == 1
    if b.ndim == 0 or (b.shape[-1] if vec else b.shape[-2]) != ab.shape[-1]:
        raise ValueError(f"shapes of {name} and b are not compatible.")
    return (b.unsqueeze(-1) if vec else b), vec


# SciPy's batch rule where SciPy batches in its own code: (argument or (tuple argument,
# element), core dimensions); c_or_cr is one vector or a (c, r) tuple
_TOEPLITZ = (("c_or_cr", 1), (("c_or_cr", 0), 1), (("c_or_cr", 1), 1))


@dispatch(_sl.solve_banded, stacks=True, double_float=("neuron",),
          batch=((("l_and_u", 0), 0), (("l_and_u", 1), 0), ("ab", 2), ("b", "1|2")))
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """The band is expanded to the dense matrix off the CPU (O(n^3) work, not gbsv's).  A
    stack (the dispatcher's broadcast) is one solve, but for per-matrix l and u."""
    if any(getattr(x, "ndim", 0) > 0 for x in l_and_u):
        raise PerMatrix  # (each matrix its own band widths: SciPy's loop)
    lower, upper = (int(x) for x in l_and_u)
    device = device_of(ab, b)
    ab = as_matrix(ab, device, False, name="ab", small_ints=torch.float64)
    b = as_tensor(b, device, False, small_ints=torch.float64)
    if check_finite:
        check_finite_(ab, b)
    bm, vec = _banded_rhs(ab, b, "ab")
    if lower + upper + 1 != ab.shape[-2]:
        raise ValueError(f"invalid values for the number of lower and upper diagonals: "
                         f"l+u+1 ({lower + upper + 1}) does not equal ab.shape[0] "
                         f"({ab.shape[-2]})")
    dtype = torch.promote_types(ab.dtype, b.dtype)
    if (b.numel() == 0 or ab.shape[-1] == 1) and max(ab.ndim, bm.ndim) > 2:
        raise PerMatrix  # (SciPy's loop's shapes)
    if b.numel() == 0:
        return b.to(dtype).clone()
    if ab.shape[-1] == 1:
        return divide(b.to(dtype), ab[..., upper, 0].to(dtype)).clone()
    x = kernel("linalg.solve_banded", device)((lower, upper), ab.to(dtype), bm.to(dtype))
    return x[..., 0] if vec else x


@dispatch(_sl.solveh_banded, stacks=True, double_float=("neuron",))
def solveh_banded(ab, b, overwrite_ab=False, overwrite_b=False, lower=False,
                  check_finite=True):
    """A dense Cholesky factorization off the CPU (O(n^3) work, not pbsv's)."""
    device = device_of(ab, b)
    ab = as_matrix(ab, device, False, name="ab")
    b = as_tensor(b, device, False)
    if check_finite:
        check_finite_(ab, b)
    bm, vec = _banded_rhs(ab, b, "ab")
    dtype = torch.promote_types(ab.dtype, b.dtype)
    if b.numel() == 0:
        if ab.ndim > 2:
            raise PerMatrix  # (SciPy's loop's shape)
        return b.to(dtype).clone()
    x = kernel("linalg.solveh_banded", device)(ab.to(dtype), bm.to(dtype), lower=lower)
    return x[..., 0] if vec else x


@dispatch(_sl.pinvh, stacks=True, double_float=("neuron",))
def pinvh(a, atol=None, rtol=None, lower=True, return_rank=False, check_finite=True):
    a = as_square(a, device_of(a), check_finite)
    if (atol is not None and atol < 0.0) or (rtol is not None and rtol < 0.0):
        raise ValueError("atol and rtol values must be positive.")
    if a.numel() == 0:
        return (a.clone(), _no_rank(a)) if return_rank else a.clone()
    return kernel("linalg.pinvh", a.device)(a, atol=atol, rtol=rtol, lower=lower,
                                             return_rank=return_rank)


def _toeplitz_args(c_or_cr, b, check_finite, square=True):
    """SciPy's argument rules for the Toeplitz solvers: (c, r, b) in float64/complex128.
    A stack (the dispatcher's broadcast: c or r of two or more dimensions, or b of three)
    keeps its batch dimensions: c and r (..., n), b (n,) or (..., n, k)."""
    c, r = c_or_cr if isinstance(c_or_cr, tuple) else (c_or_cr, None)
    if b is None:
        raise ValueError("`b` must be an array, not None.")
    device = device_of(c, r, b)
    c = as_tensor(c, device, check_finite)
    r = None if r is None else as_tensor(r, device, check_finite)
    b = as_tensor(b, device, check_finite)
    if c.ndim < 2 and (r is None or r.ndim < 2) and b.ndim < 3:
        c, r = c.reshape(-1), None if r is None else r.reshape(-1)
    r = c.conj() if r is None else r
    rows = b.shape[0] if b.ndim == 1 or c.ndim < 2 and r.ndim < 2 and b.ndim < 3 else \
        b.shape[-2]
    if (square and r.shape[-1] != c.shape[-1]) or rows != r.shape[-1]:
        raise ValueError("Incompatible dimensions.")
    dtype = torch.complex128 if any(t.is_complex() for t in (c, r, b)) else torch.float64
    return tuple(tensor_on(t, device, dtype) for t in (c, r, b))  # exact on float32 storage


@dispatch(_sl.solve_toeplitz, composite=True, stacks=True, batch=_TOEPLITZ + (("b", "1|2"),))
def solve_toeplitz(c_or_cr, b, check_finite=True):
    """CPU: SciPy's Levinson recursion on views.  Elsewhere the dense Toeplitz matrix
    (trnscipy's toeplitz) through trnscipy's solve: O(n^3) instead of Levinson's O(n^2);
    SciPy's LinAlgError where a leading principal minor is singular (see below)."""
    c, r, b = _toeplitz_args(c_or_cr, b, check_finite)
    return kernel("linalg.solve_toeplitz", b.device)(c, r, b)


@register("linalg.solve_toeplitz", "generic")
def _solve_toeplitz_dense(c, r, b):
    from trnscipy.linalg._special_matrices import toeplitz

    # SciPy raises LinAlgError where its Levinson recursion meets a singular leading
    # principal minor (which a pivoted dense solve passes): that verdict depends on c and
    # r only, so SciPy's own recursion decides it on their host copies (2n numbers read,
    # O(n^2) host work, no right-hand side)
    ch, rh = to_host(c), to_host(r)
    _sl.solve_toeplitz((ch, rh), np.zeros(ch.shape + (1,), dtype=ch.dtype),
                       check_finite=False)
    t = toeplitz(c, r)
    if b.ndim == 1 and t.ndim > 2:  # (a stack's shared vector: solve's "1|2" core)
        return solve(t, b[:, None], check_finite=False)[..., 0]
    return solve(t, b, check_finite=False)


@dispatch(_sl.matmul_toeplitz, double=True, stacks=True, batch=_TOEPLITZ + (("x", "1|2"),),
          double_float=("neuron",))
def matmul_toeplitz(c_or_cr, x, check_finite=False, workers=None):
    """The dense Toeplitz matrix times x (one GEMM; SciPy uses FFTs), in float64 as SciPy
    (double-float on a device without it)."""
    from trnscipy.linalg._special_matrices import toeplitz

    c, r, x = _toeplitz_args(c_or_cr, x, check_finite, square=False)
    t = toeplitz(c, r)
    if x.ndim == 1 and t.ndim > 2:  # (a stack's shared vector: a column of each product)
        return kernel("linalg._matmul", x.device)(t, x[:, None])[..., 0]
    return kernel("linalg._matmul", x.device)(t, x)


def _axis_len(name, a, axis):
    ax = axis + a.ndim if axis < 0 else axis
    if 0 <= ax < a.ndim:
        return a.shape[ax]
    raise ValueError(f"'{name}axis' entry is out of bounds")


@dispatch(_sl.solve_circulant, double_float=("neuron",))
def solve_circulant(c, b, singular="raise", tol=None, caxis=-1, baxis=0, outaxis=0):
    """The DFTs are products with the DFT matrix (torch.fft does not lower on XLA), in
    (real, imaginary) pairs of real tensors: real input computes in real arithmetic only.
    One host read (the near-singularity test)."""
    device = device_of(c, b)
    c, b = as_tensor(c, device, False), as_tensor(b, device, False)
    c, b = c.reshape(1) if c.ndim == 0 else c, b.reshape(1) if b.ndim == 0 else b
    nc, nb = _axis_len("c", c, caxis), _axis_len("b", b, baxis)
    if nc != nb:
        raise ValueError(f"Shapes of c {tuple(c.shape)} and b {tuple(b.shape)} are "
                         "incompatible")
    dtype = common_dtype(c, b, small_ints=torch.float64)
    if b.numel() == 0:
        return torch.empty(b.shape, dtype=dtype, device=device)
    shape_c = c.movedim(caxis, -1).shape
    shape_b = b.movedim(baxis, -1).shape
    try:
        torch.broadcast_shapes(shape_b, shape_c)
    except RuntimeError:
        raise ValueError("operands could not be broadcast together with shapes "
                         f"{tuple(shape_b)} {tuple(shape_c)}") from None
    return kernel("linalg.solve_circulant", device)(
        c.to(dtype), b.to(dtype), singular=singular, tol=tol, caxis=caxis, baxis=baxis,
        outaxis=outaxis)


@dispatch(_sl.matrix_balance, stacks=True, double_float=("neuron",))
def matrix_balance(A, permute=True, scale=True, separate=False, overwrite_a=False):
    """LAPACK's gebal: the zero pattern is read on the host once (the permutation search),
    then one host read of four norms per row in each scaling sweep; the scaling by powers
    of 2 runs on the device.  A stack: each matrix balanced as alone, the reads shared."""
    a = as_tensor(A, device_of(A), True)
    a = a.reshape(1, 1) if a.ndim == 0 else a.reshape(1, -1) if a.ndim == 1 else a
    if a.shape[-1] != a.shape[-2]:
        raise ValueError("The data matrix for balancing should be square.")
    lead, n = a.shape[:-2], a.shape[-1]
    if n == 0 or a.numel() == 0:
        if separate and not lead:
            return a.clone(), (torch.ones(n, dtype=torch.float64, device=a.device),
                               torch.arange(n, device=a.device))
        if separate:
            return a.clone(), torch.ones(*lead, 2, n, dtype=torch.float64, device=a.device)
        return a.clone(), torch.empty((*lead, n, n), dtype=torch.float64, device=a.device)
    return kernel("linalg.matrix_balance", a.device)(a, permute=bool(permute),
                                                    scale=bool(scale), separate=separate)
