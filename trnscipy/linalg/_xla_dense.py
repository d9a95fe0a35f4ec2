"""Dense factorizations for XLA devices, built only from ops that lower to HLO.

torch-xla 2.9 runs ``linalg.lu*``, ``qr``/``geqrf``, ``eig`` and ``matrix_exp`` on
the host through its silent aten fallback (docs/design.md).  These kernels trace
one lazy graph per call from ops that do lower (argmax, gather, scatter, slices,
matmul, ``triangular_solve``): every shape is static, so a call compiles once per
input shape and a repeat compiles nothing.  Loops over columns are unrolled in
Python; the big work is the GEMM of each block's trailing update.
"""

from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import lu_factor_warning

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
    kernel("materialize", tensors[0].device)(tensors)


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


def _panel(a, j0, nb):
    cols = j0 + torch.arange(nb, device=a.device)
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
    mult = torch.where(below, col / d, torch.zeros_like(col))
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
    u12 = torch.triangular_solve(top, l11, upper=False, unitriangular=True).solution
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
    rows = torch.arange(perm.shape[-1], device=perm.device)
    for s in range(SWAPS):
        i = i0 + s
        p = torch.gather(piv, -1, i.expand(*piv.shape[:-1], 1))
        valid = i < perm.shape[-1]
        iv = torch.where(valid, i, 0).expand(*perm.shape[:-1], 1)
        vi, vp = torch.gather(perm, -1, iv), torch.gather(perm, -1, p.clamp(max=perm.shape[-1] - 1))
        perm = torch.where(valid & (rows == i), vp, torch.where(valid & (rows == p), vi, perm))
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
