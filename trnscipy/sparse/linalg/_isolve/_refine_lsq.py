"""float64 lsqr and lsmr on a Neuron device: the float32 solver, then double-float
refinement on the normal equations (called by the 'neuron' ``krylov`` kernel).

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  The solve:

1. the float32 lsqr (lsmr) on A's and b's float32 parts to a relative tolerance of about
   1e-5: the start x, and the estimates SciPy returns (``anorm``, ``acond``, ``var``);
2. in double-float: r = b - A x and the normal-equations residual
   g = A^T r - damp^2 (x - x0) (x0: SciPy's start, which its damping term is centred on),
   and the norms of SciPy's stopping tests, read once per step;
3. steps until double-float's level (SciPy's tests 4, 5 at 2**-44 where SciPy tests
   float64's eps), istop the first of SciPy's tests that holds there (1, 2 on the user's
   atol/btol, else 4, 5); each step's correction d solves
   (A^T A + damp^2 I) d = g by float32 cg on the normal equations (A's and A^T's float32
   copies; one device loop that stops on the device), and x += d in double-float, in the
   graph of the next step's norms: one graph execution and one host read a step.

Each step shrinks the error by about max(1e-4, eps32 cond(A)^2): corrections from the
residual of the normal equations, not of b - A x, so a large least-squares residual does
not set a floor (the float32 products of A^T r with r ~ ||b|| would).  Where a step does
not halve ||g|| before SciPy's tests hold (cond(A) beyond about 3e3; after, the last x
that met them is returned), or the float32 solver stops on its iteration
limit or condition estimate, SciPy runs the solve on the host from the exact data,
announced (its unconverged or ill-conditioned float64 iterate is not what float32
iterations reproduce).

Differs from SciPy: ``itn`` counts the float32 solver's iterations plus one per refinement
step; ``anorm``/``normA``, ``acond``/``condA`` and ``var`` are the float32 solver's
estimates; the norms of the residuals and of x are computed from the returned x.
``show`` and operators given by functions run on the host, announced.
"""

import inspect
import warnings

import numpy as np

from trnscipy import _transfer
from trnscipy._double_float import is_float64
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import _on_host
from trnscipy.sparse.linalg._isolve import utils
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _parts
from trnscipy.sparse.linalg._isolve.iterative import cg_iteration

__all__ = ["least_squares"]

_TOL32 = 1e-5  # the float32 stage's atol/btol (at least)
_INNER_RTOL = 1e-4  # a correction's float32 cg: relative residual
_MAX_STEPS = 30
_EPS_DF = 2.0 ** -44  # double-float's "machine" level in SciPy's tests 4 and 5
_EPS = float(np.finfo(np.float64).eps)


def least_squares(scipy_solver, device_solver, args, kwargs):
    """lsqr/lsmr: the refined solve for float64 operands, else the device solver."""
    bound = inspect.signature(scipy_solver).bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    A, b = p["A"], p["b"]
    name = scipy_solver.__name__
    if any(_is_complex(v) for v in (A, b, p["x0"])):
        return _on_host(scipy_solver, p, "a Neuron device has no complex arithmetic")
    if not (is_float64(A) or is_float64(b)):
        return device_solver(*args, **kwargs)
    if p["show"]:
        return _on_host(scipy_solver, p, "show's per-iteration table has no double-float "
                        "method")
    try:
        op = _df_operator(A)
    except TypeError:
        return _on_host(scipy_solver, p, f"a {type(A).__name__} operator has no "
                        "double-float product")
    device = op.parts[0].device
    m, n = op.shape
    b = _as_device(b, device)
    if b.numel() != m:
        return device_solver(*args, **kwargs)  # the solver's own shape error
    bp = tuple(t.reshape(-1) for t in _parts(b))
    x0 = p["x0"]
    c = None if x0 is None else tuple(t.reshape(-1) for t in _parts(_as_device(x0, device)))
    damp = float(p["damp"])
    limit = "iter_lim" if name == "lsqr" else "maxiter"
    kw = {"damp": damp, "atol": max(float(p["atol"]), _TOL32),
          "btol": max(float(p["btol"]), _TOL32), "conlim": p["conlim"],
          limit: p[limit], "x0": None if c is None else c[0]}
    if name == "lsqr":
        kw["calc_var"] = p["calc_var"]
    with warnings.catch_warnings():  # the float32 stage's notices are not the user's
        warnings.simplefilter("ignore", UserWarning)
        out = device_solver(op.float32, bp[0], **kw)
    istop32 = int(out[1])
    if istop32 == 0:  # SciPy's early return: x = x0 (exactly) or zeros
        x = out[0] if c is None else _transfer.df_tensor(*c)
        return (x, *out[1:])
    if istop32 in (3, 6, 7):
        return _on_host(scipy_solver, p, "the float32 solve that starts the double-float "
                        "refinement stopped on its iteration limit or condition estimate "
                        f"(istop {istop32}): SciPy's float64 iterate is computed on the host")
    x32 = _parts(out[0])[0].reshape(-1)
    refined = _Refinement(op, _transposed(A), bp, c, damp, device)
    found = refined.run((x32, torch.zeros_like(x32)), float(out[5]), float(p["atol"]),
                        float(p["btol"]), lsmr=name == "lsmr")
    if found is None:
        return _on_host(scipy_solver, p, "the double-float refinement stagnated (condition "
                        "too large for float32 corrections)")
    x, istop, steps, r1norm, r2norm, arnorm, dxnorm, xnorm = found
    itn = int(out[2]) + steps
    if name == "lsqr":
        var = out[9]
        return (x, istop, itn, r1norm, r2norm, float(out[5]), float(out[6]),
                np.float64(arnorm), dxnorm, var)
    return (x, istop, itn, r2norm, np.float64(arnorm), float(out[5]), np.float64(out[6]),
            xnorm)


def _is_complex(x):
    if x is None:
        return False
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype.is_complex
    return np.dtype(dtype if dtype is not None else np.asarray(x).dtype).kind == "c"


def _as_device(x, device):
    if isinstance(x, torch.Tensor):
        return x
    return _transfer.tensor_on(np.asarray(x, dtype=np.float64), device)


class _Refinement:
    """Refinement steps for min ||A x - b||^2 + damp^2 ||x - c||^2 (module docstring)."""

    def __init__(self, op, AT, b, c, damp, device):
        self.op, self.b, self.c = op, b, c
        self.opT = _df_operator(AT)
        self.damp = damp
        self.device = device
        n = op.shape[1]
        self.dsq = _pair(damp * damp, device)
        A32, AT32 = op.float32, self.opT.float32
        dsq32 = float(np.float32(damp * damp))

        def matvec(v):
            v = v.reshape(-1)
            w = AT32 @ (A32 @ v)
            return w + dsq32 * v if damp else w

        self.normal = utils.Local(matvec, lambda v: v)
        self.maxiter = max(50, 4 * int(np.sqrt(n)))

    def residuals(self, x):
        """r = b - A x, g = A^T r - damp^2 (x - c), x - c (double-float)."""
        r = _df.sub(self.b, self.op.product(x))
        g = self.opT.product(r)
        dx = x if self.c is None else _df.sub(x, self.c)
        if self.damp:
            g = _df.sub(g, _df.mul(self.dsq, dx))
        return r, g, dx

    def run(self, x, anorm, atol, btol, lsmr):
        """(x, istop, steps, ||r||, ||[r; damp dx]||, ||g||, ||dx||, ||x||) at double-float's
        level (SciPy's tests 4 or 5 at 2**-44), reporting the first of SciPy's tests that
        holds: a float64 iterate lands far below SciPy's tests where it converges, a float32
        start x that barely meets them does not (1e-7 where SciPy's is exact).  Where a step
        does not halve ||g||, the last x that met SciPy's tests, else None."""
        read = backend(self.device).materialize
        bnorm = accepted = None
        prev = np.inf
        for step in range(_MAX_STEPS):
            r, g, dx = self.residuals(x)
            pairs = [_df.norm(v) for v in (r, g, dx, x, self.b)]
            norms = torch.stack([p[0] for p in pairs] + [p[1] for p in pairs])
            gn = norms[1]
            rhs = g[0] / torch.where(gn > 0, gn, torch.ones_like(gn))
            read([norms, rhs, *x])
            host = np.asarray(norms.cpu(), dtype=np.float64)  # one read: the norms' parts
            rn, gnorm, dxn, xn, bn = host[:5] + host[5:]
            scale = norms[1:2]
            bnorm = bn if bnorm is None else bnorm
            r2 = float(np.hypot(rn, self.damp * dxn))
            xnorm = xn if lsmr else dxn
            test1 = r2 / bnorm
            test2 = gnorm / (anorm * r2 + (0.0 if lsmr else _EPS)) if anorm * r2 else np.inf
            t1 = test1 / (1 + anorm * xnorm / bnorm)
            rtol = btol + atol * anorm * xnorm / bnorm
            met = 1 if test1 <= rtol else 2 if test2 <= atol else 0
            found = (_transfer.df_tensor(*x), met, step, rn, r2, gnorm, dxn, xn)
            if t1 <= _EPS_DF or test2 <= _EPS_DF or gnorm == 0:
                return (*found[:1], met or (4 if t1 <= _EPS_DF else 5), *found[2:])
            if not gnorm <= 0.5 * prev:
                return accepted  # stagnated: the last x that met SciPy's tests, or None
            accepted = found if met else None
            prev = gnorm
            # (traced, not run: it runs in the graph of the next step's norms)
            x = _df.add_f(x, self.correction(rhs) * scale)
        return None

    def correction(self, rhs):
        """d with (A^T A + damp^2 I) d = rhs by float32 cg from 0 to a relative residual
        of ``_INNER_RTOL`` (SciPy's cg test), as one device loop stopping on the device
        (no host read)."""
        V, tol = self.normal, _INNER_RTOL * utils.norm(rhs)

        def body(carry, _):
            *state, live, _ = carry
            s = utils.LazyStep(live, torch.zeros(1, dtype=torch.int64, device=live.device))
            state = cg_iteration(V, s, tuple(state), False, tol)
            return (*state, s.live, ~s.live)

        live = torch.ones((), dtype=torch.bool, device=rhs.device)
        zero = torch.zeros_like(rhs)
        out = backend(self.device).device_loop(
            body, (zero, rhs, zero, torch.ones_like(tol), live, ~live), 0, self.maxiter,
            until=5)
        return out[0]


def _transposed(A):
    """A^T with A's float64 data (a sparse container's: a view of the same data)."""
    from trnscipy.sparse.linalg._interface import MatrixLinearOperator

    if type(A) is MatrixLinearOperator:
        A = A.A
    return A.mT if isinstance(A, torch.Tensor) else A.T


def _pair(value, device):
    """A float64 host number as a double-float pair of 0-d device tensors (data)."""
    hi = np.float32(value)
    lo = np.float32(value - float(hi))
    return (torch.tensor(hi).to(device), torch.tensor(lo).to(device))
