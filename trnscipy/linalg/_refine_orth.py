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
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, register
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
