"""float64 schur on a Neuron device (see ``_refine``): float32 arithmetic only.

The float32 device real Schur form of A's float32 rounding (``_decomp_schur.real_schur``,
the Francis QR) refined by Newton steps on A = Z T Z^T in double-float (Bujanovic,
Kressner and Schroeder, "Iterative refinement of Schur decompositions", 2022), keeping
the float32 form's pattern of 1x1 and 2x2 diagonal blocks.  One step:

- Z <- Z (I + R/2), R = I - Z^T Z (Newton-Schulz: Z orthogonal to double-float);
- T~ = Z^T A Z in double-float (Ozaki GEMMs), its part below the block pattern the error;
- the correction Z <- Z (I + W + W^2/2), W = L - L^T, L block strictly lower with
  low(T L - L T) = -low(T~) (T: T~'s block upper part), solved in float32 by block
  anti-diagonals (``_sylvester``): each front of tiles from the fronts farther out, every
  tile's 2x2 Sylvester equation in closed form (Cayley-Hamilton), all tiles at once.

A fixed number of steps (one graph, compiled once, executed per step), then one host read
of the residual below the pattern and of Z's orthogonality; the 2x2 blocks are then
standardized as SciPy's (equal diagonal, off-diagonal entries of opposite signs) by a
double-float rotation each.  Close eigenvalues make the Sylvester equation
ill-conditioned and the steps stall: SciPy on the exact values, announced, rather than a
wrong form.  Complex output and ``sort`` are not on the device (announced).
"""

import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._decomp_schur import real_schur
from trnscipy.linalg._validate import LinAlgError

_STEPS = 3  # Newton steps before the first host read (float32 errors, their squares, ...)
_MORE = 3  # further steps, a read each, where those did not finish
_DONE = 2.0 ** -44  # below-pattern residual (relative to max |T|) accepted as converged
_ORTHO = 2.0 ** -22  # I - Z^T Z before the last Newton-Schulz step (leaves its square)
_CLUSTER = "the refinement of the float32 Schur form did not converge (close eigenvalues)"


def _pattern(t0):
    """The float32 form's block structure: (first row of a 2x2 block, second row, each
    row's block partner (itself for a 1x1 block), block index of each row)."""
    n = t0.shape[-1]
    sub = t0.diagonal(-1) != 0
    no = torch.zeros(1, dtype=torch.bool, device=t0.device)
    first, second = torch.cat([sub, no]), torch.cat([no, sub])
    r = torch.arange(n, device=t0.device)
    partner = torch.where(first, r + 1, torch.where(second, r - 1, r))
    block = (~second).to(torch.int64).cumsum(0) - 1
    return first, second, partner, block


def _sylvester(t, rhs, pattern, loop):
    """Block strictly lower L with low(T L - L T) = rhs (float32; ``t`` quasi upper
    triangular, its 2x2 blocks taken with their mean diagonal, ``rhs`` zero outside the
    block strictly lower part).  Tile (I, J) needs the tiles below it in column J and left
    of it in row I: farther from the diagonal, so fronts of equal block distance are
    solved from the corner in, each from D_I X - X D_J = rhs - (N L - L N) (N: the block
    strictly upper part).  With q the characteristic polynomial of D_J,
    q(D_I) X = (D_I - a_J) R + R (D_J - a_J) (Cayley-Hamilton), and q(D_I) is
    sigma I + 2 delta E_I (E: a block's off-diagonal part): closed form, elementwise."""
    first, second, partner, block = pattern
    n = t.shape[-1]
    scale = _df._pow2_ceil(t.abs().max().clamp(min=torch.finfo(t.dtype).tiny))
    t, rhs = t / scale, rhs / scale  # (exact: sigma and det below neither overflow)
    d = t.diagonal()
    a = 0.5 * (d + d[partner])
    inblock = first | second
    e = torch.where(inblock, t.gather(1, partner[:, None])[:, 0], 0)  # E[i, partner(i)]
    f = e[partner]  # E[partner(j), j]
    bc = e * f  # b c of the row's block (0: 1x1)
    delta = a[:, None] - a[None, :]
    sigma = delta * delta + bc[:, None] - bc[None, :]
    det = sigma * sigma - 4 * delta * delta * bc[:, None]
    below = block[:, None] > block[None, :]
    solvable = below & (det != 0)
    det = torch.where(solvable, det, 1)
    upper = torch.where(block[:, None] < block[None, :], t, 0)
    dist = block[:, None] - block[None, :]

    def tile(r):
        y = delta * r + e[:, None] * r[partner] + r[:, partner] * f[None, :]
        x = (sigma * y - 2 * delta * e[:, None] * y[partner]) / det
        return torch.where(solvable, x, 0)

    def front(carry, k):
        (lo,) = carry
        rest = rhs - (upper @ lo - lo @ upper)
        return (torch.where(dist == n - 1 - k, tile(rest), lo),)

    (lo,) = loop(front, (torch.zeros_like(t),), 0, max(n - 1, 0))
    return lo


def _orthogonalize(Z, eye):
    """Z (I + R/2), R = I - Z^T Z (its error: R's square and float32 rounding of R), and
    max |R|."""
    R = _df.sub((eye, torch.zeros_like(eye)), _df.gemm(_r._t(Z), Z))
    half = R[0] * 0.5
    return _df.add(Z, _df.gemm(Z, (half, torch.zeros_like(half)), bits_b=24)), \
        R[0].abs().max()


def _newton_step(A, Z, pattern, eye, loop):
    """One refinement step of Z (double-float pair)."""
    Z, _ = _orthogonalize(Z, eye)
    T = _df.gemm(_r._t(Z), _df.gemm(A, Z))
    below = pattern[3][:, None] > pattern[3][None, :]
    L = _sylvester(torch.where(below, 0, T[0]), torch.where(below, -T[0], 0), pattern,
                   loop)
    W = L - L.mT
    M = W + 0.5 * (W @ W)  # I + M: orthogonal to third order in W
    return _df.add(Z, _df.gemm(Z, (M, torch.zeros_like(M)), bits_b=24))


def _pick(p, index, dim):
    return tuple(x.index_select(dim, index) for x in p)


def _standardize(T, Z, pattern):
    """Every 2x2 block rotated to equal diagonal entries (double-float): the rotation
    angle theta with tan 2 theta = (d - a) / (b + c), applied to T's rows and columns
    and Z's columns; (T, Z, every 2x2 block has b c < 0)."""
    first, second, partner, _ = pattern
    n = T[0].shape[-1]
    r = torch.arange(n, device=T[0].device)
    nxt = (r + 1).clamp(max=n - 1)

    def entry(i, j):
        return tuple(x.reshape(-1).gather(0, i * n + j) for x in T)

    a, b, c, d = entry(r, r), entry(r, nxt), entry(nxt, r), entry(nxt, nxt)
    delta, s = _df.sub(a, d), _df.add(b, c)
    root = _df.sqrt(_df.add(_df.mul(s, s), _df.mul(delta, delta)))
    sign = torch.where(s[0] < 0, -1.0, 1.0)
    den = _df.add(s, (root[0] * sign, root[1] * sign))
    zero = den[0] == 0
    one = torch.ones_like(den[0])
    tt = _df.div((-delta[0], -delta[1]), (torch.where(zero, one, den[0]),
                                           torch.where(zero, 0, den[1])))
    tt = tuple(torch.where(first & ~zero, x, 0) for x in tt)  # tan theta at first rows
    cs = _df.div((one, torch.zeros_like(one)), _df.sqrt(_df.add(
        (one, torch.zeros_like(one)), _df.mul(tt, tt))))
    sn = _df.mul(tt, cs)
    # per column j of a block: Z G[:, j] = cs z_j + (sn at its first, -sn at its second)
    # z_partner(j); the same coefficients act on the rows of G^T T
    gd = tuple(torch.where(second, x[partner], x) for x in cs)
    go = tuple(torch.where(second, -x[partner], x) for x in sn)

    def cols(X):
        return _df.add(_df.mul(X, (gd[0][None, :], gd[1][None, :])),
                       _df.mul(_pick(X, partner, 1), (go[0][None, :], go[1][None, :])))

    def rows(X):
        return _df.add(_df.mul(X, (gd[0][:, None], gd[1][:, None])),
                       _df.mul(_pick(X, partner, 0), (go[0][:, None], go[1][:, None])))

    T, Z = rows(cols(T)), cols(Z)
    # the blocks' diagonal entries set to their mean; b c < 0: a complex pair
    diag = tuple(x.diagonal() for x in T)
    mean = tuple(x * 0.5 for x in _df.add(diag, tuple(x[partner] for x in diag)))
    eye = torch.eye(n, dtype=torch.bool, device=T[0].device)
    T = tuple(torch.where(eye & (first | second)[:, None], m[:, None], x)
              for x, m in zip(T, mean, strict=True))
    up = T[0].diagonal(1)
    low = T[0].diagonal(-1)
    complex_ = ((up * low < 0) | ~first[:-1]).all()
    return T, Z, complex_


def _finish(A, Z, pattern, eye, scale):
    """The last graph: (T, Z as float64 tensors, [residual, orthogonality, complex])."""
    Z, ortho = _orthogonalize(Z, eye)
    T = _df.gemm(_r._t(Z), _df.gemm(A, Z))
    block = pattern[3]
    below = block[:, None] > block[None, :]
    size = T[0].abs().max()
    resid = torch.where(below, T[0], 0).abs().max() / torch.where(size > 0, size, 1)
    T, Z, complex_ = _standardize(T, Z, pattern)
    T = tuple(torch.where(below, 0, x) * scale for x in T)
    flags = torch.stack([resid, ortho, complex_.to(resid.dtype)])
    return _transfer.df_tensor(*T), _transfer.df_tensor(*Z), flags


@register("linalg.schur", "neuron")
def schur(a, output="real", sort=None):
    if not _r._df64(a) and not a.dtype == torch.complex128:
        return kind_kernel("linalg.schur", "xla")(a, output=output, sort=sort)
    host = lambda x: _sl.schur(x, output=output, sort=sort,  # noqa: E731
                               check_finite=False)
    if a.is_complex() or sort is not None:
        return _r._on_host("scipy.linalg.schur", "the complex Schur form and sorting have "
                           "no double-float method", host, a)
    A = _r._parts(a)
    n = A[0].shape[-1]
    # A scaled by a power of two near its largest entry (exact): float32 room for T's
    scale = _df._pow2_ceil(A[0].abs().max().clamp(min=torch.finfo(torch.float32).tiny))
    A = (A[0] / scale, A[1] / scale)
    try:
        t0, z0 = real_schur(A[0])
    except LinAlgError:
        return _r._on_host("scipy.linalg.schur", "the float32 Francis QR did not converge",
                           host, a)
    dev = backend(a.device)
    pattern = _pattern(t0)
    eye = torch.eye(n, dtype=torch.float32, device=a.device)
    Z = (z0, torch.zeros_like(z0))
    dev.materialize([*A, *Z, *pattern, eye, scale])
    for k in range(_STEPS + _MORE):
        Z = _newton_step(A, Z, pattern, eye, dev.device_loop)
        dev.materialize(list(Z))  # one graph per step, the same each time
        if k + 1 < _STEPS:
            continue
        T, Zd, flags = _finish(A, Z, pattern, eye, scale)
        resid, ortho, complex_ = (float(x) for x in _r._fetch(flags))
        if resid <= _DONE and ortho <= _ORTHO and complex_:
            return T, Zd
        if not complex_ or resid != resid or k + 1 > _STEPS and resid > 0.5 * prev:
            break  # (real eigenvalues in a 2x2 block, NaN, or stalled)
        prev = resid
    return _r._on_host("scipy.linalg.schur", _CLUSTER, host, a)
