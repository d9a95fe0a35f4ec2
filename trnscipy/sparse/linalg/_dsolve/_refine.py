"""float64 sparse direct solves on a Neuron device: the float32 device LU plus
double-float refinement (the 'neuron' registration of the ``sparse.linalg.factor`` kernel).

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  ``splu``/``spsolve``/``factorized``
factorize the float32 part of A with the device LU (``_multifrontal``, static pivoting)
and solve by LAPACK DSGESV-style refinement, the algorithm of the dense solves
(``trnscipy.linalg._refine._refine``): r = b - op(A) x in double-float, x += S(r) with S the
float32 factors' solve, until the correction is at double-float rounding level.  This is
SuperLU_DIST's scheme (static pivoting plus refinement), with the residual in double-float.
The steps are one device loop whose condition is that stopping rule (``_refine_loop``,
the float32 solve traced into its body): one graph execution and one host read a solve.

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

``spilu`` of float64 data (``Float64ILU``) computes the float32 ILU of A's float32 part
(what a float64 Krylov solve's float32 inner solves apply); the double-float factors are
made on the first ``solve`` (or ``L``, ``U``, ``nnz``), since their sweeps cost seconds
at 10^4 unknowns: ``_ilu``'s float32 sweeps (no dropping yet), then Chow-Patel sweeps in
residual form to double-float factors: R = a - (L U) on the pattern in double-float,
v += R (U's entries) or R / u_jj (L's), the correction in float32, in one device loop
until the largest correction is at double-float rounding level (2**-47 of the largest
entry, or not shrinking below 2**-44); then ``drop_tol`` as in ``_ilu``. The factors
satisfy (L U)_ij = (Pr A)_ij on the pattern to about 1e-14 relative (measured on 2-D
Poisson). Sweeps are the fixed-point iteration's: a deep pattern (2-D Poisson 40x40,
ILU(8)) takes about 180. ``solve`` refines against the ILU operator M = Pr^T L U, not A
(M^-1 b, as SciPy's ILU solve; refining with A would give A^-1 b): the float32 factors'
solve as the approximate solver, b - M x with the double-float factors' products. A zero
or non-finite float32 pivot, and sweeps that do not converge in ``_ILU_SWEEPS``, hand
the matrix to SciPy's spilu on the host (a DeviceFallbackWarning). A float64 Krylov
solve given M = LinearOperator(A.shape, ilu.solve) preconditions its float32 inner
solves with the float32 factors' solve (``float32_solve``, traced into their device
loops).
"""

import numpy as np
import scipy.sparse.linalg as _spla
from numpy.linalg import LinAlgError

from trnscipy import _transfer
from trnscipy._dtypes import abs_max
from trnscipy._errors import fallback
from trnscipy._kernels import _df, _plan, backend, register
from trnscipy._torch import torch
from trnscipy.linalg._refine import _refine, _refine_loop
from trnscipy.sparse.linalg._dsolve import _ilu, _triangular
from trnscipy.sparse.linalg._dsolve._ilu import DeviceILU, device_ilu
from trnscipy.sparse.linalg._dsolve._multifrontal import DeviceLU, device_factor
from trnscipy.sparse.linalg._dsolve._superlu import SuperLU
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _parts

__all__ = ["Float64ILU", "RefinedLU", "triangular"]


@register("sparse.linalg.factor", "neuron")
def factor(A, natural=False):
    """``device_factor`` for float32 data; the refined float64 factorization for float64.
    A float32 factorization that meets a zero or non-finite pivot cannot tell a singular
    matrix from one beyond float32's range (entries near 1e20 overflow its products):
    SciPy's SuperLU decides on the host, announced."""
    if A.data.dtype != torch.float64:
        return device_factor(A, natural)
    try:
        return RefinedLU(A, natural)
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

    _vectors = True  # ``_solve`` takes 1-D and 2-D right-hand sides

    def __init__(self, A, natural=False):
        self._A, self._natural = A, natural
        self._ops = {"N": _df_operator(A)}  # A's double-float product and float32 copy
        self._lu32 = device_factor(self._ops["N"].float32, natural)
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
        # the float32 solve without its graph cut: every step in one device loop, which
        # gives the result b's shape (a reshape after it would be a graph of its own)
        return _refine_loop(op.product, _parts(b.reshape(b.shape[0], -1)),
                            lambda r: lu32._traced(r, trans), shape=b.shape)

    traced_solve = None  # the refinement reads the host: callers use ``solve``

    def _cast(self, rhs):
        return _float_parts(rhs)

    def to(self, device):
        return RefinedLU(self._A.to(device), self._natural)

    def _export(self):
        L, U, perm_r, perm_c = self._lu32._export()
        # float32 subnormals flushed to zero: float64 data on the device is float32
        # parts, which hold no subnormal (their change is below the factors' accuracy)
        for F in (L, U):
            F.data[np.abs(F.data) < np.finfo(np.float32).tiny] = 0
        return L, U, perm_r, perm_c


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

    return _plan.pattern_analysis(A, "df_triangle", (lower, unit_diagonal), analyse)


@register("sparse.linalg.ilu", "neuron")
def ilu(A, drop_tol, fill_factor):
    """``device_ilu`` for float32 data; for float64, ``Float64ILU``.  Where the float32
    sweeps meet a zero or non-finite pivot, SciPy's spilu decides on the host, announced."""
    if A.data.dtype != torch.float64:
        return device_ilu(A, drop_tol, fill_factor)
    try:
        return Float64ILU(A, drop_tol, fill_factor)
    except RuntimeError as e:
        fallback("scipy.sparse.linalg.spilu", str(e), stacklevel=5)
    return SuperLU(_host_ilu(A, drop_tol, fill_factor), A.device)


def _host_ilu(A, drop_tol, fill_factor):
    return _spla.spilu(_transfer.to_host(A).tocsc(), drop_tol=drop_tol, fill_factor=fill_factor)


_ILU_SWEEPS = 500  # double-float sweeps at most (they stop when converged)
_ILU_DONE = 2.0 ** -47  # converged: the largest correction below this, relative, or
_ILU_NOISE = 2.0 ** -44  # below this and not reduced by a sweep (the residual's rounding)


def _df_ilu(A, drop_tol, fill_factor):
    """(pattern analysis, double-float factor values (hi, lo), scaling, the float32 solve's
    tables of L and U) of A's ILU (the module docstring).  A sweep in residual form,
    v += C(R), is Chow-Patel's sweep (same fixed point, same contraction) with only the
    correction C(R) in float32, so it converges down to double-float rounding."""
    sym = _ilu.symbolic(A, fill_factor)
    if sym.singular:
        raise RuntimeError("Factor is exactly singular")
    dev = A.data.device
    data = tuple(p.reshape(-1) for p in _parts(A.data))
    v32, d, bad = _ilu.factor(sym, data[0], 0.0)
    # a: A's entries summed into the pattern (duplicates too), scaled by D^-1 . D^-1
    nnz, m = sym.row.shape[0], data[0].shape[0]
    into = _df.RowPadded((nnz, m), sym.src, np.arange(m), np.arange(m), dev)
    a = _df.tree_sum(into.values(data[0]), into.values(data[1]), dim=1)
    dd = _df.two_prod(d.index_select(0, sym.on_device("row", dev)),
                      d.index_select(0, sym.on_device("col", dev)))
    a = _df.div(a, dd)
    width = _ilu.terms(sym)[0].shape[1]  # (the host tables sym.t1, sym.t2, once)
    t1, t2 = (sym.on_device(name, dev).reshape(-1) for name in ("t1", "t2"))
    lower, pivot = sym.on_device("lower", dev), sym.on_device("pivot", dev)
    ext = torch.tensor([1.0, 0.0], dtype=torch.float32, device=dev)
    zeros = torch.zeros(2, dtype=torch.float32, device=dev)

    def sweep(carry, _):
        hi, lo, prev, done = carry
        # each value split once, its halves gathered (not split at every use)
        v = (*_df.split(torch.cat([hi, ext])), torch.cat([lo, zeros]))
        x, y = ([p.index_select(0, t).reshape(nnz, width) for p in v] for t in (t1, t2))
        p, e = _df.split_prod(x[:2], y[:2])
        e = e + ((x[0] + x[1]) * y[2] + x[2] * (y[0] + y[1]))
        r = _df.sub(a, _df.tree_sum(p, e, dim=1))
        step = torch.where(lower, r[0] / hi.index_select(0, pivot), r[0])
        new = _df.add_f((hi, lo), step)
        size, top = abs_max(step), abs_max(new[0])
        now = (size <= _ILU_DONE * top) | ((size >= prev) & (size <= _ILU_NOISE * top))
        return (torch.where(done, hi, new[0]), torch.where(done, lo, new[1]),
                torch.where(done, prev, size), done | now)

    done = torch.zeros((), dtype=torch.bool, device=dev)
    inf = torch.full((), float("inf"), device=dev)
    hi, lo, _, done = _triangular.loop(v32)(
        sweep, (v32, torch.zeros_like(v32), inf, done), 0, _ILU_SWEEPS, until=3)
    if drop_tol > 0:
        small = _ilu.dropped(sym, a[0], hi, drop_tol)
        hi, lo = (torch.where(small, torch.zeros_like(p), p) for p in (hi, lo))
    bad = bad + (~torch.isfinite(hi)).sum() + (hi.index_select(0, sym.on_device("diagpos", dev))
                                                == 0).sum()
    flags = torch.stack([bad, done.to(bad.dtype)])
    tables = {which: _ilu.prepare(sym, hi, which) for which in ("L", "U")}  # float32 solve's
    backend(dev).materialize([hi, lo, d, flags] + [t for pair in tables.values()
                                                   for t in pair if t is not None])
    bad, done = _transfer.to_host(flags).tolist()  # one read
    if bad:
        raise RuntimeError("the incomplete factorization met a zero or non-finite pivot")
    if not done:
        raise RuntimeError(f"the double-float ILU sweeps did not converge in {_ILU_SWEEPS}")
    return sym, (hi, lo), d, tables


class Float64ILU(DeviceILU):
    """The incomplete factors of a float64 matrix with SciPy's float64 interface.

    ``spilu`` computes the float32 factors of A's float32 part (``device_ilu``): what a
    float64 Krylov solve's float32 inner solves apply (``float32_solve``).  The factors to
    double-float accuracy (``_df_ilu``: hundreds of sweeps on a deep pattern, seconds at
    10^4 unknowns) are computed on first use of ``solve``, ``L``, ``U`` or ``nnz``;
    ``solve`` then refines against the ILU operator M = Pr^T D L U D (not A): the float32
    factors' solve as approximate solver, the residual b - M x with the double-float
    factors' products.  Where those sweeps do not converge, SciPy's spilu on the host
    serves (announced)."""

    def __init__(self, A, drop_tol, fill_factor):
        lu = device_ilu(_df_operator(A).float32, drop_tol, fill_factor)
        super().__init__(lu._sym, lu._values, lu._scale, lu._tables)
        self._source = (A, drop_tol, fill_factor)
        self._parts = self._host = None
        self.dtype = np.dtype(np.float64)
        self._products = None

    def _double_float(self):
        """The double-float factors, computed once (or SciPy's host ILU where the sweeps
        do not converge); True where the device ones serve."""
        if self._parts is None and self._host is None:
            A, drop_tol, fill_factor = self._source
            try:
                self._sym, parts, self._scale, tables = _df_ilu(A, drop_tol, fill_factor)
            except RuntimeError as e:
                fallback("scipy.sparse.linalg.spilu", str(e), stacklevel=6)
                self._host = _host_ilu(A, drop_tol, fill_factor)
            else:
                self._parts, self._values, self._tables = parts, parts[0], dict(tables)
        return self._host is None

    def __repr__(self):
        return f"<Float64ILU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def solve(self, rhs, trans="N"):
        """x with op(M) x = rhs for the incomplete factors M, to double-float accuracy."""
        return DeviceLU.solve(self, rhs, trans)  # host reads: not pure tensor code

    traced_solve = None

    def float32_solve(self, rhs):
        """The float32 factors' solve of a float32 ``rhs`` (pure tensor code): a float32
        Krylov solve's preconditioner (``_isolve._refine``)."""
        b = rhs.reshape(rhs.shape[0], -1)
        return DeviceILU._solve(self, b, "N").reshape(rhs.shape)

    float32_solve.pure_tensor_code = True

    def _cast(self, rhs):
        return _float_parts(rhs)

    def _layouts(self):
        """The row-padded layouts of strict L, U and their transposes (host, once)."""
        if self._products is None:
            sym, dev = self._sym, self.device
            pos = np.arange(sym.row.shape[0])
            low, up = sym.lower, ~sym.lower
            shape = (sym.n, sym.n)
            self._products = {
                "L": _df.RowPadded(shape, sym.row[low], sym.col[low], pos[low], dev),
                "U": _df.RowPadded(shape, sym.row[up], sym.col[up], pos[up], dev),
                "LT": _df.RowPadded(shape, sym.col[low], sym.row[low], pos[low], dev),
                "UT": _df.RowPadded(shape, sym.col[up], sym.row[up], pos[up], dev)}
        return self._products

    def _product(self, trans):
        """x -> op(M) x in double-float for a 2-D pair x."""
        sym, dev, lay, v = self._sym, self.device, self._layouts(), self._parts
        d = self._scale.unsqueeze(1)

        def unit_lower(name, y):
            return _df.add(y, _df.spmv(lay[name], v, y))

        if trans == "N":  # M = Pr^T D L U D
            inv = sym.on_device("inv_match", dev)
            return lambda x: tuple(p.index_select(0, inv) for p in _df.mul_f(
                unit_lower("L", _df.spmv(lay["U"], v, _df.mul_f(x, d))), d))
        match = sym.on_device("match", dev)  # M^T = D U^T L^T D Pr
        return lambda x: _df.mul_f(_df.spmv(lay["UT"], v, unit_lower("LT", _df.mul_f(
            tuple(p.index_select(0, match) for p in x), d))), d)

    def _solve(self, b, trans):
        trans = "T" if trans == "H" else trans  # real factors
        if self._parts is None and self._host is None and not bool(_parts(b)[0].any()):
            # M^-1 0 = 0 without the double-float factors: SciPy's LinearOperator probes
            # a solve with zeros for its dtype, and a Krylov solve needs only float32_solve
            z = torch.zeros(b.shape, dtype=torch.float32, device=b.device)
            return _transfer.df_tensor(z, z)
        if not self._double_float():  # (the fallback is announced once, when made)
            x = self._host.solve(_transfer._to_host(b, strict=False), trans)
            return _transfer._to_device(x, self.device, strict=True)
        for which in (("L", "U") if trans == "N" else ("UT", "LT")):
            self._table(which)  # the float32 solve's tables, outside the refinement's graph
        approx = lambda r: DeviceILU._solve(self, r, trans)  # noqa: E731
        x = _refine(self._product(trans), _parts(b), approx)
        return x if x.dtype == torch.float64 else _transfer.df_tensor(*_parts(x))

    def to(self, device):
        A, drop_tol, fill_factor = self._source
        return Float64ILU(A.to(device), drop_tol, fill_factor)

    def _export(self):
        if not self._double_float():
            h = self._host
            return h.L, h.U, h.perm_r, h.perm_c
        return _ilu.export(self._sym, _transfer.df_tensor(*self._parts), self._scale)

    @property
    def nnz(self):
        return self._host.nnz if not self._double_float() else super().nnz
