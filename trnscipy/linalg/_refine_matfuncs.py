"""sqrtm, signm, logm and fractional_matrix_power of real matrices on a Neuron device
(see ``_refine``): real float32 arithmetic only, double-float where the result is float64.

- float32 start: the scaled Denman-Beavers iteration (Y -> A^1/2, Z -> A^-1/2, Frobenius
  norm scaling), one device loop left on a flag (a step below 2**-10, then one more), one
  host read.  Its convergence is the test that the root is real: an eigenvalue on the
  closed negative real axis (or a singular matrix) leaves it unconverged, and SciPy runs
  on the exact values, announced.  float32 sqrtm returns it.
- ``sqrtm`` (float64): Newton steps on the double-float residual R = A - X X (Ozaki
  GEMMs), the correction from X0 E + E X0 = R in float32 through the real Schur form of
  the float32 root X0 (the Francis QR, once): fronts of tiles in closed form, one device
  loop (``_sum_sylvester``).  Each step gains float32's precision; until E is below 2**-48
  of X (two steps, then a read per step, at most 8).  Every graph depends on n only.
- ``signm`` (float64): sign(A) = N^-1 A with N = sqrtm(A^2) (A^2 by an Ozaki GEMM, the
  double-float solve): a Newton iteration on S would converge to the sign of its float32
  start, not of A.  float32 and ``disp=False``: the host (SciPy's dtype and tuple follow
  its funm error estimate).
- ``logm``: inverse scaling and squaring, double-float square roots until
  ||X - I||_1 <= 0.6, log(I + Y) as the 16-point Gauss-Legendre partial fractions (one
  stacked double-float solve of the 16 shifted systems), times 2^k.  float32 input
  (SciPy's result is double precision): the same on its values, where its spectrum is
  real (SciPy's result is complex otherwise: the host).
- ``fractional_matrix_power``: integer t by double-float repeated squaring (the
  double-float inverse first for t < 0); otherwise expm(t logm(A)) in double-float, where
  the spectrum is real and positive (otherwise SciPy's result is complex: the host).
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._batch import PerMatrix
from trnscipy._dtypes import abs_max
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r
from trnscipy.linalg import _refine_funcs as _rf
from trnscipy.linalg._decomp_schur import real_schur
from trnscipy.linalg._refine_schur import _pattern
from trnscipy.linalg._validate import LinAlgError

_STEPS = 40  # float32 iteration steps at most (scaled: quadratic after a few)
_DONE = 2.0 ** -10  # a relative step this small: one more step reaches float32 rounding
_START = 1e-3  # the float32 root's relative residual accepted as a start (else: host)
_NEWTON = 8  # double-float Newton steps at most
_BLIND = 2  # of which before the first host read
# log(I + Y) by 16-point Gauss-Legendre (the [16/16] Pade approximant): below float64's
# rounding for ||Y||_1 <= 0.7; stopping at 0.6 saves a square root over 1/4 (each one
# doubles the weight of the roots' 2**-48 errors)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)
_GAP = 0.6

_NO_REAL = "no real {} found (an eigenvalue on or near the {}, or a singular matrix)"


def _fro(x):
    return (x * x).sum().sqrt()


def _scale_exponent(hi):
    """An even power of two near max |A| (exact scaling; its root halves the exponent)."""
    top = hi.abs().max().clamp(min=torch.finfo(torch.float32).tiny)
    return torch.floor(_df._exponent(top) * 0.5) * 2


def _loop(x, body, carry):
    dev = backend(x.device)
    dev.materialize(list(carry))  # the loop's inputs: finished work
    return dev.device_loop(body, carry, 0, _STEPS, until=len(carry) - 1)


def _sqrt32(a):
    """(X ~ A^1/2, its relative residual ||X X - A||_F / ||A||_F, inf where the iteration
    did not settle) for float32 ``a`` (an even power of two near max |A| scaled out
    exactly): scaled Denman-Beavers."""
    e = _scale_exponent(a)
    b = a * _df._pow2(-e)
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    one = torch.ones((), dtype=a.dtype, device=a.device)

    def body(carry, _):
        y, z, prev, _ = carry
        yi, zi = torch.linalg.inv_ex(y)[0], torch.linalg.inv_ex(z)[0]
        mu = ((_fro(yi) ** 2 + _fro(zi) ** 2) / (_fro(y) ** 2 + _fro(z) ** 2)).sqrt().sqrt()
        mu = torch.where(prev > 1e-2, mu, one)  # (scaling off near convergence)
        y1, z1 = 0.5 * (mu * y + zi / mu), 0.5 * (mu * z + yi / mu)
        change = _fro(y1 - y) / _fro(y1)
        return y1, z1, change, ~(prev > _DONE)  # (NaN: done)

    y, _, _, done = _loop(a, body, (b, eye, one, torch.zeros((), dtype=torch.bool,
                                                                device=a.device)))
    resid = _fro(y @ y - b) / _fro(b)  # (not converged in _STEPS: inf)
    return y * _df._pow2(e * 0.5), torch.where(done, resid, torch.inf)


def _sum_sylvester(t, f, pattern, loop):
    """Y with T Y + Y T = F in float32 (T quasi upper triangular, its 2x2 blocks taken
    with their mean diagonal): tile (I, J) needs the tiles below it in column J and left
    of it in row I, so fronts of equal block distance I - J are solved from the lower left
    corner (2n - 1 fronts, one device loop whose body compiles once, the block pattern as
    data).  A tile's D_I X + X D_J = R in closed form: with D = a I + E (E^2 = bc I),
    (s^2 - 4 bc_I bc_J) X = s P + 2 E_I P E_J, P = d R - E_I R - R E_J, d = a_I + a_J,
    s = d^2 - bc_I - bc_J."""
    first, second, partner, block = pattern
    n = t.shape[-1]
    scale = _df._pow2_ceil(t.abs().max().clamp(min=torch.finfo(t.dtype).tiny))
    t, f = t / scale, f / scale  # (exact; Y is unchanged)
    d = t.diagonal()
    a = 0.5 * (d + d[partner])
    e = torch.where(first | second, t.gather(1, partner[:, None])[:, 0], 0)  # E[i, p(i)]
    g = e[partner]  # E[p(j), j]
    bc = e * g
    delta = a[:, None] + a[None, :]
    sigma = delta * delta - bc[:, None] - bc[None, :]
    det = sigma * sigma - 4 * bc[:, None] * bc[None, :]
    det = torch.where(det != 0, det, 1)
    upper = torch.where(block[:, None] < block[None, :], t, 0)
    dist = block[:, None] - block[None, :]

    def tile(r):
        p = delta * r - e[:, None] * r[partner] - r[:, partner] * g[None, :]
        return (sigma * p + 2 * e[:, None] * p[partner][:, partner] * g[None, :]) / det

    def front(carry, k):
        (y,) = carry
        rest = f - (upper @ y + y @ upper)
        return (torch.where(dist == n - 1 - k, tile(rest), y),)

    (y,) = loop(front, (torch.zeros_like(t),), 0, 2 * n - 1)
    return y


def _sqrt_pair(A):
    """(the principal square root of the real pair A as a pair, whether A has complex
    eigenvalues: 2x2 blocks in the root's real Schur form), or None where the float32
    start did not converge (no real principal root: SciPy's result is complex) or the
    Newton steps did not."""
    e = _scale_exponent(A[0])  # A / 2^e, X * 2^(e/2): exact, no float32 under/overflow
    A = (A[0] * _df._pow2(-e), A[1] * _df._pow2(-e))
    x0, resid = _sqrt32(A[0])
    if not float(_r._fetch(resid)) <= _START:
        return None
    try:
        t, u = real_schur(x0)
    except LinAlgError:
        return None
    pattern = _pattern(t)
    pairs = pattern[0].any().to(t.dtype)
    loop = backend(t.device).device_loop
    X = (x0, torch.zeros_like(x0))
    prev = None
    for k in range(_NEWTON):
        R = _df.sub(A, _df.gemm(X, X))
        E = u @ _sum_sylvester(t, u.mT @ R[0] @ u, pattern, loop) @ u.mT
        X = _df.add_f(X, E)
        if k + 1 < _BLIND:
            continue
        dn, xn, two = (float(v) for v in _r._fetch(torch.stack([abs_max(E), abs_max(X[0]),
                                                                  pairs])))
        if not (np.isfinite(dn) and np.isfinite(xn)):
            return None
        if dn <= _r._EPS_DF * xn or (prev is not None and dn > 0.5 * prev
                                     and dn <= _r._NOISE * xn):
            root = _df._pow2(e * 0.5)
            return (X[0] * root, X[1] * root), bool(two)
        prev = dn
    return None


def _host(name, what, where, a, fn):
    return _r._on_host(f"scipy.linalg.{name}", _NO_REAL.format(what, where), fn, a)


def _other(name, a, *args, **kwargs):
    """Complex input: SciPy on the host (Neuron has no complex arithmetic)."""
    return _r._on_host(f"scipy.linalg.{name}", "complex input has no real method",
                       lambda h: getattr(_sl, name)(h, *args, **kwargs), a)


@register("linalg.sqrtm", "neuron")
def sqrtm(a, disp=True, blocksize=None):
    if a.ndim > 2:
        raise PerMatrix  # (the float32 iteration and the double-float refinement: one matrix)
    kw = {} if disp is True else {"disp": disp}
    host = lambda h: _sl.sqrtm(h, **kw)  # noqa: E731
    if a.is_complex() or a.dtype not in (torch.float32, torch.float64):
        return _other("sqrtm", a, **kw)
    if a.dtype == torch.float32:
        x, resid = _sqrt32(a)
        if not float(_r._fetch(resid)) <= _START:
            return _host("sqrtm", "square root", "negative real axis", a, host)
        x = x.contiguous()
        if disp is False:
            err = _fro(x @ x - a) ** 2 / _fro(a)
            return x, float(_r._fetch(err))
        return x
    A = _r._parts(a)
    X = _sqrt_pair(A)
    if X is None:
        return _host("sqrtm", "square root", "negative real axis", a, host)
    X = X[0]
    x = _transfer.df_tensor(*X)
    if disp is False:  # SciPy's ||X X - A||_F^2 / ||A||_F (float32 of the residual)
        R = _df.sub(_df.gemm(X, X), A)
        err = _fro(R[0]) ** 2 / _fro(A[0])
        return x, float(_r._fetch(err))
    return x


@register("linalg.signm", "neuron")
def signm(a, disp=True):
    if a.ndim > 2:
        raise PerMatrix  # (the double-float square root: one matrix)
    host = lambda h: _sl.signm(h) if disp else _sl.signm(h, disp=False)  # noqa: E731
    if a.is_complex() or a.dtype not in (torch.float32, torch.float64):
        return _other("signm", a) if disp else _r._on_host(
            "scipy.linalg.signm", "complex input has no real method", host, a)
    if disp is not True:  # SciPy's tuple depends on its funm's error estimate
        return _r._on_host("scipy.linalg.signm", "disp=False returns SciPy's own error "
                           "estimate", host, a)
    if a.dtype == torch.float32:  # SciPy: float32, or float64 where its funm estimate
        # sends it to its Newton iteration (an estimate from the complex Schur form)
        return _r._on_host("scipy.linalg.signm", "SciPy's float32 result dtype depends on "
                           "its funm error estimate", host, a)
    A = _r._parts(a)
    N = _sqrt_pair(_df.gemm(A, A))
    if N is None:
        return _host("signm", "sign", "imaginary axis", a, host)
    solve = kind_kernel("linalg.solve", "neuron")
    return solve(_transfer.df_tensor(*N[0]), a)


def _log_pair(A):
    """(log of the real pair A as a pair, whether A has complex eigenvalues), or None (no
    real logarithm found)."""
    eye = torch.eye(A[0].shape[-1], dtype=A[0].dtype, device=A[0].device)
    X, k, pairs = A, 0, None
    while True:
        gap = float(_r._fetch(abs_max((X[0] - eye).abs().sum(0))))
        if not np.isfinite(gap) or k > 40:
            return None
        if gap <= _GAP:
            break
        root = _sqrt_pair(X)
        if root is None:
            return None
        X, k = root[0], k + 1
        pairs = root[1] if pairs is None else pairs
    if pairs is None:  # (A near I: its own real Schur form's blocks)
        try:
            t, _ = real_schur(A[0])
        except LinAlgError:
            return None
        pairs = bool(_r._fetch((t.diagonal(-1) != 0).any()))
    Y = _df.add_f(X, -eye)  # X - I (exact for X near I)
    # log(I + Y) = sum_j w_j (I + x_j Y)^-1 Y, x_j the nodes on [0, 1]: one stacked solve
    nodes = [(node + 1) / 2 for node in _GL_NODES]
    M = [_df.add_f(_df.mul(_rf._const(x, eye), Y), eye) for x in nodes]
    M = tuple(torch.stack([m[i] for m in M]) for i in (0, 1))
    B = tuple(p.expand(len(nodes), *p.shape) for p in Y)
    solve = kind_kernel("linalg.solve", "neuron")
    Z = _r._parts(solve(_transfer.df_tensor(*M), _transfer.df_tensor(*B)))
    out = None
    for j, w in enumerate(_GL_WEIGHTS):
        t = _df.mul(_rf._const(w / 2 * 2.0 ** k, eye), (Z[0][j], Z[1][j]))
        out = t if out is None else _df.add(out, t)
    return out, pairs


@register("linalg.logm", "neuron")
def logm(a):
    """float64 input: real (SciPy drops an imaginary part within 1e6 eps); float32 input
    (SciPy computes in float32, returns double precision): the double-float logarithm of
    its values where its spectrum is real, SciPy's complex128 (host) otherwise."""
    if a.ndim > 2:
        raise PerMatrix  # (the double-float square roots: one matrix)
    host = lambda h: _sl.logm(h)  # noqa: E731
    if a.dtype not in (torch.float32, torch.float64):
        return _other("logm", a)
    L = _log_pair(_r._parts(a))
    if L is None:
        return _host("logm", "logarithm", "negative real axis", a, host)
    if L[1] and a.dtype == torch.float32:
        return _r._on_host("scipy.linalg.logm", "SciPy's float32 logm of complex "
                           "eigenvalues is complex", host, a)
    return _transfer.df_tensor(*L[0])


@register("linalg._logm_error", "neuron")
def _logm_error(f, a):
    """||expm(F) - A||_1 / ||A||_1 of a float64 F: the double-float expm and difference,
    the norms of its high parts (float32: an estimate, as SciPy's is)."""
    if f.dtype != torch.float64:
        return kind_kernel("linalg._logm_error", "generic")(f, a)
    d = _df.sub(_rf._expm_pair(_r._parts(f)), _r._parts(a))
    return d[0].abs().sum(0).max() / _r._parts(a)[0].abs().sum(0).max()


@register("linalg.fractional_matrix_power", "neuron")
def fractional_matrix_power(a, t):
    """Integer t: double-float repeated squaring (float64; other dtypes: the generic
    kernel's products in their dtype); otherwise expm(t logm(A)) in double-float, float64
    as SciPy's, where A's spectrum is real and positive (else SciPy's result is complex:
    the host)."""
    host = lambda h: _sl.fractional_matrix_power(h, t)  # noqa: E731
    if t == int(t) and a.dtype != torch.float64:
        return kind_kernel("linalg.fractional_matrix_power", "generic")(a, t)
    if a.ndim > 2:
        raise PerMatrix  # (the double-float methods: one matrix)
    if a.dtype not in (torch.float32, torch.float64):
        return _other("fractional_matrix_power", a, t)
    if t == int(t):
        return _transfer.df_tensor(*_power_pair(a, int(t)))
    L = _log_pair(_r._parts(a))
    if L is None:
        return _host("fractional_matrix_power", "logarithm", "negative real axis", a, host)
    if L[1]:
        return _r._on_host("scipy.linalg.fractional_matrix_power", "SciPy's result for "
                           "complex eigenvalues is complex", host, a)
    L = L[0]
    return _transfer.df_tensor(*_rf._expm_pair(_df.mul(_rf._const(t, L[0]), L)))


def _power_pair(a, p):
    """A^p of a float64 tensor for integer p, as a pair (binary powering)."""
    A = _r._parts(a)
    if p < 0:
        A, p = _r._parts(kind_kernel("linalg.inv", "neuron")(a)), -p
    eye = torch.eye(a.shape[-1], dtype=A[0].dtype, device=a.device)
    out = None
    while p:
        if p & 1:
            out = A if out is None else _df.gemm(out, A)
        p >>= 1
        if p:
            A = _df.gemm(A, A)
    return out if out is not None else (eye, torch.zeros_like(eye))
