"""float64 matrix_balance and solve_circulant on a Neuron device (see ``_refine``): float32
arithmetic only.

- ``matrix_balance``: LAPACK's gebal as ``_kernels_struct.gebal`` runs it (the
  permutation from the zero pattern, one host read of four numbers per row and sweep),
  with gebal's norms in triple-float (``_df.norm3``, the largest magnitudes exactly: within
  a unit of float64 rounding of the float64 norms, so its decisions are float64's) and
  the scaling by powers of two applied to every part (exact).
- ``solve_circulant``: SciPy's DFT method with the DFTs as sums of products with the
  cos and sin tables (float64 host values, exact as triples) in triple-float
  (``_df.mul3``, ``tree_sum3``): |fft(c)| and the near-singularity test as SciPy's
  float64 FFT gives them (one host read), the quotients fft(b) / fft(c) and the inverse
  DFT to about 2**-70 relative of the sums' magnitudes.  A direct method, not a
  refinement: SciPy's ``singular='lstsq'`` result has no component along the
  near-singular modes, which refinement from a float32 solution would not remove.
  O(n^2) elementwise work and memory per right-hand side (SciPy's FFT: O(n log n)), up
  to ``_MAX_ENTRIES``; beyond it SciPy runs on the exact host values, announced.
"""

import numpy as np

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._kernels_struct import gebal
from trnscipy.linalg._refine_funcs import _extreme, _magnitudes
from trnscipy.linalg._validate import LinAlgError

# ---- matrix_balance ----------------------------------------------------------------------


def _masked(t, mask):
    return [torch.where(mask, p, 0) for p in t]


def _gebal_norms(a, hot, inner, upto_l, from_k):
    """gebal's (c, r, ca, ra) of row/column ``hot`` of each matrix of the stack ``a`` as a
    (B, 4, 3) tensor of triple-float parts (see ``_kernels_struct._gebal_norms``).  The
    column and row are picked by sums with zeros (exact)."""
    t = _transfer.df_triple(a)
    col = [torch.where(hot[None, None, :], p, 0).sum(-1) for p in t]
    row = [torch.where(hot[None, :, None], p, 0).sum(-2) for p in t]
    # the column and the row as one (B, 2, n) triple: one norm and one maximum to compile
    both = [torch.stack([x, y], -2) for x, y in zip(col, row, strict=True)]
    norms = _df.norm3(_masked(both, inner[:, None, :]))
    tops = _extreme(_magnitudes(_masked(both, torch.stack([upto_l, from_k], -2))), True, -1)
    return torch.cat([torch.stack(list(norms), -1), torch.stack(list(tops), -1)], -2)


def _gebal_rescale(a, hot, f):
    """Row ``hot`` of each matrix divided by its f (B,), its column multiplied, in every
    part (powers of two: exact)."""
    t = _transfer.df_triple(a)
    fs = torch.where(hot, torch.as_tensor(f, dtype=t[0].dtype).to(a.device)[:, None],  # (data)
                     torch.ones((), dtype=t[0].dtype, device=a.device))
    t = [p / fs[:, :, None] * fs[:, None, :] for p in t]
    backend(a.device).materialize(t)  # (the norms' graph then starts from data)
    return _transfer.df_tensor(*t)


@register("linalg.matrix_balance", "neuron")
def matrix_balance(a, permute=True, scale=True, separate=False):
    if not _r._df64(a) or a.is_complex():
        return kind_kernel("linalg.matrix_balance", "xla")(a, permute, scale, separate)
    return gebal(a, permute, scale, separate, _gebal_norms, _gebal_rescale,
                 lambda x: _transfer.df_parts(x)[0] != 0)  # (the high part: zero iff x is)


# ---- solve_circulant ---------------------------------------------------------------------

_MAX_ENTRIES = 1 << 22  # (right-hand sides) x n x n elementwise triple-float products


def _cos_sin(n):
    """cos and sin of 2 pi jk / n as float64 (n, n) arrays: the angle reduced in integers
    to a quadrant and to its first half, so that quarter-period values (0, 1, -1) are exact
    and the tables keep the DFT's symmetries, as an FFT's twiddle factors do."""
    m = np.outer(np.arange(n), np.arange(n)) % n
    q, rem = np.divmod(4 * m, n)  # angle = (q + rem / n) pi / 2, 0 <= rem < n
    upper = 2 * rem > n
    x = np.where(upper, n - rem, rem) * (np.pi / 2) / n  # in [0, pi/4]
    c0 = np.where(upper, np.sin(x), np.cos(x))
    s0 = np.where(upper, np.cos(x), np.sin(x))
    q = q % 4
    cos = np.choose(q, [c0, -s0, -c0, s0])
    sin = np.choose(q, [s0, c0, -s0, -c0])
    return cos, sin


def _tables(n, device):
    """The forward table [cos | -sin] (n, 2n) and the inverse one [cos; -sin] (2n, n) as
    device triples (x times the first gives fft(x)'s real and imaginary parts side by
    side; [re | im] times the second, ifft's real part times n)."""
    cos, sin = _cos_sin(n)
    return tuple(_transfer.df_triple(_transfer.tensor_on(t, device))
                 for t in (np.hstack([cos, -sin]), np.vstack([cos, -sin])))


def _dft_sum(x, table):
    """x @ table for a triple x (..., m) and an (m, k) triple table: the products in
    triple-float, summed along m by a pairwise tree."""
    return _df.tree_sum3(_df.mul3([v[..., :, None] for v in x], table), dim=-2)


def _halves(t):
    n = t[0].shape[-1] // 2
    return [p[..., :n] for p in t], [p[..., n:] for p in t]


def _triple_of(value, like):
    """A float64 Python number or device tensor as a triple in ``like``'s graph."""
    if torch.is_tensor(value):
        return _transfer.df_triple(_transfer.tensor_on(value, like.device, torch.float64))
    hi = float(np.float32(value))
    lo = float(np.float32(value - hi))
    tail = float(np.float32(value - hi - lo))
    return tuple(torch.full((), v, dtype=like.dtype, device=like.device)
                 for v in (hi, lo, tail))


def _at_most(a, b):
    """a <= b for triples (the sign of their difference)."""
    d = _df.add3(a, _df.neg3(b))
    return (d[0] < 0) | ((d[0] == 0) & (d[1] + d[2] <= 0))


@register("linalg.solve_circulant", "neuron")
def solve_circulant(c, b, singular="raise", tol=None, caxis=-1, baxis=0, outaxis=0):
    plain = not _r._df64(c, b) or c.is_complex() or b.is_complex()
    if plain:
        return kind_kernel("linalg.solve_circulant", "xla")(
            c, b, singular=singular, tol=tol, caxis=caxis, baxis=baxis, outaxis=outaxis)
    cm, bm = c.movedim(caxis, -1), b.movedim(baxis, -1)
    n = cm.shape[-1]
    if (bm.numel() // n + cm.numel() // n) * n * n > _MAX_ENTRIES:
        host_tol = _transfer.to_host(tol) if torch.is_tensor(tol) else tol
        return _r._on_host(
            "scipy.linalg.solve_circulant", "the double-float method's DFTs are O(n^2) "
            f"products: more than {_MAX_ENTRIES} entries", lambda x, y: _r._k._sl.
            solve_circulant(x, y, singular=singular, tol=host_tol, caxis=caxis,
                            baxis=baxis, outaxis=outaxis), c, b)
    forward, inverse = _tables(n, c.device)
    C, B = _transfer.df_triple(cm), _transfer.df_triple(bm)
    fc_re, fc_im = _halves(_dft_sum(C, forward))  # fft(c) = sum_j c_j (cos - i sin)
    abs_fc = _df.norm3([torch.stack([x, y], -1) for x, y in zip(fc_re, fc_im, strict=True)])
    like = abs_fc[0]
    if tol is None:  # SciPy's: max |fc| n eps (n eps a power-of-two multiple: exact)
        top = _extreme(abs_fc, True, -1)
        tol3 = _df.mul3([p[..., None] for p in top],
                        _triple_of(n * float(np.finfo(np.float64).eps), like))
    else:
        tol3 = _triple_of(tol, like)
        try:
            torch.broadcast_shapes(like.shape, tol3[0].shape)
        except RuntimeError:
            raise ValueError("operands could not be broadcast together with shapes "
                             f"{tuple(like.shape)} {tuple(tol3[0].shape)}") from None
    near = _at_most(abs_fc, tol3)
    flag = near.any()
    if bool(_r._fetch(flag)):
        if singular == "raise":
            raise LinAlgError("near singular circulant matrix.")
        fc_re = [torch.where(near, float(i == 0), p) for i, p in enumerate(fc_re)]
        fc_im = [torch.where(near, 0, p) for p in fc_im]  # (fc = 1 there, as SciPy's)
    fb_re, fb_im = _halves(_dft_sum(B, forward))
    # q = fb conj(fc) / |fc|^2 with fc scaled by a power of two near |fc| (exact): no
    # overflow or underflow of the squares
    big = torch.maximum(fc_re[0].abs(), fc_im[0].abs())
    s = _df._pow2(-torch.clamp(_df._exponent(big), -126, 126))
    fr, fi = [p * s for p in fc_re], [p * s for p in fc_im]
    den = _df.add3(_df.mul3(fr, fr), _df.mul3(fi, fi))
    q_re = _df.div3(_df.add3(_df.mul3(fb_re, fr), _df.mul3(fb_im, fi)), den)
    q_im = _df.div3(_df.add3(_df.mul3(fb_im, fr), _df.neg3(_df.mul3(fb_re, fi))), den)
    q_re, q_im = [p * s for p in q_re], [p * s for p in q_im]
    zero = near.expand(q_re[0].shape)
    q_re = [torch.where(zero, 0, p) for p in q_re]
    q_im = [torch.where(zero, 0, p) for p in q_im]
    # ifft(q) real part: sum_k (q_re cos - q_im sin) / n
    x = _dft_sum([torch.cat([x, y], -1) for x, y in zip(q_re, q_im, strict=True)], inverse)
    x = _df.div3(x, _triple_of(float(n), like))
    out = _transfer.df_tensor(*x)
    return out if outaxis == -1 else out.movedim(-1, outaxis)
