"""svd on XLA devices: QDWH polar decomposition, then eigh of the Hermitian factor.

torch-xla 2.9 lowers real ``linalg.svd`` to XLA's Jacobi SVD, which took 260-284 s
for a 300 x 300 float32 matrix here (docs/decisions/0005).  A = U_p H (polar), H = V L V^T
(eigh), so A = (U_p V) L V^T: backward stable (Nakatsukasa & Higham 2013), no squared
condition number.  The polar factor comes from the QR-based dynamically weighted Halley
iteration (Nakatsukasa, Bai & Gygi 2010) with a fixed schedule of weights computed on
the host from the lower bound l0 = eps: iterations with a large weight c use the QR of
[sqrt(c) X; I] by shifted Cholesky QR (Fukaya et al. 2020) and then two Cholesky QR
passes, the later ones the Cholesky form; everything is matmul, ``torch.cholesky`` and
``triangular_solve`` (they lower), one graph per iteration.  H above LEAF is split
first (QDWH-eig, Nakatsukasa & Higham 2013: the polar factor of H - sigma I gives the
projector onto its eigenvalues above sigma), so XLA's Jacobi eigh sees only small
blocks; the split's ranks are read on the host, and the blocks are padded to a few
fixed sizes, so that the graphs depend on n, not on the data.  Where A is (nearly) rank
deficient or ``full_matrices`` asks for more columns than A has, U is completed by the
device Householder QR (one host read decides).
"""

import math
import warnings

from trnscipy._kernels import backend, kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _on_host, _svd, small_eigh, xla_triangular_solve

__all__ = ["polar_qdwh", "svd_qdwh"]


def _sync(*tensors):
    backend(tensors[0].device).materialize(tensors)


def _chol(g):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.cholesky's deprecation note
        return torch.cholesky(g)  # (torch.linalg.cholesky does not lower)


def _solve_lt(y, lower):
    """y L^-T for lower triangular L."""
    return xla_triangular_solve(y.mT, lower, upper=False).mT


def _schedule(eps):
    """QDWH's weights (a, b, c) per iteration for sigma_min(X0) >= l0 = eps."""
    out, lo = [], eps
    while abs(1 - lo) > 10 * eps:
        d = (4 * (1 - lo * lo) / lo ** 4) ** (1 / 3)
        a = math.sqrt(1 + d) + 0.5 * math.sqrt(8 - 4 * d + 8 * (2 - lo * lo)
                                               / (lo * lo * math.sqrt(1 + d)))
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        out.append((a, b, c))
        lo = lo * (a + b * lo * lo) / (1 + c * lo * lo)
    return out


def polar_qdwh(a):
    """The orthonormal polar factor of a real (..., m, n) tensor with m >= n."""
    *batch, m, n = a.shape
    eps = torch.finfo(a.dtype).eps
    norm = torch.linalg.vector_norm(a, dim=(-2, -1), keepdim=True)
    x = a / torch.where(norm == 0, torch.ones_like(norm), norm)
    _sync(x)  # (the first iteration then runs its form's executable, not one of its own)
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand(*batch, n, n)
    for wa, wb, wc in _schedule(eps):
        qr_form = wc > 100
        # the weights as device data: every iteration of a form runs one executable
        w = torch.tensor([math.sqrt(wc) if qr_form else wc, wb / wc,
                          (wa - wb / wc) / (math.sqrt(wc) if qr_form else 1),
                          2 * (m + 2 * n) * eps * (wc + 1)],  # shift above the Gram's rounding
                         dtype=a.dtype).to(a.device)
        if qr_form:  # QR of [sqrt(c) X; I]: shifted Cholesky QR, then two passes
            y = torch.cat([w[0] * x, eye], -2)
            q = _solve_lt(y, _chol(y.mT @ y + w[3] * eye))
            for _ in range(2):
                q = _solve_lt(q, _chol(q.mT @ q))
            x = w[1] * x + w[2] * (q[..., :m, :] @ q[..., m:, :].mT)
        else:  # X (I + c X^T X)^-1 by Cholesky
            low = _chol(eye + w[0] * (x.mT @ x))
            z = xla_triangular_solve(x.mT, low, upper=False)
            z = xla_triangular_solve(z, low, upper=False, transpose=True)
            x = w[1] * x + w[2] * z.mT
        _sync(x)
    return 1.5 * x - 0.5 * x @ (x.mT @ x)  # one Newton-Schulz step


def _eigh_error(h, w, v):
    eye = torch.eye(h.shape[-1], dtype=h.dtype, device=h.device)
    resid = torch.linalg.vector_norm(h @ v - v * w.unsqueeze(-2), dim=(-2, -1))
    orth = torch.linalg.vector_norm(v.mT @ v - eye, dim=(-2, -1))
    return resid + orth * torch.linalg.vector_norm(h, dim=(-2, -1))


def _refined_eigh(h):
    """eigh; in float64 with Ogita-Aishima steps where they help (XLA's float64 eigh
    vectors reach ~1e-8; the steps can stall on graded spectra, then the plain result
    is kept: chosen on the device by the residual)."""
    w, v = torch.linalg.eigh(h)
    if h.dtype != torch.float64:
        return w, v
    flat = h.reshape(-1, *h.shape[-2:])
    pairs = [small_eigh(t) for t in flat]
    w1 = torch.stack([p[0] for p in pairs]).reshape(w.shape)
    v1 = torch.stack([p[1] for p in pairs]).reshape(v.shape)
    better = _eigh_error(h, w1, v1) < _eigh_error(h, w, v)
    return (torch.where(better.unsqueeze(-1), w1, w),
            torch.where(better.unsqueeze(-1).unsqueeze(-1), v1, v))


# Blocks above LEAF are split before XLA's eigh, whose Jacobi sweeps grow fast with n
# (0.13-0.18 s at n = 150, 1.5 s at 300, minutes at 1024; measured).
LEAF = 256


def _bucket(k, size):
    """The padded size of a block of k eigenpairs split from a padded ``size`` block:
    the next of LEAF/4 (j + 1/2), where the halves of powers of two fall mid-bucket
    (n = 1024: 544, 288, 160).  In a block below 2 LEAF, a leaf that would pad above
    LEAF pads to LEAF - LEAF/32 instead (a graded spectrum's 243 of 300); the quarters
    of 1024 (256 +- 10) come from 544 and always go to 288 and split."""
    grain, leaf = max(LEAF // 4, 2), LEAF - LEAF // 32
    padded = grain * max(0, math.ceil((k - grain // 2) / grain)) + grain // 2
    return min(size, leaf if k <= leaf < padded and size < 2 * LEAF else padded)


def _orth(y, cols, shifts=2):
    """An orthonormal basis of range(y) in its first ``cols`` columns (a device count),
    the other columns of y zero and kept zero: ``shifts`` shifted Cholesky QR passes
    (shift above the Gram's rounding, from ||G||_1 >= ||G||_2), then two plain ones."""
    m, k = y.shape[-2:]
    eps = torch.finfo(y.dtype).eps
    eye = torch.eye(k, dtype=y.dtype, device=y.device)
    hole = torch.diag((torch.arange(k, device=y.device) >= cols).to(y.dtype))
    for shifted in (True,) * shifts + (False, False):
        g = y.mT @ y + hole
        if shifted:
            g = g + 2 * (m + 2 * k) * eps * g.abs().sum(-2).max() * eye
        y = _solve_lt(y, _chol(g))
    return y.clone()  # (not a view: its base would stay pending after y is materialized)


def _projector(b, count):
    """P = (I + polar(B - sigma I)) / 2 on the real block of the padded ``b`` (its first
    ``count`` rows and columns, a device count), zero on the pads; sigma is the median
    of the real diagonal entries.  The pads of B - sigma I are set to the real part's
    RMS eigenvalue, without coupling: polar factor 1 there, in no graph's shape."""
    size = b.shape[-1]
    real = torch.arange(size, device=b.device) < count
    both = real.unsqueeze(-1) & real
    d = torch.where(real, torch.diagonal(b), torch.inf)
    sigma = torch.sort(d).values.index_select(0, (count // 2).reshape(1))
    c = (b - sigma * torch.eye(size, dtype=b.dtype, device=b.device)) * both
    rms = torch.linalg.vector_norm(c) * torch.rsqrt(count.to(b.dtype))
    u = polar_qdwh(c + torch.diag(torch.where(real, 0, rms)))
    return (u + u.mT) * (0.25 * both) + torch.diag(real * 0.5)


def _split(b, s):
    """Bases (q1, k), (q2, s - k) of the invariant subspaces of the symmetric block ``b``
    (real in its first s rows and columns, zero padding after) above and below sigma
    (QDWH-eig: Nakatsukasa & Higham 2013): P (_projector) projects onto the first;
    rank(P) = trace(P) is one host read; q1 spans P X for a fixed random X, q2 its
    complement.  Each q has _bucket(k) columns, the first k orthonormal, the others
    zero, and zero padding rows.  None where one side is empty."""
    size, dev = b.shape[-1], b.device
    # device data: graphs depend on the sizes only (a 0-d upload would not: torch-xla 2.9
    # makes 0 and 1 constants and shares one parameter between equal scalars)
    count = torch.tensor([s]).to(dev)
    p = _projector(b, count)
    trace = torch.diagonal(p).sum()
    backend(dev).materialize((p, trace))  # (one graph of their own, then the read)
    trace = float(kernel("linalg._fetch", dev)(trace))
    if not math.isfinite(trace):  # (non-finite input: the leaf eigh raises SciPy's error)
        return None
    k = round(trace)
    if k <= 0 or k >= s:
        return None
    k1, k2 = _bucket(k, size), _bucket(s - k, size)
    x = torch.randn(size, 2 * size, generator=torch.Generator().manual_seed(size),
                    dtype=torch.float64).to(b.dtype).to(dev)
    sides = torch.tensor([k, s - k]).to(dev)
    q1 = _orth(p @ x[:, :k1] * (torch.arange(k1, device=dev) < sides[0]), sides[0])
    q1 = _orth(p @ q1, sides[0], 0)  # (P X1 is as ill-conditioned as a k x k Gaussian)
    real = (torch.arange(size, device=dev) < count).unsqueeze(-1)
    y = x[:, size:size + k2] * real * (torch.arange(k2, device=dev) < sides[1])
    for _ in range(2):
        y = y - q1 @ (q1.mT @ y)
    q2 = _orth(y, sides[1])  # (y is as ill-conditioned as a (s - k) square Gaussian:
    q2 = _orth(q2 - q1 @ (q1.mT @ q2), sides[1], 0)  # its rounding along q1 grows)
    return (q1, k), (q2, s - k)


def _divide(b, s, vectors):
    """Eigenpairs (w, v) of the real block of a padded ``b`` (see _split): split while
    its padded size is above LEAF, then XLA's eigh (refined in float64) with the pads
    above the spectrum; the pads' eigenvalues come back as inf, their vectors zero.
    A split's bases and results are materialized (its leaves' eighs in the results'
    graph), so that no graph carries another block's work."""
    size = b.shape[-1]
    parts = _split(b, s) if size > LEAF else None
    if parts is not None:
        blocks = [(q, k, q.mT @ b @ q) for q, k in parts]
        blocks = [(q, k, (c + c.mT) * 0.5) for q, k, c in blocks]
        backend(b.device).materialize([t for q, _, c in blocks for t in (q, c)])
        out = [(q, *_divide(c, k, vectors)) for q, k, c in blocks]
        w = torch.cat([w for _, w, _ in out], -1)
        v = torch.cat([q @ v for q, _, v in out], -1) if vectors else None
        backend(b.device).materialize((w,) if v is None else (w, v))
    else:
        pad = torch.arange(size, device=b.device) >= torch.tensor([s]).to(b.device)
        # distinct pads above ||B||_inf (the spectral radius), no coupling
        top = 2 * b.abs().sum(-1).max()
        top = torch.where(top > 0, top, 1)
        b = b + torch.diag(torch.where(pad, top * (1 + torch.arange(size, device=b.device)
                                                     / size), 0))
        w, v = _refined_eigh(b) if vectors else (torch.linalg.eigvalsh(b), None)
        w = torch.where(pad, torch.inf, w)  # eigh's order is ascending: pads last
    return w, v


def eigh_split(h, vectors=True):
    """Eigenpairs (w ascending, v) of a real symmetric 2-D ``h``: spectral divide and
    conquer down to blocks of at most LEAF, then XLA's eigh (refined in float64).
    Blocks are padded to a few sizes per n (_bucket), so that another matrix of the
    same n runs the same graphs."""
    n = h.shape[-1]
    if n <= LEAF:
        w, v = _refined_eigh(h) if vectors else (torch.linalg.eigvalsh(h), None)
        return w, v
    w, v = _divide(h, n, vectors)
    w, order = torch.sort(w, -1)
    return w[:n], (v.take_along_dim(order[:n].unsqueeze(-2), -1) if vectors else None)


def svd_qdwh(a, full_matrices=True, compute_uv=True):
    """SciPy's svd of a real tensor (u, s, vh) or s, through the polar factor."""
    m, n = a.shape[-2:]
    if m < n:
        out = svd_qdwh(a.mT, full_matrices, compute_uv)
        return (out[2].mT, out[1], out[0].mT) if compute_uv else out
    up = polar_qdwh(a)
    h = up.mT @ a
    h = (h + h.mT) * 0.5
    split = h.ndim == 2 and n > LEAF
    if not compute_uv:
        w = eigh_split(h, False)[0] if split else torch.linalg.eigvalsh(h)
        return torch.sort(w.abs(), -1, descending=True).values
    w, v = eigh_split(h) if split else _refined_eigh(h)
    s, order = torch.sort(w.abs(), -1, descending=True)
    w = w.take_along_dim(order, -1)
    v = v.take_along_dim(order.unsqueeze(-2), -1)
    if split:  # the split's bases leave V orthonormal to ~10 n eps: two Cholesky QR passes
        for _ in range(2):
            v = _solve_lt(v, _chol(v.mT @ v))
    u = (up @ v) * torch.where(w < 0, -1.0, 1.0).to(a.dtype).unsqueeze(-2)
    # U = U_p V is orthonormal to about eps * cond(A): Cholesky QR twice, in the singular
    # values' order (column j moves only along the columns before it, by about
    # eps s_0 / s_j: backward stable).  Where A is (nearly) rank deficient, U_p is not
    # orthonormal on A's near-null space, the Cholesky factor breaks down, and U is
    # completed from the Householder QR of its columns (one host read decides).
    eps = torch.finfo(a.dtype).eps
    uq = u
    for _ in range(2):
        uq = _solve_lt(uq, _chol(uq.mT @ uq))
    bad = ~torch.isfinite(uq).all(-2) | (((uq * uq).sum(-2) - 1).abs() > max(m, n) * eps)
    if (full_matrices and m > n) or kernel("linalg._fetch", a.device)(bad.any()):
        q, r = kernel("linalg.qr", a.device)(u, mode="full" if full_matrices else "economic")
        d = torch.diagonal(r, dim1=-2, dim2=-1)
        sign = torch.where(d < 0, -1.0, 1.0).to(a.dtype)
        uq = torch.cat([q[..., :n] * sign.unsqueeze(-2), q[..., n:]], -1)
    return uq, s, v.mT


@register("linalg._svd", "xla")
def _svd_xla(a, full_matrices, compute_uv):
    if a.is_complex():
        return _on_host("scipy.linalg.svd", "complex SVD does not lower to XLA",
                        lambda t: _svd(t, full_matrices, compute_uv), a)
    out = svd_qdwh(a, full_matrices, compute_uv)
    return tuple(out) if compute_uv else out


# XLA's symmetric eigensolver (Jacobi) stops at a fixed relative tolerance: float64
# residuals ||A v - v w|| of about 1e-10 ||A|| at n = 4 (conformance), where LAPACK gives
# 1e-15.  Two refinement steps in working precision bring them to LAPACK's level.
_EIGH_REFINE_STEPS = 2


@register("linalg.eigh", "xla")
def eigh(a, b=None, lower=True, eigvals_only=False, type=1, subset_by_index=None,
         subset_by_value=None, driver=None):
    """Real matrices above LEAF: spectral divide and conquer (``eigh_split``), XLA's
    Jacobi eigh only on its blocks (n = 1024 float32: 13.4 s warm and orthogonality 46 n
    eps with XLA's eigh of the whole matrix).  Otherwise the generic eigh.  float64
    (complex128) eigenpairs are then refined by Ogita & Aishima's iteration (clusters
    kept orthonormal)."""
    from trnscipy.linalg import _kernels

    split = a.ndim == 2 and a.shape[-1] > LEAF and not a.is_complex()
    refine = a.dtype in (torch.float64, torch.complex128)
    if not (split or refine):
        return _kernels.eigh(a, b, lower=lower, eigvals_only=eigvals_only, type=type,
                             subset_by_index=subset_by_index,
                             subset_by_value=subset_by_value, driver=driver)
    full = _kernels.hermitian(a, lower)
    back = None
    if b is not None:
        full, back = _kernels._gen_reduce(full, b, lower, type)
        full = (full + full.mH) * 0.5
    if split:
        w, v = eigh_split(full, vectors=refine or not eigvals_only)
    else:
        w, v = _kernels.eigh(full, lower=True)
    if refine:
        for _ in range(_EIGH_REFINE_STEPS):
            w, v = _refine_eigh(full, v)
        w = _refine_eigh(full, v, vectors=False)
    # ascending (a refined pair may swap within a cluster); the columns move by a
    # permutation product: torch-xla 2.9 corrupts memory gathering complex128 columns
    w, order = torch.sort(w, dim=-1)
    if eigvals_only:
        v = None
    else:
        positions = torch.arange(w.shape[-1], device=w.device)
        v = v @ (order.unsqueeze(-2) == positions.unsqueeze(-1)).to(v.dtype)
        if back is not None:
            v = back(v)
    return _kernels.select_eigh(w, v, subset_by_index, subset_by_value)


def _refine_eigh(a, v, vectors=True):
    """One Ogita-Aishima step for A = A^H with approximate eigenvectors ``v``: the
    Rayleigh quotients and, with ``vectors``, the corrected eigenvectors.  Complex
    values are divided only by real tensors: torch-xla 2.9 returns float32 real parts
    for complex128 divided by a complex tensor or a Python number."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    r = eye - v.mH @ v
    s = v.mH @ (a @ v)
    w = s.diagonal(dim1=-2, dim2=-1).real / (1 - r.diagonal(dim1=-2, dim2=-1).real)
    if not vectors:
        return w
    # eigenvalues closer than delta form a cluster: only orthonormalized there
    delta = 2 * (_fro(s - torch.diag_embed(w).to(s.dtype)) + _fro(a) * _fro(r))
    gap = w.unsqueeze(-2) - w.unsqueeze(-1)  # gap[i, j] = w_j - w_i
    close = gap.abs() <= delta[..., None, None]
    e = torch.where(close, r * 0.5, (s + w.unsqueeze(-2).to(s.dtype) * r)
                    / torch.where(close, torch.ones_like(gap), gap))
    return w, v + v @ e


def _fro(x):
    """Frobenius norm over the last two axes (torch-xla's matrix_norm takes no complex)."""
    return torch.sqrt((x.conj() * x).real.sum((-2, -1)))
