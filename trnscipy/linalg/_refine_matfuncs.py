"""sqrtm, signm, logm and fractional_matrix_power of real matrices on a Neuron device
(see ``_refine``): real float32 arithmetic only, double-float where the result is float64.

- float32 start: the scaled Denman-Beavers iteration (Y -> A^1/2, Z -> A^-1/2; Frobenius
  norm scaling) and the scaled Newton iteration for the sign, each one device loop left
  on a flag (a step below 2**-10 and one more), one host read.  Its convergence is the
  test that the result is real: an eigenvalue on the closed negative real axis (sqrtm,
  logm) or on the imaginary axis (signm) leaves it unconverged, and SciPy runs on the
  exact values, announced.
- ``sqrtm`` (float64): Newton steps on the double-float residual R = A - X X (Ozaki
  GEMMs), the correction from X0 E + E X0 = R by the float32 real Bartels-Stewart of the
  float32 root X0 (``_kernels_struct.sylvester_factors``, one real Schur form, computed
  once: each step gains float32's precision), until E is below 2**-48 of X (a read per
  step, at most 8).
- ``signm`` (float64): sign(A) = N^-1 A with N = sqrtm(A^2) (A^2 by an Ozaki GEMM, N by
  the refinement above, the double-float solve): a Newton iteration on S would converge
  to the sign of its float32 start, not of A.
- ``logm`` (float64): inverse scaling and squaring, double-float square roots until
  ||X - I||_1 <= 1/4, then log(I + Y) as the degree-8 Gauss-Legendre partial fractions
  (one stacked double-float solve of the eight shifted systems), times 2^k.
- ``fractional_matrix_power`` (float64): integer t by double-float repeated squaring (the
  double-float inverse first for t < 0); otherwise expm(t logm(A)) in double-float.
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _kernels_struct as _ks
from trnscipy.linalg import _refine as _r
from trnscipy.linalg import _refine_funcs as _rf

_STEPS = 40  # float32 iteration steps at most (scaled: about 10 for cond 1e6)
_DONE = 2.0 ** -10  # a relative step this small: one more step reaches float32 rounding
_START = 1e-3  # the float32 root's relative residual accepted as a start (else: host)
_NEWTON = 8  # double-float Newton steps at most
_BLIND = 2  # of which before the first host read
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)  # log(I + Y), ||Y||_1 <= 1/4

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
    """(X ~ A^1/2, its relative residual ||X X - A||_F / ||A||_F) for float32 ``a`` (an
    even power of two near max |A| scaled out exactly): scaled Denman-Beavers."""
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

    y, _, _, _ = _loop(a, body, (b, eye, one, torch.zeros((), dtype=torch.bool,
                                                             device=a.device)))
    resid = _fro(y @ y - b) / _fro(b)
    return y * _df._pow2(e * 0.5), resid


def _sign32(a):
    """(S ~ sign(A), ||S S - I||_F / sqrt(n)) for float32 ``a``: the Newton iteration
    S -> (mu S + S^-1 / mu) / 2, mu = sqrt(||S^-1||_F / ||S||_F)."""
    e = _scale_exponent(a)
    one = torch.ones((), dtype=a.dtype, device=a.device)
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)

    def body(carry, _):
        s, prev, _ = carry
        si = torch.linalg.inv_ex(s)[0]
        mu = torch.where(prev > 1e-2, (_fro(si) / _fro(s)).sqrt(), one)
        s1 = 0.5 * (mu * s + si / mu)
        change = _fro(s1 - s) / _fro(s1)
        return s1, change, ~(prev > _DONE)

    s, _, _ = _loop(a, body, (a * _df._pow2(-e), one,
                              torch.zeros((), dtype=torch.bool, device=a.device)))
    return s, _fro(s @ s - eye) / (a.shape[-1] ** 0.5)


def _sqrt_pair(A):
    """The principal square root of the real pair A as a pair, or None where the float32
    start did not converge (no real principal root: SciPy's result is complex) or the
    Newton steps did not."""
    x0, resid = _sqrt32(A[0])
    if not float(_r._fetch(resid)) <= _START:
        return None
    factors = _ks.sylvester_factors(x0, x0)
    X = (x0, torch.zeros_like(x0))
    prev = None
    for k in range(_NEWTON):
        R = _df.sub(A, _df.gemm(X, X))
        E = _ks.sylvester_solve(factors, R[0])
        X = _df.add_f(X, E)
        if k + 1 < _BLIND:
            continue
        dn, xn = (float(v) for v in _r._fetch(torch.stack([E.abs().max(),
                                                             X[0].abs().max()])))
        if not (np.isfinite(dn) and np.isfinite(xn)):
            return None
        if dn <= _r._EPS_DF * xn or (prev is not None and dn > 0.5 * prev
                                     and dn <= _r._NOISE * xn):
            return X
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
    x = _transfer.df_tensor(*X)
    if disp is False:  # SciPy's ||X X - A||_F^2 / ||A||_F (float32 of the residual)
        R = _df.sub(_df.gemm(X, X), A)
        err = _fro(R[0]) ** 2 / _fro(A[0])
        return x, float(_r._fetch(err))
    return x


@register("linalg.signm", "neuron")
def signm(a, disp=True):
    host = lambda h: _sl.signm(h) if disp else _sl.signm(h, disp=False)  # noqa: E731
    if a.is_complex() or a.dtype not in (torch.float32, torch.float64):
        return _other("signm", a) if disp else _r._on_host(
            "scipy.linalg.signm", "complex input has no real method", host, a)
    if disp is not True:  # SciPy's tuple depends on its funm's error estimate
        return _r._on_host("scipy.linalg.signm", "disp=False returns SciPy's own error "
                           "estimate", host, a)
    if a.dtype == torch.float32:
        s, resid = _sign32(a)
        if not float(_r._fetch(resid)) <= _START:
            return _host("signm", "sign", "imaginary axis", a, host)
        return s.contiguous()
    A = _r._parts(a)
    N = _sqrt_pair(_df.gemm(A, A))
    if N is None:
        return _host("signm", "sign", "imaginary axis", a, host)
    solve = kind_kernel("linalg.solve", "neuron")
    return solve(_transfer.df_tensor(*N), a)


def _log_pair(A):
    """log of the real pair A as a pair, or None (no real logarithm found)."""
    eye = torch.eye(A[0].shape[-1], dtype=A[0].dtype, device=A[0].device)
    X, k = A, 0
    while True:
        gap = float(_r._fetch((X[0] - eye).abs().sum(0).max()))
        if not np.isfinite(gap) or k > 40:
            return None
        if gap <= 0.25:
            break
        X = _sqrt_pair(X)
        if X is None:
            return None
        k += 1
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
    return out


@register("linalg.logm", "neuron")
def logm(a):
    if a.dtype != torch.float64:  # SciPy: complex128 for float32 and complex input
        return _r._on_host("scipy.linalg.logm", "its float32 and complex results are "
                           "complex (SciPy's)", lambda h: _sl.logm(h), a)
    L = _log_pair(_r._parts(a))
    if L is None:
        return _host("logm", "logarithm", "negative real axis", a, lambda h: _sl.logm(h))
    return _transfer.df_tensor(*L)


@register("linalg.fractional_matrix_power", "neuron")
def fractional_matrix_power(a, t):
    host = lambda h: _sl.fractional_matrix_power(h, t)  # noqa: E731
    if t == int(t) and a.dtype != torch.float64:
        return kind_kernel("linalg.fractional_matrix_power", "generic")(a, t)
    if a.dtype != torch.float64:
        return _r._on_host("scipy.linalg.fractional_matrix_power", "its float32 and complex "
                           "results are complex (SciPy's)", host, a)
    A = _r._parts(a)
    if t == int(t):
        p = int(t)
        if p < 0:
            A, p = _r._parts(kind_kernel("linalg.inv", "neuron")(a)), -p
        eye = torch.eye(a.shape[-1], dtype=A[0].dtype, device=a.device)
        out = (eye, torch.zeros_like(eye))
        first = True
        while p:
            if p & 1:
                out = A if first else _df.gemm(out, A)
                first = False
            p >>= 1
            if p:
                A = _df.gemm(A, A)
        return _transfer.df_tensor(*out)
    L = _log_pair(A)
    if L is None:
        return _host("fractional_matrix_power", "logarithm", "negative real axis", a, host)
    return _transfer.df_tensor(*_rf._expm_pair(_df.mul(_rf._const(t, L[0]), L)))
