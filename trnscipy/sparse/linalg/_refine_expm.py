"""float64 expm_multiply on a Neuron device: SciPy's Al-Mohy-Higham truncated Taylor
series with scaling, its terms carried in double-float (called by the 'neuron' ``krylov``
kernel).

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  Not a refinement: the series
itself runs in double-float arithmetic (float32 operations only), as SciPy runs it in
float64:

- mu = trace(A) / n from a double-float sum of the stored diagonal (one host read), the
  shift A - mu I applied in each product (A x - mu x, the double-float sparse product),
  never formed;
- the parameters (m*, s) by SciPy's selection (``_fragment_3_1``) from the float32 copy of
  A - mu I (its exact 1-norm and ``onenormest`` of its powers, float32 device work):
  norms within float32 rounding of SciPy's, so the same (m*, s) but at a boundary of
  SciPy's table, where either choice meets the 2**-53 truncation bound;
- each term B = (t / (s (j+1))) (A - mu I) B and the sum F = F + B in double-float, the
  stop test c1 + c2 <= 2**-53 ||F||_inf on the float32 parts (a device flag, read once
  per block of terms, ``utils.run``), and F = exp(t mu / s) F in double-float.

The result carries double-float's rounding (about 2**-48 relative per operation) times
the series' growth, where SciPy's carries float64's.  The interval form (``start``,
``stop``, ``num``, ``endpoint``) and operators given by functions run on the host,
announced.
"""

import inspect

import numpy as np

from trnscipy import _transfer
from trnscipy._double_float import is_float64
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import _on_host
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _layout, _parts

__all__ = ["expm_multiply"]

_TOL = 2.0 ** -53


def expm_multiply(scipy_func, device_func, args, kwargs):
    """The double-float series for float64 operands, else the device function."""
    from trnscipy.sparse.linalg._expm_multiply import _check, _Problem

    bound = inspect.signature(scipy_func).bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    A, B = p["A"], p["B"]
    if not (is_float64(A) or is_float64(B)) or getattr(A, "dtype", None) in (
            torch.complex64, torch.complex128) or getattr(B, "dtype", None) in (
            torch.complex64, torch.complex128):
        return device_func(*args, **kwargs)
    if any(p[k] is not None for k in ("start", "stop", "num", "endpoint")):
        return _on_host(scipy_func, p, "the interval form has no double-float method")
    try:
        op = _df_operator(A)
    except TypeError:
        return _on_host(scipy_func, p, f"a {type(A).__name__} operator has no double-float "
                        "product")
    device = op.parts[0].device
    if not isinstance(B, torch.Tensor):
        B = _transfer.tensor_on(np.asarray(B, dtype=np.float64), device)
    n0 = _check(A, B)
    Bp = _parts(B)
    traceA = p["traceA"]
    trace = float(traceA) if traceA is not None else _trace(A, op)
    # SciPy's parameters from the float32 copy of A - mu I (SciPy: mu = trace / n)
    problem = _Problem(op.float32, Bp[0], trace)
    m_star, s, _ = problem.params(1.0, n0)
    mu = problem.mu
    F = _series(op, Bp, 1.0, mu, m_star, s, device)
    return _transfer.df_tensor(*F)


def _trace(A, op):
    """trace(A) as a float64 host number from a double-float sum of the stored diagonal."""
    if isinstance(A, torch.Tensor):
        d = (op.parts[0].diagonal(), op.parts[1].diagonal())
    else:
        from trnscipy.sparse.linalg._interface import MatrixLinearOperator

        if type(A) is MatrixLinearOperator:
            A = A.A
        layout = _layout(A)
        flat = [t.reshape(-1) for t in op.parts]
        m, w = layout.mask.shape
        rows = torch.arange(m, device=layout.cols.device)[:, None]
        on_diagonal = layout.mask & (layout.cols.reshape(m, w) == rows)
        zero = torch.zeros((), dtype=flat[0].dtype, device=flat[0].device)
        d = tuple(torch.where(on_diagonal, layout.values(t), zero).reshape(-1) for t in flat)
    total = _df.tree_sum(*d)
    parts = torch.stack(list(total))
    backend(parts.device).materialize([parts])
    hi, lo = np.asarray(parts.cpu(), dtype=np.float64)
    return float(hi + lo)


def _pair(value, device):
    """A float64 host number as a double-float pair of shape-(1,) device tensors (data,
    not graph constants)."""
    hi = np.float32(value)
    lo = np.float32(value - float(hi))
    return (torch.tensor([hi]).to(device), torch.tensor([lo]).to(device))


def _inf_norm(x):
    """||x||_inf (max row sum of |x|) of the float32 part, shape (1,)."""
    a = x.abs()
    return (a if a.ndim == 1 else a.sum(dim=1)).max().reshape(1)


def _series(op, B, t, mu, m_star, s, device):
    """SciPy's _expm_multiply_simple_core in double-float: F = e^{t mu} e^{t (A - mu I)} B."""
    from trnscipy.sparse.linalg._isolve.utils import run

    shape = B[0].shape
    B = tuple(v.contiguous() for v in B)
    mu_p = _pair(mu, device)
    # the pair's (1,) shape broadcast over B: a (1, 1) view for a 2-D B
    view = (lambda q: q) if len(shape) == 1 else (lambda q: (q[0][:, None], q[1][:, None]))
    t_s = t / float(s)

    def product(x):  # (A - mu I) x
        return _df.sub(op.product(x), _df.mul(view(mu_p), x))

    def step(state, st, first):
        bh, bl, fh, fl, c1, j = state
        j = j + 1
        coeff = _df.div(view(_pair_t(t_s, bh)), view((j.to(bh.dtype), torch.zeros_like(
            j, dtype=bh.dtype))))
        b = _df.mul(coeff, product((bh, bl)))
        bh = st.keep(b[0], torch.zeros_like(bh))
        bl = st.keep(b[1], torch.zeros_like(bl))
        c2 = _inf_norm(bh)
        fh, fl = _df.add((fh, fl), (bh, bl))
        st.stop_if((c1 + c2 <= _TOL * _inf_norm(fh))[0], 0)
        return bh, bl, fh, fl, c2, j

    F = B
    eta = _pair(np.exp(t * mu / float(s)), device)
    for _ in range(s):
        if m_star:
            j0 = torch.zeros((1,), dtype=torch.int64).to(device)
            state = (B[0], B[1], F[0], F[1], _inf_norm(B[0]), j0)
            # block=1: one While to the stop flag whatever m* (a block of unrolled
            # double-float terms compiles for minutes)
            out = run(step, state, m_star, device, block=1, peel=None, loop=True)[0]
            F = (out[2], out[3])
        F = _df.mul(view(eta), F)
        B = F
    return F


def _pair_t(value, like):
    """A float64 host constant as a double-float pair of shape (1,) in ``like``'s graph."""
    hi = float(np.float32(value))
    lo = float(np.float32(value - hi))
    return (torch.full((1,), hi, dtype=like.dtype, device=like.device),
            torch.full((1,), lo, dtype=like.dtype, device=like.device))
