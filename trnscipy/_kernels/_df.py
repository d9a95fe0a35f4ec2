"""Double-float arithmetic on float32 tensors (any device; no float64 op anywhere).

A double-float value is a pair ``(hi, lo)`` of float32 tensors of one shape holding
the unevaluated sum ``hi + lo`` with ``|lo| <= ulp(hi)/2``: about 48 significant bits
(unit roundoff 2**-48, about 3.6e-15), float32's exponent range (``lo`` loses bits
below 2**-126: values under about 1e-30 keep less than 48 bits).

Error-free transformations: TwoSum, FastTwoSum, a rounding split (scaled by exact powers
of two) and Dekker's TwoProd (torch-xla exposes no fused multiply-add).  Every value
that enters TwoSum is computed exactly (sums of exact products of 12-bit halves), so a
compiler that contracts a product and a sum into an FMA (XLA CPU does, inside fusions)
cannot change it; only the low-order error terms see such rounding differences.  Sums
are pairwise trees of TwoSum over static shapes (zero padding to a power of two, no
scatter): the error terms are added in float32, which bounds the error of a sum of n
terms by about u*|s| + n*u**2*sum|x_i| (Ogita-Rump-Oishi's Sum2 in tree form).

Products:

- sparse (``RowPadded``): every row padded to the longest row (the padding masked
  out), built on the host from the index structure once per matrix; TwoProd per
  stored entry and a tree sum along the row.  Rows of very different lengths waste
  the padding (a dense row makes the layout m x n).
- dense matrix-vector (``gemv``): TwoProd per entry and a tree sum along each row:
  O(mn) elementwise work, cheaper than any splitting for one vector.
- dense matrix-matrix (``gemm``): Ozaki's splitting.  Each operand is cut into
  float32 slices of ``b = (24 - log2 k) // 2`` bits relative to its row (column)
  maximum, so that every slice product is an exact float32 GEMM; the products whose
  exponents reach 2**-50 of the result's scale are summed in double-float.  The big
  work is float32 GEMMs (about s(s+1)/2 of them for s slices).
"""

import math

import numpy as np

from trnscipy._torch import torch

__all__ = ["two_sum", "fast_two_sum", "split", "two_prod", "split_prod", "add", "sub", "mul",
           "mul3", "add3", "div3", "neg3", "tree_sum3", "sqrt3", "norm3", "div",
           "sqrt", "add_f", "mul_f", "tree_sum", "dot", "norm", "axpy", "scale",
           "gemv", "gemm", "RowPadded", "row_padded", "spmv", "from_host", "to_host_f64"]

# ---- error-free transformations -------------------------------------------------------

def two_sum(a, b):
    """s, e with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def fast_two_sum(a, b):
    """s, e with s + e = a + b exactly, for |a| >= |b| (Dekker)."""
    s = a + b
    return s, b - (s - a)


def _pow2(e):
    """2**e for integer-valued float32 e in [-126, 127] (exact; torch.exp2 and bit casts
    do not lower on torch-xla 2.9: they ran on the host CPU, measured)."""
    return torch.pow(2.0, e)


def _exponent(x):
    """E with 2**(E-1) <= x < 2**E (float32, integer values) for normal x > 0; 1 for 0.
    log2 is not exact on XLA (log2(2**-125) = -124.99999): corrected by comparisons."""
    x = torch.where(x > 0, x, torch.ones_like(x))
    e = torch.ceil(torch.log2(x))
    e = torch.where(_pow2(e) <= x, e + 1, e)
    return torch.where(_pow2(e - 1) > x, e - 1, e)


def split(a):
    """a = hi + lo exactly, hi and lo with at most 12 significant bits each: a scaled by
    exact powers of two into (-1, 1), rounded to a multiple of 2**-12 by adding and
    subtracting 1.5 * 2**11, scaled back.  (Veltkamp's ``c - (c - a)``, c = 4097 a, was
    contracted into an FMA by XLA CPU, which broke the split: measured.)"""
    e = _exponent(a.abs())
    half = torch.floor(e * 0.5)
    up, down = _pow2(half), _pow2(e - half)  # 2**e as two factors: no overflow at e = 128
    t = a * _pow2(-half) * _pow2(half - e)
    hi = ((t + 3072.0) - 3072.0) * up * down
    return hi, a - hi


def two_prod(a, b):
    """p, e with p ~ fl(a * b) and p + e = a * b to 2**-48 relative, without FMA.

    Dekker's product from the half products (exact but the smallest, al * bl, whose
    rounding is far below 2**-48), summed error-free.  Not
    ``p = fl(a*b)`` with Dekker's error formula: XLA fuses elementwise producers into
    each consumer and contracts a rounded product and a sum into an FMA there, so a
    rounded ``p`` is not the same value at its uses (measured on XLA CPU: dot products
    wrong at 1e-9).  Exact products give the same value fused or not.
    """
    return split_prod(split(a), split(b))


def split_prod(a, b):
    """``two_prod`` of a and b given as their ``split`` halves (a caller that multiplies
    one value many times splits it once)."""
    (ah, al), (bh, bl) = a, b
    s, e = two_sum(ah * bh, ah * bl)
    s, f = two_sum(s, al * bh)
    return fast_two_sum(s, (e + f) + al * bl)


# ---- double-float arithmetic on pairs ---------------------------------------------------

def add(a, b):
    """(a_hi + a_lo) + (b_hi + b_lo), accurately (IEEE-style double-double addition)."""
    s, e = two_sum(a[0], b[0])
    t, f = two_sum(a[1], b[1])
    s, e = fast_two_sum(s, e + t)
    return fast_two_sum(s, e + f)


def sub(a, b):
    return add(a, (-b[0], -b[1]))


def add_f(a, b):
    """double-float a + float32 b."""
    s, e = two_sum(a[0], b)
    return fast_two_sum(s, e + a[1])


def mul(a, b):
    """double-float a * double-float b."""
    p, e = two_prod(a[0], b[0])
    return fast_two_sum(p, e + (a[0] * b[1] + a[1] * b[0]))


def mul_f(a, b):
    """double-float a * float32 b."""
    p, e = two_prod(a[0], b)
    return fast_two_sum(p, e + a[1] * b)


def _distil(terms):
    """s, errors with s ~ sum(terms) and s + sum(errors) == sum(terms) exactly (a cascade
    of two_sums, last term first)."""
    s, errors = terms[-1], []
    for x in reversed(terms[:-1]):
        s, e = two_sum(x, s)
        errors.append(e)
    return s, errors


def _three(terms):
    """(hi, lo, tail) of a sum of float32 terms: two distillations, the last errors summed."""
    hi, errors = _distil(terms)
    lo, errors = _distil(errors)
    tail = errors[0]
    for e in errors[1:]:
        tail = tail + e
    return hi, lo, tail


def mul3(a, b):
    """Triple-float (hi, lo, tail) a * b, float32 ops only: the product's terms down to
    2**-72 relative, two of them distilled into hi and lo (float64's 53 bits and more;
    what a float64 result that SciPy rounds needs, and double-float's 48 bits are not)."""
    a0, a1, a2 = a
    b0, b1, b2 = b
    terms = [*two_prod(a0, b0), *two_prod(a0, b1), *two_prod(a1, b0),
             a1 * b1, a0 * b2, a2 * b0]
    return _three(terms)


def add3(a, b):
    """Triple-float (hi, lo, tail) a + b, float32 ops only: the parts' error-free sums,
    distilled as in ``mul3``."""
    terms = [*two_sum(a[0], b[0]), *two_sum(a[1], b[1]), a[2], b[2]]
    return _three(terms)


def neg3(a):
    """-a for a triple (or pair): exact, a sign change of every part."""
    return tuple(-p for p in a)


def div3(a, b):
    """Triple-float (hi, lo, tail) a / b, float32 ops only: the float32 quotient and two
    corrections from the triple-float remainders a - b q (``mul3``, ``add3``): about
    2**-70 relative, what a float64 quotient that SciPy rounds needs.  Where the float32
    quotient is not finite (b zero, inf or nan operands) it is the result, as float64's."""
    zero = torch.zeros_like(a[0] / b[0])
    q = [a[0] / b[0]]
    r = a
    for _ in range(2):
        r = add3(r, neg3(mul3(b, (q[-1], zero, zero))))
        q.append(r[0] / b[0])
    out = _three(q)
    finite = torch.isfinite(q[0])
    return tuple(torch.where(finite, p, f) for p, f in zip(out, (q[0], zero, zero),
                                                          strict=True))


def div(a, b):
    """double-float a / double-float b (one correction step of the float32 quotient)."""
    q = a[0] / b[0]
    r = sub(a, mul_f(b, q))
    return fast_two_sum(q, r[0] / b[0])


def sqrt(a):
    """sqrt of a non-negative double-float (one Newton step from the float32 root)."""
    x = torch.sqrt(a[0])
    p, e = two_prod(x, x)
    r = (a[0] - p) - e + a[1]
    safe = torch.where(x > 0, x, torch.ones_like(x))
    c = torch.where(x > 0, r / (2 * safe), torch.zeros_like(x))
    return fast_two_sum(x, c)


def scale(alpha, x):
    """alpha * x for a double-float scalar alpha (0-d pair) and double-float x."""
    return mul((alpha[0], alpha[1]), x)


def axpy(alpha, x, y):
    """y + alpha * x, all double-float (alpha a 0-d pair or broadcastable pair)."""
    return add(y, mul(alpha, x))


# ---- sums and products ---------------------------------------------------------------

def tree_sum(hi, lo=None, dim=-1):
    """Double-float sum of ``hi (+ lo)`` along ``dim``: a pairwise TwoSum tree."""
    hi = hi.movedim(dim, -1)
    lo = torch.zeros_like(hi) if lo is None else lo.movedim(dim, -1)
    n = hi.shape[-1]
    if n == 0:
        z = torch.zeros(hi.shape[:-1], dtype=hi.dtype, device=hi.device)
        return z, z.clone()
    width = 1 << (n - 1).bit_length()
    if width != n:
        pad = torch.zeros(hi.shape[:-1] + (width - n,), dtype=hi.dtype, device=hi.device)
        hi, lo = torch.cat([hi, pad], -1), torch.cat([lo, pad], -1)
    while hi.shape[-1] > 1:
        half = hi.shape[-1] // 2
        s, e = two_sum(hi[..., :half], hi[..., half:])
        hi, lo = s, e + (lo[..., :half] + lo[..., half:])
    return fast_two_sum(hi[..., 0], lo[..., 0])


def tree_sum3(t, dim=-1):
    """Triple-float (hi, lo, tail) sum of the triple ``t`` along ``dim``: a pairwise tree
    of ``add3`` (within a unit of float64 rounding of the exact sum for the sums of
    magnitudes and squares it is used for)."""
    t = [p.movedim(dim, -1) for p in t]
    n = t[0].shape[-1]
    if n == 0:
        z = torch.zeros(t[0].shape[:-1], dtype=t[0].dtype, device=t[0].device)
        return z, z.clone(), z.clone()
    width = 1 << (n - 1).bit_length()
    if width != n:
        pad = torch.zeros(t[0].shape[:-1] + (width - n,), dtype=t[0].dtype,
                          device=t[0].device)
        t = [torch.cat([p, pad], -1) for p in t]
    while t[0].shape[-1] > 1:
        half = t[0].shape[-1] // 2
        t = add3([p[..., :half] for p in t], [p[..., half:] for p in t])
    return tuple(p[..., 0] for p in t)


def sqrt3(s):
    """Triple-float sqrt of a non-negative triple: the float32 root and two Newton
    corrections from triple-float residuals s - y**2 (about 2**-70 relative)."""
    x = torch.sqrt(s[0])
    zero = torch.zeros_like(x)
    safe = torch.where(x > 0, 2 * x, torch.ones_like(x))
    y = (x, zero, zero)
    for _ in range(2):
        r = add3(s, neg3(mul3(y, y)))
        y = add3(y, (torch.where(x > 0, r[0] / safe, zero), zero, zero))
    return y


def norm3(t, dim=-1):
    """Triple-float 2-norm of the triple ``t`` along ``dim``, scaled by a power of two near
    the maximum (no overflow or underflow of the squares; the scaling is exact)."""
    amax = t[0].abs().amax(dim=dim, keepdim=True)
    e = torch.clamp(_exponent(amax), -126, 126)
    down = _pow2(-e)
    x = [p * down for p in t]
    s = sqrt3(tree_sum3(mul3(x, x), dim))
    up = _pow2(e).squeeze(dim)
    return tuple(p * up for p in s)


def _prod_terms(a, b):
    """Elementwise double-float a * b as (p, err) float32 tensors (p + err ~ a*b)."""
    p, e = two_prod(a[0], b[0])
    return p, e + (a[0] * b[1] + a[1] * b[0])


def dot(a, b, dim=-1):
    """Double-float dot product of double-float vectors (along ``dim``)."""
    p, e = _prod_terms(a, b)
    return tree_sum(p, e, dim)


def norm(a, dim=-1):
    """Double-float 2-norm, scaled by a power of two near the maximum (no overflow or
    underflow of the squares; the scaling is exact)."""
    amax = a[0].abs().amax(dim=dim, keepdim=True)
    e = torch.clamp(_exponent(amax), -126, 126)
    x = mul_f(a, _pow2(-e))
    s = sqrt(dot(x, x, dim))
    return mul_f(s, _pow2(e).squeeze(dim))


def gemv(A, x):
    """Double-float A @ x for a dense (..., m, n) pair A and an (n,) or (..., n, k) pair x
    (leading dimensions broadcast)."""
    if x[0].ndim == 1:
        return dot(A, (x[0][None, :], x[1][None, :]))
    terms = _prod_terms((A[0][..., None], A[1][..., None]),
                        (x[0][..., None, :, :], x[1][..., None, :, :]))
    return tree_sum(terms[0], terms[1], dim=-2)


def _pow2_ceil(t):
    """A power of two > t (t > 0 float32), from float32 ops that lower everywhere."""
    return _pow2(_exponent(t))


def _slices(a, dim, count, bits):
    """Ozaki slices of the double-float ``a``: float32 tensors with ``bits`` significant
    bits relative to the maximum along ``dim``, summing to ``a`` up to the last slice."""
    r = a
    out = []
    for _ in range(count):
        mu = r[0].abs().amax(dim=dim, keepdim=True)
        mu = torch.where(mu > 0, mu, torch.ones_like(mu))
        sigma = _pow2_ceil(mu) * float(2 ** (24 - bits))
        s = (r[0] + sigma) - sigma
        out.append(s)
        r = add_f(r, -s)
    return out


def gemm(A, B, bits_a=52, bits_b=52):
    """Double-float A @ B (pairs of (..., m, k) and (..., k, n) float32 tensors, leading
    dimensions broadcast) by Ozaki splitting:
    every slice product is an exact float32 GEMM, summed in double-float.  ``bits_a``,
    ``bits_b``: the significant bits to keep of each operand (24 for a float32 one)."""
    k = A[0].shape[-1]
    bits = max(1, (24 - max(1, math.ceil(math.log2(max(k, 2))))) // 2)
    ca, cb = -(-bits_a // bits), -(-bits_b // bits)
    sa = _slices(A, -1, ca, bits)
    sb = _slices(B, -min(2, B[0].ndim), cb, bits)
    shape = (torch.broadcast_shapes(A[0].shape[:-2], B[0].shape[:-2]) + A[0].shape[-2:-1]
             + B[0].shape[-1:])
    hi = torch.zeros(shape, dtype=A[0].dtype, device=A[0].device)
    lo = torch.zeros_like(hi)
    # the products down to 2**-52 of the result's scale, smallest first, each exact
    last = max(ca, cb) + 1
    for total in range(last, 1, -1):
        for i in range(max(1, total - cb), min(ca, total - 1) + 1):
            hi, lo = add_f((hi, lo), sa[i - 1] @ sb[total - i - 1])
    return hi, lo


# ---- sparse products through a row-padded layout ---------------------------------------

class RowPadded:
    """A sparse matrix's entries laid out row by row, every row padded to the longest.

    ``cols``, ``pos`` (index into the flattened stored data) and ``mask`` are (m, W)
    device tensors; built on the host from the index structure (no values).
    """

    def __init__(self, shape, row, col, pos, device, bucket=False):
        m = shape[0]
        order = np.argsort(row, kind="stable")
        row, col, pos = row[order], col[order], pos[order]
        counts = np.bincount(row, minlength=m) if m else np.zeros(0, np.int64)
        width = int(counts.max()) if counts.size and counts.max() > 0 else 1
        if bucket:  # (the next power of two: a few widths, so a few graphs, across patterns)
            width = 1 << (width - 1).bit_length()
        start = np.zeros(m + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        slot = np.arange(row.shape[0]) - start[row]
        cols = np.zeros((m, width), np.int64)
        poss = np.zeros((m, width), np.int64)
        mask = np.zeros((m, width), bool)
        cols[row, slot], poss[row, slot], mask[row, slot] = col, pos, True
        self.shape, self.width = shape, width
        self.cols = torch.from_numpy(cols.reshape(-1)).to(device)
        self.pos = torch.from_numpy(poss.reshape(-1)).to(device)
        self.mask = torch.from_numpy(mask).to(device)

    def values(self, data):
        """The padded (m, W) values of the flattened float32 ``data``, zeros in padding."""
        vals = data.reshape(-1).index_select(0, self.pos).reshape(self.mask.shape)
        return torch.where(self.mask, vals, torch.zeros((), dtype=vals.dtype,
                                                        device=vals.device))


def row_padded(shape, fmt, index, device, bucket=False):
    """The RowPadded layout of a matrix given its host index arrays.

    ``index``: csr/csc ``(indptr, indices)``, coo ``(row, col)``, bsr
    ``(indptr, indices, blocksize)``, dia ``(offsets, width)``.  ``bucket``: rows padded
    to a power of two, for patterns drawn anew per call (the graphs' shapes follow W).
    """
    m, n = shape
    if fmt in ("csr", "csc"):
        indptr, indices = (np.asarray(i, np.int64) for i in index)
        major = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
        row, col = (major, indices) if fmt == "csr" else (indices, major)
        pos = np.arange(indices.shape[0])
    elif fmt == "coo":
        row, col = (np.asarray(i, np.int64) for i in index)
        pos = np.arange(row.shape[0])
    elif fmt == "bsr":
        indptr, indices, (r, c) = index
        indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices, np.int64)
        brow = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
        i, j = np.meshgrid(np.arange(r), np.arange(c), indexing="ij")
        row = (brow[:, None, None] * r + i).reshape(-1)
        col = (indices[:, None, None] * c + j).reshape(-1)
        pos = np.arange(row.shape[0])
    elif fmt == "dia":
        offsets, width = index
        offsets = np.asarray(offsets, np.int64)
        w = min(width, n)
        j = np.broadcast_to(np.arange(w), (offsets.shape[0], w))
        i = j - offsets[:, None]
        pos = (np.arange(offsets.shape[0])[:, None] * width + j)
        keep = (i >= 0) & (i < m)
        row, col, pos = i[keep], j[keep], pos[keep]
    else:
        raise ValueError(f"no row-padded layout for format {fmt!r}")
    return RowPadded(shape, row, col, pos, device, bucket)


def spmv(layout, data, x):
    """Double-float A @ x: ``data`` the (hi, lo) of the stored values (flattened as the
    container stores them), ``x`` an (n,) or (n, k) double-float pair."""
    ahi, alo = layout.values(data[0]), layout.values(data[1])
    m, w = layout.mask.shape
    if x[0].ndim == 1:
        xs = (x[0].index_select(0, layout.cols).reshape(m, w),
              x[1].index_select(0, layout.cols).reshape(m, w))
        return dot((ahi, alo), xs)
    k = x[0].shape[1]
    xs = (x[0].index_select(0, layout.cols).reshape(m, w, k),
          x[1].index_select(0, layout.cols).reshape(m, w, k))
    p, e = _prod_terms((ahi[:, :, None], alo[:, :, None]), xs)
    return tree_sum(p, e, dim=1)


# ---- host helpers for tests and benches -------------------------------------------------

def from_host(a, device=None):
    """(hi, lo) float32 tensors of a float64 NumPy array (the double-float split)."""
    a = np.asarray(a, np.float64)
    hi = a.astype(np.float32)
    lo = (a - hi).astype(np.float32)
    return torch.from_numpy(hi).to(device), torch.from_numpy(lo).to(device)


def to_host_f64(a):
    """hi + lo as a float64 NumPy array (both parts computed in one graph: read one by one,
    torch-xla 2.9 can hand the second graph the first's executable, pytorch/xla#8353)."""
    from trnscipy._kernels import backend

    backend(a[0].device).materialize(list(a))
    return a[0].cpu().numpy().astype(np.float64) + a[1].cpu().numpy().astype(np.float64)
