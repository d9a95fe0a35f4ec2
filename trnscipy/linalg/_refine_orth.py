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
- ``svd``, ``svdvals``: a float32 SVD from the float32 eigh of [[0, A], [A^T, 0]]
  (``_start``) refined by Ogita & Aishima's iteration
  (2020; ``_svd_step``): T = U^T A V, I - U^T U, I - V^T V in double-float, the
  corrections of U and V in float32.  Quadratic while the singular values are apart (by
  more than float32 resolves); close ones, or a correction that does not shrink, go to
  SciPy on the exact values, announced.
"""

from trnscipy import _transfer
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
    if a.ndim != 2 or b.ndim != 2:
        return _r._on_host("scipy.linalg.solve_triangular", _r._BATCHED,
                           lambda x, y: _k._sl.solve_triangular(
                               x, y, trans=trans, lower=lower, unit_diagonal=unit_diagonal,
                               check_finite=False), a, b)
    A = _tri(_r._parts(a), lower, unit_diagonal)
    upper = not lower
    if trans:  # real: 'C' is 'T'
        A, upper = _r._t(A), lower
    zero = A[0].diagonal() == 0  # a double-float zero has a zero high part
    first = torch.stack([zero.any().to(torch.int32), zero.to(torch.int32).argmax()])

    def check():
        # SciPy's (LAPACK trtrs) exact-zero-diagonal error; the read also runs the graph
        any_zero, i = (int(v) for v in _r._fetch(first))
        if any_zero:
            raise _k.LinAlgError(f"singular matrix: resolution failed at diagonal {i}")

    A0 = A[0]
    return _r._refine(lambda x: _r._mm(A, x), _r._parts(b),
                      lambda r: _r._trsm(A0, r, upper=upper), check)


def _normalized(m):
    """m = f 2**e with |f_hi| in [1/2, 1) (0 stays 0, e = 1): (f pair, e float32)."""
    e = _df._exponent(m[0].abs())
    return _df.mul_f(m, _df._pow2(-e)), e


@register("linalg.det", "neuron")
def det(a):
    if not _r._df64(a):
        return _k.det(a)
    if not _r._square_2d(a):
        return _r._on_host("scipy.linalg.det", _r._BATCHED,
                           lambda x: _k._sl.det(x, check_finite=False), a)
    _, U, _, piv, _ = _r._getrf_df(_r._parts(a))
    n = piv.shape[0]
    # product of the pivots by a tree: every factor and partial product scaled to [1/2, 1)
    # (exact), the exponents summed in float32 (integers, exact): no overflow or underflow
    # inside, whatever n.  The levels keep one width (the upper half refilled with ones)
    # so that they are one device loop: the body compiles once (unrolled, the levels'
    # splits took XLA CPU over a minute to compile at n = 16, measured)
    f, e = _normalized((U[0].diagonal(), U[1].diagonal()))
    width = 1 << max(n - 1, 1).bit_length()
    pad = torch.zeros(width - n, dtype=f[0].dtype, device=f[0].device)
    carry = (torch.cat([f[0], pad + 0.5]), torch.cat([f[1], pad]), torch.cat([e, pad + 1]))
    h = width // 2

    def level(c, _):
        # neighbours' products in the lower half (the ones above multiply to ones)
        g, d = _normalized(_df.mul((c[0][0::2], c[1][0::2]), (c[0][1::2], c[1][1::2])))
        half = torch.full((h,), 0.5, dtype=g[0].dtype, device=g[0].device)
        return (torch.cat([g[0], half]), torch.cat([g[1], half * 0]),
                torch.cat([c[2][0::2] + c[2][1::2] + d, half * 0 + 1]))

    fh, fl, e = backend(carry[0].device).device_loop(level, carry, 0, width.bit_length() - 1)
    f = (fh, fl)
    swaps = (piv != torch.arange(n, device=piv.device, dtype=piv.dtype)).sum()
    sign = 1.0 - 2.0 * (swaps % 2).to(torch.float32)
    # f 2**e, the power of two applied as two factors (each within float32's range)
    e = e[0]
    half = torch.trunc(torch.clamp(e, -250, 250) * 0.5)
    out = _df.mul_f(_df.mul_f((f[0][0], f[1][0]), _df._pow2(half)), _df._pow2(e - half))
    out = _transfer.df_tensor(out[0] * sign, out[1] * sign)
    fh, e = (float(v) for v in _r._fetch(torch.stack([f[0][0] * sign, e])))  # runs the graph
    if fh != 0 and not -126 <= e <= 128:
        # a determinant the device's double-float storage cannot hold (as to_device
        # refuses such a float64 datum): said, never inf or 0 in its place
        raise ValueError(f"the determinant, about {fh:.6g} * 2**{e:.0f}, is beyond "
                         "float32's exponent range, in which a device without float64 "
                         "(Trainium) holds float64 data; scale the matrix or compute on "
                         "the host")
    return out


def _qr_step(A1, k, eye):
    """One Newton step of the QR refinement (module docstring) on the carry
    (Q hi, Q lo, R1 hi, R1 lo, size): Q with c columns, R1 the k x k triangle."""
    c = eye.shape[0]
    idx = torch.arange(c, device=eye.device)
    top = (idx[:, None] < k).to(eye.dtype)  # rows (and columns) of the first k
    rest = (1 - top) * (1 - top).mT * (1 - eye)  # both indices >= k, off the diagonal

    def step(carry, _):
        Q, R1 = (carry[0], carry[1]), (carry[2], carry[3])
        Qh, Rh = Q[0], R1[0]
        Qk = (Q[0][:, :k], Q[1][:, :k])
        E = _df.sub(A1, _df.gemm(Qk, R1))[0]
        G = _df.sub((eye, torch.zeros_like(eye)), _df.gemm(_r._t(Q), Q))[0]
        Y = _r._trsm(Rh, E.mT, upper=True, trans=1).mT  # E R^-1
        M = Qh.mT @ Y  # c x k
        K = torch.cat([M.tril(-1), torch.zeros_like(eye[:, k:])], 1)
        X = K + (G - K.mT).triu(1) * top + torch.diag_embed(G.diagonal() * 0.5) \
            + G * rest * 0.5
        dR = (M - X[:, :k])[:k].triu() @ Rh
        dQ = Qh @ X + torch.cat([Y - Qh @ M, torch.zeros_like(Qh[:, k:])], 1)
        Q, R1 = _df.add_f(Q, dQ), _df.add_f(R1, dR)
        size = torch.maximum(dQ.abs().max(), dR.abs().max() / Rh.abs().max())
        return (*Q, *R1, size)

    return step


_QR_HOST = "the double-float refinement of the QR did not converge (rank-deficient or " \
    "ill-conditioned matrix): SciPy's QR on the exact values"


@register("linalg.qr", "neuron")
def qr(a, mode="full", pivoting=False):
    if not _r._df64(a):
        return _xla_dense.qr(a, mode=mode, pivoting=pivoting)
    host = lambda reason: _r._on_host("scipy.linalg.qr", reason, lambda x: _k._sl.qr(  # noqa: E731
        x, mode=mode, pivoting=pivoting, check_finite=False), a)
    if a.ndim != 2 or pivoting or mode == "raw":
        return host("batched input, column pivoting and mode='raw' (LAPACK's Householder "
                    "form) have no double-float method")
    A = _r._parts(a)
    m, n = a.shape
    k = min(m, n)
    c = m if mode == "full" else k
    h, tau = _xla_dense.geqrf(A[0])
    Q0, R0 = _xla_dense.orgqr(h, tau, c), h.triu()[:k, :k]
    eye = torch.eye(c, dtype=Q0.dtype, device=Q0.device)
    A1 = (A[0][:, :k], A[1][:, :k])
    step = _qr_step(A1, k, eye)
    loop = backend(Q0.device).device_loop
    zero = torch.zeros((), dtype=Q0.dtype, device=Q0.device)
    # a fixed number of steps in the graph of the float32 QR, one host read
    carry = loop(step, (Q0, torch.zeros_like(Q0), R0, torch.zeros_like(R0), zero), 0,
                 _QR_STEPS)
    size = float(_r._fetch(carry[4]))
    for _ in range(_QR_MORE):
        if size <= _QR_DONE or size != size:
            break
        carry = step(carry, None)
        size = float(_r._fetch(carry[4]))
    if not size <= _QR_DONE:
        return host(_QR_HOST)
    Q, R1 = (carry[0], carry[1]), (carry[2], carry[3])
    R = R1
    if n > k:  # the columns past the square: R2 = Q^T A2 (Q orthogonal to double-float)
        R2 = _df.gemm(_r._t(Q), (A[0][:, k:], A[1][:, k:]))
        R = (torch.cat([R1[0], R2[0]], 1), torch.cat([R1[1], R2[1]], 1))
    if mode != "economic" and m > n:  # R has Q's m rows
        pad = torch.zeros((m - n, n), dtype=R[0].dtype, device=R[0].device)
        R = (torch.cat([R[0], pad]), torch.cat([R[1], pad]))
    R = _transfer.df_tensor(*R)
    if mode == "r":
        return (R,)
    return _transfer.df_tensor(*Q), R


_SVD_STEPS = 2  # Ogita-Aishima steps in the graph of the float32 start, before its host read
_SVD_MORE = 3  # further steps, one host read each, where the first ones did not finish
_SVD_DONE = 2.0 ** -30  # a step this small leaves an error near its square (quadratic)
_SVD_APART = 2.0 ** -16  # singular values closer than this (relative to the largest),
# or to zero where U has a column space beyond A's rank, are not resolved by float32
_SVD_HOST = "the double-float refinement of the SVD did not converge: SciPy's SVD on " \
    "the exact values"
_SVD_CLOSE = "close or repeated singular values (or a rank-deficient rectangular " \
    "matrix) are beyond the double-float SVD refinement: SciPy's SVD on the exact values"


def _svd_step(A, c):
    """One Ogita-Aishima step for A (m x n pair, m >= n) on the carry
    (U hi, U lo, V hi, V lo, size, gap): U with c columns (n, or m for a full U).

    U = U~ (I + F), V = V~ (I + G) exactly, to first order: R = I - U~^T U~ = F + F^T,
    S = I - V~^T V~ = G + G^T, T = U~^T A V~ = Sigma - F^T Sigma - Sigma G.  The diagonal
    gives s_i = t_ii / (1 - (r_ii + s_ii) / 2) and f_ii = r_ii / 2, g_ii = s_ii / 2; each
    pair (i, j) of the leading n the 2 x 2 system t_ij = -s_j f_ji - s_i g_ij,
    t_ji + s_i r_ij + s_j s_ij = s_i f_ji + s_j g_ij; a full U's rows past n
    f_ji = -t_ij / s_j, f_ij = r_ij - f_ji; an economic U its component outside span(U~),
    (I - U~ U~^+) A V~ Sigma^-1.  T, R, S in double-float; F, G (first-order small) in
    float32."""
    n = A[0].shape[1]

    def step(carry, _):
        U, V = (carry[0], carry[1]), (carry[2], carry[3])
        Uh, Vh = U[0], V[0]
        eye_c = torch.eye(c, dtype=Uh.dtype, device=Uh.device)
        eye_n = eye_c[:n, :n]
        zc, zn = torch.zeros_like(eye_c), torch.zeros_like(eye_n)
        AV = _df.gemm(A, V)
        T = _df.gemm(_r._t(U), AV)  # c x n
        R = _df.sub((eye_c, zc), _df.gemm(_r._t(U), U))[0]
        S = _df.sub((eye_n, zn), _df.gemm(_r._t(V), V))[0]
        Th = T[0]
        T11, R11 = Th[:n], R[:n, :n]
        s = T11.diagonal() / (1 - (R11.diagonal() + S.diagonal()) * 0.5)
        si, sj = s[:, None], s[None, :]
        alpha = T11
        beta = T11.mT + si * R11 + sj * S
        off = eye_n == 0
        gap = torch.where(off, si * si - sj * sj, 1)
        Fji = torch.where(off, (alpha * sj + beta * si) / gap, 0)  # (i, j) holds f_ji
        G = torch.where(off, -(alpha * si + beta * sj) / gap, 0) \
            + torch.diag_embed(S.diagonal() * 0.5)
        F11 = Fji.mT + torch.diag_embed(R11.diagonal() * 0.5)
        smax = s.abs().max()
        sinv = 1 / torch.where(s == 0, 1, s)  # s = 0 only where the gap check fails
        if c > n:  # full U: its rows and columns past n
            F12 = (Th[n:] * sinv[None, :]).mT * -1
            F = torch.cat([torch.cat([F11, F12], 1),
                           torch.cat([R[n:, :n] - F12.mT, R[n:, n:] * 0.5], 1)], 0)
            dU = Uh @ F
        else:
            dU = Uh @ F11
            if A[0].shape[0] > n:  # economic: the part of A V~ outside span(U~)
                W = _df.sub(AV, _df.gemm(U, T))[0]
                W = W - Uh @ (Uh.mT @ W)
                dU = dU + W * sinv[None, :]
        dV = Vh @ G
        U, V = _df.add_f(U, dU), _df.add_f(V, dV)
        size = torch.maximum((T11 * off).abs().max() / smax, dU.abs().max())
        # the smallest distance between singular values (and to zero where U has columns
        # beyond A's rank), relative to the largest
        d = (si - sj).abs() + (1 - off.to(s.dtype)) * smax
        if A[0].shape[0] > n:
            d = torch.minimum(d.min(), s.abs().min())
        # the gap: the smallest over the steps (the first, from the float32 start, decides:
        # a step across close values makes inf and NaN); the size: inf from the first
        # step that is not finite on (torch-xla's min and max pass NaN over: measured, a
        # NaN U read as size 1e-14 and gap 0.33 two steps after a zero gap)
        finite = ((~torch.isfinite(dU)).sum() + (~torch.isfinite(dV)).sum() == 0) \
            & (carry[4] <= float("inf"))
        g = d.min() / smax
        gap = torch.minimum(carry[5], torch.where(g == g, g, carry[5]))
        return (*U, *V, torch.where(finite, size, float("inf")), gap)

    return step


def _singular_values(A, U, V):
    """s_i = t_ii / (1 - (r_ii + s_ii) / 2) in double-float, where
    1 - (r_ii + s_ii) / 2 = (|u_i|^2 + |v_i|^2) / 2."""
    n = V[0].shape[0]
    Un = (U[0][:, :n], U[1][:, :n])
    t = _df.dot(Un, _df.gemm(A, V), dim=0)
    d = _df.add(_df.dot(Un, Un, dim=0), _df.dot(V, V, dim=0))
    return _df.div(t, (d[0] * 0.5, d[1] * 0.5))  # halving is exact


def _svd32(a, full_matrices, compute_uv):
    """The float32 SVD of the XLA lane (QDWH; by the kernel seam, not an import)."""
    return kind_kernel("linalg._svd", "xla")(a, full_matrices, compute_uv)


def _start(a, c):
    """Float32 U (m x c) and V (n x n) of a (m >= n) from the float32 eigh of the
    Jordan-Wielandt matrix B = [[0, a], [a^T, 0]] (XLA compiles it in seconds, where its
    QDWH SVD took minutes and GBs): B [u; v] = s [u; v] for each singular triple, so B's
    n largest eigenvalues are s_1 >= ... >= s_n with eigenvectors [u_i; v_i] / sqrt(2)
    (B's condition is a's: nothing squared), and its m - n zero eigenvalues have
    eigenvectors [w; 0] with a^T w = 0, a full U's complement.  Columns normalized: a
    float32 mixing of the +s and -s eigenvectors ([u; v] and [u; -v]) scales u and v
    but leaves their directions."""
    m, n = a.shape
    B = torch.zeros((m + n, m + n), dtype=a.dtype, device=a.device)
    B = torch.cat([torch.cat([B[:m, :m], a], 1), torch.cat([a.mT, B[m:, m:]], 1)], 0)
    _, X = torch.linalg.eigh(B)  # ascending: -s_1..-s_n, the m - n zeros, s_n..s_1
    top = X[:, m:].flip(1)
    U, V = top[:m], top[m:]
    if c > n:
        U = torch.cat([U, X[:m, n:m]], 1)
    return U / torch.linalg.vector_norm(U, dim=0), V / torch.linalg.vector_norm(V, dim=0)


@register("linalg._svd", "neuron")
def _svd(a, full_matrices, compute_uv):
    if not _r._df64(a):
        return _svd32(a, full_matrices, compute_uv)
    host = lambda reason: _r._on_host("scipy.linalg.svd", reason, lambda x: (  # noqa: E731
        _k._sl.svd(x, full_matrices=full_matrices, check_finite=False) if compute_uv
        else _k._sl.svdvals(x, check_finite=False)), a)
    if a.ndim != 2:
        return host(_r._BATCHED)
    A = _r._parts(a)
    m, n = a.shape
    wide = m < n
    if wide:
        A, m, n = _r._t(A), n, m
    c = m if full_matrices and compute_uv else n
    U0, V0 = _start(A[0], c)
    step = _svd_step(A, c)
    zero = torch.zeros((), dtype=U0.dtype, device=U0.device)
    # a fixed number of steps in the graph of the float32 SVD, one host read
    carry = backend(U0.device).device_loop(
        step, (U0, torch.zeros_like(U0), V0, torch.zeros_like(V0), zero, zero + 2), 0,
        _SVD_STEPS)
    size, gap = (float(v) for v in _r._fetch(torch.stack(carry[4:])))
    if not gap >= _SVD_APART:  # NaN included
        return host(_SVD_CLOSE)
    for _ in range(_SVD_MORE):
        if size <= _SVD_DONE or size != size:
            break
        carry = step(carry, None)
        size, gap = (float(v) for v in _r._fetch(torch.stack(carry[4:])))
    if not gap >= _SVD_APART:
        return host(_SVD_CLOSE)
    if not size <= _SVD_DONE:
        return host(_SVD_HOST)
    U, V = (carry[0], carry[1]), (carry[2], carry[3])
    s = _transfer.df_tensor(*_singular_values(A, U, V))
    if not compute_uv:
        return s
    if wide:  # A^T = U S V^T: A = V S U^T (transposed as pairs)
        return _transfer.df_tensor(*V), s, _transfer.df_tensor(*_r._t(U))
    return _transfer.df_tensor(*U), s, _transfer.df_tensor(*_r._t(V))

