"""float64 matrix functions on a Neuron device, continued (see ``_refine``): float32
arithmetic only, double-float where the result needs it.

- ``expm``: SciPy's scaling and squaring (Al-Mohy & Higham 2009, the degree and scaling
  rule of SciPy's ``pick_pade_structure``) with every product an Ozaki GEMM.  One graph
  computes, in float32 from the high part, the 1-norms of A^4, A^6, A^8, A^10 and the
  norms of |A|^p 1 (p = 1, 7, 11, 15, 19, 27) that SciPy's rule reads (one host read; the
  degree m and the scaling s follow on the host in float64 from these numbers).  Then
  in double-float: the powers and U, V of the degree-m Pade approximant, the solve
  (V - U) X = V + U by ``_refine`` (the float32 inverse as the approximate solver), and
  s squarings as one device loop (its body compiles once, s is graph data).  The float32
  norms are within float32 rounding of SciPy's: the same (m, s) except at a boundary of
  SciPy's tests, where either choice is accurate to float64 rounding.  For n >= 400 SciPy
  estimates ||A^8||_1 and ||A^10||_1 (``norm1est``); here they are exact (an estimate is
  at most the exact norm: s can be larger by one there).  A stack is one computation:
  each matrix its own s (its squarings masked past them), the stack the highest degree.
- ``norm``: sums of |a|, maxima and 2-norms (a scaled sum of squares) in triple-float
  (``_df.tree_sum3``, ``norm3``: within a unit of float64 rounding); ord 2, -2, 'nuc'
  from the refined singular values (``_refine_orth``); other vector orders on the host.
- ``solve_sylvester`` (real input): ``_refine`` with the float32 real Bartels-Stewart
  (``_kernels_struct.sylvester_factors``: Schur forms and block inverses computed once)
  as the approximate solver, A X + X B by Ozaki GEMMs.  ``solve_discrete_lyapunov``:
  'direct', I - kron(A, A) by exact products and the double-float solve; 'bilinear',
  the double-float inverses and products of SciPy's transformation, then the Sylvester
  refinement.
"""

import math
import warnings

import numpy as np

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels_struct as _ks
from trnscipy.linalg import _refine as _r
from trnscipy.linalg import _xla_dense


def _const(value, like):
    """A float64 constant as a 0-d double-float pair in ``like``'s graph."""
    hi = float(np.float32(value))
    lo = float(np.float32(value - hi))
    return (torch.full((), hi, dtype=like.dtype, device=like.device),
            torch.full((), lo, dtype=like.dtype, device=like.device))


def _combo(terms, like):
    """sum b_j P_j over (b_j, P_j) in double-float (P_j None: the identity)."""
    eye = torch.eye(like.shape[-1], dtype=like.dtype, device=like.device)
    out = None
    for b, p in terms:
        t = _df.mul(_const(b, like), (eye, torch.zeros_like(eye)) if p is None else p)
        out = t if out is None else _df.add(out, t)
    return out


def _pade_uv(A, m):
    """U, V of SciPy's degree-m Pade approximant of the (scaled) pair A."""
    b = _xla_dense._PADE[m]
    like = A[0]
    A2 = _df.gemm(A, A)
    if m == 3:
        return _df.gemm(A, _combo([(b[3], A2), (b[1], None)], like)), \
            _combo([(b[2], A2), (b[0], None)], like)
    A4 = _df.gemm(A2, A2)
    if m == 5:
        return _df.gemm(A, _combo([(b[5], A4), (b[3], A2), (b[1], None)], like)), \
            _combo([(b[4], A4), (b[2], A2), (b[0], None)], like)
    A6 = _df.gemm(A4, A2)
    if m == 7:
        return _df.gemm(A, _combo([(b[7], A6), (b[5], A4), (b[3], A2), (b[1], None)],
                                  like)), \
            _combo([(b[6], A6), (b[4], A4), (b[2], A2), (b[0], None)], like)
    if m == 9:
        A8 = _df.gemm(A4, A4)
        return _df.gemm(A, _combo([(b[9], A8), (b[7], A6), (b[5], A4), (b[3], A2),
                                   (b[1], None)], like)), \
            _combo([(b[8], A8), (b[6], A6), (b[4], A4), (b[2], A2), (b[0], None)], like)
    u = _df.add(_df.gemm(A6, _combo([(b[13], A6), (b[11], A4), (b[9], A2)], like)),
                _combo([(b[7], A6), (b[5], A4), (b[3], A2), (b[1], None)], like))
    v = _df.add(_df.gemm(A6, _combo([(b[12], A6), (b[10], A4), (b[8], A2)], like)),
                _combo([(b[6], A6), (b[4], A4), (b[2], A2), (b[0], None)], like))
    return _df.gemm(A, u), v


def _expm_pair(A):
    """expm of a square double-float pair, or a stack of them (one computation): a pair.
    Each matrix of a stack takes its own scaling s (its single call's) and squarings, and
    the stack the highest of their Pade degrees (accurate for every matrix: a matrix's
    own degree's bound is below the highest's)."""
    hi = A[0]
    device = hi.device
    batch, n = hi.shape[:-2], hi.shape[-1]
    numbers = np.asarray(_r._fetch(_xla_dense.pade_numbers(hi)), dtype=np.float64)
    numbers = numbers.reshape(numbers.shape[0], -1)  # one column per matrix
    # SciPy: NaNs for a non-finite input (such a matrix computes as zero, then NaN)
    bad = ~np.isfinite(numbers[0])
    picks = [(3, 0) if b else _xla_dense.pick_pade(col)
             for b, col in zip(bad, numbers.T, strict=True)]
    m = max(p[0] for p in picks)
    steps = np.array([p[1] for p in picks], dtype=np.float32).reshape(batch + (1, 1))
    # 2^-s as graph data (exact: a power of two), so the graphs do not depend on s
    scale = torch.from_numpy(2.0 ** -steps).to(device)
    if bad.any():
        scale = scale * torch.from_numpy(~bad.reshape(batch + (1, 1))).to(device)
    u, v = _pade_uv((A[0] * scale, A[1] * scale), m)
    P, Q = _df.sub(v, u), _df.add(v, u)
    P, Q = _r._padded_system(P, Q, _r._bucket(n))
    approx, check = _r._approx_solver(P[0], "gen")
    X = _transfer.df_parts(_r._refine(lambda x: _r._mm(P, x), Q, approx, check)[..., :n, :])
    s = int(steps.max())
    if s:
        counts = torch.from_numpy(steps).to(device)

        def body(carry, j):  # a matrix with fewer squarings keeps its X after them
            Y = _df.gemm(carry, carry)
            more = j < counts
            return tuple(torch.where(more, y, x) for y, x in zip(Y, carry, strict=True))

        X = tuple(backend(device).device_loop(body, X, 0, s))
    if bad.any():
        nan = torch.from_numpy(bad.reshape(batch + (1, 1))).to(device)
        X = (torch.where(nan, math.nan, X[0]), torch.where(nan, 0.0, X[1]))
    return X


@register("linalg.expm", "neuron")
def expm(a):
    if not _r._df64(a) or a.is_complex():
        return _xla_dense.expm(a)
    return _transfer.df_tensor(*_expm_pair(_r._parts(a)))  # (a stack: one computation)


@register("linalg._expm_half", "neuron")
def _expm_half(a, sign):
    """coshm (sign 1), sinhm (-1): (expm(A) + sign expm(-A)) / 2 from two double-float
    expm (-A exactly: both parts negated), the sum in double-float, halved exactly."""
    if not _r._df64(a) or a.is_complex() or a.numel() == 0:
        return kind_kernel("linalg._expm_half", "xla")(a, sign)
    A = _r._parts(a)  # (a stack: one computation)
    E, F = _expm_pair(A), _expm_pair((-A[0], -A[1]))
    S = _df.add(E, F) if sign > 0 else _df.sub(E, F)
    return _transfer.df_tensor(S[0] * 0.5, S[1] * 0.5)


# ---- polar ------------------------------------------------------------------------------

_POLAR_STEPS = 100  # Newton-Schulz steps at most (the linear phase: about log1.5 cond(A))
_POLAR_DONE = 2.0 ** -47  # a step that moves X less than this (||X||_2 ~ 1) is the last


def _polar_tall(A):
    """The orthogonal polar factor of a tall (m >= n) pair A, a pair: Newton-Schulz
    X <- X + X (I - X^T X) / 2 in double-float from X = A / 2^e (2^e above ||A||_2: the
    singular values in (0, 1], where the iteration converges).  Every iterate is
    A times a polynomial in A^T A, so it keeps A's polar factor (a float32 start, or a
    float32 step, would not).  One device loop, left when a step is below _POLAR_DONE
    (converged, or the remaining singular values are below double-float resolution:
    rank-deficient A), and one host read.  A stack is one loop: each matrix stops at its
    own last step (its X kept after it), the loop when all have."""
    hi = A[0]
    bound = torch.minimum((hi * hi).sum((-2, -1)).sqrt(),
                          (hi.abs().sum(-2).amax(-1) * hi.abs().sum(-1).amax(-1)).sqrt())
    # a power of two above the bound (1 + 2^-20: the float32 bound's rounding); exact
    scale = _df._pow2(-_df._exponent(bound * (1 + 2.0 ** -20)))[..., None, None]
    X = (A[0] * scale, A[1] * scale)
    backend(hi.device).materialize(list(X))  # the loop's inputs: finished work
    n = hi.shape[-1]
    eye = torch.eye(n, dtype=hi.dtype, device=hi.device)
    zero = torch.zeros(hi.shape[:-2], dtype=hi.dtype, device=hi.device)
    done = torch.zeros(hi.shape[:-2], dtype=torch.bool, device=hi.device)

    def body(carry, _):
        xh, xl, last, stopped, _ = carry
        x = (xh, xl)
        g = _df.gemm(_r._t(x), x)
        e = _df.sub((eye * 0.5, torch.zeros_like(eye)), (g[0] * 0.5, g[1] * 0.5))  # exact
        d = _df.gemm(x, e)
        size = d[0].abs().amax(-1).amax(-1)
        y = _df.add(x, d)
        keep = stopped[..., None, None]
        now = stopped | (size <= _POLAR_DONE)
        return (torch.where(keep, xh, y[0]), torch.where(keep, xl, y[1]),
                torch.where(stopped, last, size), now, now.all())

    xh, xl, size, _, _ = backend(hi.device).device_loop(
        body, (*X, zero, done, done.all()), 0, _POLAR_STEPS, until=4)
    return (xh, xl), size


@register("linalg.polar", "neuron")
def polar(a, side="right"):
    if not _r._df64(a) or a.is_complex() or a.numel() == 0:
        return kind_kernel("linalg.polar", "xla")(a, side)  # the SVD route
    A = _r._parts(a)  # (a stack: one computation)
    m, n = a.shape[-2:]
    if m >= n:
        U, size = _polar_tall(A)
    else:
        U, size = _polar_tall(_r._t(A))
        U = _r._t(U)
    # the positive factor: U^T A (right) or A U^T (left), symmetrized exactly (halving)
    P = _df.gemm(_r._t(U), A) if side == "right" else _df.gemm(A, _r._t(U))
    # (a graph cut before the transpose: XLA CPU fused the Ozaki sums into both operands
    # of the symmetrization and compiled it for minutes, measured)
    backend(a.device).materialize([U[0], U[1], P[0], P[1]])
    P = _df.add((P[0] * 0.5, P[1] * 0.5), (P[0].mT * 0.5, P[1].mT * 0.5))
    # rank-deficient A: Newton-Schulz leaves u's null-space columns at zero where SciPy's
    # SVD route completes them to an orthogonal u; that route then (one host read for both)
    k = min(m, n)
    gram = U[0].mT @ U[0] if m >= n else U[0] @ U[0].mT
    loss = (torch.eye(k, dtype=gram.dtype, device=gram.device) - gram).abs().amax(-1) \
        .amax(-1)
    size, loss = np.asarray(_r._fetch(torch.stack([size, loss])), dtype=np.float64)
    if not (loss <= 1e-3).all():
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return kind_kernel("linalg.polar", "xla")(a, side)
    u, p = _transfer.df_tensor(*U), _transfer.df_tensor(*P)
    if not (size <= _POLAR_DONE).all():
        import warnings

        warnings.warn("double-float Newton-Schulz iteration for the polar factor did not "
                      "converge: u may have only float32 accuracy", _r._k._sl.LinAlgWarning,
                      stacklevel=4)
    return u, p


# ---- norm: double-float sums, maxima and the refined singular values ----------------------


@register("linalg.norm", "neuron")
def norm(a, ord=None, axis=None, keepdims=False):
    """float64: NumPy's norms of real data in double-float (float32 operations only): the
    2-norm and Frobenius norm by ``_df.norm`` (scaled sums of squares), sums of |a| by
    ``_df.tree_sum`` (|a|: a sign change of both parts), maxima and minima of pairs, the
    count of nonzeros (ord 0); ord 2, -2, 'nuc' of a matrix from the refined singular
    values (``_refine_orth``).  Vector norms of other orders (sum |a|^p)^(1/p) run on the
    host, announced.  Other dtypes as on XLA."""
    if a.dtype != torch.float64:
        return kind_kernel("linalg.norm", "xla")(a, ord=ord, axis=axis, keepdims=keepdims)
    if a.numel() == 0:  # NumPy's result (zeros) or its error for empty reductions
        return _transfer.tensor_on(np.asarray(np.linalg.norm(
            np.zeros(a.shape), ord=ord, axis=axis, keepdims=keepdims)), a.device)
    # NumPy's errors (bad order, axes or dimensions) before any work: the same call on a
    # one-element array of a's dimensions
    np.linalg.norm(np.zeros((1,) * a.ndim), ord=ord, axis=axis, keepdims=keepdims)
    nd = a.ndim
    x = _transfer.df_triple(a)
    if axis is None and ord is None:  # the 2-norm of all entries, any dimensions
        return _result(_df.norm3([p.reshape(-1) for p in x]), range(nd), keepdims)
    if axis is None:
        axes = (0,) if nd == 1 else (0, 1)
    else:
        axes = tuple(int(i) % nd for i in (axis if isinstance(axis, tuple) else (axis,)))
    if len(axes) == 1:
        r = _vector_norm([p.movedim(axes[0], -1) for p in x], ord)
        if r is None:
            return _r._on_host("scipy.linalg.norm", f"vector norms of order {ord!r} have no "
                               "double-float method", lambda h: np.asarray(np.linalg.norm(
                                   h, ord=ord, axis=axis, keepdims=keepdims)), a)
        return _result(r, axes, keepdims)
    M = [p.movedim(axes, (-2, -1)) for p in x]
    if ord in (None, "fro", "f"):
        r = _df.norm3([p.reshape(*p.shape[:-2], -1) for p in M])
    elif ord in (2, -2, "nuc"):  # the refined singular values (double-float accuracy)
        s = _svdvals_triple(M)
        r = (_df.tree_sum3(s) if ord == "nuc" else
             tuple(p[..., 0] if ord == 2 else p[..., -1] for p in s))
    else:  # 1, -1: column sums of |a|; inf, -inf: row sums
        sums = _df.tree_sum3(_magnitudes(M), dim=-2 if ord in (1, -1) else -1)
        r = _extreme(sums, largest=ord in (1, np.inf), dim=-1)
    return _result(r, axes, keepdims)


def _svdvals_triple(M):
    """The refined singular values of the pair M (a matrix or a stack) as triples; a stack
    one of whose matrices the refinement leaves to the host runs matrix by matrix (the
    svd kernel's PerMatrix is the dispatcher's signal, which no dispatcher sees here)."""
    svdvals = kind_kernel("linalg.svdvals", "neuron")
    try:
        return _transfer.df_triple(svdvals(_transfer.df_tensor(*M)))
    except PerMatrix:
        flat = [p.reshape(-1, *p.shape[-2:]) for p in M]
        each = [_transfer.df_triple(svdvals(_transfer.df_tensor(flat[0][i], flat[1][i])))
                for i in range(flat[0].shape[0])]
        return tuple(torch.stack(q).reshape(M[0].shape[:-2] + q[0].shape[-1:])
                     for q in zip(*each, strict=True))


def _magnitudes(x):
    sign = torch.where(x[0] < 0, -1.0, 1.0)
    return [p * sign for p in x]  # |a| (exact: a sign change)


def _vector_norm(x, ord):
    """The norm along the last dimension of the triple ``x`` (None: no double-float
    method)."""
    if ord in (None, 2):
        return _df.norm3(x)
    if ord == 1:
        return _df.tree_sum3(_magnitudes(x))
    if ord in (np.inf, -np.inf):
        return _extreme(_magnitudes(x), largest=ord == np.inf, dim=-1)
    if ord == 0:  # the count of nonzeros, exactly
        count = (x[0] != 0).sum(-1).to(torch.float32)
        return count, torch.zeros_like(count), torch.zeros_like(count)
    return None


def _extreme(t, largest, dim):
    """The largest (smallest) triple-float value along ``dim``: by the high part, ties by
    the next parts."""
    out, on = [], None
    for p in t:
        fill = torch.full_like(p, -np.inf if largest else np.inf)
        p = p if on is None else torch.where(on, p, fill)
        pick = p.amax(dim=dim, keepdim=True) if largest else p.amin(dim=dim, keepdim=True)
        on = (p == pick) if on is None else on & (p == pick)
        out.append(pick.squeeze(dim))
    return tuple(out)


def _result(r, axes, keepdims):
    """The triple-float result, with the reduced axes kept as ones for ``keepdims``."""
    if keepdims:
        for ax in sorted(axes):
            r = [p.unsqueeze(ax) for p in r]
    return _transfer.df_tensor(*r)


# ---- arcsin, arccos (subspace_angles) ---------------------------------------------------

_TRIG_TERMS = 11  # Taylor terms: |x|^23 / 23! < 2^-60 for |x| <= pi / 2


def _sin_cos(x):
    """sin and cos of a double-float x in [0, pi/2]: Horner's rule in double-float on x^2,
    one step per Taylor term as a device loop (one body to compile: unrolled, the terms'
    double-float arithmetic took XLA's CPU compiler minutes)."""
    like = x[0]
    x2 = _df.mul(x, x)
    # 1 / ((2k)(2k+1)) (sine) and 1 / ((2k-1)(2k)) (cosine), k = K .. 1, as pairs
    ks = range(_TRIG_TERMS, 0, -1)
    coef = [_const(1.0 / ((2 * k) * (2 * k + 1)), like) for k in ks] + \
        [_const(1.0 / ((2 * k - 1) * (2 * k)), like) for k in ks]
    coef = [torch.stack([c[i] for c in coef]).reshape(2, _TRIG_TERMS) for i in (0, 1)]
    one = torch.ones_like(like)
    zero = torch.zeros_like(like)

    def body(carry, _):
        # the coefficients ride in the carry, the step's in column 0, rolled each step
        s, c, (ch, cl) = carry[:2], carry[2:4], carry[4:]
        s = _df.sub((one, zero), _df.mul(_df.mul(x2, s), (ch[0, 0], cl[0, 0])))
        c = _df.sub((one, zero), _df.mul(_df.mul(x2, c), (ch[1, 0], cl[1, 0])))
        return (*s, *c, ch.roll(-1, 1), cl.roll(-1, 1))

    loop = backend(like.device)
    loop.materialize([*x2, *coef, one, zero])  # the loop's inputs: finished work
    out = loop.device_loop(body, (one, zero, one, zero, *coef), 0, _TRIG_TERMS)
    return _df.mul(x, tuple(out[:2])), tuple(out[2:4])


_TRIG_NEWTON = 2  # Newton steps from the float32 angle (error 1e-7 -> 1e-14 -> below)


def arcsin_arccos(v, inverse_sine):
    """arcsin (``inverse_sine``) or arccos of a double-float v clipped to [0, 1], as a
    pair: the float32 angle, then Newton steps on sin(t) = v (cos(t) = v) with sin and cos
    in double-float.  Accurate where the derivative is not small (arcsin below ~0.9, arccos
    above ~0.1, SciPy's choice in subspace_angles); near 1 (arcsin) or 0 (arccos) as
    float64's functions are, limited by v's own rounding."""
    hi = torch.clamp(v[0], 0.0, 1.0)
    v = (hi, torch.where(v[0] == hi, v[1], torch.zeros_like(v[1])))
    t = (torch.arcsin(hi) if inverse_sine else torch.arccos(hi), torch.zeros_like(hi))
    for _ in range(_TRIG_NEWTON):
        s, c = _sin_cos(t)
        f, d = (_df.sub(v, s), c) if inverse_sine else (_df.sub(c, v), s)
        ok = d[0] > 2.0 ** -20  # (at the ends of the range: the float32 angle's value)
        step = _df.div(f, tuple(torch.where(ok, p, torch.ones_like(p)) for p in d))
        t = _df.add(t, tuple(torch.where(ok, p, torch.zeros_like(p)) for p in step))
    return t


# ----------------------------------------------------------------------------------------
# solve_sylvester and solve_discrete_lyapunov: the Sylvester equation is linear, so the
# float32 real Bartels-Stewart (``_kernels_struct.sylvester_factors``, computed once) is the
# approximate solver of ``_refine``, with A X + X B in double-float (Ozaki GEMMs).


@register("linalg.solve_sylvester", "neuron")
def solve_sylvester(a, b, q):
    if not _r._df64(a, b, q):
        return _ks.solve_sylvester(a, b, q)
    return _sylvester(_r._parts(a), _r._parts(b), _r._parts(q))


def _sylvester(A, B, Q):
    """X with A X + X B = Q to double-float accuracy for real pairs A, B, Q."""
    factors = _ks.sylvester_factors(A[0], B[0])
    return _r._refine(lambda x: _df.add(_df.gemm(A, x), _df.gemm(x, B)), Q,
                      lambda f: _ks.sylvester_solve(factors, f))


@register("linalg.solve_discrete_lyapunov", "neuron")
def solve_discrete_lyapunov(a, q, dtype, method):
    """SciPy's two methods with float64 data: 'direct', I - kron(A, A) by exact products
    (``_df.mul``) and the double-float solve; 'bilinear', the continuous equation with
    B = (A^T - I)(A^T + I)^-1 and C = 2 (A + I)^-1 Q (A^T + I)^-1 from the double-float
    inverse and Ozaki GEMMs."""
    if dtype != torch.float64:  # complex: the generic kernel's (announced) route
        return kind_kernel("linalg.solve_discrete_lyapunov", "generic")(a, q, dtype, method)
    A, Q = _r._parts(a), _r._parts(q)  # (float32 operands: exact parts, zero low parts)
    n, dev = A[0].shape[-1], A[0].device
    solve, inv = kind_kernel("linalg.solve", "neuron"), kind_kernel("linalg.inv", "neuron")
    if method == "direct":
        lead = A[0].shape[:-2]
        kron = _df.mul(tuple(p[..., :, None, :, None] for p in A),
                       tuple(p[..., None, :, None, :] for p in A))
        if a.dtype == torch.float32:  # SciPy's kron is in a's precision
            kron = (kron[0], torch.zeros_like(kron[1]))
        eye = torch.eye(n * n, dtype=A[0].dtype, device=dev)
        lhs = _df.sub((eye, torch.zeros_like(eye)), tuple(p.reshape(*lead, n * n, n * n)
                                                          for p in kron))
        rhs = _transfer.df_tensor(*(p.reshape(*Q[0].shape[:-2], -1, 1) for p in Q))
        return solve(_transfer.df_tensor(*lhs), rhs).reshape(q.shape)
    eye = torch.eye(n, dtype=A[0].dtype, device=dev)
    plus = _df.add_f(A, eye)  # A + I, exactly rounded
    ah_inv = _r._parts(inv(_transfer.df_tensor(plus[0].mT, plus[1].mT)))
    b = _df.gemm(_df.add_f(_r._t(A), -eye), ah_inv)
    c = _df.gemm(_df.gemm(_r._parts(inv(_transfer.df_tensor(*plus))), Q), ah_inv)
    return _sylvester(_r._t(b), b, (-2 * c[0], -2 * c[1]))



# ----------------------------------------------------------------------------------------
# solve_continuous_are: the float32 solution, then Newton steps in defect-correction form


def _dfmm(x, y):
    return _df.gemm(x, y)


def _df_standard_form(a, b, q, r, e, s):
    """``_solvers._standard_form`` in double-float: (A, G, Q) pairs."""
    solve = kind_kernel("linalg.solve", "neuron")

    def sol(m, rhs):  # m^-1 rhs for pairs, a pair
        return _r._parts(solve(_transfer.df_tensor(*m), _transfer.df_tensor(*rhs)))

    A, B, Q, R = (_r._parts(x) for x in (a, b, q, r))
    S = None if s is None else _r._parts(s)
    if e is not None:
        E = _r._parts(e)
        A = _r._t(sol(_r._t(E), _r._t(A)))  # A E^-1
        Q = _r._t(sol(_r._t(E), _r._t(sol(_r._t(E), Q))))  # E^-T Q E^-1 (Q symmetric)
        S = None if S is None else sol(_r._t(E), S)
    G = _dfmm(B, sol(R, _r._t(B)))
    if S is not None:
        rinv_st = sol(R, _r._t(S))
        A = _df.sub(A, _dfmm(B, rinv_st))
        Q = _df.sub(Q, _dfmm(S, rinv_st))
    return A, _sym_df(G), _sym_df(Q)


def _sym_df(x):
    h = _df.add(x, _r._t(x))
    return 0.5 * h[0], 0.5 * h[1]


def _newton_done(d, X, prev):
    """(|D|, |X|, converged) after a Newton step X += D (one host read; in a stack each
    matrix's own): D below 2**-48 of X, or it stopped shrinking near that level (the
    residual is double-float rounding noise, as ``_refine``'s rule), for every matrix;
    converged None where the steps overflowed (|D| or |X| infinite or NaN)."""
    dn, xn = np.asarray(_r._fetch(torch.stack([_r._sizes(d), _r._sizes(X[0])])), np.float64)
    if not np.all((0 <= dn) & (dn < np.inf) & (0 <= xn) & (xn < np.inf)):
        return dn, xn, None
    stalled = (dn > 0.5 * prev) & (dn <= _r._NOISE * xn) if prev is not None else False
    return dn, xn, bool(np.all((dn <= _r._EPS_DF * xn) | stalled))


_FLOAT32_LEVEL = 2.0 ** -20  # a last step below this much of X: float32's accuracy at least


def _newton(X, step, host):
    """X (double-float parts) += step(X) until ``_newton_done`` (at most 8 steps), kept
    symmetric.  The result as a tensor; where it did not converge, a LinAlgWarning if the
    last step was at float32's level, else (and where the steps overflowed) ``host()``
    (SciPy on the host, announced): the float32 X0 was too far for the frozen Jacobian,
    and its X would be wrong."""
    prev = None
    backend(X[0].device).sync()  # pending setup in its own graph: every step's graph the same
    for _ in range(8):
        d = step(X)
        X = _sym_df(_df.add_f(X, d))
        prev, xn, done = _newton_done(d, X, prev)
        if done is None:  # diverged (SciPy's own LinAlgError, if any, comes from the host)
            return host()
        if done:
            return _transfer.df_tensor(*X)
    if not np.all(prev <= _FLOAT32_LEVEL * xn):
        return host()
    warnings.warn("double-float refinement did not converge: the result may have only "
                  "float32 accuracy (ill-conditioned equation)", _r._k._sl.LinAlgWarning,
                  stacklevel=7)
    return _transfer.df_tensor(*X)


def _are_on_host(name, a, b, q, r, e, s, balanced):
    """SciPy's Riccati solver ``name`` on the exact host data, announced."""
    def scipy_are(a, b, q, r, *rest):
        more = iter(rest)
        return getattr(_r._k._sl, name)(a, b, q, r, e=None if e is None else next(more),
                                        s=None if s is None else next(more),
                                        balanced=balanced)

    return _r._on_host(f"scipy.linalg.{name}", "the double-float Newton steps did not "
                       "converge (an ill-conditioned equation: the float32 start is too "
                       "far from X)", scipy_are, a, b, q, r,
                       *(t for t in (e, s) if t is not None))


@register("linalg.solve_continuous_are", "neuron")
def solve_continuous_are(a, b, q, r, e=None, s=None, balanced=True):
    """float64 data: the generic method (``_solvers.care_standard``) in float32 from the
    double-float standard form's high parts gives X0; then Newton steps on the residual
    C(X) = A^T X + X A - X G X + Q computed in double-float: (A - G X0)^T D + D (A - G X0)
    = -C(X), X += D, with the float32 Bartels-Stewart factors of A - G X0 computed once
    (a Newton step with a frozen Jacobian: each step gains float32's precision), until D
    is below 2**-48 of X or stops shrinking (``_newton_done``; one host read per step, at
    most 8)."""
    if not _r._df64(a, b, q, r):
        return kind_kernel("linalg.solve_continuous_are", "generic")(
            a, b, q, r, e=e, s=s, balanced=balanced)
    A, G, Q = _df_standard_form(a, b, q, r, e, s)
    # (the double-float Newton steps below replace the float32 method's own Kleinman steps)
    x0 = kind_kernel("linalg._care_standard", "generic")(A[0], G[0], Q[0], kleinman=0)
    closed = A[0] - G[0] @ x0
    factors = _ks.sylvester_factors(closed.mT, closed)

    def step(X):  # Kleinman: the closed loop frozen at X0
        XA = _dfmm(X, A)
        res = _df.add(_df.add(_r._t(XA), XA), _df.sub(Q, _dfmm(_dfmm(X, G), X)))
        return _ks.sylvester_solve(factors, -res[0])

    return _newton((x0, torch.zeros_like(x0)), step, lambda: _are_on_host(
        "solve_continuous_are", a, b, q, r, e, s, balanced))


@register("linalg._are_min_sv", "neuron")
def _are_min_sv(r):
    """SciPy's singularity test of R (min singular value < eps ||R||_1); R is symmetric
    there (tested first), so min |eigenvalue|.  The float32 eigvalsh of the high part
    decides when it is far above its error bound (Weyl: about n u32 ||R||; one host read);
    otherwise the double-float eigvalsh (repeated eigenvalues, R = I, are beyond the
    double-float SVD's refinement, not eigh's), a large graph only a near-singular R pays."""
    if not _r._df64(r):
        return kind_kernel("linalg._are_min_sv", "generic")(r)
    hi = _r._parts(r)[0]
    n = hi.shape[-1]
    w32 = torch.linalg.eigvalsh(0.5 * (hi + hi.mT)).abs().amin(-1)  # (each of a stack)
    low, size = np.asarray(_r._fetch(torch.stack([w32, hi.abs().sum(-2).amax(-1)])))
    if np.all(low > 64 * n * float(np.finfo(np.float32).eps) * size):
        return _transfer.df_tensor(w32, torch.zeros_like(w32))
    w = kind_kernel("linalg.eigh", "neuron")(_transfer.df_tensor(*_sym_df(_r._parts(r))),
                                             eigvals_only=True)
    hi = _r._parts(w)[0].abs().amin(-1)
    return _transfer.df_tensor(hi, torch.zeros_like(hi))


@register("linalg._are_asymmetry", "neuron")
def _are_asymmetry(x):
    """||X - X^T||_1 of float64 data from the exact double-float difference."""
    if not _r._df64(x):
        return kind_kernel("linalg._are_asymmetry", "generic")(x)
    X = _r._parts(x)
    return norm(_transfer.df_tensor(*_df.sub(X, _r._t(X))), 1, axis=(-2, -1))


@register("linalg.solve_discrete_are", "neuron")
def solve_discrete_are(a, b, q, r, e=None, s=None, balanced=True):
    """float64 data: the generic method's doubling (``_solvers.dare_doubling``) in float32
    from the double-float standard form's high parts gives X0; then Newton (Hewer) steps on the
    residual D(X) = A^T X A - X - A^T X B (R + B^T X B)^-1 B^T X A + Q in double-float
    (the double-float solve): A_K^T D A_K - D = -D(X), X += D, A_K = A - B K0 frozen, the
    Stein equation by SciPy's bilinear transformation to a Sylvester equation whose float32
    Bartels-Stewart factors are computed once; until ``_newton_done`` (one host read per
    step, at most 8)."""
    if not _r._df64(a, b, q, r):
        return kind_kernel("linalg.solve_discrete_are", "generic")(
            a, b, q, r, e=e, s=s, balanced=balanced)
    A, G, Q = _df_standard_form(a, b, q, r, e, s)
    B, R = _r._parts(b), _r._parts(r)
    x0 = kind_kernel("linalg._dare_doubling", "generic")(A[0], G[0], Q[0])
    X = (x0, torch.zeros_like(x0))
    # the frozen closed loop A_K = A - B K0, K0 = (R + B^T X0 B)^-1 B^T X0 A (float32)
    inv32 = kind_kernel("linalg._inv", "neuron")  # (no LU solve lowers on XLA)
    k0 = inv32(R[0] + B[0].mT @ x0 @ B[0])[0] @ (B[0].mT @ x0 @ A[0])
    ak = A[0] - B[0] @ k0
    # A_K^T D A_K - D + C = 0 is SciPy's discrete Lyapunov equation of a = A_K^T: bilinear
    # F = (a^T - I)(a^T + I)^-1, then F^T D + D F = -2 (a + I)^-1 C (a^T + I)^-1
    eye = torch.eye(ak.shape[-1], dtype=ak.dtype, device=ak.device)
    left, right = inv32(ak.mT + eye)[0], inv32(ak + eye)[0]
    f = (ak - eye) @ right
    factors = _ks.sylvester_factors(f.mT, f)
    solve = kind_kernel("linalg.solve", "neuron")

    def step(X):  # Hewer: the closed loop frozen at X0
        XA = _dfmm(X, A)
        BtXA = _dfmm(_r._t(B), XA)
        M = _df.add(R, _dfmm(_dfmm(_r._t(B), X), B))
        K = _r._parts(solve(_transfer.df_tensor(*M), _transfer.df_tensor(*BtXA)))
        res = _df.sub(_df.add(_dfmm(_r._t(A), XA), Q), _df.add(X, _dfmm(_r._t(BtXA), K)))
        return _ks.sylvester_solve(factors, -2 * (left @ res[0] @ right))

    return _newton(X, step, lambda: _are_on_host(
        "solve_discrete_are", a, b, q, r, e, s, balanced))
