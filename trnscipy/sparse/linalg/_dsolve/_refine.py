"""float64 sparse direct solves on a Neuron device: the float32 device LU plus
double-float refinement (the 'neuron' registration of the ``sparse.linalg.factor`` kernel).

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  ``splu``/``spsolve``/``factorized``
factorize the float32 part of A with the device block LU (``_blocklu``, static pivoting)
and solve by LAPACK DSGESV-style refinement, the algorithm of the dense solves
(``trnscipy.linalg._refine._refine``): r = b - op(A) x in double-float, x += S(r) with S the
float32 factors' solve, until the correction is at double-float rounding level.  This is
SuperLU_DIST's scheme (static pivoting plus refinement), with the residual in double-float.

Differs from SciPy: a matrix too ill-conditioned for float32 (cond beyond about 1e7)
refines slowly or not at all: the result then carries a LinAlgWarning, as the dense
solves do.  A float32 factorization with a zero or non-finite pivot hands the matrix to
SciPy's SuperLU on the host (a DeviceFallbackWarning): SciPy's singular-matrix verdict.
``L``/``U`` are the float32 factors' (``Pr A Pc = L U`` to float32 accuracy),
assembled on the host as on every device kind.

``spsolve_triangular`` refines the same way: the float32 level-scheduled substitution
(``_triangular``) of the float32 part of the triangle as the approximate solver, the
residual b - T x with the triangle's double-float product (only the chosen triangle
and the diagonal are read, as the float32 solve does).

``spilu`` of float64 data factorizes A's float32 part (a preconditioner needs no more):
its ``solve`` takes and returns float64 data as SciPy's, applying the float32 factors
to the right-hand side rounded to float32 (``Float64ILU``).
"""

import numpy as np
import scipy.sparse.linalg as _spla
from numpy.linalg import LinAlgError

from trnscipy import _transfer
from trnscipy._errors import fallback
from trnscipy._kernels import _df, backend, register
from trnscipy._torch import torch
from trnscipy.linalg._refine import _refine
from trnscipy.sparse.linalg._dsolve import _triangular
from trnscipy.sparse.linalg._dsolve._devicelu import DeviceILU, DeviceLU, device_factor, device_ilu
from trnscipy.sparse.linalg._dsolve._superlu import SuperLU
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _parts

__all__ = ["Float64ILU", "RefinedLU", "triangular"]


@register("sparse.linalg.factor", "neuron")
def factor(A):
    """``device_factor`` for float32 data; the refined float64 factorization for float64.
    A float32 factorization that meets a zero or non-finite pivot cannot tell a singular
    matrix from one beyond float32's range (entries near 1e20 overflow its products):
    SciPy's SuperLU decides on the host, announced."""
    if A.data.dtype != torch.float64:
        return device_factor(A)
    try:
        return RefinedLU(A)
    except RuntimeError:
        fallback("scipy.sparse.linalg.splu", "the float32 factorization met a zero or "
                 "non-finite pivot (a singular matrix, or one beyond float32's range)",
                 stacklevel=5)
    return SuperLU(_spla.splu(_transfer.to_host(A).tocsc()), A.device)


def _float_parts(rhs):
    """A right-hand side of a float64 solve: float32 or float64 as given (``_parts`` takes
    both: a conversion to float64 would be a float64 op on the device), integers that
    float32 holds exactly (SciPy's LinearOperator probes with int8) as float32."""
    if rhs.dtype in (torch.float32, torch.float64):
        return rhs
    if rhs.dtype == torch.bool or (not rhs.dtype.is_floating_point and rhs.element_size() <= 2):
        return rhs.to(torch.float32)
    return rhs.to(torch.float64)


class RefinedLU(DeviceLU):
    """A float64 device CSR/CSC container's LU on Neuron: float32 factors, solves refined
    to double-float accuracy with A's exact double-float products."""

    def __init__(self, A):
        self._A = A
        self._ops = {"N": _df_operator(A)}  # A's double-float product and float32 copy
        self._lu32 = device_factor(self._ops["N"].float32)
        self.device = A.device
        self.dtype = np.dtype(np.float64)
        self.shape = tuple(A.shape)
        self._factors = None

    def __repr__(self):
        return f"<RefinedLU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def _solve(self, b, trans):
        if trans not in self._ops:  # real data: A^H = A^T, an operator built once
            self._ops[trans] = self._ops.get("T") or _df_operator(self._A.T)
        op, lu32 = self._ops[trans], self._lu32
        x = _refine(op.product, _parts(b), lambda r: lu32._solve(r, trans))
        return x if x.dtype == torch.float64 else _transfer.df_tensor(*_parts(x))

    traced_solve = None  # the refinement reads the host: callers use ``solve``

    def _cast(self, rhs):
        return _float_parts(rhs)

    def to(self, device):
        return RefinedLU(self._A.to(device))

    def _export(self):
        return self._lu32._export()


@register("sparse.linalg.triangular", "neuron")
def triangular(A, sched, lower, unit_diagonal, dtype):
    """``_triangular.solver`` for float32; in float64, refinement around the float32
    substitution with T's double-float product.  The diagonal is summed in double-float
    (duplicates included) for SciPy's zero-diagonal test: one host read."""
    if dtype != torch.float64:
        return _triangular.solver(A, sched, lower, unit_diagonal, dtype)
    tri, diag_layout = _df_triangle(A, lower, unit_diagonal)
    parts = tuple(p.reshape(-1) for p in _parts(A.data))
    diag = None
    if not unit_diagonal:
        ones = torch.ones(sched.n, dtype=torch.float32, device=parts[0].device)
        d = _df.spmv(diag_layout, parts, (ones, torch.zeros_like(ones)))
        zero = (d[0] == 0).any()
        backend(d[0].device).materialize([*d, zero, *parts])
        if bool(_transfer.to_host(zero)):
            raise LinAlgError("A is singular: zero entry on diagonal.")
        diag = d[0]
    tables = _triangular.tables(sched, parts[0], diag)
    backend(parts[0].device).materialize([t for t in tables if t is not None])

    def product(x):
        y = _df.spmv(tri, parts, x)
        return _df.add(y, x) if unit_diagonal else y

    def solve(b):
        approx = lambda r: _triangular.solve(sched, None, None, r, tables)  # noqa: E731
        return _refine(product, _parts(b), approx)

    return solve


def _df_triangle(A, lower, unit_diagonal):
    """(the row-padded layout of T's entries: the strict triangle and, without a unit
    diagonal, the diagonal; that of the diagonal), cached in A's plan with its pattern."""
    device = A.data.device

    def analyse(n, row, col):
        keep = (row > col) if lower else (row < col)
        on_diag = row == col
        if not unit_diagonal:
            keep = keep | on_diag
        pos = np.arange(row.shape[0])
        return (_df.RowPadded((n, n), row[keep], col[keep], pos[keep], device),
                _df.RowPadded((n, n), row[on_diag], col[on_diag], pos[on_diag], device))

    return _triangular.pattern_analysis(A, "df_triangle", (lower, unit_diagonal), analyse)


@register("sparse.linalg.ilu", "neuron")
def ilu(A, drop_tol, fill_factor):
    """``device_ilu`` for float32 data; for float64, that of A's float32 part (kept in
    A's plan with the double-float operator, so its symbolic analysis is reused)."""
    if A.data.dtype != torch.float64:
        return device_ilu(A, drop_tol, fill_factor)
    return Float64ILU(device_ilu(_df_operator(A).float32, drop_tol, fill_factor))


class Float64ILU(DeviceILU):
    """The float32 incomplete factors of a float64 matrix with SciPy's float64 interface:
    ``solve`` rounds the right-hand side to float32, applies the factors and returns the
    float64 (double-float) result.  L and U are the float32 factors, as float64."""

    def __init__(self, lu):
        super().__init__(lu._sym, lu._values, lu._scale, lu._tables)
        self.dtype = np.dtype(np.float64)

    def __repr__(self):
        return f"<Float64ILU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def _cast(self, rhs):
        return _float_parts(rhs)

    def _solve(self, b, trans):
        x = super()._solve(_parts(b)[0], trans)
        return _transfer.df_tensor(x, torch.zeros_like(x))

    def to(self, device):
        return Float64ILU(DeviceILU(self._sym, self._values.to(device),
                                    self._scale.to(device)))
