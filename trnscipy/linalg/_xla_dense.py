"""Dense factorizations for XLA devices, built only from ops that lower to HLO.

torch-xla 2.9 runs ``linalg.lu*``, ``qr``/``geqrf``, ``eig`` and ``matrix_exp`` on
the host through its silent aten fallback (docs/design.md).  These kernels trace
one lazy graph per call from ops that do lower (argmax, gather, scatter, slices,
matmul, ``triangular_solve``): every shape is static, so a call compiles once per
input shape and a repeat compiles nothing.  Loops over columns are unrolled in
Python; the big work is the GEMM of each block's trailing update.
"""

import math

from trnscipy._dtypes import divide
from trnscipy._kernels import backend, kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import as_stack, lu_factor_warning, xla_triangular_solve
from trnscipy.linalg._kernels import qr as generic_qr

__all__ = ["getrf", "perm_from_piv"]

NB = 32  # block width: columns factored in the panel before a GEMM trailing update
STEPS = 8  # panel columns per graph execution


def _pivot_magnitude(col):
    """LAPACK's pivot measure: |x| for real, |re| + |im| for complex (i?amax)."""
    if col.is_complex():
        return col.real.abs() + col.imag.abs()
    return col.abs()


def _swap_index(r, i, p):
    """Index vector that swaps positions ``i`` (shape (1,)) and ``p`` (...,) of ``r``."""
    p = p.unsqueeze(-1)
    return torch.where(r == i, p, torch.where(r == p, i, r))


def _gather_rows(t, idx):
    """``t[..., idx, :]`` for a batch of row indices ``idx`` (..., rows)."""
    return torch.gather(t, -2, idx.unsqueeze(-1).expand(*idx.shape, t.shape[-1]))


def _sync(*tensors):
    backend(tensors[0].device).materialize(tensors)


def _counter(value, device):
    # shape (1,): an uploaded 0-d 0 or 1 would become a graph constant (docs/design.md)
    return torch.full((1,), value, dtype=torch.int64, device=device)


def getrf(a, nb=NB):
    """LU with partial pivoting: (lu, piv, perm, info) as LAPACK's getrf.

    ``piv`` holds SciPy's 0-based pivots (int64), ``perm`` the row permutation with
    ``a[perm] = L @ U``, ``info`` (int32, per slice) the 1-based index of the first
    exactly zero diagonal of U, or 0.

    Blocked right-looking LU in fixed-shape steps, so that a factorization compiles
    four small graphs per shape whatever its size: the matrix is padded with ``nb``
    zero rows and columns; each panel of ``nb`` columns (full height) is factored by
    one step graph per column (argmax pivot among the rows at and below the step,
    row swap by gather, rank-1 update of the panel); a block graph then applies the
    panel's row order to the whole matrix, computes U12 by one triangular solve and
    updates the trailing matrix by one GEMM (masked, full width), and loads the next
    panel.  Step and block counters are device data, so every ``STEPS`` columns run the
    same executable: ceil(min(m, n) / nb) * (nb / STEPS + 1) + 2 executions.  Steps past
    min(m, n) in the last block meet only zero padding and change nothing.
    """
    *batch, m, n = a.shape
    k = min(m, n)
    dev = a.device
    mp = m + nb
    nblocks = -(-k // nb)
    a = torch.nn.functional.pad(a, (0, nb, 0, nb))
    perm = torch.arange(mp, device=dev).expand(*batch, mp).contiguous()
    piv = torch.zeros(*batch, nblocks * nb, dtype=torch.int64, device=dev)
    step, j0 = _counter(0, dev), _counter(0, dev)
    panel, order = _panel(a, j0, nb)
    _sync(a, perm, piv, step, j0, panel, order)
    for _ in range(nblocks):
        for _ in range(nb // STEPS):
            for _ in range(STEPS):
                panel, order, piv, step = _panel_step(panel, order, piv, step, j0)
            _sync(panel, order, piv, step)
        a, perm, j0, panel, order = _block_end(a, panel, order, perm, j0, nb)
        _sync(a, perm, j0, panel, order)
    lu = a[..., :m, :n].contiguous()
    piv = piv[..., :k].contiguous()
    perm = perm[..., :m].contiguous()
    zero = lu.diagonal(dim1=-2, dim2=-1) == 0
    info = torch.where(zero.any(-1), zero.to(torch.int32).argmax(-1) + 1, 0).to(torch.int32)
    _sync(lu, piv, perm, info)
    return lu, piv, perm, info


def _panel_cols(a, j0, nb):
    # the block after the last one loads a panel that is never used: keep it in bounds
    return (j0 + torch.arange(nb, device=a.device)).clamp(max=a.shape[-1] - 1)


def _panel(a, j0, nb):
    cols = _panel_cols(a, j0, nb)
    panel = torch.index_select(a, -1, cols)
    order = torch.arange(a.shape[-2], device=a.device).expand(panel.shape[:-1]).contiguous()
    return panel, order


def _panel_step(panel, order, piv, step, j0):
    """One column of the panel: pivot, swap, multipliers, rank-1 update (fixed shapes)."""
    mp, nb = panel.shape[-2:]
    rows = torch.arange(mp, device=panel.device)
    jloc = step - j0
    col = torch.index_select(panel, -1, jloc).squeeze(-1)
    mag = torch.where(rows >= step, _pivot_magnitude(col), -1)
    p = mag.argmax(-1)
    piv = piv.scatter(-1, step.expand(*piv.shape[:-1], 1), p.unsqueeze(-1))
    swap = _swap_index(rows, step, p)
    panel = _gather_rows(panel, swap)
    order = torch.gather(order, -1, swap)
    col = torch.gather(col, -1, swap)
    d = torch.gather(col, -1, step.expand(*col.shape[:-1], 1))
    d = torch.where(d == 0, torch.ones_like(d), d)  # LAPACK skips a zero pivot
    below = rows > step
    mult = torch.where(below, divide(col, d), torch.zeros_like(col))
    pivot_row = torch.gather(panel, -2, step.expand(*panel.shape[:-2], 1, nb))
    right = torch.arange(nb, device=panel.device) > jloc
    pivot_row = torch.where(right, pivot_row, torch.zeros_like(pivot_row))
    at_col = (torch.arange(nb, device=panel.device) == jloc) & below.unsqueeze(-1)
    panel = torch.where(at_col, mult.unsqueeze(-1), panel) - mult.unsqueeze(-1) * pivot_row
    return panel, order, piv, step + 1


def _block_end(a, panel, order, perm, j0, nb):
    """Apply the panel's row order, store it, U12 by a triangular solve, GEMM update."""
    mp, np_ = a.shape[-2:]
    dev = a.device
    a = _gather_rows(a, order)
    perm = torch.gather(perm, -1, order)
    blk = j0 + torch.arange(nb, device=dev)
    a = a.scatter(-1, blk.expand(*a.shape[:-1], nb), panel)
    l11 = torch.index_select(panel, -2, blk)
    top = torch.index_select(a, -2, blk)
    u12 = xla_triangular_solve(top, l11, upper=False, unitriangular=True)
    trailing = torch.arange(np_, device=dev) >= j0 + nb
    u12 = torch.where(trailing, u12, torch.zeros_like(u12))
    a = a.scatter(-2, blk.unsqueeze(-1).expand(*a.shape[:-2], nb, np_),
                  torch.where(trailing, u12, top))
    l21 = torch.where((torch.arange(mp, device=dev) >= j0 + nb).unsqueeze(-1), panel,
                      torch.zeros_like(panel))
    a = a - l21 @ u12
    j0 = j0 + nb
    panel, order = _panel(a, j0, nb)
    return a, perm, j0, panel, order


SWAPS = 32  # pivots applied per graph by perm_from_piv


def perm_from_piv(piv, m):
    """Row permutation (``a[perm] = L @ U``) from 0-based LAPACK pivots, on the device
    (``SWAPS`` interchanges per graph; the same executable for every chunk)."""
    dev = piv.device
    k = piv.shape[-1]
    chunks = -(-k // SWAPS)
    piv = torch.nn.functional.pad(piv.to(torch.int64), (0, chunks * SWAPS - k))
    piv = piv + torch.where(torch.arange(chunks * SWAPS, device=dev) >= k,
                            torch.arange(chunks * SWAPS, device=dev), 0)  # pads: no-ops
    perm = torch.arange(m, device=dev).expand(*piv.shape[:-1], m).contiguous()
    i0 = _counter(0, dev)
    for _ in range(chunks):
        perm, i0 = _swaps(perm, piv, i0)
        _sync(perm, i0)
    return perm


def _swaps(perm, piv, i0):
    """``SWAPS`` interchanges, each two gathers and a scatter (a chain of elementwise
    selects instead was fused into itself by XLA: 91 s to compile 32 swaps on XLA CPU,
    15 s now)."""
    m = perm.shape[-1]
    for s in range(SWAPS):
        i = i0 + s
        p = torch.gather(piv, -1, i.expand(*piv.shape[:-1], 1))
        valid = i < m  # past the pivots: swap position 0 with itself
        iv = torch.where(valid, i, 0).expand(*perm.shape[:-1], 1)
        pv = torch.where(valid, p.clamp(max=m - 1), 0)
        vi, vp = torch.gather(perm, -1, iv), torch.gather(perm, -1, pv)
        perm = perm.scatter(-1, torch.cat([iv, pv], -1), torch.cat([vp, vi], -1))
    return perm, i0 + SWAPS


def _unpack(lu, m, n):
    k = min(m, n)
    eye = torch.eye(m, k, dtype=lu.dtype, device=lu.device)
    return lu[..., :, :k].tril(-1) + eye, lu[..., :k, :].triu()


@register("linalg._getrf", "xla")
def _getrf_kernel(a):
    """Kernel-level LU for solvers on the device (no host read): (lu, piv int32, info)."""
    lu, piv, _, info = getrf(a)
    return lu, piv.to(torch.int32), info


@register("linalg.lu_factor", "xla")
def lu_factor(a):
    lu, piv, _, info = getrf(a)
    lu_factor_warning(info, a)
    return lu, piv.to(torch.int32)


@register("linalg._det", "xla")
def det(a):
    """LAPACK's determinant: the product of U's diagonal, signed by the row swaps (an
    exactly singular matrix gives 0 as SciPy's; XLA's slogdet gave 1e-14 there)."""
    packed, piv, _, _ = getrf(a)
    n = a.shape[-1]
    swaps = (piv[..., :n] != torch.arange(n, device=a.device)).sum(-1)
    sign = 1 - 2 * (swaps % 2)
    return packed.diagonal(0, -2, -1).prod(-1) * sign.to(packed.dtype)


@register("linalg.lu", "xla")
def lu(a, permute_l=False, p_indices=False):
    m, n = a.shape[-2:]
    packed, _, perm, _ = getrf(a)
    lo, up = _unpack(packed, m, n)
    inv = torch.empty_like(perm).scatter_(-1, perm, torch.arange(m, device=a.device)
                                          .expand(perm.shape))
    if permute_l:
        return _gather_rows(lo, inv), up
    if p_indices:
        return inv.to(torch.int32), lo, up
    real = a.real.dtype if a.is_complex() else a.dtype
    return (perm.unsqueeze(-2) == torch.arange(m, device=a.device).unsqueeze(-1)).to(real), \
        lo, up


@register("linalg.lu_solve", "xla")
def lu_solve(lu_and_piv, b, trans=0):
    lu, piv = lu_and_piv
    n = lu.shape[-1]
    batch = torch.broadcast_shapes(lu.shape[:-2], piv.shape[:-1], b.shape[:-2])
    lu = lu.expand(*batch, n, n)
    b = b.expand(*batch, *b.shape[-2:])
    perm = perm_from_piv(piv, n).expand(*batch, n)
    trsm = kernel("linalg._trsm", lu.device)
    if trans == 0:
        y = trsm(lu, _gather_rows(b, perm), upper=False, unit=True)
        return trsm(lu, y, upper=True)
    z = trsm(lu, trsm(lu, b, upper=True, trans=trans), upper=False, trans=trans, unit=True)
    idx = perm.unsqueeze(-1).expand(z.shape)
    return torch.empty_like(z).scatter_(-2, idx, z)


# ----------------------------------------------------------------------------------------
# Householder QR in compact-WY blocks, LAPACK's conventions (geqrf: R's diagonal is
# beta = -sign(re alpha) * ||x||, tau = (beta - alpha) / beta, v = x / (alpha - beta)),
# in the same fixed-shape step graphs as the LU.


def _conj(t):
    return t.conj() if t.is_complex() else t


def geqrf(a, nb=NB):
    """(h, tau) as LAPACK's geqrf: R in the upper triangle of h, the Householder vectors
    below it (unit diagonal implied), Q = H_1 ... H_k with H_i = I - tau_i v_i v_i^H."""
    *batch, m, n = a.shape
    k = min(m, n)
    dev = a.device
    nblocks = -(-k // nb)
    a = torch.nn.functional.pad(a, (0, nb, 0, nb))
    tau = torch.zeros(*batch, nblocks * nb, dtype=a.dtype, device=dev)
    step, j0 = _counter(0, dev), _counter(0, dev)
    panel = torch.index_select(a, -1, _panel_cols(a, j0, nb))
    _sync(a, tau, step, j0, panel)
    for _ in range(nblocks):
        for _ in range(nb // STEPS):
            for _ in range(STEPS):
                panel, tau, step = _qr_step(panel, tau, step, j0, m)
            _sync(panel, tau, step)
        a, j0, panel = _qr_block_end(a, panel, tau, j0, nb)
        _sync(a, j0, panel)
    h = a[..., :m, :n].contiguous()
    tau = tau[..., :k].contiguous()
    _sync(h, tau)
    return h, tau


def _qr_step(panel, tau, step, j0, m):
    """One Householder reflector for the panel column at ``step`` (rows below m: padding)."""
    mp, nb = panel.shape[-2:]
    dev = panel.device
    rows = torch.arange(mp, device=dev)
    jloc = step - j0
    x = torch.index_select(panel, -1, jloc).squeeze(-1)
    alpha = torch.gather(x, -1, step.expand(*x.shape[:-1], 1))
    below = (rows > step) & (rows < m)
    tail = torch.where(below, x, torch.zeros_like(x))
    mag2 = tail.real * tail.real + tail.imag * tail.imag if tail.is_complex() else tail * tail
    xnorm = torch.sqrt(mag2.sum(-1, keepdim=True))  # (complex vector_norm does not lower)
    ar = alpha.real if alpha.is_complex() else alpha
    ai = alpha.imag if alpha.is_complex() else torch.zeros_like(ar)
    keep = (xnorm == 0) & (ai == 0)  # H = I
    norm = torch.sqrt(ar * ar + ai * ai + xnorm * xnorm)
    beta = torch.where(ar >= 0, -norm, norm)
    beta = torch.where(keep, ar, beta)
    safe_beta = torch.where(keep, torch.ones_like(beta), beta)
    t = torch.where(keep, torch.zeros_like(alpha), divide(beta.to(alpha.dtype) - alpha, safe_beta))
    denom = alpha - beta.to(alpha.dtype)
    denom = torch.where(keep, torch.ones_like(denom), denom)
    v = torch.where(below, divide(tail, denom), torch.zeros_like(x))
    v = torch.where(rows == step, torch.ones_like(v), v)
    tau = tau.scatter(-1, step.expand(*tau.shape[:-1], 1), t)
    # apply H^H = I - conj(tau) v v^H to the panel's columns right of the step
    right = torch.arange(nb, device=dev) > jloc
    w = (_conj(v).unsqueeze(-1) * panel).sum(-2, keepdim=True)
    w = torch.where(right, w, torch.zeros_like(w))
    panel = panel - _conj(t).unsqueeze(-1) * v.unsqueeze(-1) * w
    at_col = torch.arange(nb, device=dev) == jloc
    newcol = torch.where(rows == step, beta.to(x.dtype), torch.where(below, v, x))
    panel = torch.where(at_col, newcol.unsqueeze(-1), panel)
    return panel, tau, step + 1


def _block_reflector(vcols, tau_blk, blk):
    """(V, T) of a block: V the vectors with unit diagonal (rows blk), zero above; T upper
    triangular with H_1...H_nb = I - V T V^H, from T^-1 = striu(V^H V) + diag(1/tau)."""
    mp, nb = vcols.shape[-2:]
    rows = torch.arange(mp, device=vcols.device).unsqueeze(-1)
    diag = rows == blk
    active = (tau_blk != 0).unsqueeze(-2)
    v = torch.where(rows > blk, vcols, torch.zeros_like(vcols))
    v = torch.where(diag, torch.ones_like(v), v)
    v = torch.where(active, v, torch.zeros_like(v))
    g = (_conj(v).mT @ v).triu(1)
    safe = torch.where(tau_blk != 0, tau_blk, torch.ones_like(tau_blk))
    tinv = g + torch.diag_embed(divide(1, safe))
    eye = torch.eye(nb, dtype=v.dtype, device=v.device).expand(tinv.shape)
    t = xla_triangular_solve(eye, tinv, upper=True)
    return v, t


def _qr_block_end(a, panel, tau, j0, nb):
    mp, np_ = a.shape[-2:]
    dev = a.device
    blk = j0 + torch.arange(nb, device=dev)
    a = a.scatter(-1, blk.expand(*a.shape[:-1], nb), panel)
    v, t = _block_reflector(panel, torch.gather(tau, -1, blk.expand(*tau.shape[:-1], nb)), blk)
    trailing = torch.arange(np_, device=dev) >= j0 + nb
    w = _conj(t).mT @ (_conj(v).mT @ a)
    a = a - v @ torch.where(trailing, w, torch.zeros_like(w))
    j0 = j0 + nb
    panel = torch.index_select(a, -1, _panel_cols(a, j0, nb))
    return a, j0, panel


def orgqr(h, tau, cols, nb=NB):
    """Q's first ``cols`` columns (m x cols) from geqrf's (h, tau): blocks applied to the
    identity from the last to the first, one graph per block."""
    *batch, m, n = h.shape
    k = tau.shape[-1]
    dev = h.device
    nblocks = -(-k // nb)
    hp = torch.nn.functional.pad(h, (0, nb, 0, nb))
    taup = torch.nn.functional.pad(tau, (0, nblocks * nb - k))
    q = torch.eye(m + nb, cols, dtype=h.dtype, device=dev).expand(*batch, m + nb, cols)
    j0 = _counter((nblocks - 1) * nb, dev)
    _sync(hp, taup, q, j0)
    for _ in range(nblocks):
        q, j0 = _orgqr_block(hp, taup, q, j0, nb)
        _sync(q, j0)
    q = q[..., :m, :].contiguous()
    _sync(q)
    return q


def _orgqr_block(hp, taup, q, j0, nb):
    blk = j0 + torch.arange(nb, device=hp.device)
    vcols = torch.index_select(hp, -1, blk)
    v, t = _block_reflector(vcols, torch.gather(taup, -1, blk.expand(*taup.shape[:-1], nb)),
                            blk)
    q = q - v @ (t @ (_conj(v).mT @ q))
    return q, j0 - nb


@register("linalg.qr", "xla")
def qr(a, mode="full", pivoting=False):
    if pivoting and not a.is_complex() and a.ndim == 2:
        return qr_pivoted(a, mode)
    if pivoting:
        return generic_qr(a, mode=mode, pivoting=True)  # announced host work
    # (one matrix as a pair on PJRT CPU: its blocked reflectors round as in a stack)
    return as_stack(lambda x: _qr_blocked(x, mode), a)


def _qr_blocked(a, mode):
    """qr without pivoting: LAPACK's geqrf and orgqr in blocks on the device."""
    m, n = a.shape[-2:]
    k = min(m, n)
    h, tau = geqrf(a)
    r = h.triu()
    if mode == "raw":
        return (h, tau), (r[..., :k, :] if m > n else r)
    if mode == "r":
        return (r,)
    if mode == "economic":
        return orgqr(h, tau, k), r[..., :k, :]
    return orgqr(h, tau, m), r


# ----------------------------------------------------------------------------------------
# expm: scaling and squaring with Pade approximants.  float64/complex128: SciPy's degree
# and scaling rule (Al-Mohy & Higham 2009, as SciPy's pick_pade_structure: the norms of
# A^4..A^10 and of |A|^p 1 bound the backward error, so a badly scaled matrix is not
# over-scaled), and for a triangular matrix the diagonal and first off-diagonal
# recomputed exactly after each squaring (their Code Fragment 2.1, as SciPy).  float32:
# Higham 2005's degrees 3-7 by the 1-norm.  One host read picks the degree and the
# scaling; the graphs then depend on them only.

_PADE = {
    3: (120.0, 60.0, 12.0, 1.0),
    5: (30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0),
    7: (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0),
    9: (17643225600.0, 8821612800.0, 2075673600.0, 302702400.0, 30270240.0, 2162160.0,
        110880.0, 3960.0, 90.0, 1.0),
    13: (64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
         1187353796428800.0, 129060195264000.0, 10559470521600.0, 670442572800.0,
         33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0),
}
# largest 1-norm for which degree m is accurate to float32 roundoff (Higham 2005)
_THETA_SINGLE = {3: 4.258730016922831e-1, 5: 1.880152677804762, 7: 3.925724783138660}
# SciPy's thresholds (theta_m) and the ell coefficients (double precision) of
# pick_pade_structure, for m = 3, 5, 7, 9, 13
_THETA = (1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1,
          2.097847961257068, 4.25)
_COEFF = (1.1191048088221578e-11, 1.1167770708198077e-06, 4.9826124310493469e-01,
          6.5662862500000000e+05, 1.2573361865339437e+19)
_SPINS = (1, 7, 11, 15, 19, 27)  # the powers p of |A|^p 1 SciPy's rule reads


def _abs(x):
    # hypot: XLA's complex abs stays complex-typed
    return torch.hypot(x.real, x.imag) if x.is_complex() else x.abs()


def _norm1(x):
    """The 1-norm of a matrix, or of each matrix of a stack."""
    return _abs(x).sum(-2).amax(-1)


def _pow2_above(t):
    """A power of two near t > 0 (float32: the double-float helper, lowering everywhere)."""
    if t.dtype == torch.float32:
        from trnscipy._kernels import _df

        return _df._pow2_ceil(t)
    return torch.pow(2.0, torch.ceil(torch.log2(t)))


def pade_numbers(hi):
    """The numbers SciPy's degree rule reads for ``hi`` (a matrix or a stack), as one
    (11, *batch) real tensor: [||A||_inf (SciPy's normA: max of |A| 1), log2 max(|A|^p 1)
    - p log2 ||A||_inf for p in _SPINS[1:], log2 c, ||B^k||_1 for k = 4, 6, 8, 10 (B = A / c,
    c a power of two near ||A||_1: no overflow of the powers)].  Each spin is rescaled by
    its maximum (no underflow)."""
    absA = _abs(hi)
    norm_inf = absA.sum(-1).amax(-1)
    safe = torch.where(norm_inf > 0, norm_inf, torch.ones_like(norm_inf))
    v = torch.ones_like(absA[..., :, :1])
    logs, total = [], torch.zeros_like(norm_inf)
    for p in range(1, _SPINS[-1] + 1):
        v = (absA @ v) / safe[..., None, None]
        top = v.amax(-1).amax(-1)
        total = total + torch.log2(top)
        v = v / torch.where(top > 0, top, torch.ones_like(top))[..., None, None]
        if p in _SPINS[1:]:
            logs.append(total)
    n1 = _norm1(hi)
    c = _pow2_above(torch.where(n1 > 0, n1, torch.ones_like(n1)))
    b = hi / c[..., None, None]
    b2 = b @ b
    b4 = b2 @ b2
    b6 = b4 @ b2
    norms = [_norm1(x) for x in (b4, b6, b4 @ b4, b6 @ b4)]
    return torch.stack([norm_inf, *logs, torch.log2(c), *norms])


def pick_pade(numbers):
    """(m, s) by SciPy's rule from ``pade_numbers`` (host floats, float64)."""
    norm_inf, l7, l11, l15, l19, l27, log_c, n4, n6, n8, n10 = (float(x) for x in numbers)
    if norm_inf == 0:
        return 3, 0
    c = 2.0 ** log_c
    lg = math.log2(norm_inf)

    def ell(log_t, i, p, shift=0.0):
        # ceil(log2(||  |A|^p 1 ||_inf / normA / coeff) / (p - 1)), at least 0
        value = log_t + (p - 1) * lg + shift - math.log2(_COEFF[i])
        return max(0, math.ceil(value / (p - 1))) if math.isfinite(value) else 0

    d4, d6 = c * n4 ** 0.25, c * n6 ** (1 / 6)
    d8, d10 = c * n8 ** 0.125, c * n10 ** 0.1
    eta1 = max(d4, d6)
    if eta1 < _THETA[0] and ell(l7, 0, 7) == 0:
        return 3, 0
    if eta1 < _THETA[1] and ell(l11, 1, 11) == 0:
        return 5, 0
    eta2 = max(d6, d8)
    if eta2 < _THETA[2] and ell(l15, 2, 15) == 0:
        return 7, 0
    if eta2 < _THETA[3] and ell(l19, 3, 19) == 0:
        return 9, 0
    eta4 = min(eta2, max(d8, d10))
    s = max(0, math.ceil(math.log2(eta4 / _THETA[4]))) if eta4 > 0 else 0
    # |2^-s A|^27 1 / ||2^-s A||: 2^(-26 s) of the unscaled ratio
    return 13, s + ell(l27, 4, 27, -26.0 * s)


def _pade_uv(a, m):
    b = _PADE[m]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape)
    a2 = a @ a
    if m == 13:
        a4 = a2 @ a2
        a6 = a4 @ a2
        u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2)
                 + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
        v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 \
            + b[2] * a2 + b[0] * eye
        return u, v
    powers = [eye, a2]
    while len(powers) < (m + 1) // 2:
        powers.append(powers[-1] @ a2)
    u = a @ sum(b[2 * j + 1] * p for j, p in enumerate(powers))
    v = sum(b[2 * j] * p for j, p in enumerate(powers))
    return u, v


def _degree_and_scaling(norm, theta):
    """The Pade degree m and the squarings s that a matrix of 1-norm ``norm`` needs."""
    degrees = sorted(theta)
    m = next((d for d in degrees[:-1] if norm <= theta[d]), degrees[-1])
    s = max(0, math.ceil(math.log2(norm / theta[m]))) if norm > theta[m] else 0
    return m, s


def _picks(a):
    """Per matrix of ``a``: (m, s, upper, lower), or None for a non-finite matrix; one
    host read."""
    mats = a.reshape(-1, *a.shape[-2:])
    tri = torch.stack([(mats.tril(-1) == 0).flatten(1).all(1),
                       (mats.triu(1) == 0).flatten(1).all(1)], 1).to(a.real.dtype)
    if a.real.dtype == torch.float32:
        nums = _abs(mats).sum(-2).amax(-1, keepdim=True)
    else:
        nums = pade_numbers(mats).T  # (batch, 11): one graph for any stack
    rows = kernel("linalg._fetch", a.device)(torch.cat([tri, nums], 1))
    out = []
    for row in rows:
        if not all(math.isfinite(x) for x in row[2:3]):
            out.append(None)
        elif a.real.dtype == torch.float32:
            out.append((*_degree_and_scaling(row[2], _THETA_SINGLE), *map(bool, row[:2])))
        else:
            out.append((*pick_pade(row[2:]), *map(bool, row[:2])))
    return out


@register("linalg.expm", "xla")
def expm(a):
    """expm by Pade degree 3-13 (float64) or 3-7 (float32) after scaling by 2^-s.

    In a batch each matrix gets the degree and scaling its own norms pick, so that the
    batch computes what its single calls compute (SciPy's test_batch compares them): one
    graph evaluates the degrees present and selects per matrix; the squarings run to the
    largest s, a matrix squared only while its own s lasts."""
    picks = _picks(a)
    if all(p is None for p in picks):
        return a + math.nan  # SciPy returns NaNs for a non-finite input
    dev, batch = a.device, a.shape[:-2]

    def per_matrix(values, dtype):
        return torch.tensor(values, dtype=dtype, device=dev).reshape(*batch, 1, 1)

    bad = [p is None for p in picks]
    picks = [p or (3, 0, False, False) for p in picks]  # (non-finite: NaN at the end)
    if any(bad):
        a = torch.where(per_matrix(bad, torch.bool), torch.zeros_like(a), a)
    squarings = [s for _, s, _, _ in picks]
    tri = [(up or lo) and s > 0 for _, s, up, lo in picks]
    if len(set(squarings)) > 1:
        a_s = a * per_matrix([2.0 ** -s for s in squarings], a.real.dtype)  # exact
    else:
        a_s = a * 2.0 ** -squarings[0] if squarings[0] else a
    u = v = None
    degrees = sorted({m for m, _, _, _ in picks})
    for m in degrees:
        um, vm = _pade_uv(a_s, m)
        if u is not None:
            degree = per_matrix([m for m, _, _, _ in picks], torch.int64)
            um, vm = torch.where(degree == m, um, u), torch.where(degree == m, vm, v)
        u, v = um, vm
    lu, piv, _, _ = getrf(v - u)
    x = lu_solve((lu, piv), v + u)
    fix = None
    if any(tri):
        fix = _TriangularFix(a, picks, tri, per_matrix)
        x = fix(x, 0)
    same = len(set(squarings)) == 1
    count = None if same else per_matrix(squarings, torch.int64)
    for k in range(max(squarings)):
        x = x @ x if same else torch.where(count > k, x @ x, x)
        if fix is not None:
            x = fix(x, k + 1)
        _sync(x)
    if any(bad):
        x = torch.where(per_matrix(bad, torch.bool), torch.full_like(x, math.nan), x)
    return x


class _TriangularFix:
    """Code Fragment 2.1 of Al-Mohy & Higham 2009 for the triangular matrices of a batch:
    after k of its s squarings a matrix's diagonal is exp(2^(k-s) diag A), and its first
    super (or sub) diagonal the exact divided difference of exp times that of A."""

    def __init__(self, a, picks, tri, per_matrix):
        n = a.shape[-1]
        self.a, self.per_matrix = a, per_matrix
        self.s = [s for _, s, _, _ in picks]
        self.upper = [up for _, _, up, _ in picks]
        self.tri = tri
        self.eye = torch.eye(n, dtype=torch.bool, device=a.device)
        self.sup = torch.ones(n - 1, device=a.device).diag_embed(1).bool()

    def __call__(self, x, k):
        """x after k squarings: the fixed entries of the matrices with k <= s."""
        active = [t and k <= s for t, s in zip(self.tri, self.s, strict=True)]
        if not any(active):
            return x
        t = self.per_matrix([2.0 ** (k - s) if on else 0.0
                             for on, s in zip(active, self.s, strict=True)], self.a.real.dtype)
        d = self.a.diagonal(dim1=-2, dim2=-1) * t[..., 0]
        y = torch.where(self.eye, torch.diag_embed(torch.exp(d)), x)
        l1, l2 = d[..., :-1], d[..., 1:]
        half = (l2 - l1) / 2
        small = _abs(half) < 1
        safe = torch.where(small & (half != 0), half, torch.ones_like(half))
        sinhc = torch.where(half == 0, torch.ones_like(half), torch.sinh(safe) / safe)
        wide = torch.where(small, torch.ones_like(half), l2 - l1)
        dd = torch.where(small, torch.exp((l1 + l2) / 2) * sinhc,
                         (torch.exp(l2) - torch.exp(l1)) / wide)
        upper = self.per_matrix(self.upper, torch.bool)
        off_up = self.a.diagonal(1, -2, -1) * t[..., 0] * dd
        off_lo = self.a.diagonal(-1, -2, -1) * t[..., 0] * dd
        y = torch.where(self.sup & upper, torch.diag_embed(off_up, 1), y)
        y = torch.where(self.sup.mT & ~upper, torch.diag_embed(off_lo, -1), y)
        return torch.where(self.per_matrix(active, torch.bool), y, x)


# ----------------------------------------------------------------------------------------
# Column-pivoted Householder QR (LAPACK's geqp3 pivot rule: the remaining column of
# largest norm, the first on ties; norms recomputed each step, not downdated), one
# fixed-shape step graph per column, the step a device counter.


def geqp3(a):
    """(h, tau, perm) for a real 2-D tensor: A[:, perm] = Q R, Q from (h, tau) as geqrf."""
    m, n = a.shape
    k = min(m, n)
    dev = a.device
    tau = torch.zeros(k, dtype=a.dtype, device=dev)
    perm = torch.arange(n, device=dev)
    step = _counter(0, dev)
    _sync(a, tau, perm, step)
    for i in range(k):
        a, tau, perm, step = _qp3_step(a, tau, perm, step)
        if (i + 1) % STEPS == 0 or i + 1 == k:
            _sync(a, tau, perm, step)
    return a, tau, perm


def _qp3_step(a, tau, perm, step):
    m, n = a.shape
    rows = torch.arange(m, device=a.device)
    cols = torch.arange(n, device=a.device)
    norms = torch.where(rows.unsqueeze(1) >= step, a * a, torch.zeros_like(a)).sum(0)
    p = torch.where(cols >= step, norms, torch.full_like(norms, -1.0)).argmax()
    order = torch.where(cols == step, p, torch.where(cols == p, step, cols))
    a = a.index_select(1, order)
    perm = perm.index_select(0, order)
    x = a.index_select(1, step).squeeze(1)
    alpha = x.gather(0, step)
    below = rows > step
    tail = torch.where(below, x, torch.zeros_like(x))
    xnorm = torch.sqrt((tail * tail).sum())
    keep = xnorm == 0  # H = I
    norm = torch.sqrt(alpha * alpha + xnorm * xnorm)
    beta = torch.where(keep, alpha, torch.where(alpha >= 0, -norm, norm))
    safe = torch.where(keep, torch.ones_like(beta), beta)
    t = torch.where(keep, torch.zeros_like(alpha), (beta - alpha) / safe)
    denom = torch.where(keep, torch.ones_like(alpha), alpha - beta)
    v = torch.where(below, tail / denom, torch.zeros_like(x))
    v = torch.where(rows == step, torch.ones_like(v), v)
    tau = tau.scatter(0, step.clamp(max=tau.shape[0] - 1), t) if tau.shape[0] else tau
    w = (v.unsqueeze(1) * a).sum(0)
    w = torch.where(cols > step, w, torch.zeros_like(w))
    a = a - t * v.unsqueeze(1) * w.unsqueeze(0)
    newcol = torch.where(rows == step, beta, torch.where(below, v, x))
    a = torch.where(cols.unsqueeze(0) == step, newcol.unsqueeze(1), a)
    return a, tau, perm, step + 1


@register("linalg._qr_pivoted", "generic")
def qr_pivoted(a, mode):
    """SciPy's qr(..., pivoting=True) outputs for a real 2-D tensor."""
    m, n = a.shape
    k = min(m, n)
    h, tau, perm = geqp3(a)
    r = h.triu()
    p = perm.to(torch.int32)
    if mode == "raw":
        return (h, tau), (r[:k] if m > n else r), p
    if mode == "r":
        return r, p
    if mode == "economic":
        return orgqr(h, tau, k), r[:k], p
    return orgqr(h, tau, m), r, p
