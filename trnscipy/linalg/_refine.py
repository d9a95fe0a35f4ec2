"""float64 dense linear algebra on a Neuron device: float32 factorizations plus
double-float refinement (the 'neuron' registrations of the linalg kernels).

A float64 matrix there is held exactly as double-float pairs
(``trnscipy._transfer.df_parts``); all arithmetic is float32 (``trnscipy._kernels._df``).

- ``solve``: the float32 approximate solver (Cholesky for ``assume_a='pos'``,
  triangular solves for triangular kinds, else the float32 inverse) and LAPACK
  DSGESV/DSPOSV-style refinement: r = b - A x in double-float, x += S(r), until the
  correction is below 2**-48 of x or stops shrinking below 2**-36 of x (at most 30
  steps; a LinAlgWarning if that is not reached).  Systems are solved at a bucket order
  (``_bucket``: at most 1/8 larger) as [[A, 0], [0, I]], so the refinement's graphs
  compile once per bucket, not once per order.
- ``lu_factor``, ``lu``: the float32 device LU (its pivots) refined to double-float
  factors by Newton steps on P A = L U: E = P A - L U by Ozaki GEMMs,
  F = L0^-1 E U0^-1 by float32 triangular solves, L += L0 tril(F, -1), U += triu(F) U0.
- ``lu_solve``: refinement with the double-float factors' products (no A needed);
  ``inv``: refinement of A X = I from the float32 inverse, A X by Ozaki GEMMs.
- ``cholesky``: the float32 factor refined to double-float by two Newton steps,
  L += L0 Phi(L0^-1 (A - L L^T) L0^-T) (Phi: the lower triangle, half diagonal),
  A - L L^T by Ozaki GEMMs.
- ``cho_solve``: refinement with the double-float factor's products.
- ``eigh``: float32 eigh, rotation steps X (I + R/2) exp(Theta) (every pair's Jacobi
  angle; they undo the float32 mixing of close eigenvalues) and Ogita-Aishima steps
  (matrix products only, Ozaki GEMMs): eigenvalues and vectors to double-float accuracy
  (exactly equal eigenvalues: the vectors span their subspace).  A fixed schedule of
  steps (device loops) in one graph with the float32 eigh, and one host read.

A stack of matrices (SciPy's batches) is one refinement: each step acts on the whole
stack, one host read decides for it (the LU's Newton steps keep each matrix's own
stopping rule, eigh's scales are each matrix's), so a batch costs the graph executions
of one matrix.
"""

import warnings

import numpy as np

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._dtypes import abs_max
from trnscipy._errors import fallback
from trnscipy._kernels import _df, backend, kernel, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels as _k
from trnscipy.linalg import _xla_dense

_MAX_STEPS = 30
_BLIND = 4  # refinement steps before the first host read (errors 1e-5 -> noise at cond 100)
_EPS_DF = 2.0 ** -48
_NOISE = 2.0 ** -36
_EIGH_STEPS = 14
_EIGH_DONE = 2.0 ** -26  # a correction this small leaves an error near its square
_ROTATE_UNTIL = 1e-3  # rotation steps while the largest Jacobi angle is above this
_TAYLOR = 8  # terms of exp(Theta): |Theta| <= pi/4 per entry
_RESOLVED = 2.0 ** -44  # gaps below this (relative) count as equal eigenvalues
_REFINE_STEPS = 2  # Ogita-Aishima steps in eigh's first graph (after _rotations(n))


def _parts(t):
    if t.dtype == torch.float32:
        return t, torch.zeros_like(t)
    return _transfer.df_parts(t)


def _df64(*tensors):
    return any(t.dtype == torch.float64 for t in tensors)


def _sym(p, lower):
    """Both parts symmetrized from one triangle (exact: the triangles do not overlap)."""
    return _k.hermitian(p[0], lower), _k.hermitian(p[1], lower)


def _t(p):
    return p[0].mT, p[1].mT


def _fetch(t):
    return kernel("linalg._fetch", t.device)(t)


@register("linalg._all_finite", "neuron")
def _all_finite(*tensors):
    """Finite iff the float32 high part is (float64 tensors through their parts, complex
    ones through their real and imaginary views: no complex arithmetic)."""
    hi = [_parts(t)[0] if t.dtype in (torch.float64, torch.complex128) else t
          for t in tensors]
    return _k._all_finite(*(p for t in hi for p in ((t.real, t.imag) if t.is_complex()
                                                    else (t,))))


def _refine(product, b, approx, check=None):
    """x with A x = b to double-float accuracy, as a float64 tensor (``df_tensor``):
    ``product(x)`` = A x on pairs, b a 2-D pair or a stack of them, ``approx`` a float32
    approximate solver.

    The first ``_BLIND`` steps run without a host read, in the graph of the approximate
    solver's setup, which also computes the result: one graph execution where a
    well-conditioned system needs no more.  ``check()`` (the approximate solver's
    singularity check, a host read) runs after it.  Then one graph and one read per step
    until the correction is small, in a stack for every matrix by its own sizes (further
    steps leave a converged matrix at its rounding level)."""
    x = (approx(b[0]), torch.zeros_like(b[0]))
    sizes = []
    for _ in range(_BLIND):
        r = _df.sub(b, product(x))
        d = approx(r[0])
        x = _df.add_f(x, d)
        sizes.append(_sizes(d))
    result = _transfer.df_tensor(*x)  # computed in the graph of the read that accepts it
    prev, dn, xn = np.asarray(_fetch(torch.stack([*sizes[-2:], _sizes(x[0])])), np.float64)
    if check is not None:
        check()
    for _ in range(_MAX_STEPS):
        # converged: the correction is at double-float rounding level, or it stopped
        # shrinking near it (the residual is then rounding noise)
        if np.all((dn <= _EPS_DF * xn) | ((dn > 0.5 * prev) & (dn <= _NOISE * xn))):
            return result
        if np.isnan(dn).any() or np.isnan(xn).any():
            break
        prev = dn
        r = _df.sub(b, product(x))
        d = approx(r[0])
        x = _df.add_f(x, d)
        result = _transfer.df_tensor(*x)
        dn, xn = np.asarray(_fetch(torch.stack([_sizes(d), _sizes(x[0])])), np.float64)
    warnings.warn("double-float refinement did not converge: the result may have only "
                  "float32 accuracy (ill-conditioned matrix)", _k._sl.LinAlgWarning,
                  stacklevel=6)
    return result


def _refine_loop(product, b, approx, shape=None):
    """``_refine`` (same steps, same stopping rule, at most ``_BLIND + _MAX_STEPS`` steps)
    as one device loop whose While condition is the stopping rule, and one host read, for
    a pure-tensor ``approx`` (no graph cuts, host reads or device loops of its own): a
    step then costs no graph execution.  Starts from x = 0 (the first step is approx(b)),
    lest the graph trace the approximate solver twice.  A stack stops each matrix at its
    own rule (its carry kept), the loop when all have.  The result has ``shape`` if given
    (a reshape in the loop's graph: one after it would be left pending, a graph of its
    own at the next sync)."""
    batch, dev = b[0].shape[:-2], b[0].device
    zero = torch.zeros_like(b[0])
    inf = torch.full(batch, float("inf"), dtype=b[0].dtype, device=dev)
    no = torch.zeros(batch, dtype=torch.bool, device=dev)

    def body(c, _):
        xh, xl, bh, bl, prev, stopped, ok, _ = c
        d = approx(_df.sub((bh, bl), product((xh, xl)))[0])
        y = _df.add_f((xh, xl), d)
        dn, xn = _sizes(d), _sizes(y[0])
        # converged: as ``_refine``'s test; NaN stops the loop unconverged
        met = (dn <= _EPS_DF * xn) | ((dn > 0.5 * prev) & (dn <= _NOISE * xn))
        now = stopped | met | dn.isnan() | xn.isnan()
        keep = stopped[..., None, None]
        return (torch.where(keep, xh, y[0]), torch.where(keep, xl, y[1]), bh, bl,
                torch.where(stopped, prev, dn), now, ok | (met & ~stopped), now.all())

    xh, xl, *_, ok, _ = backend(dev).device_loop(
        body, (zero, zero, *b, inf, no, no, no.all()), 0, _BLIND + _MAX_STEPS, until=7)
    if shape is not None:
        xh, xl = xh.reshape(shape), xl.reshape(shape)
    result, ok = _transfer.df_tensor(xh, xl), ok.all()
    # one graph of the loop and its result (not every pending tensor: a first call's
    # leftovers would make its graph differ from later calls', compiled twice)
    backend(dev).materialize([result, ok])
    if not bool(_transfer.to_host(ok)):
        warnings.warn("double-float refinement did not converge: the result may have only "
                      "float32 accuracy (ill-conditioned matrix)", _k._sl.LinAlgWarning,
                      stacklevel=6)
    return result


def _sizes(t):
    """max |t| of each matrix of a stack (..., n, k) (of t, for a matrix)."""
    return abs_max(t.flatten(-2), -1)


def _kept(done, new, old):
    """The carry ``new`` with the matrices of a stack that ``done`` (a host bool array of
    the batch's shape) marks left at ``old``: a converged matrix stops where its single
    call would while the others step."""
    if not np.any(done):
        return tuple(new)
    keep = torch.as_tensor(np.asarray(done), device=old[0].device)
    return tuple(torch.where(keep.reshape(keep.shape + (1,) * (n.ndim - keep.ndim)), o, n)
                 for n, o in zip(new, old, strict=True))


def _trsm(a, b, upper, trans=0, unit=False):
    return kernel("linalg._trsm", a.device)(a, b, upper=upper, trans=trans, unit=unit)


def _cho32(L):
    return lambda r: _trsm(L, _trsm(L, r, upper=False), upper=False, trans=1)


def _approx_solver(a32, kind):
    """A float32 solver for a32 (the refinement's preconditioner) and its deferred
    singularity check (or None).  General matrices (``gen``): the float32 inverse (it
    lowers on XLA, and a refinement step is then one GEMV; the blocked device LU, ``lu``,
    costs a graph execution per few columns), singular as the float32 solve judges it."""
    if kind == "pos":
        return _cho32(_k.potrf(a32, lower=True)), None
    if kind in ("upper", "lower"):
        _k.solve_triangular(a32, a32[..., :1], lower=kind == "lower")  # singularity check
        return (lambda r: _trsm(a32, r, upper=kind == "upper")), None
    if kind == "gen":
        ainv, info = kernel("linalg._inv", a32.device)(a32)
        return (lambda r: ainv @ r), (lambda: _k._singular(info, a32))
    lu, piv, perm, info = _xla_dense.getrf(a32)
    _k._singular(info, a32)
    return _lu32(lu, perm), None


def _lu32(lu, perm, trans=0):
    """The float32 solver of op(P^T L U) x = r from packed float32 factors, ``a[perm] = L U``."""
    if trans == 0:
        return lambda r: _trsm(lu, _trsm(lu, _gather_rows(r, perm), upper=False, unit=True),
                               upper=True)
    iperm = _inverse(perm)
    return lambda r: _gather_rows(_trsm(lu, _trsm(lu, r, upper=True, trans=1), upper=False,
                                        trans=1, unit=True), iperm)


def _gather_rows(r, perm):
    """r[perm] of an (..., n, k) tensor, with one permutation per matrix of a stack."""
    if perm.ndim == 1:
        return r.index_select(-2, perm)
    return torch.gather(r, -2, perm[..., None].expand(perm.shape + r.shape[-1:]))


def _inverse(perm):
    return torch.empty_like(perm).scatter_(-1, perm, torch.arange(
        perm.shape[-1], device=perm.device).expand(perm.shape))


_BATCHED = "batched input has no double-float method"


def _on_host(op, reason, fn, *tensors):
    """``fn`` (SciPy's function on NumPy arrays) on the exact host values of ``tensors``,
    announced; array results back on the device exactly."""
    fallback(op, reason, stacklevel=6)
    device = tensors[0].device
    out = fn(*(_transfer.to_host(t) for t in tensors))

    def back(o):
        if isinstance(o, np.generic):  # a NumPy scalar (lstsq's residue of a 1-D b)
            o = np.asarray(o)
        return _transfer.tensor_on(o, device) if hasattr(o, "dtype") else o

    return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)


@register("linalg._divide", "neuron")
def _divide(b, a):
    """float64 b / a from the exact triple parts, SciPy's correctly rounded quotient (a
    float64 division on the device would be float32's)."""
    if not (b.dtype == a.dtype == torch.float64):
        return kind_kernel("linalg._divide", "generic")(b, a)
    shape = torch.broadcast_shapes(b.shape, a.shape)
    B, A = (tuple(p.expand(shape) for p in _transfer.df_triple(x)) for x in (b, a))
    return _transfer.df_tensor(*_df.div3(B, A))


@register("linalg.solve", "neuron")
def solve(a, b, lower=False, assume_a=None, transposed=False):
    if not _df64(a, b):
        return _k.solve(a, b, lower=lower, assume_a=assume_a, transposed=transposed)
    if b.ndim < 2:
        return _on_host("scipy.linalg.solve", _BATCHED, lambda x, y: _k._sl.solve(
            x, y, lower=lower, assume_a=assume_a, transposed=transposed,
            check_finite=False), a, b)
    kind = _k._SOLVE_KINDS[assume_a]
    A, B = _broadcast(_parts(a), _parts(b))  # a stack: one refinement for the batch
    if transposed:
        A, lower = _t(A), not lower
        kind = {"upper": "lower", "lower": "upper"}.get(kind, kind)
    if kind in ("pos", "sym", "her"):
        A = _sym(A, lower)
    elif kind in ("upper", "lower"):
        A = (A[0].triu(), A[1].triu()) if kind == "upper" else (A[0].tril(), A[1].tril())
    elif kind == "diagonal":
        A = tuple(torch.diag_embed(p.diagonal(dim1=-2, dim2=-1)) for p in A)
    elif kind == "tridiagonal":
        A = (A[0].triu(-1).tril(1), A[1].triu(-1).tril(1))
    n = A[0].shape[-1]
    A, B = _padded_system(A, B, _bucket(n))
    approx, check = _approx_solver(A[0], kind if kind in ("pos", "upper", "lower") else "gen")
    try:
        return _refine(lambda x: _mm(A, x), B, approx, check)[..., :n, :]
    except _k.LinAlgError:
        if check is None:
            raise
    # the float32 inverse looks singular: the float32 device LU tells an exactly singular
    # matrix (a zero pivot: LinAlgError) from an ill-conditioned one (refined, warned)
    approx, _ = _approx_solver(A[0], "lu")
    return _refine(lambda x: _mm(A, x), B, approx)[:n]


def _broadcast(A, B):
    """The pairs of a and b with their leading (batch) dimensions broadcast, as SciPy's."""
    batch = torch.broadcast_shapes(A[0].shape[:-2], B[0].shape[:-2])
    return (tuple(p.expand(batch + p.shape[-2:]) for p in A),
            tuple(p.expand(batch + p.shape[-2:]) for p in B))


def _bucket(n):
    """The order a system of order ``n`` is solved at: at most 1/8 larger (8 at least), so
    a device compiles the solve's graphs once per bucket, not once per order (a script
    solving systems of many sizes: SciPy's test_onenormest inverts 100 of 31 orders)."""
    step = max(8, 1 << max(n.bit_length() - 4, 0))
    return -(-n // step) * step


def _padded_system(A, B, size):
    """Pairs of [[A, 0], [0, I]] and [B; 0] of order ``size``: the first rows of their
    solution solve A x = B (the blocks never mix; identity keeps A's kind: symmetric,
    positive definite, triangular).  The padding, and all pending work on the order's
    shapes, runs in a small graph of its own: the solve's graphs see only the bucket's."""
    n = A[0].shape[-1]
    if size != n:
        pad = torch.nn.functional.pad
        ones = torch.cat([torch.zeros(n, dtype=A[0].dtype, device=A[0].device),
                          torch.ones(size - n, dtype=A[0].dtype, device=A[0].device)])
        A = (pad(A[0], (0, size - n, 0, size - n)) + torch.diag(ones),
             pad(A[1], (0, size - n, 0, size - n)))
        B = tuple(pad(p, (0, 0, 0, size - n)) for p in B)
    backend(A[0].device).sync()
    return A, B


@register("linalg.cholesky", "neuron")
def cholesky(a, lower=False):
    if not _df64(a):
        return _k.cholesky(a, lower=lower)
    A = _sym(_parts(a), lower)  # (a stack: one refinement for the batch)
    # the positive-definiteness check reads info after the Newton steps are traced: the
    # factorization and its refinement are one graph execution
    L0, info = kernel("linalg._potrf", a.device)(A[0], False)
    L = (L0, torch.zeros_like(L0))
    for _ in range(2):
        R = _df.sub(A, _df.gemm(L, _t(L)))
        F = _trsm(L0, _trsm(L0, R[0], upper=False).mT, upper=False)
        phi = F.tril(-1) + torch.diag_embed(F.diagonal(dim1=-2, dim2=-1) * 0.5)
        L = _df.add_f(L, L0 @ phi)
    L = (L[0].tril(), L[1].tril())
    out = _transfer.df_tensor(*(L if lower else _t(L)))
    try:
        _k.check_potrf(info, A[0])
    except _k.LinAlgError:
        _not_definite_beyond_float32(A[0])
        # float32 rounding made a positive (semi)definite float64 matrix indefinite (an
        # eigenvalue within float32's rounding of zero): SciPy's float64 potrf decides
        return _on_host("scipy.linalg.cholesky", "the float32 factorization failed within "
                        "float32 rounding (an ill-conditioned matrix)",
                        lambda x: _k._sl.cholesky(x, lower=lower, check_finite=False), a)
    return out


def _not_definite_beyond_float32(A):
    """Raise SciPy's LinAlgError where A + delta I, delta a float32 rounding bound of the
    factorization, is still not positive definite in float32: A is not positive definite."""
    n = A.shape[-1]
    scale = A.diagonal(dim1=-2, dim2=-1).abs().amax(-1)[..., None, None]
    delta = 2 * n * float(np.finfo(np.float32).eps) * scale
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    _, info = kernel("linalg._potrf", A.device)(A + delta * eye, False)
    _k.check_potrf(info, A)


@register("linalg.cho_solve", "neuron")
def cho_solve(c_and_lower, b):
    c, lower = c_and_lower
    if not _df64(c, b):
        return _k.cho_solve(c_and_lower, b)
    if b.ndim < 2:
        return _on_host("scipy.linalg.cho_solve", _BATCHED, lambda x, y: _k._sl.cho_solve(
            (x, lower), y, check_finite=False), c, b)
    C, B = _broadcast(_parts(c), _parts(b))  # a stack: one refinement for the batch
    L = (C[0].tril(), C[1].tril()) if lower else _t((C[0].triu(), C[1].triu()))
    Lt = _t(L)

    return _refine(lambda x: _df.gemv(L, _df.gemv(Lt, x)), B, _cho32(L[0]))


_LU_STEPS = 10
_LU_DONE = 2.0 ** -26  # a Newton correction this small leaves an error below 2**-52
_LU_NOISE = 2.0 ** -20


def _getrf_df(A):
    """P A = L U to double-float accuracy for a square pair A, or a stack of them: (L, U)
    pairs, ``perm`` (``A[perm] = L U``), the 0-based pivots and ``info`` (1-based index of
    the first exactly zero diagonal of U, or 0), per matrix.  The Newton steps run on the
    whole stack, one host read each; every matrix keeps its own rule (a growing correction
    is not applied; it stops at convergence or stagnation), as its single call."""
    lu0, piv, perm, _ = _xla_dense.getrf(A[0])
    n = A[0].shape[-1]
    eye = torch.eye(n, dtype=lu0.dtype, device=lu0.device)
    L0, d = lu0.tril(-1) + eye, lu0.diagonal(dim1=-2, dim2=-1)
    # a zero float32 pivot takes 1 in the Newton solves: the float64 pivot may not be zero
    U0 = lu0.triu() + torch.diag_embed(torch.where(d == 0, 1.0, 0.0).to(d.dtype))
    zero = torch.zeros_like(lu0)
    PA = (_gather_rows(A[0], perm), _gather_rows(A[1], perm))
    L, U = (L0, zero), (lu0.triu(), zero)
    # per matrix: the last applied correction's size, still refining, converged
    batch = lu0.shape[:-2]
    prev = torch.full(batch, float("inf"), dtype=lu0.dtype, device=lu0.device)
    active = torch.ones(batch, dtype=torch.bool, device=lu0.device)
    ok = torch.zeros_like(active)
    state = [L0, U0, *PA, *L, *U, prev, active, ok]
    backend(lu0.device).materialize(state)  # one executable for all steps
    for _ in range(_LU_STEPS):
        E = _df.sub(PA, _df.gemm(L, U))
        F = _trsm(U0, _trsm(L0, E[0], upper=False, unit=True).mT, upper=True, trans=1).mT
        f = F.abs().amax(-1).amax(-1)
        new = _df.add_f(L, L0 @ F.tril(-1)), _df.add_f(U, F.triu() @ U0)
        apply = (active & (f <= prev))[..., None, None]  # (NaN: not applied, stops)
        L, U = (tuple(torch.where(apply, x, y) for x, y in zip(N, O, strict=True))
                for N, O in zip(new, (L, U), strict=True))
        done = active & ~((f > _LU_DONE) & (f <= 0.5 * prev))
        ok = torch.where(done, f <= _LU_NOISE, ok)  # converged, or stagnated at noise
        prev = torch.where(active, f, prev)
        active = active & ~done
        more, good = _fetch(torch.stack([active.any(), ok.all()]))  # the step's one read
        if not more:
            break
    if not good:
        warnings.warn("double-float refinement of the LU factors did not converge: they "
                      "may have only float32 accuracy (ill-conditioned or singular matrix)",
                      _k._sl.LinAlgWarning, stacklevel=6)
    zero = U[0].diagonal(dim1=-2, dim2=-1) == 0
    info = torch.where(zero.any(-1), zero.to(torch.int32).argmax(-1) + 1, 0).to(torch.int32)
    return L, U, perm, piv, info


_GEMV_COLS = 4  # right-hand sides up to which A X is a GEMV (elementwise), not a GEMM


def _mm(A, x):
    return _df.gemv(A, x) if x[0].shape[-1] <= _GEMV_COLS else _df.gemm(A, x)


@register("linalg._matmul", "neuron")
def _matmul(a, b):
    """a @ b: float64 operands (a 2-D a and a 1-D b, or stacks of matrices, their leading
    dimensions broadcast) by double-float products."""
    if not _df64(a, b) or a.ndim < 2 or b.ndim < 1 or (b.ndim == 1 and a.ndim != 2) \
            or a.is_complex() or b.is_complex():
        return _k._matmul(a, b)
    x = _parts(b if b.ndim >= 2 else b[:, None])
    hi, lo = _mm(_parts(a), x)
    return _transfer.df_tensor(hi, lo) if b.ndim >= 2 else _transfer.df_tensor(hi[:, 0],
                                                                                  lo[:, 0])


def _rows(p, idx):
    return _gather_rows(p[0], idx), _gather_rows(p[1], idx)


def _unpack(lu):
    """(L, U) pairs of packed double-float factors."""
    eye = torch.eye(lu[0].shape[-1], dtype=lu[0].dtype, device=lu[0].device)
    return (lu[0].tril(-1) + eye, lu[1].tril(-1)), (lu[0].triu(), lu[1].triu())


def _square(a):
    return a.shape[-2] == a.shape[-1]


_NOT_SQUARE = "the double-float LU takes square matrices (rectangular input)"


@register("linalg.lu_factor", "neuron")
def lu_factor(a):
    if not _df64(a):
        return _xla_dense.lu_factor(a)
    if not _square(a):
        return _on_host("scipy.linalg.lu_factor", _NOT_SQUARE,
                        lambda x: _k._sl.lu_factor(x, check_finite=False), a)
    L, U, _, piv, info = _getrf_df(_parts(a))  # (a stack: one refinement for the batch)
    _k.lu_factor_warning(info, a)
    lu = _transfer.df_tensor(L[0].tril(-1) + U[0], L[1].tril(-1) + U[1])
    return lu, piv.to(torch.int32)


@register("linalg.lu", "neuron")
def lu(a, permute_l=False, p_indices=False):
    if not _df64(a):
        return _xla_dense.lu(a, permute_l=permute_l, p_indices=p_indices)
    if not _square(a):
        return _on_host("scipy.linalg.lu", _NOT_SQUARE, lambda x: _k._sl.lu(
            x, permute_l=permute_l, p_indices=p_indices, check_finite=False), a)
    L, U, perm, _, _ = _getrf_df(_parts(a))  # (a stack: one refinement for the batch)
    iperm = _inverse(perm)
    U = _transfer.df_tensor(*U)
    if permute_l:
        return _transfer.df_tensor(*_rows(L, iperm)), U
    L = _transfer.df_tensor(*L)
    if p_indices:
        return iperm.to(torch.int32), L, U
    n = perm.shape[-1]
    P = (perm[..., None, :] == torch.arange(n, device=perm.device)[:, None]).to(torch.float32)
    return _transfer.df_tensor(P, torch.zeros_like(P)), L, U


@register("linalg.lu_solve", "neuron")
def lu_solve(lu_and_piv, b, trans=0):
    lu, piv = lu_and_piv
    if not _df64(lu, b):
        return _xla_dense.lu_solve(lu_and_piv, b, trans=trans)
    n = lu.shape[-1]
    # a stack (lu, piv and b broadcast, as SciPy's): one refinement for the batch
    batch = torch.broadcast_shapes(lu.shape[:-2], piv.shape[:-1], b.shape[:-2])
    LU = tuple(p.expand(batch + (n, n)) for p in _parts(lu))
    B = tuple(p.expand(batch + b.shape[-2:]) for p in _parts(b))
    L, U = _unpack(LU)
    perm = _xla_dense.perm_from_piv(piv.expand(batch + piv.shape[-1:]), n)
    if trans == 0:  # A = P^T L U, A[perm] = L U
        iperm = _inverse(perm)
        product = lambda x: _rows(_mm(L, _mm(U, x)), iperm)  # noqa: E731
    else:  # real: trans 2 is trans 1
        product = lambda x: _mm(_t(U), _mm(_t(L), _rows(x, perm)))  # noqa: E731
    return _refine(product, B, _lu32(LU[0], perm, trans))


@register("linalg.inv", "neuron")
def inv(a, assume_a=None, lower=False):
    if not _df64(a):
        return _k.inv(a, assume_a=assume_a, lower=lower)
    n = a.shape[-1]  # (a stack: one refinement for the batch)
    size = _bucket(n)  # solved at the bucket's order with the bucket's identity: A X = I
    eye = torch.eye(size, dtype=torch.float32, device=a.device)
    A, _ = _padded_system(_parts(a), (eye[:n, :1],), size)
    x = solve(_transfer.df_tensor(*A), _transfer.df_tensor(eye, torch.zeros_like(eye)),
              lower=lower, assume_a=assume_a)
    return x[..., :n, :n]


@register("linalg.eigh", "neuron")
def eigh(a, b=None, lower=True, eigvals_only=False, type=1, subset_by_index=None,
         subset_by_value=None, driver=None):
    if not _df64(a):
        return _k.eigh(a, b, lower=lower, eigvals_only=eigvals_only, type=type,
                       subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                       driver=driver)
    if b is None and a.ndim > 2 and subset_by_value is not None:
        raise PerMatrix  # (a stack's subsets by value differ in size per matrix)
    if b is not None:
        return _on_host("scipy.linalg.eigh", "generalized input (or a batch with "
                        "subset_by_value) has no double-float method", lambda *x: _k._sl.eigh(
                            *x, lower=lower, eigvals_only=eigvals_only, type=type,
                            subset_by_index=subset_by_index,
                            subset_by_value=subset_by_value, driver=driver,
                            check_finite=False), *((a,) if b is None else (a, b)))
    A = _sym(_parts(a), lower)  # (a stack: one refinement for the batch)
    with _k.linalg_errors():
        _, X0 = torch.linalg.eigh(A[0])
    n = A[0].shape[-1]
    eye = torch.eye(n, dtype=X0.dtype, device=X0.device)
    loop = backend(X0.device).device_loop

    def steps(step, X, count):
        """``count`` steps as one device loop: (X, the last step's size)."""
        def body(carry, _):
            Y, size = step(A, carry[:2], eye)
            return (*Y, size)

        *Y, size = loop(body, (*X, torch.zeros((), dtype=X0.dtype, device=X0.device)),
                        0, count)
        return tuple(Y), size

    # a fixed schedule in the graph of the float32 eigh, read once: rotations (XLA's
    # float32 eigh at n = 1024 mixes close pairs by angles up to 0.5), then Ogita-Aishima
    # steps (float32 error, then its square); each kind of step compiles once
    Xr, angle = steps(_rotation_step, (X0, torch.zeros_like(X0)), _rotations(n))
    X, size = steps(_ogita_aishima, Xr, _REFINE_STEPS)
    lo, hi = (0, n) if subset_by_index is None else (int(subset_by_index[0]),
                                                     int(subset_by_index[1]) + 1)
    out = _eigh_result(A, X, eye, lo, hi, eigvals_only, subset_by_value)
    angle, size = _fetch(torch.stack([angle, size]))  # the one graph execution
    if not (angle <= _ROTATE_UNTIL and size <= _EIGH_DONE):
        # rare: go on one step and one host read at a time (from the rotations' X where
        # they had not finished); stop after a step whose correction is below _EIGH_DONE
        rotate = not angle <= _ROTATE_UNTIL
        X = Xr if rotate else X
        for _ in range(_EIGH_STEPS):
            X, size = (_rotation_step if rotate else _ogita_aishima)(A, X, eye)
            size = float(_fetch(size))
            if not rotate and not size > _EIGH_DONE:  # (NaN stops too)
                break
            rotate = rotate and size > _ROTATE_UNTIL
        out = _eigh_result(A, X, eye, lo, hi, eigvals_only, subset_by_value)
    if subset_by_value is not None:
        out = _by_value(out, subset_by_value, eigvals_only)
    return out


def _rotations(n):
    """Rotation steps in eigh's first graph.  Measured, the last one's largest angle:
    n = 256, 2 steps: 2e-4; n = 1024, 2 steps: 0.07, 4 steps: 8e-5 (then one
    Ogita-Aishima step, 5e-9)."""
    return 2 if n <= 256 else 4


def _eigh_result(A, X, eye, lo, hi, eigvals_only, subset_by_value):
    """(w, v) or w as float64 tensors, columns lo:hi (all of them for subset_by_value)."""
    w = _ogita_aishima(A, X, eye, vectors=False)
    # ascending, as SciPy's: a refined pair of close eigenvalues can leave the float32
    # order.  Ranks by double-float comparisons (torch.sort in this graph aborted
    # torch-xla: "Check failed: buffer != nullptr")
    gap, _ = _gaps(w, eye)
    idx = torch.arange(eye.shape[0], device=eye.device)
    order = _inverse(((gap < 0) | ((gap == 0) & (idx[None, :] < idx[:, None]))).sum(-1))
    w = tuple(torch.gather(p, -1, order) for p in w)
    cols = order[..., None, :].expand(X[0].shape)
    X = tuple(torch.gather(p, -1, cols) for p in X)
    if subset_by_value is not None:
        return w, X
    w = _transfer.df_tensor(w[0][..., lo:hi].clone(), w[1][..., lo:hi].clone())
    if eigvals_only:
        return w
    return w, _transfer.df_tensor(X[0][..., lo:hi].clone(), X[1][..., lo:hi].clone())


def _by_value(out, subset_by_value, eigvals_only):
    w, X = out
    vlo, vhi = subset_by_value
    lo, hi = (int(c) for c in _fetch(torch.stack([(w[0] <= vlo).sum(), (w[0] <= vhi).sum()])))
    w = _transfer.df_tensor(w[0][lo:hi].clone(), w[1][lo:hi].clone())
    if eigvals_only:
        return w
    return w, _transfer.df_tensor(X[0][:, lo:hi].clone(), X[1][:, lo:hi].clone())


def _rayleigh(A, X, eye):
    """R = I - X^T X, S = X^T A X and the eigenvalue estimates s_ii / (1 - r_ii), pairs."""
    R = _df.sub((eye, torch.zeros_like(eye)), _df.gemm(_t(X), X))
    S = _df.gemm(_t(X), _df.gemm(A, X))
    r, s = (tuple(p.diagonal(dim1=-2, dim2=-1) for p in M) for M in (R, S))
    lam = _df.div(s, _df.sub((torch.ones_like(r[0]), torch.zeros_like(r[0])), r))
    return R, S, lam


def _gaps(lam, eye, Rs=None):
    """lam_j - lam_i in float32 from the pairs (the high parts' difference is exact for
    close eigenvalues, whose gaps (1e-6 of ||A|| at n = 1024) the float32 estimates alone
    would give to 25%: their rounding), and the mask of pairs i != j whose gap double-float
    resolves (above _RESOLVED max |lam|): equal eigenvalues are left alone, as a cluster.
    With ``Rs`` (the float32 R), the mask of pairs whose gap is above 2**10 times their
    coupling's noise (``_noise``): their vectors are determined to 2**-10 (measured: a pair
    1e-12 apart corrected to first order took noise-sized angles and diverged)."""
    gap = _outer_diff(lam[0]) + _outer_diff(lam[1])
    floor = _RESOLVED * _scale(lam)
    if Rs is not None:
        floor = torch.maximum(floor, 2.0 ** 10 * _noise(lam, Rs))
    return gap, (gap.abs() > floor) & ~eye.bool()


def _noise(lam, Rs):
    """The error of a float32 coupling s_ij + (l_i + l_j)/2 r_ij: its rounding (about
    2**-22 |l| |r_ij|) and the double-float products' (2**-47 max |l|, generous)."""
    return _scale(lam) * (2.0 ** -47 + 2.0 ** -21 * Rs.abs())


def _outer_diff(v):
    """v_j - v_i at [..., i, j] (one matrix per vector of a stack)."""
    return v[..., None, :] - v[..., :, None]


def _mid(v):
    """(v_i + v_j) / 2 at [..., i, j]."""
    return (v[..., None, :] + v[..., :, None]) * 0.5


def _scale(lam):
    """max |lam| of each matrix of a stack, shaped to scale its (n, n) matrices."""
    return lam[0].abs().amax(-1)[..., None, None]


def _ogita_aishima(A, X, eye, vectors=True):
    """One step of Ogita & Aishima's refinement (2018), every pair with distinct
    eigenvalue estimates corrected to first order (the rotations before leave no
    float32-level mixing): (refined X, its largest correction), or the eigenvalues."""
    R, S, lam = _rayleigh(A, X, eye)
    if not vectors:
        return lam
    Rs, Ss = (R[0] + R[0].mT) * 0.5, (S[0] + S[0].mT) * 0.5
    lh, (gap, apart) = lam[0], _gaps(lam, eye, Rs)
    # E = R/2 + F with F_ij = (s_ij + (l_i + l_j)/2 r_ij) / (l_j - l_i), Ogita-Aishima's
    # (s_ij + l_j r_ij) / (l_j - l_i) split so that F is exactly antisymmetric in float32
    # and E an exact pair: E + E^T = R to double-float, not to float32 (orthogonality)
    mid = _mid(lh)
    F = torch.where(apart, (Ss + mid * Rs) / torch.where(apart, gap, 1), 0)
    E = _df.two_sum(F, Rs * 0.5)
    return _df.add(X, _df.gemm(X, E)), (F.abs().max() + Rs.abs().max() * 0.5)


def _rotation_step(A, X, eye):
    """X (I + R/2) exp(Theta): Theta_ij = atan2(2 c_ij, l_j - l_i) / 2, the Jacobi angle of
    every pair with its coupling in X (I + R/2), c_ij = s_ij + (l_i + l_j)/2 r_ij
    (antisymmetric; exp by its Taylor series in float32), so large float32 mixing of close
    eigenvalues is rotated out without losing orthogonality (first-order corrections of
    angles near 0.5 do; measured: Ogita-Aishima from XLA's float32 eigh at n = 1024
    stalled at 4e5 n eps64).  A pair is left alone (an exact repeat) only when its gap and
    its coupling are both below double-float resolution: a resolvable pair mixed by 45
    degrees has equal Rayleigh quotients.  (refined X, largest angle)."""
    R, S, lam = _rayleigh(A, X, eye)
    gap = _gaps(lam, eye)[0]
    scale, mid = _scale(lam), _mid(lam[0])
    Rs = (R[0] + R[0].mT) * 0.5
    # (float32 from the high parts: the low parts of the Ozaki products in this
    # elementwise expression made XLA CPU compile the step for minutes, measured)
    C = (S[0] + S[0].mT) * 0.5 + mid * Rs
    tiny = _RESOLVED * scale
    alone = (gap.abs() <= tiny) & (C.abs() <= torch.maximum(tiny,
                                                            _noise(lam, Rs)))
    order = torch.ones_like(eye).triu(1) - torch.ones_like(eye).tril(-1)  # sign at gap 0
    sign = torch.where(gap == 0, order, torch.sign(gap))
    theta = torch.where(alone | eye.bool(), 0, 0.5 * torch.atan2(2 * C * sign, gap.abs()))
    Q, term = eye, eye
    for k in range(1, _TAYLOR + 1):
        term = (term @ theta) * (1.0 / k)
        Q = Q + term
    Y = _df.add(X, _df.gemm(X, (R[0] * 0.5, torch.zeros_like(R[0])), bits_b=24))
    # the size: pairs whose angle is not noise (see _gaps)
    size = torch.where(_gaps(lam, eye, Rs)[1], theta.abs(), 0).max()
    return _df.gemm(Y, (Q, torch.zeros_like(Q)), bits_b=24), size
