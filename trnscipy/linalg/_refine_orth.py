"""float64 dense linear algebra on a Neuron device, continued (see ``_refine``): the
triangular solve, the determinant and the orthogonal factorizations, float32 on the
device plus double-float refinement.

- ``solve_triangular``: the float32 triangular solve as the approximate solver of
  ``_refine`` (r = b - op(A) x in double-float).
- ``det``: the product of the refined LU's pivots (``_refine._getrf_df``) in
  double-float, each partial product rescaled by an exact power of two (its exponent
  summed separately), signed by the pivots' parity.
- ``qr``: the float32 Householder QR refined by Newton steps on A = Q R, Q^T Q = I:
  E = A - Q R and G = I - Q^T Q in double-float (Ozaki GEMMs), Y = E R0^-1,
  M = Q0^T Y; the correction X of Q in its own basis takes M's strictly lower part
  (what makes Q^T A upper triangular), G's diagonal halved and G - M^T above, so that
  X + X^T = G; then Q += Q0 X + Y - Q0 M, R += (M - X) R0.  Quadratic: float32 errors,
  then their squares (two steps reach double-float rounding for cond(A) up to ~1e4).
- ``qr_update``, ``qr_insert``, ``qr_delete``: the float32 rotation sequence (the generic
  kernel) on the high parts as the start of the QR refinement of the updated matrix,
  formed exactly (Q R + U V^T by Ozaki GEMMs; insertions and deletions as gathers).
- ``svd``, ``svdvals``: a rectangular A (A^T when wide) is first A = Q R by the refined
  QR (not converging: rank-deficient or ill-conditioned, SciPy on the exact values,
  announced), then the square R's float32 SVD from the float32 eigh of [[0, R], [R^T, 0]]
  (``_start``) is refined by Ogita & Aishima's iteration (2020; ``_svd_step``):
  T = U^T R V, I - U^T U, I - V^T V in double-float, the corrections of U and V in
  float32; U = Q [U_R, 0; 0, I].  Quadratic while the singular values are apart;
  singular values closer than 2**-16 of the largest (float32 cannot separate their
  vectors), or a correction that does not shrink, go to SciPy on the exact values,
  announced.
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels as _k
from trnscipy.linalg import _refine as _r
from trnscipy.linalg import _xla_dense

_QR_STEPS = 2  # Newton steps in the graph of the float32 QR, before its one host read
_QR_MORE = 4  # further steps, one host read each, where the first ones did not finish
_QR_DONE = 2.0 ** -40  # a correction this small leaves an error below double-float's


def _tri(p, lower, unit):
    """The triangle of pair ``p`` that a triangular solve reads (unit: diagonal 1)."""
    hi, lo = (p[0].tril(), p[1].tril()) if lower else (p[0].triu(), p[1].triu())
    if unit:
        d = torch.diag_embed(torch.ones_like(hi.diagonal()))
        hi = hi - torch.diag_embed(hi.diagonal()) + d
        lo = lo - torch.diag_embed(lo.diagonal())
    return hi, lo


@register("linalg.solve_triangular", "neuron")
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
    if not _r._df64(a, b):
        return _k.solve_triangular(a, b, trans=trans, lower=lower,
                                   unit_diagonal=unit_diagonal)
    # (a stack: one refinement for the batch)
    A, B = _r._broadcast(_tri(_r._parts(a), lower, unit_diagonal), _r._parts(b))
    upper = not lower
    if trans:  # real: 'C' is 'T'
        A, upper = _r._t(A), lower
    n = A[0].shape[-1]
    # (a double-float zero has a zero high part)
    zero = (A[0].diagonal(dim1=-2, dim2=-1) == 0).reshape(-1, n).to(torch.int32)
    # the first matrix with a zero diagonal, and its first one (as SciPy's loop meets it)
    k = zero.amax(-1).argmax()
    first = torch.stack([zero.max(), zero.argmax(-1).gather(0, k.reshape(1))[0]])

    def check():
        # SciPy's (LAPACK trtrs) exact-zero-diagonal error; the read also runs the graph
        any_zero, i = (int(v) for v in _r._fetch(first))
        if any_zero:
            raise _k.LinAlgError(f"singular matrix: resolution failed at diagonal {i}")

    A0 = A[0]
    return _r._refine(lambda x: _r._mm(A, x), B,
                      lambda r: _r._trsm(A0, r, upper=upper), check)


def _normalized(m):
    """m = f 2**e with |f_hi| in [1/2, 1) (0 stays 0, e = 1): (f pair, e float32)."""
    e = _df._exponent(m[0].abs())
    return _df.mul_f(m, _df._pow2(-e)), e


@register("linalg.det", "neuron")
def det(a):
    if not _r._df64(a):
        return _k.det(a)
    _, U, _, piv, _ = _r._getrf_df(_r._parts(a))  # (a stack: one refinement for the batch)
    n = piv.shape[-1]
    batch = piv.shape[:-1]
    # product of the pivots by a tree: every factor and partial product scaled to [1/2, 1)
    # (exact), the exponents summed in float32 (integers, exact): no overflow or underflow
    # inside, whatever n.  The levels keep one width (the upper half refilled with ones)
    # so that they are one device loop: the body compiles once (unrolled, the levels'
    # splits took XLA CPU over a minute to compile at n = 16, measured)
    f, e = _normalized(tuple(p.diagonal(dim1=-2, dim2=-1) for p in U))
    width = 1 << max(n - 1, 1).bit_length()
    pad = torch.zeros(batch + (width - n,), dtype=f[0].dtype, device=f[0].device)
    carry = (torch.cat([f[0], pad + 0.5], -1), torch.cat([f[1], pad], -1),
             torch.cat([e, pad + 1], -1))
    h = width // 2

    def level(c, _):
        # neighbours' products in the lower half (the ones above multiply to ones)
        g, d = _normalized(_df.mul((c[0][..., 0::2], c[1][..., 0::2]),
                                   (c[0][..., 1::2], c[1][..., 1::2])))
        half = torch.full(batch + (h,), 0.5, dtype=g[0].dtype, device=g[0].device)
        return (torch.cat([g[0], half], -1), torch.cat([g[1], half * 0], -1),
                torch.cat([c[2][..., 0::2] + c[2][..., 1::2] + d, half * 0 + 1], -1))

    fh, fl, e = backend(carry[0].device).device_loop(level, carry, 0, width.bit_length() - 1)
    f = (fh[..., 0], fl[..., 0])
    swaps = (piv != torch.arange(n, device=piv.device, dtype=piv.dtype)).sum(-1)
    sign = 1.0 - 2.0 * (swaps % 2).to(torch.float32)
    # f 2**e, the power of two applied as two factors (each within float32's range)
    e = e[..., 0]
    half = torch.trunc(torch.clamp(e, -250, 250) * 0.5)
    out = _df.mul_f(_df.mul_f(f, _df._pow2(half)), _df._pow2(e - half))
    out = _transfer.df_tensor(out[0] * sign, out[1] * sign)
    # (the read runs the graph)
    fh, e = (np.asarray(v, dtype=np.float64).reshape(-1)
             for v in _r._fetch(torch.stack([f[0] * sign, e])))
    beyond = (fh != 0) & ~((-126 <= e) & (e <= 128))
    if beyond.any():
        # a determinant the device's double-float storage cannot hold (as to_device
        # refuses such a float64 datum): said, never inf or 0 in its place
        i = int(np.argmax(beyond))
        raise ValueError(f"the determinant, about {fh[i]:.6g} * 2**{e[i]:.0f}, is beyond "
                         "float32's exponent range, in which a device without float64 "
                         "(Trainium) holds float64 data; scale the matrix or compute on "
                         "the host")
    return out


def _qr_step(A1, k, eye):
    """One Newton step of the QR refinement (module docstring) on the carry
    (Q hi, Q lo, R1 hi, R1 lo, size): Q with c columns, R1 the k x k triangle."""
    c = eye.shape[-1]
    idx = torch.arange(c, device=eye.device)
    top = (idx[:, None] < k).to(eye.dtype)  # rows (and columns) of the first k
    rest = (1 - top) * (1 - top).mT * (1 - eye)  # both indices >= k, off the diagonal

    def step(carry, _):
        Q, R1 = (carry[0], carry[1]), (carry[2], carry[3])
        Qh, Rh = Q[0], R1[0]
        Qk = (Q[0][..., :k], Q[1][..., :k])
        E = _df.sub(A1, _df.gemm(Qk, R1))[0]
        G = _df.sub((eye, torch.zeros_like(eye)), _df.gemm(_r._t(Q), Q))[0]
        Y = _r._trsm(Rh, E.mT, upper=True, trans=1).mT  # E R^-1
        M = Qh.mT @ Y  # c x k
        K = torch.cat([M.tril(-1), M.new_zeros(M.shape[:-1] + (c - k,))], -1)
        X = K + (G - K.mT).triu(1) * top \
            + torch.diag_embed(G.diagonal(dim1=-2, dim2=-1) * 0.5) + G * rest * 0.5
        dR = (M - X[..., :k])[..., :k, :].triu() @ Rh
        dQ = Qh @ X + torch.cat([Y - Qh @ M, torch.zeros_like(Qh[..., k:])], -1)
        Q, R1 = _df.add_f(Q, dQ), _df.add_f(R1, dR)
        size = torch.maximum(_max(dQ), _max(dR) / _max(Rh))
        return (*Q, *R1, size)

    return step


_QR_HOST = "the double-float refinement of the QR did not converge (rank-deficient or " \
    "ill-conditioned matrix): SciPy's QR on the exact values"


def _max(t):
    """max |t| over the last two axes (one value per matrix of a stack)."""
    return t.abs().amax(-1).amax(-1)


def _step_until(step, carry, more, done, apart=None):
    """``step`` on the carry (ending in the step's size, one per matrix; with ``apart``,
    (gap, size)) until every matrix's size is at most ``done``, at most ``more`` times,
    one host read each; it gives up on a NaN size or a gap below ``apart``.  The final
    carry and the last (size,) or (gap, size) read.  In a stack a converged matrix keeps
    its carry while the others step (each stops where its single call would)."""
    tail = 1 if apart is None else 2

    def read(c):
        return np.asarray(_r._fetch(torch.stack(c[-tail:])), dtype=np.float64)

    values = read(carry)
    for _ in range(more):
        ok = values[-1] <= done
        if ok.all() or np.isnan(values[-1]).any() or \
                (apart is not None and not (values[0] >= apart).all()):
            break
        carry = _r._kept(ok, step(carry, None), carry)
        values = read(carry)
    return carry, values


def _qr_refined(A, c, start=None):
    """Q (m x c) and the square R (k x k, k = min(m, n)) pairs of A's first k columns by
    the refined QR, or None where the refinement does not converge (in a stack: for any
    of its matrices).  ``start``: float32 (Q, R) to refine (their signs kept), else the
    float32 Householder QR of A's high part."""
    m, n = A[0].shape[-2:]
    k = min(m, n)
    if start is None:
        h, tau = _xla_dense.geqrf(A[0])
        Q0, R0 = _xla_dense.orgqr(h, tau, c), h.triu()[..., :k, :k]
    else:
        Q0, R0 = start[0], start[1][..., :k, :k].triu()
    eye = torch.eye(c, dtype=Q0.dtype, device=Q0.device)
    step = _qr_step((A[0][..., :k], A[1][..., :k]), k, eye)
    loop = backend(Q0.device).device_loop
    zero = torch.zeros(Q0.shape[:-2], dtype=Q0.dtype, device=Q0.device)
    # a fixed number of steps in the graph of the float32 QR, one host read
    carry = loop(step, (Q0, torch.zeros_like(Q0), R0, torch.zeros_like(R0), zero), 0,
                 _QR_STEPS)
    carry, (size,) = _step_until(step, carry, _QR_MORE, _QR_DONE)
    if not (size <= _QR_DONE).all():
        return None
    return (carry[0], carry[1]), (carry[2], carry[3])


def qr_factors(A, c, start=None):
    """A = Q R in double-float pairs, Q with c orthonormal columns and R with c rows (its
    rows past min(m, n) zero), by the refined QR (``_qr_refined``); None where that does
    not converge."""
    QR = _qr_refined(A, c, start)
    if QR is None:
        return None
    Q, R = QR
    m, n = A[0].shape[-2:]
    k = min(m, n)
    if n > k:  # the columns past the square: R2 = Q^T A2 (Q orthogonal to double-float)
        R2 = _df.gemm(_r._t((Q[0][..., :k], Q[1][..., :k])), (A[0][..., k:], A[1][..., k:]))
        R = (torch.cat([R[0], R2[0]], -1), torch.cat([R[1], R2[1]], -1))
    if c > k:  # R has Q's c rows
        pad = torch.zeros(A[0].shape[:-2] + (c - k, n), dtype=R[0].dtype, device=R[0].device)
        R = (torch.cat([R[0], pad], -2), torch.cat([R[1], pad], -2))
    return Q, R


@register("linalg.qr", "neuron")
def qr(a, mode="full", pivoting=False):
    if not _r._df64(a):
        return _xla_dense.qr(a, mode=mode, pivoting=pivoting)
    host = lambda reason: _r._on_host("scipy.linalg.qr", reason, lambda x: _k._sl.qr(  # noqa: E731
        x, mode=mode, pivoting=pivoting, check_finite=False), a)
    if a.ndim != 2 and (pivoting or mode == "raw" or (mode == "full"
                                                       and a.shape[-2] > a.shape[-1])):
        # (a full Q's columns past n are any orthonormal complement: the float32 start's,
        # which a batched graph rounds otherwise than a single one; SciPy's loop's instead)
        raise PerMatrix
    if pivoting or mode == "raw":
        return host("column pivoting and mode='raw' (LAPACK's Householder form) have no "
                    "double-float method")
    A = _r._parts(a)  # (a stack: one refinement for the batch)
    m, n = a.shape[-2:]
    QR = qr_factors(A, m if mode == "full" else min(m, n))
    if QR is None:
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return host(_QR_HOST)
    Q, R = QR
    R = _transfer.df_tensor(*R)
    if mode == "r":
        return (R,)
    return _transfer.df_tensor(*Q), R


# ----------------------------------------------------------------------------------------
# qr_update, qr_insert, qr_delete (``_decomp_update``): the float32 method's factors, refined to the
# double-float QR of the updated matrix (``qr_factors``: Newton steps that keep
# the start's signs, so Q and R are SciPy's to float64 accuracy; the free trailing
# columns of a full Q are an orthonormal complement near SciPy's, float32-close)

_UPDATE_HOST = ("the double-float refinement of the updated QR did not converge "
                "(rank-deficient or ill-conditioned result): SciPy's update on the exact values")


def _hi(*tensors):
    return tuple(_r._parts(t)[0] for t in tensors)


def _product(Q, R, batch):
    """Q R in double-float pairs, broadcast to the batch."""
    A = _df.gemm(_r._parts(Q), _r._parts(R))
    return tuple(a.expand(tuple(batch) + a.shape[-2:]) for a in A)


def _refined(name, start, A, host):
    if 0 in A[0].shape[-2:]:  # (every row deleted: empty factors, nothing to refine)
        return tuple(_transfer.df_tensor(s, torch.zeros_like(s)) for s in start)
    QR = qr_factors(A, start[0].shape[-1], start)
    if QR is None:
        if A[0].ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return _r._on_host(f"scipy.linalg.{name}", _UPDATE_HOST, *host)
    return tuple(_transfer.df_tensor(*p) for p in QR)


def _reorder(A, kk, dim, insert, p):
    """A's rows (dim -2) or columns (-1) with p inserted at each matrix's kk (the p
    appended last in ``A``) or the p from kk deleted: a gather, exact on the pairs."""
    size = A[0].shape[dim] - p if insert else A[0].shape[dim]
    j = np.arange(size + p if insert else size - p)
    k = kk[..., None]
    order = (np.where(j < k, j, np.where(j < k + p, size + j - k, j - p)) if insert
             else np.where(j < k, j, j + p))
    index = torch.as_tensor(order, device=A[0].device)
    index = index.unsqueeze(-1) if dim == -2 else index.unsqueeze(-2)
    shape = list(A[0].shape)
    shape[dim] = order.shape[-1]
    return tuple(torch.take_along_dim(a, index.expand(shape), dim) for a in A)


@register("linalg.qr_update", "neuron")
def qr_update(Q, R, u, v, economic, core):
    generic = kind_kernel("linalg.qr_update", "generic")
    if not _r._df64(Q):
        return generic(Q, R, u, v, economic, core)
    start = generic(*_hi(Q, R, u, v), economic, core)
    U, V = _r._parts(u), _r._parts(v)
    if core == 1:
        U, V = (tuple(x.unsqueeze(-1) for x in P) for P in (U, V))
    A = _df.add(_product(Q, R, start[0].shape[:-2]), _df.gemm(U, _r._t(V)))
    return _refined("qr_update", start, A, (lambda *a: _k._sl.qr_update(
        *a, check_finite=False), Q, R, u, v))


@register("linalg.qr_insert", "neuron")
def qr_insert(Q, R, u, k, kk, which, rcond, economic, core, batch):
    generic = kind_kernel("linalg.qr_insert", "generic")
    if not _r._df64(Q):
        return generic(Q, R, u, k, kk, which, rcond, economic, core, batch)
    start = generic(*_hi(Q, R, u), k, kk, which, rcond, economic, core, batch)
    dim = -2 if which == "row" else -1
    U = tuple(x.unsqueeze(dim) if core == 1 else x for x in _r._parts(u))
    U = tuple(x.expand(tuple(batch) + x.shape[-2:]) for x in U)
    A = _product(Q, R, batch)
    A = _reorder(tuple(torch.cat([a, x], dim) for a, x in zip(A, U, strict=True)), kk, dim,
                 True, U[0].shape[dim])
    return _refined("qr_insert", start, A, (lambda *a: _k._sl.qr_insert(
        *a, int(kk), which=which, rcond=rcond, check_finite=False), Q, R, u))


@register("linalg.qr_delete", "neuron")
def qr_delete(Q, R, k, kk, p, which, economic, batch):
    generic = kind_kernel("linalg.qr_delete", "generic")
    if not _r._df64(Q):
        return generic(Q, R, k, kk, p, which, economic, batch)
    if which == "col" and p == R.shape[-1]:  # every column: no rotation, Q as given
        c = Q.shape[-1] - (p if economic else 0)  # (economic: Q's first n - p columns)

        def part(t, rows, cols):
            return _transfer.df_tensor(*(x.expand(tuple(batch) + x.shape[-2:])[..., :rows, :cols]
                                         for x in _r._parts(t)))

        return part(Q, None, c), part(R, c, 0)
    start = generic(*_hi(Q, R), k, kk, p, which, economic, batch)
    A = _reorder(_product(Q, R, batch), kk, -2 if which == "row" else -1, False, p)
    return _refined("qr_delete", start, A, (lambda *a: _k._sl.qr_delete(
        *a, int(kk), p=p, which=which, check_finite=False), Q, R))


_SVD_STEPS = 2  # Ogita-Aishima steps in the graph of the float32 start, before its host read
_SVD_MORE = 3  # further steps, one host read each, where the first ones did not finish
_SVD_DONE = 2.0 ** -30  # a step this small leaves an error near its square (quadratic)
_SVD_APART = 2.0 ** -16  # singular values closer than this (relative to the largest) are
# not resolved by float32: their vectors' first-order corrections do not converge
_SVD_HOST = "the double-float refinement of the SVD did not converge: SciPy's SVD on " \
    "the exact values"
_SVD_CLOSE = "singular values closer than 2**-16 of the largest (close or repeated) are " \
    "beyond the double-float SVD refinement: SciPy's SVD on the exact values"
_SVD_RANK = "the double-float QR of a rectangular matrix did not converge (rank-deficient " \
    "or ill-conditioned): SciPy's SVD on the exact values"


def _svd_step(A):
    """One Ogita-Aishima step for the square A (n x n pair) on the carry
    (U hi, U lo, V hi, V lo, gap, size).

    U = U~ (I + F), V = V~ (I + G) exactly, to first order: R = I - U~^T U~ = F + F^T,
    S = I - V~^T V~ = G + G^T, T = U~^T A V~ = Sigma - F^T Sigma - Sigma G.  The diagonal
    gives s_i = t_ii / (1 - (r_ii + s_ii) / 2) and f_ii = r_ii / 2, g_ii = s_ii / 2; each
    pair (i, j) the 2 x 2 system t_ij = -s_j f_ji - s_i g_ij,
    t_ji + s_i r_ij + s_j s_ij = s_i f_ji + s_j g_ij.  T, R, S in double-float; F, G
    (first-order small) in float32."""
    n = A[0].shape[-1]

    def step(carry, _):
        U, V = (carry[0], carry[1]), (carry[2], carry[3])
        Uh, Vh = U[0], V[0]
        eye = torch.eye(n, dtype=Uh.dtype, device=Uh.device)
        zero = torch.zeros_like(eye)
        T = _df.gemm(_r._t(U), _df.gemm(A, V))[0]
        R = _df.sub((eye, zero), _df.gemm(_r._t(U), U))[0]
        S = _df.sub((eye, zero), _df.gemm(_r._t(V), V))[0]
        diag = lambda t: t.diagonal(dim1=-2, dim2=-1)  # noqa: E731
        s = diag(T) / (1 - (diag(R) + diag(S)) * 0.5)
        si, sj = s[..., :, None], s[..., None, :]
        alpha, beta = T, T.mT + si * R + sj * S
        off = eye == 0
        gap = torch.where(off, si * si - sj * sj, 1)
        Fji = torch.where(off, (alpha * sj + beta * si) / gap, 0)  # (i, j) holds f_ji
        G = torch.where(off, -(alpha * si + beta * sj) / gap, 0) \
            + torch.diag_embed(diag(S) * 0.5)
        dU = Uh @ (Fji.mT + torch.diag_embed(diag(R) * 0.5))
        dV = Vh @ G
        U, V = _df.add_f(U, dU), _df.add_f(V, dV)
        smax = s.abs().amax(-1)
        size = torch.maximum(_max(T * off) / smax, _max(dU))
        # the gap: the smallest distance between singular values relative to the largest,
        # over the steps (the first, from the float32 start, decides: a step across close
        # values makes inf and NaN); the size: inf from the first step that is not finite
        # on (torch-xla's min and max pass NaN over: measured, a NaN U read as size 1e-14
        # and gap 0.33 two steps after a zero gap)
        g = ((si - sj).abs() + (1 - off.to(s.dtype)) * smax[..., None, None]).amin(-1) \
            .amin(-1) / smax
        gap = torch.minimum(carry[4], torch.where(g == g, g, carry[4]))
        finite = ((~torch.isfinite(dU)).sum((-2, -1)) + (~torch.isfinite(dV)).sum((-2, -1))
                  == 0) & (carry[5] < float("inf"))
        return (*U, *V, gap, torch.where(finite, size, float("inf")))

    return step


def _singular_values(A, U, V):
    """s_i = t_ii / (1 - (r_ii + s_ii) / 2) in double-float, where
    1 - (r_ii + s_ii) / 2 = (|u_i|^2 + |v_i|^2) / 2."""
    t = _df.dot(U, _df.gemm(A, V), dim=-2)
    d = _df.add(_df.dot(U, U, dim=-2), _df.dot(V, V, dim=-2))
    return _df.div(t, (d[0] * 0.5, d[1] * 0.5))  # halving is exact


def _svd32(a, full_matrices, compute_uv):
    """The float32 SVD of the XLA lane (QDWH; by the kernel seam, not an import)."""
    return kind_kernel("linalg._svd", "xla")(a, full_matrices, compute_uv)


def _start(a):
    """Float32 U and V of the square a from the float32 eigh of the Jordan-Wielandt
    matrix B = [[0, a], [a^T, 0]] (XLA compiles it in seconds, where its QDWH SVD took
    minutes and GBs): B [u; v] = s [u; v] for each singular triple, so B's n largest
    eigenvalues are s_1 >= ... >= s_n with eigenvectors [u_i; v_i] / sqrt(2) (B's
    condition is a's: nothing squared).  Columns normalized: a float32 mixing of the +s
    and -s eigenvectors ([u; v] and [u; -v]) scales u and v but leaves their
    directions."""
    n = a.shape[-1]
    zero = torch.zeros_like(a)
    _, X = torch.linalg.eigh(torch.cat([torch.cat([zero, a], -1),
                                        torch.cat([a.mT, zero], -1)], -2))
    top = X[..., n:].flip(-1)  # ascending: -s_1..-s_n, then s_n..s_1
    U, V = top[..., :n, :], top[..., n:, :]
    return (U / torch.linalg.vector_norm(U, dim=-2, keepdim=True),
            V / torch.linalg.vector_norm(V, dim=-2, keepdim=True))


def _svd_square(A):
    """(U, s, V) pairs of the square A (n x n pair, or a stack: one refinement), or the
    reason it goes to the host (for any matrix of a stack)."""
    U0, V0 = _start(A[0])
    step = _svd_step(A)
    zero = torch.zeros(U0.shape[:-2], dtype=U0.dtype, device=U0.device)
    # a fixed number of steps in the graph of the float32 start, one host read
    carry = backend(U0.device).device_loop(
        step, (U0, torch.zeros_like(U0), V0, torch.zeros_like(V0), zero + 2, zero), 0,
        _SVD_STEPS)
    carry, (gap, size) = _step_until(step, carry, _SVD_MORE, _SVD_DONE, _SVD_APART)
    if not (gap >= _SVD_APART).all():  # NaN included
        return _SVD_CLOSE
    if not (size <= _SVD_DONE).all():
        return _SVD_HOST
    U, V = (carry[0], carry[1]), (carry[2], carry[3])
    return U, _singular_values(A, U, V), V


@register("linalg._svd", "neuron")
def _svd(a, full_matrices, compute_uv):
    if not _r._df64(a):
        return _svd32(a, full_matrices, compute_uv)
    def host(reason):
        if a.ndim > 2:
            raise PerMatrix  # (each matrix decides alone, as its single call)
        return _r._on_host("scipy.linalg.svd", reason, lambda x: (
            _k._sl.svd(x, full_matrices=full_matrices, check_finite=False) if compute_uv
            else _k._sl.svdvals(x, check_finite=False)), a)

    A = _r._parts(a)  # (a stack: one refinement for the batch)
    m, n = a.shape[-2:]
    if a.ndim > 2 and full_matrices and compute_uv and m != n:
        raise PerMatrix  # (the full U or V's complement: as qr's full Q above)
    wide = m < n
    if wide:
        A, m, n = _r._t(A), n, m
    full = full_matrices and compute_uv
    Q = None
    if m > n:
        # A = Q R by the refined QR, then the SVD of the square R: the rectangular
        # Ogita-Aishima step's graphs took XLA CPU 4 to 9 minutes and 5.6 GB to compile
        # (20 x 12, 24 x 16; the QR's and the square's take seconds, measured)
        QR = _qr_refined(A, m if full else n)
        if QR is None:
            return host(_SVD_RANK)
        Q, A = QR
    out = _svd_square(A)
    if isinstance(out, str):
        return host(out)
    U, s, V = out
    s = _transfer.df_tensor(*s)
    if not compute_uv:
        return s
    if Q is not None:  # U = Q [U_R, 0; 0, I]
        U = _df.gemm((Q[0][..., :n], Q[1][..., :n]), U)
        U = (torch.cat([U[0], Q[0][..., n:]], -1), torch.cat([U[1], Q[1][..., n:]], -1))
    if wide:  # A^T = U S V^T: A = V S U^T (transposed as pairs)
        return _transfer.df_tensor(*V), s, _transfer.df_tensor(*_r._t(U))
    return _transfer.df_tensor(*U), s, _transfer.df_tensor(*_r._t(V))
