"""lsqr on device data: SciPy 1.17's LSQR (Paige-Saunders), its tests, istop codes and
10-tuple.

The scalar recurrences run as 0-d device tensors, the stop test is a device flag read
once per block (``utils.run``); after the stop the returned values are masked.  The
setup reads one value on the host (SciPy's early return when A^H b = 0).  Differs
from SciPy: the norms come back as Python floats, ``var`` as a tensor; the iteration
runs in the operands' precision (float32 stays float32; SciPy mixes in float64
scalars), and ``x`` and ``var`` are promoted to float64/complex128 as SciPy's are (a
device without float64 holds the float32 values exactly, as double-float).
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import call_device, dispatch
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on
from trnscipy.sparse.linalg._isolve.utils import (
    _coerce,
    _fast_matvec,
    _torch_to_char,
    as_operator,
    norm,
    run,
    solver_kernel,
    sync,
    traceable,
)

__all__ = ["lsqr"]

# Iterations per host read of the stop flag where a solve is not one device While (on
# XLA it is: the step body compiles once and the loop runs to the stop flag); on CUDA a
# captured graph of that many iterations is replayed.
BLOCK = 10


def block_length(show):
    """Iterations per host read: 1 with ``show`` (SciPy's per-iteration table)."""
    return 1 if show else BLOCK

_EPS = float(np.finfo(np.float64).eps)  # SciPy's module constant, whatever the dtype

_MSG = ("The exact solution is  x = 0                              ",
        "Ax - b is small enough, given atol, btol                  ",
        "The least-squares solution is good enough, given atol     ",
        "The estimate of cond(Abar) has exceeded conlim            ",
        "Ax - b is small enough for this machine                   ",
        "The least-squares solution is good enough for this machine",
        "Cond(Abar) seems to be too large for this machine         ",
        "The iteration limit has been reached                      ")


class LeastSquares:
    """The device least-squares system: operator products, b, x, dtypes."""

    def __init__(self, A, b, x0, device):
        from trnscipy._dtypes import to_torch_dtype

        if not isinstance(b, torch.Tensor):
            b = torch.as_tensor(np.asarray(b), device=device)
        b = torch.atleast_1d(b)
        if b.ndim > 1:
            b = b.squeeze()
        op = as_operator(A, device)
        self.m, self.n = op.shape
        achar = op.dtype.char if op.dtype is not None else "d"
        char = _coerce(achar, _torch_to_char(b.dtype))
        if x0 is not None:
            x0 = torch.atleast_1d(torch.as_tensor(x0, device=device))
            char = _coerce(char, _torch_to_char(x0.dtype))
        self.dtype = to_torch_dtype(np.dtype(char))
        self.float64 = capability(device_kind(device)).float64
        # the scalar recurrences in float64 where the device has it (SciPy's scalars are
        # Python floats for float32 data too); the vectors in the operands' precision
        self.real = torch.float64 if self.float64 else (
            self.dtype.to_real() if self.dtype.is_complex else self.dtype)
        self.b = b.to(self.dtype)
        self.x0_dtype = None if x0 is None else x0.dtype
        self.x0 = None if x0 is None else x0.to(self.dtype)
        self.device = device
        self.traceable = traceable(op)
        self.matvec = _fast_matvec(op, self.dtype)
        self.rmatvec = _fast_matvec(op.H, self.dtype)

    def bidiagonalization_start(self):
        """Golub-Kahan's first step: ||b||, x, u, beta, v, alpha (u = b - A x normalized,
        v = A^H u normalized; a zero beta or alpha leaves non-finite vectors, as SciPy's
        early returns then ignore them)."""
        bnorm = self.norm(self.b)
        if self.x0 is None:
            x = torch.zeros(self.n, dtype=self.dtype, device=self.device)
            u, beta = self.b, bnorm
        else:
            x = self.x0.clone()
            u = self.b - self.matvec(x)
            beta = self.norm(u)
        u = u * (1 / beta)
        v = self.rmatvec(u)
        alpha = self.norm(v)
        return bnorm, x, u, beta, v * (1 / alpha), alpha

    def norm(self, x):
        """||x|| in the scalar dtype."""
        return norm(x).to(self.real)

    def scalar(self, value):
        return torch.tensor(value, dtype=self.real, device=self.device)

    def data_scalar(self, value):
        """A NumPy scalar in the data's real dtype: SciPy's type for the scalars it
        computes from vector norms (np.float32 for float32 data)."""
        from trnscipy._dtypes import to_numpy_dtype

        real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
        return to_numpy_dtype(real).type(value)

    @staticmethod
    def out_dtype(dtype):
        """SciPy's dtype for what starts as float64 zeros (x without x0, var)."""
        return torch.complex128 if dtype.is_complex else torch.float64

    def result(self, x):
        """x in SciPy's dtype: x0's promoted with the iteration's, or as ``out_dtype``.
        A device without float64 holds the float32 values exactly (double-float)."""
        if self.x0_dtype is None:
            return self.cast(x, self.out_dtype(x.dtype))
        return self.cast(x, torch.promote_types(self.x0_dtype, x.dtype))

    @staticmethod
    def cast(t, dtype):
        return tensor_on(t, t.device, dtype)


def sym_ortho(a, b):
    """SciPy's _sym_ortho (stable Givens rotation) on real 0-d tensors: c, s, r."""
    one = torch.ones_like(a)
    a0, b0 = a == 0, b == 0
    big_b = b.abs() > a.abs()
    tau = torch.where(big_b, a / torch.where(b0, one, b), b / torch.where(a0, one, a))
    t = torch.sqrt(1 + tau * tau)
    s_b = torch.sign(b) / t
    c_a = torch.sign(a) / t
    c = torch.where(big_b, s_b * tau, c_a)
    s = torch.where(big_b, s_b, c_a * tau)
    r = torch.where(big_b, b / torch.where(s == 0, one, s), a / torch.where(c == 0, one, c))
    c = torch.where(b0, torch.sign(a), torch.where(a0, 0 * a, c))
    s = torch.where(b0, 0 * a, torch.where(a0, torch.sign(b), s))
    r = torch.where(b0, a.abs(), torch.where(a0, b.abs(), r))
    return c, s, r


def settle(s, values, eye):
    """The 0-d tensors ``values`` through one small reduction, on graph devices.

    XLA fuses a chain of scalar ops into every kernel that consumes its end, so carried
    scalar recurrences made the unrolled block's graph grow with the square of its length
    (a 25-iteration lsqr block compiled for minutes).  A reduction is a fusion root: the
    chain stops at each iteration.  ``eye`` is device data (an identity), not a constant
    the compiler could fold away."""
    if not s.lazy:
        return values
    packed = torch.stack(values)
    return tuple((packed[:, None] * eye).sum(0).unbind())


def read_floats(*values):
    """0-d or 1-element device tensors as Python floats, in one read (counts in float64
    where there is float64, else in the values' dtype: exact below 2**24)."""
    dtype = values[-1].dtype
    return torch.stack([v.reshape(()).to(dtype) for v in values]).tolist()


@dispatch(_scipy.lsqr, double_float=("neuron",))
@solver_kernel(_scipy.lsqr)
def lsqr(A, b, damp=0.0, atol=1e-6, btol=1e-6, conlim=1e8, iter_lim=None, show=False,
         calc_var=False, x0=None):
    device = call_device((A, b, x0))
    system = LeastSquares(A, b, x0, device)
    m, n = system.m, system.n
    matvec, rmatvec, scalar, snorm = system.matvec, system.rmatvec, system.scalar, system.norm
    iter_lim = 2 * n if iter_lim is None else int(iter_lim)
    dampsq = damp ** 2
    ctol = 1 / conlim if conlim > 0 else 0
    if show:
        print(" ")
        print("LSQR            Least-squares solution of  Ax = b")
        print(f"The matrix A has {m} rows and {n} columns")
        print(f"damp = {damp:20.14e}   calc_var = {calc_var:8g}")
        print(f"atol = {atol:8.2e}                 conlim = {conlim:8.2e}")
        print(f"btol = {btol:8.2e}               iter_lim = {iter_lim:8g}")

    bnorm, x, u, beta, v, alfa = system.bidiagonalization_start()
    var = torch.zeros(n, dtype=system.dtype if calc_var else system.real, device=device)
    if calc_var and not system.dtype.is_complex:
        var = var.to(system.real)
    sync(device)
    beta_h, alfa_h = read_floats(beta, alfa)
    if not beta_h > 0:
        alfa_h = 0.0
    if alfa_h * beta_h == 0:  # SciPy's early return (its x is then x0 or zeros)
        if show:
            print(_MSG[0])
        x = system.result(x) if x0 is not None else system.cast(
            x.real, system.out_dtype(system.real))
        beta_s = system.data_scalar(beta_h)
        return (x, 0, 0, beta_s, beta_s, 0, 0, system.data_scalar(alfa_h * beta_h), 0,
                system.cast(var, system.out_dtype(var.dtype)))
    if show:
        print(" ")
        print("   Itn      x[0]       r1norm     r2norm ", " Compatible    LS      Norm A   Cond A")
        print(f"{0:6g} {float(x[0].real):12.5e}", f" {beta_h:10.3e} {beta_h:10.3e}",
              f"  {1:8.1e} {alfa_h / beta_h:8.1e}")

    zero = scalar(0.0)
    limit = torch.tensor([iter_lim], device=device)
    eye = torch.eye(15, dtype=system.real).to(device)

    def step(state, s, first):
        (x, u, v, w, var, itn, alfa, rhobar, phibar, anorm, ddnorm, res2, xxnorm, z, cs2, sn2,
         out) = state
        itn = itn + 1
        u = matvec(v) - alfa * u
        beta = snorm(u)
        pos = beta > 0
        # (scalar guards only: a torch.where on carried vectors is copied into every later
        # kernel of the block on XLA; beta = 0 ends the solve at this iteration, and the
        # alfa and v it leaves differ from SciPy's only where they no longer reach a result)
        u = u * torch.where(pos, 1 / beta, 1)
        anorm = torch.where(pos, torch.sqrt(anorm ** 2 + alfa ** 2 + beta ** 2 + dampsq), anorm)
        v = rmatvec(u) - beta * v
        alfa = snorm(v)
        v = v * torch.where(alfa > 0, 1 / alfa, 1)
        if damp > 0:
            rhobar1 = torch.sqrt(rhobar ** 2 + dampsq)
            psi = (damp / rhobar1) * phibar
            phibar = (rhobar / rhobar1) * phibar
        else:
            rhobar1, psi = rhobar, zero
        cs, sn, rho = sym_ortho(rhobar1, beta)
        theta = sn * alfa
        rhobar = -cs * alfa
        phi = cs * phibar
        phibar = sn * phibar
        tau = sn * phi
        dk = (1 / rho) * w
        x_new = x + (phi / rho) * w
        w = v + (-theta / rho) * w
        ddnorm = ddnorm + snorm(dk) ** 2
        if calc_var:
            var = s.keep(var + dk ** 2, var)
        delta = sn2 * rho
        gambar = -cs2 * rho
        rhs = phi - delta * z
        zbar = rhs / gambar
        xnorm = torch.sqrt(xxnorm + zbar ** 2)
        gamma = torch.sqrt(gambar ** 2 + theta ** 2)
        cs2 = gambar / gamma
        sn2 = theta / gamma
        z = rhs / gamma
        xxnorm = xxnorm + z ** 2
        acond = anorm * torch.sqrt(ddnorm)
        res2 = res2 + psi ** 2
        rnorm = torch.sqrt(phibar ** 2 + res2)
        arnorm = alfa * tau.abs()
        if damp > 0:
            r1sq = rnorm ** 2 - dampsq * xxnorm
            r1norm = torch.sqrt(r1sq.abs())
            r1norm = torch.where(r1sq < 0, -r1norm, r1norm)
        else:
            r1norm = rnorm
        test1 = rnorm / bnorm
        test2 = arnorm / (anorm * rnorm + _EPS)
        test3 = 1 / (acond + _EPS)
        t1 = test1 / (1 + anorm * xnorm / bnorm)
        rtol = btol + atol * anorm * xnorm / bnorm
        istop = torch.zeros((1,), dtype=torch.int64, device=device)
        for cond, code in ((itn >= limit, 7), (1 + test3 <= 1, 6), (1 + test2 <= 1, 5),
                           (1 + t1 <= 1, 4), (test3 <= ctol, 3), (test2 <= atol, 2),
                           (test1 <= rtol, 1)):
            istop = torch.where(cond, code, istop)
        (alfa, rhobar, phibar, anorm, ddnorm, res2, xxnorm, z, cs2, sn2, r1norm, rnorm, acond,
         arnorm, xnorm) = settle(s, (alfa, rhobar, phibar, anorm, ddnorm, res2, xxnorm, z, cs2,
                                     sn2, r1norm, rnorm, acond, arnorm, xnorm), eye)
        out_new = (itn, r1norm, rnorm, anorm, acond, arnorm, xnorm, istop)
        out = tuple(s.keep(a, b) for a, b in zip(out_new, out, strict=True))
        x = s.keep(x_new, x)
        if show:
            _show_line(itn, x, r1norm, rnorm, test1, test2, test3, anorm, acond, rtol, ctol,
                       atol, istop, n, iter_lim)
        s.stop_if(istop[0] != 0, istop[0])
        return (x, u, v, w, var, itn, alfa, rhobar, phibar, anorm, ddnorm, res2, xxnorm, z,
                cs2, sn2, out)

    itn0 = torch.zeros((1,), dtype=torch.int64, device=device)
    out = (itn0, beta, beta, zero, zero, alfa * beta, zero, itn0)
    state = (x, u, v, v.clone(), var, itn0, alfa, alfa.clone(), beta.clone(), zero, zero, zero,
             zero, zero, scalar(-1.0), zero, out)
    state, _ = run(step, state, iter_lim, device, block=block_length(show), peel=None,
                   host_effects=show or not system.traceable, loop=True)
    x, var, out = state[0], state[4], state[-1]
    istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm = read_floats(out[-1], *out[:-1])
    istop, itn = int(istop), int(itn)
    if show:
        print(" ")
        print("LSQR finished")
        print(_MSG[istop])
        print(" ")
        print(f"istop ={istop:8g}   r1norm ={r1norm:8.1e}" + "   "
              + f"anorm ={anorm:8.1e}   arnorm ={arnorm:8.1e}")
        print(f"itn   ={itn:8g}   r2norm ={r2norm:8.1e}" + "   "
              + f"acond ={acond:8.1e}   xnorm  ={xnorm:8.1e}")
        print(" ")
    return (system.result(x), istop, itn, r1norm, r2norm, anorm, acond,
            system.data_scalar(arnorm), xnorm,
            system.cast(var, system.out_dtype(var.dtype)))


def _show_line(itn, x, r1norm, r2norm, test1, test2, test3, anorm, acond, rtol, ctol, atol,
               istop, n, iter_lim):
    itn, test1, test2, test3 = int(itn[0]), float(test1), float(test2), float(test3)
    if (n <= 40 or itn <= 10 or itn >= iter_lim - 10 or test3 <= 2 * ctol
            or test2 <= 10 * atol or test1 <= 10 * float(rtol) or int(istop[0]) != 0):
        print(f"{itn:6g} {float(x[0].real):12.5e}", f" {float(r1norm):10.3e} "
              f"{float(r2norm):10.3e}", f"  {test1:8.1e} {test2:8.1e}",
              f" {float(anorm):8.1e} {float(acond):8.1e}")
