"""float64 schur on a Neuron device (see ``_refine``): float32 arithmetic only.

The float32 device real Schur form of A's float32 rounding (``_decomp_schur.real_schur``,
the Francis QR) refined by Newton steps on A = Z T Z^T in double-float (Bujanovic,
Kressner and Schroeder, "Iterative refinement of Schur decompositions", 2022), keeping
the float32 form's pattern of 1x1 and 2x2 diagonal blocks.  One step (``_newton_step``):

- Z <- Z (I + R/2), R = I - Z^T Z (Newton-Schulz: Z orthogonal to double-float);
- T = Z^T A Z in double-float (Ozaki GEMMs); its part below the block pattern and its
  2x2 blocks' diagonal differences are the residual;
- the correction Z <- Z (I + W + W^2/2), W = L - L^T + Theta: L block strictly lower with
  low(T L - L T) = -low(T), solved in float32 by block anti-diagonals (``_sylvester``:
  each front of tiles from the fronts farther out, every tile's 2x2 Sylvester equation
  in closed form by Cayley-Hamilton, all tiles at once); Theta rotates each 2x2 block
  to equal diagonal entries (SciPy's standardized blocks: equal diagonal, off-diagonal
  entries of opposite signs), to first order with L's change of the diagonal (not a block
  within 2**-20 of a scaled rotation, a normal matrix's: its angle is rounding noise).

Each step is one graph, traced once and replayed; its flags are read after the third
step and after each further one.  Close eigenvalues make the Sylvester equation
ill-conditioned and the convergence linear, then nothing: a residual that stops halving
above its rounding floor (or a 2x2 block whose eigenvalues are real, or NaN) runs SciPy
on the exact values, announced, rather than returning a wrong form.  Complex output: that
form's 2x2 blocks rotated by ``rsf2csf`` in double-float.  ``sort`` and complex input are
not on the device (announced).
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._dtypes import abs_max
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _francis
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._decomp_schur import cdf2rdf_pairs, real_schur
from trnscipy.linalg._validate import LinAlgError

_STEPS = 3  # Newton steps before the first host read (its flags: after two corrections)
_MORE = 12  # further steps, a read each, while the residual halves (close eigenvalues:
# linear convergence at a rate near cond * 2**-24)
_DONE = 2.0 ** -47  # below-pattern residual (relative to max |T|) accepted as converged
_FLOOR = 2.0 ** -42  # a residual that stopped halving is accepted below this (rounding:
# 2.4e-15 measured at n = 128)
_ORTHO = 2.0 ** -30  # I - Z^T Z before the last Newton-Schulz step (leaves its square and
# 2**-24 of it)
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
        abs_max(R[0])


def _blocks(T, pattern):
    """Per row i starting a 2x2 block [[a, b], [c, d]] of the pair T: a - d and b + c
    (float32 from the pairs: the high parts' differences are exact for close values), and
    b c (float32)."""
    first = pattern[0]
    n = T[0].shape[-1]
    r = torch.arange(n, device=T[0].device)
    nxt = (r + 1).clamp(max=n - 1)

    def entry(x, i, j):
        return x.reshape(-1).gather(0, i * n + j)

    a, b, c, d = ((entry(T[0], i, j), entry(T[1], i, j)) for i, j in
                  ((r, r), (r, nxt), (nxt, r), (nxt, nxt)))
    delta = (a[0] - d[0]) + (a[1] - d[1])
    s = (b[0] + c[0]) + (b[1] + c[1])
    return torch.where(first, delta, 0), torch.where(first, s, 0), b[0] * c[0]


def _newton_step(A, Z, pattern, eye, loop):
    """One refinement step from Z (a double-float pair): (Zo, T = Zo^T A Zo, the flags
    [residual, orthogonality, complex], the next Z).  Zo is Z orthogonalized; the residual
    is T's largest entry below the pattern or difference of a 2x2 block's diagonal
    entries, relative to T's largest entry.  The correction W = L - L^T + Theta: L
    (``_sylvester``) takes T below the pattern to second order, Theta rotates each 2x2
    block to equal diagonal entries (first order, with L's change of them)."""
    first, second, partner, block = pattern
    Zo, ortho = _orthogonalize(Z, eye)
    T = _df.gemm(_r._t(Zo), _df.gemm(A, Zo))
    below = block[:, None] > block[None, :]
    delta, s, bc = _blocks(T, pattern)
    size = abs_max(T[0])
    resid = torch.maximum(abs_max(torch.where(below, T[0], 0)), abs_max(delta))
    resid = resid / torch.where(size > 0, size, 1)
    complex_ = ((bc < 0) | ~first).all()
    flags = torch.stack([resid, ortho, complex_.to(resid.dtype)])
    t = T[0]
    L = _sylvester(torch.where(below, 0, t), torch.where(below, -t, 0), pattern, loop)
    W = L - L.mT
    # the diagonal entries of T W - W T: L's first-order change of T's diagonal
    change = (t * W.mT).sum(-1) - (W * t.mT).sum(-1)
    delta = delta + (change - change[partner])
    sign = torch.where(s < 0, -1.0, 1.0)
    # a block within 2**-20 of a scaled rotation (a normal matrix's: a - d and b + c both
    # rounding) is one in every orientation: its angle is noise, and a large one would
    # break W's second-order orthogonality, so it is left as it is
    settled = delta * delta + s * s <= 2.0 ** -40 * (s * s - 4 * bc)
    theta = torch.where(first & ~settled, 0.5 * torch.atan2(-delta * sign, s.abs()), 0)
    # W[i + 1, i] = theta_i, W[i, i + 1] = -theta_i at each block's first row i
    r = torch.arange(t.shape[-1], device=t.device)
    rot = torch.where((r[:, None] == r[None, :] + 1) & first[None, :], theta[None, :], 0)
    W = W + (rot - rot.mT)
    M = W + 0.5 * (W @ W)  # I + M: orthogonal to third order in W
    Zn = _df.add(Zo, _df.gemm(Zo, (M, torch.zeros_like(M)), bits_b=24))
    return Zo, T, flags, Zn


_REPLAYS = {}  # device -> the Newton step as a replayed graph (every tensor an argument)


def _step_graph(device):
    """The Newton step as one graph, traced at its first call for an order and replayed
    (its trace costs more than its execution)."""
    fn = _REPLAYS.get(device)
    if fn is None:
        dev = backend(device)

        def step(ah, al, first, second, partner, block, eye, zh, zl):
            Zo, T, flags, Z = _newton_step((ah, al), (zh, zl), (first, second, partner, block),
                                           eye, dev.device_loop)
            return (*Zo, *T, flags, *Z)

        fn = _REPLAYS[device] = dev.graph_function(step)
    return fn


def _finish(T, Z, pattern, scale):
    """(T, Z) as float64 tensors: T zero below the pattern, each 2x2 block's diagonal
    entries their mean (they agree to the residual), scaled back."""
    first, second, partner, block = pattern
    n = T[0].shape[-1]
    below = block[:, None] > block[None, :]
    diag = tuple(x.diagonal() for x in T)
    mean = tuple(x * 0.5 for x in _df.add(diag, tuple(x[partner] for x in diag)))
    eye = torch.eye(n, dtype=torch.bool, device=T[0].device) & (first | second)[:, None]
    T = tuple(torch.where(below, 0, torch.where(eye, m[:, None], x)) * scale
              for x, m in zip(T, mean, strict=True))
    return _transfer.df_tensor(*T), _transfer.df_tensor(*Z)


@register("linalg.schur", "neuron")
def schur(a, output="real", sort=None):
    host = lambda x: _sl.schur(x, output=output, sort=sort,  # noqa: E731
                               check_finite=False)
    complex_out = output in ("complex", "c")
    if a.ndim > 2 and (_r._df64(a) or a.is_complex()):
        raise PerMatrix  # (the double-float refinement takes one matrix)
    if not _r._df64(a) and not a.is_complex():
        if complex_out and sort is None:  # the real form's blocks rotated in real arithmetic
            return rsf2csf(*real_schur(a), None)
        return kind_kernel("linalg.schur", "xla")(a, output=output, sort=sort)
    if a.is_complex() or sort is not None:
        return _r._on_host("scipy.linalg.schur", "complex input and sorting have no "
                           "double-float method", host, a)
    if complex_out:  # the refined real form's blocks rotated in double-float
        return rsf2csf(*schur(a), None)
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
    step = _step_graph(a.device)
    prev = None
    for k in range(_STEPS + _MORE):
        zoh, zol, th, tl, flags, *Z = step(*A, *pattern, eye, *Z)
        Zo, T = (zoh, zol), (th, tl)
        if k + 1 < _STEPS:
            continue
        resid, ortho, complex_ = (float(x) for x in _r._fetch(flags))
        if not complex_ or not resid == resid:
            break  # (real eigenvalues in a 2x2 block, or NaN)
        stalled = prev is not None and resid > 0.5 * prev
        if ortho <= _ORTHO and (resid <= _DONE or stalled and resid <= _FLOOR):
            return _finish(T, Zo, pattern, scale)
        if stalled:
            break
        prev = resid
    return _r._on_host("scipy.linalg.schur", _CLUSTER, host, a)


# ----------------------------------------------------------------------------------------
# eig / eigvals of real input on Neuron: real arithmetic on the real Schur form (float32:
# the Francis QR; float64: the refined form above, eigenvalues in double-float), the complex
# results assembled from their real and imaginary parts by data movement (``complex_of``)


def _eig_host(b, left, right, homogeneous_eigvals):
    return lambda *x: _sl.eig(x[0], x[1] if b is not None else None, left=left, right=right,
                              homogeneous_eigvals=homogeneous_eigvals, check_finite=False)


def _eigvals_df(T):
    """(wr, wi) double-float pairs of a standardized real Schur form (a float64 tensor):
    each 2x2 block [[a, b], [c, a]] gives a +- i sqrt(-b c), the positive part first."""
    t = _r._parts(T)
    wr = tuple(x.diagonal() for x in t)
    zero = torch.zeros_like(wr[0][:1])
    sub = tuple(torch.cat([x.diagonal(-1), zero]) for x in t)  # sub[i] = T[i + 1, i]
    sup = tuple(torch.cat([x.diagonal(1), zero]) for x in t)
    first = sub[0] != 0
    bc = _df.mul(sub, sup)  # (negative in a block)
    w = _df.sqrt(tuple(torch.where(first, -x, 0) for x in bc))
    prev = tuple(torch.cat([zero, x[:-1]]) for x in w)
    second = torch.cat([zero > 0, first[:-1]])
    wi = tuple(torch.where(first, x, torch.where(second, -p, 0)) for x, p in
               zip(w, prev, strict=True))
    return wr, wi


@register("linalg.eig", "neuron")
def eig(a, b=None, left=False, right=True, homogeneous_eigvals=False):
    wide = _r._df64(a)
    if a.ndim > 2 and (wide or b is not None or homogeneous_eigvals or a.is_complex()):
        raise PerMatrix  # (each matrix as its single call)
    if b is not None or homogeneous_eigvals or a.is_complex():
        reason = ("generalized and homogeneous eigenproblems and complex input are not on "
                  "the device")
        return _r._on_host("scipy.linalg.eig", reason, _eig_host(b, left, right,
                                                                  homogeneous_eigvals),
                           *((a, b) if b is not None else (a,)))
    if wide and not (left or right):
        T, _ = schur(a)
        return _transfer.df_complex(*_eigvals_df(T))
    if wide:
        return _eig_df(a, left, right)
    t, z = real_schur(a)
    wr, wi, vl, vr = _francis.eig_from_schur(t, z, left=left, right=right)
    w = _transfer.complex_of(wr, wi)
    if not (left or right):
        return w
    real = not bool(_r._fetch((wi != 0).any().reshape(1))[0])
    out = [w]
    for v in (vl, vr) if left and right else ((vl,) if left else (vr,)):
        re, im = v
        # real eigenvalues: real vectors (their imaginary parts are rounding)
        out.append(re.contiguous() if real else _transfer.complex_of(
            re, torch.where(wi.unsqueeze(-2) == 0, torch.zeros_like(im), im)))
    return tuple(out)


_EIG_STEPS = 2  # Newton corrections of the float32 eigenvectors (each gains ~2**-24 cond)


def _cmul(ar, ai, br, bi):
    """Complex double-float product, parts as pairs."""
    return (_df.sub(_df.mul(ar, br), _df.mul(ai, bi)),
            _df.add(_df.mul(ar, bi), _df.mul(ai, br)))


def _shifted_solve(tcr, ti, br, bi):
    """Y with rows i != j of (Tc - Tc[j, j]) y_j = b_j for every column j and y_jj = 0
    (Tc = tcr + i ti upper triangular, float32 pairs): the Newton correction of an
    eigenvector in Tc's basis, back substitution one row per micro-step."""
    n = tcr.shape[-1]
    eps = torch.finfo(tcr.dtype).eps
    tiny = torch.finfo(tcr.dtype).tiny / eps
    cols = torch.arange(n, device=tcr.device)
    lr, li = tcr.diagonal(), ti.diagonal()

    def step(c):
        yr, yi, i = c
        ic = i.clamp(min=0)
        rr, ri = (torch.where(cols > i, torch.index_select(x, 0, ic).squeeze(0), 0)
                  for x in (tcr, ti))
        sr = br.index_select(0, ic).squeeze(0) - (rr @ yr - ri @ yi)
        si = bi.index_select(0, ic).squeeze(0) - (rr @ yi + ri @ yr)
        dr, di = lr.gather(0, ic) - lr, li.gather(0, ic) - li
        smin = torch.clamp(eps * (lr.abs() + li.abs()), min=tiny)
        small = dr.abs() + di.abs() < smin
        dr, di = torch.where(small, smin, dr), torch.where(small, 0, di)
        den = dr * dr + di * di
        qr, qi = (sr * dr + si * di) / den, (si * dr - sr * di) / den
        keep = (cols == i) | (i < 0)  # y_jj = 0 (and nothing once done)
        at = (cols == i).unsqueeze(-1) & (i >= 0)
        yr = torch.where(at, torch.where(keep, 0, qr).unsqueeze(0), yr)
        yi = torch.where(at, torch.where(keep, 0, qi).unsqueeze(0), yi)
        return yr, yi, i - 1

    yr = torch.zeros_like(tcr)
    i = _francis._counter(n - 1, tcr.device)
    return _francis._loop(step, (yr, torch.zeros_like(yr), i), n)[:2]


def _eig_df(a, left, right):
    """float64 (w, [vl,] [vr]): the eigenvalues from the double-float Schur form, the
    float32 eigenvectors of its high parts refined by Newton corrections (``_newton``),
    normalized as LAPACK in double-float."""
    T, Z = schur(a)
    wr, wi = _eigvals_df(T)
    A = _r._parts(a)
    tcr, tci, zr, zi = _francis.rsf2csf(_r._parts(T)[0], _r._parts(Z)[0])
    zc = (zr, zi)
    out = [_transfer.df_complex(wr, wi)]
    vecs = []
    if left:
        # y^H A = w y^H: A^T y = conj(w) y, Tc^H lower triangular: reversed, upper
        ur, ui = tcr.mT.flip(0, 1), -tci.mT.flip(0, 1)
        flip = lambda x: x.flip(0, 1)  # noqa: E731
        solve = lambda br, bi: tuple(flip(y) for y in _shifted_solve(  # noqa: E731
            ur, ui, flip(br), flip(bi)))
        xr, xi = (flip(x) for x in _francis.trevc(ur, ui))
        vecs.append(_newton(_r._t(A), (wr, (-wi[0], -wi[1])), zc, (xr, xi), solve))
    if right:
        solve = lambda br, bi: _shifted_solve(tcr, tci, br, bi)  # noqa: E731
        vecs.append(_newton(A, (wr, wi), zc, _francis.trevc(tcr, tci), solve))
    real = not bool(_r._fetch((wi[0] != 0).any().reshape(1))[0])
    for vr, vi in vecs:
        if real:
            out.append(_transfer.df_tensor(*vr))
        else:  # real eigenvalues: real vectors (their imaginary parts are rounding)
            vi = tuple(torch.where(wi[0] == 0, torch.zeros_like(x), x) for x in vi)
            out.append(_transfer.df_complex(vr, vi))
    return tuple(out)


def _newton(A, w, zc, x, solve):
    """Eigenvectors of A (a pair) for eigenvalues w (complex double-float) from Zc X (X:
    float32 eigenvectors of the complex triangular form): ``_EIG_STEPS`` corrections, the
    residual A v - v w in double-float, the correction Zc Y with ``solve``: Y from Zc^H r
    in float32 (the component along each vector kept), then normalized."""
    zr, zi = zc
    xr, xi = x
    zero = torch.zeros_like(xr)
    vr, vi = (zr @ xr - zi @ xi, zero), (zr @ xi + zi @ xr, zero.clone())
    lr, li = (tuple(p[None, :] for p in part) for part in w)
    for _ in range(_EIG_STEPS):
        pr, pi = _cmul(vr, vi, lr, li)
        rr = _df.sub(_df.gemm(A, vr), pr)[0]
        ri = _df.sub(_df.gemm(A, vi), pi)[0]
        yr, yi = solve(-(zr.mT @ rr + zi.mT @ ri), zi.mT @ rr - zr.mT @ ri)
        vr = _df.add_f(vr, zr @ yr - zi @ yi)
        vi = _df.add_f(vi, zr @ yi + zi @ yr)
    return _normalize_df(vr, vi)


def _normalize_df(vr, vi):
    """Columns to unit 2-norm, the largest component exactly real and positive (LAPACK's
    geev), in double-float."""
    mag = _df.add(_df.mul(vr, vr), _df.mul(vi, vi))
    nrm = _df.sqrt(_df.tree_sum(*mag, dim=0))
    p = mag[0].argmax(0, keepdim=True)
    pr, pi = (tuple(x.gather(0, p) for x in v) for v in (vr, vi))
    pm = _df.sqrt(_df.add(_df.mul(pr, pr), _df.mul(pi, pi)))
    pm = tuple(torch.where(pm[0] == 0, 1.0 if k == 0 else 0.0, x) for k, x in enumerate(pm))
    nrm = tuple(torch.where(nrm[0] == 0, 1.0 if k == 0 else 0.0, x)[None, :]
                for k, x in enumerate(nrm))
    den = _df.mul(pm, nrm)
    cr, ci = _df.div(pr, den), _df.div((-pi[0], -pi[1]), den)  # conj(phase) / norm
    vr, vi = _cmul(vr, vi, cr, ci)
    rows = torch.arange(vr[0].shape[0], device=vr[0].device)[:, None]
    return vr, tuple(torch.where(rows == p, torch.zeros_like(x), x) for x in vi)


@register("linalg.rsf2csf", "neuron")
def rsf2csf(t, z, dtype):
    """SciPy's rotations in real arithmetic (float32: ``_francis.rsf2csf``; float64: the
    same in double-float, ``_rsf2csf_df``), the complex results assembled by data movement;
    complex input: the host, announced."""
    if t.ndim > 2 and (t.is_complex() or z.is_complex() or _r._df64(t, z)):
        raise PerMatrix  # (each matrix as its single call)
    if t.is_complex() or z.is_complex():
        return _r._on_host("scipy.linalg.rsf2csf", "complex input has no method without "
                           "complex arithmetic", lambda x, y: _sl.rsf2csf(
                               x, y, check_finite=False), t, z)
    if _r._df64(t, z):
        tr, ti, zr, zi = _rsf2csf_df(_r._parts(t), _r._parts(z))
        return _transfer.df_complex(tr, ti), _transfer.df_complex(zr, zi)
    tr, ti, zr, zi = _francis.rsf2csf(t, z)
    return _transfer.complex_of(tr, ti), _transfer.complex_of(zr, zi)


def _rsf2csf_df(T, Z):
    """``_francis.rsf2csf`` on double-float pairs: each 2x2 block's unitary G (G = [[conj(mu),
    c], [-c, mu]] / r) acts on its two rows and columns only, so T G-products are
    elementwise with the partner row or column gathered: (Tr, Ti, Zr, Zi) as pairs."""
    n = T[0].shape[-1]
    a, d = (tuple(x.diagonal()[o:n - 1 + o] for x in T) for o in (0, 1))
    b, c = (tuple(x.diagonal(o) for x in T) for o in (1, -1))
    blk = c[0].abs() > 2.220446049250313e-16 * (a[0].abs() + d[0].abs())  # SciPy's test
    p = tuple(0.5 * x for x in _df.sub(a, d))
    disc = _df.add(_df.mul(p, p), _df.mul(b, c))
    cplx = disc[0] < 0
    root = _df.sqrt(tuple(torch.where(cplx, -x, x) for x in disc))  # sqrt |disc|
    sign = _francis._sign(p[0])
    mr = tuple(torch.where(cplx, x, y) for x, y in
               zip(p, _df.add(p, tuple(sign * q for q in root)), strict=True))
    mi = tuple(torch.where(cplx, q, 0) for q in root)
    r = _df.sqrt(_df.add(_df.add(_df.mul(mr, mr), _df.mul(mi, mi)), _df.mul(c, c)))
    r = (torch.where(blk, r[0], 1), torch.where(blk, r[1], 0))
    cr, ci, s = (tuple(torch.where(blk, q, 0) for q in _df.div(x, r)) for x in (mr, mi, c))
    # per row: G's own entry gs (complex) and its partner's gp (real), partner index
    no = torch.zeros(1, dtype=torch.bool, device=T[0].device)
    first, second = torch.cat([blk, no]), torch.cat([no, blk])
    zero = torch.zeros_like(T[0][0, :1])
    at_j = lambda x: torch.cat([x, zero])  # noqa: E731  (a block's first row)
    at_k = lambda x: torch.cat([zero, x])  # noqa: E731  (its second)
    gsr = tuple(torch.where(first, at_j(x), torch.where(second, at_k(x), 1.0 - i))
                for i, x in enumerate(cr))
    gsi = tuple(torch.where(first, -at_j(x), at_k(x)) for x in ci)
    gp = tuple(torch.where(first, at_j(x), -at_k(x)) for x in s)
    idx = torch.arange(n, device=T[0].device)
    partner = torch.where(first, idx + 1, torch.where(second, idx - 1, idx))
    row = lambda g: tuple(x[:, None] for x in g)  # noqa: E731
    col = lambda g: tuple(x[None, :] for x in g)  # noqa: E731
    # X = G T (T real), then Y = X G^H, Z G^H: column c is X_c conj(gs_c) + X_partner gp_c
    Tp = tuple(x[partner] for x in T)
    xr = _df.add(_df.mul(row(gsr), T), _df.mul(row(gp), Tp))
    xi = _df.mul(row(gsi), T)
    xrp, xip = (tuple(x[:, partner] for x in y) for y in (xr, xi))
    yr = _df.add(_df.add(_df.mul(xr, col(gsr)), _df.mul(xi, col(gsi))), _df.mul(xrp, col(gp)))
    yi = _df.add(_df.sub(_df.mul(xi, col(gsr)), _df.mul(xr, col(gsi))), _df.mul(xip, col(gp)))
    Zp = tuple(x[:, partner] for x in Z)
    zr = _df.add(_df.mul(Z, col(gsr)), _df.mul(Zp, col(gp)))
    zi = tuple(-x for x in _df.mul(Z, col(gsi)))
    return (tuple(x.triu() for x in yr), tuple(x.triu() for x in yi), zr, zi)


@register("linalg.cdf2rdf", "neuron")
def cdf2rdf(w, v):
    """Real and imaginary parts are views; SciPy's Re(v u) has columns 0.5 (Im v_k - Im v_j)
    and 0.5 (Re v_j + Re v_k) at a pair (j, k), Re v elsewhere: triple-float sums of the
    exact stored values (float32 parts: exact, as SciPy's complex128 sums), stored as
    float64 by ``df_tensor``."""
    device = w.device
    wide = w.dtype in (torch.float64, torch.complex128)
    W, V = (_transfer.df_triple(x) if x.dtype in (torch.float64, torch.complex128) else
            (x, torch.zeros_like(x), torch.zeros_like(x)) for x in (w, v))
    wr, vr = (tuple(x.real if x.is_complex() else x for x in p) for p in (W, V))
    wi, vi = (tuple(x.imag if x.is_complex() else torch.zeros_like(x) for x in p)
              for p in (W, V))
    mask = np.asarray(_r._fetch((wi[0] != 0) | (wi[1] != 0) | (wi[2] != 0)), dtype=bool)
    at, j, k = cdf2rdf_pairs(mask)
    # each column's partner (itself for a real eigenvalue), and the pairs' first members
    partner = np.broadcast_to(np.arange(mask.shape[-1]), mask.shape).copy()
    partner[at + (j,)], partner[at + (k,)] = k, j
    first = np.zeros(mask.shape, dtype=bool)
    first[at + (j,)] = True
    P, F, S = (torch.as_tensor(x, device=device) for x in (partner, first, mask & ~first))
    eye = torch.eye(mask.shape[-1], dtype=torch.bool, device=device)
    off = (torch.arange(mask.shape[-1], device=device) == P[..., None]) & ~eye
    Wr = tuple(torch.where(eye, a[..., None], torch.where(off, b[..., None], 0))
               for a, b in zip(wr, wi, strict=True))
    idx = P[..., None, :].expand(v.shape)
    d = _df.add3(tuple(x.gather(-1, idx) for x in vi), _df.neg3(vi))
    s = _df.add3(vr, tuple(x.gather(-1, idx) for x in vr))
    F, S = F[..., None, :], S[..., None, :]
    Vr = tuple(torch.where(F, 0.5 * a, torch.where(S, 0.5 * b, c))
               for a, b, c in zip(d, s, vr, strict=True))
    return _transfer.df_tensor(*Wr) if wide else Wr[0], _transfer.df_tensor(*Vr)
