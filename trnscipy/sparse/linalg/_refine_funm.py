"""float64 ``funm_multiply_krylov`` on a Neuron device: SciPy 1.17's restarted Arnoldi
(Lanczos for ``assume_a='hermitian'``) with every vector operation in double-float
(``_kernels._df``: float32 operations only): the products by A's double-float operator,
modified Gram-Schmidt with double-float inner products and updates, scaled norms, the
quotients.  Each step's column of the projection H and its norm are read to the host as
float64 (SciPy's breakdown test ``||w|| < eps**2``); ``f`` is called on the host's H as
SciPy calls it, and the result ``||b|| V c`` is a double-float sum on the device.

Differs from the float32 method: a host read per Arnoldi step (not per restart cycle), and
one graph per step of a cycle (the Gram-Schmidt loop grows with the step).
"""

import inspect

import numpy as np
from scipy.linalg import norm as _host_norm
from scipy.sparse.linalg._isolve.iterative import _get_atol_rtol

from trnscipy import _transfer
from trnscipy._double_float import is_float64
from trnscipy._kernels import _df, backend
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import _on_host
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _parts

__all__ = ["funm_multiply_krylov"]


def funm_multiply_krylov(scipy_func, device_func, args, kwargs):
    """The double-float iteration for real float64 operands, else the device function."""
    from trnscipy.sparse.linalg._funm_multiply_krylov import checked

    bound = inspect.signature(scipy_func).bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    A, b = p["A"], p["b"]
    a_dtype = getattr(A, "dtype", None)
    if not (is_float64(b) or a_dtype in (torch.float64, np.float64)):
        return device_func(*args, **kwargs)
    if b.dtype not in (torch.float32, torch.float64) or a_dtype not in (
            torch.float32, torch.float64, np.float32, np.float64):
        return _on_host(scipy_func, p, "complex or integer operands have no double-float "
                        "method", device=b.device)
    hermitian, n, m, max_restarts = checked(p["assume_a"], b, p["restart_every_m"],
                                            p["max_restarts"])
    try:
        op = _df_operator(A)
    except TypeError:
        return _on_host(scipy_func, p, f"a {type(A).__name__} operator has no double-float "
                        "product", device=b.device)
    if tuple(op.shape) != (n, n):
        raise ValueError(f"shapes of A {tuple(op.shape)} and b {(n,)} are incompatible")
    f, t = p["f"], p["t"]
    bp = _parts(b)
    bnorm = float(_read([*_df.norm(bp)])[0].sum())
    atol, _ = _get_atol_rtol("funm_multiply_krylov", bnorm, p["atol"], p["rtol"])
    if bnorm == 0:
        return b.clone()
    eps2 = float(np.finfo(np.float64).eps) ** 2
    scale = _const(bnorm, b.device)
    mmax = m * max_restarts
    H = np.zeros((mmax + 1, mmax))
    v = _df.div(bp, scale)
    backend(b.device).materialize(list(v))
    V, j = _cycle(op, v, H[:m + 1, :m], m, eps2, hermitian)
    fH = np.asarray(f(t * H[:j, :j]))
    y = _df.mul(scale, _combine(fH[:, 0], V))
    if j < m:  # breakdown: the Krylov space is invariant
        return _transfer.df_tensor(*y)
    update_norm = _host_norm(bnorm * fH[:, 0])
    restart = 1
    while restart < max_restarts and update_norm > atol:
        begin, end = restart * m, (restart + 1) * m
        V, j = _cycle(op, V[m], H[begin:end + 1, begin:end], m, eps2, hermitian)
        fH = np.asarray(f(t * H[:begin + j, :begin + j]))
        c = fH[begin:begin + j, 0]
        if j < m:  # SciPy 1.17 multiplies all m basis vectors by j < m coefficients here
            raise ValueError(f"shapes ({n},{m}) and ({c.shape[0]},) not aligned: "
                             f"{m} (dim 1) != {c.shape[0]} (dim 0)")
        y = _df.add(y, _df.mul(scale, _combine(c, V)))
        backend(b.device).materialize(list(y))
        update_norm = _host_norm(bnorm * c)
        restart += 1
    return _transfer.df_tensor(*y)


def _cycle(op, v, H, m, eps2, hermitian):
    """m Arnoldi (Lanczos) steps from the unit vector ``v`` (a pair), SciPy's, in
    double-float; H's block filled with the host's float64 values.  Returns the basis
    (pairs) and the step of a breakdown (m: none)."""
    V = [v]
    for k in range(m):
        w = op.product(V[k])
        if hermitian:
            if k > 0:
                w = _df.sub(w, _df.mul(_const(H[k, k - 1], v[0].device), V[k - 1]))
            hs = [_df.dot(w, V[k])]
            w = _df.sub(w, _df.mul(hs[0], V[k]))
        else:
            hs = []
            for i in range(k + 1):  # modified Gram-Schmidt
                hs.append(_df.dot(V[i], w))
                w = _df.sub(w, _df.mul(hs[-1], V[i]))
        beta = _df.norm(w)
        nxt = _df.div(w, beta)  # (unused at a breakdown)
        # the step's numbers read and the new vector computed in one graph execution (a
        # pending vector would be recomputed in every later step's graph)
        values = _read([p for h in (*hs, beta) for p in h], also=nxt).reshape(-1, 2).sum(1)
        if hermitian:
            H[k, k] = values[0]
        else:
            H[:k + 1, k] = values[:-1]
        H[k + 1, k] = values[-1]
        if values[-1] < eps2:
            return V, k
        V.append(nxt)
        if hermitian and k < m - 1:
            H[k, k + 1] = values[-1]
    return V, m


def _const(x, device):
    """A float64 host number as a 0-d double-float pair on ``device``."""
    hi = np.float32(x)
    return (torch.tensor(hi).to(device),
            torch.tensor(np.float32(np.float64(x) - np.float64(hi))).to(device))


def _combine(c, V):
    """sum_i c_i V_i over the first len(c) basis vectors, in double-float (c: float64
    host coefficients, V: pairs)."""
    if len(c) == 0:
        z = torch.zeros_like(V[0][0])
        return z, z.clone()
    ch, cl = (torch.from_numpy(p).to(V[0][0].device) for p in _split(np.asarray(c)))
    rows = [torch.stack([v[i] for v in V[:len(c)]]) for i in range(2)]
    return _df.dot((ch[:, None], cl[:, None]), rows, dim=0)


def _split(c):
    hi = c.astype(np.float32)
    return hi, (c - hi).astype(np.float32)


def _read(parts, also=()):
    """Float32 device scalars read to the host in one read, as float64 (the tensors
    ``also`` computed in the same execution)."""
    both = torch.stack([q.reshape(()) for q in parts])
    backend(both.device).materialize([both, *also])
    return np.asarray(both.cpu(), dtype=np.float64)
