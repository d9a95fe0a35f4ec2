"""expm_multiply on device data: SciPy 1.17's Al-Mohy-Higham algorithm, the same parameter
selection (m*, s) from the same norms, so results match SciPy's to rounding.

On CPU tensors SciPy's own function runs on zero-copy views (the "krylov" kernel); the
torch version below serves the other devices.  The norms that choose (m*, s) are read
on the host once per call; the trace of a LinearOperator without ``traceA`` is
estimated as SciPy does (Hutch++ with one sketch vector, a UserWarning).  The Taylor loop
of a single time point runs as the Krylov solvers do (``utils.run``): the stop test
``c1 + c2 <= tol ||F||`` is a device flag, read once per block of terms.  The interval
cores (``start``/``stop``) run a chunk's samples together in one such loop (``_chunk``):
the graphs depend on the shapes, not on the number of samples or terms.  Differs from
SciPy: ``B`` must be dense.
"""

import functools
import warnings

import numpy as np
import scipy.sparse.linalg as _scipy
import scipy.sparse.linalg._interface as _si
from scipy.sparse.linalg._expm_multiply import (
    LazyOperatorNormInfo,
    _fragment_3_1,
)

from trnscipy import _autograd
from trnscipy._dispatch import dispatch
from trnscipy._dtypes import absolute
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._isolve.utils import solver_kernel

__all__ = ["expm_multiply"]

_TOL = 2 ** -53


def _inf_norm(B):
    """np.linalg.norm(B, inf) of a dense tensor, on the device."""
    B = absolute(B)
    return B.max() if B.ndim == 1 else B.sum(dim=1).max()


def _is_sparse(A):
    return getattr(A, "_trnscipy_device_object", False) and hasattr(A, "tocsr")


def _floating(A):
    """An integer matrix in float64, as SciPy's A - mu I makes it (torch would take float32
    for an integer tensor times a Python float)."""
    if isinstance(A, torch.Tensor) and not (A.is_floating_point() or A.is_complex()):
        return A.to(torch.float64)
    if _is_sparse(A) and np.dtype(A.dtype).kind not in "fc":  # (NumPy dtypes, as SciPy's)
        return A.astype(np.float64)
    return A


def _shifted(A, mu):
    """A - mu I (SciPy forms it explicitly; so does this, in A's format)."""
    if mu == 0:
        return A
    n = A.shape[0]
    if _is_sparse(A):
        from trnscipy.sparse import eye

        return A - mu * eye(n, n, dtype=A.dtype, format=A.format, device=A.device)
    if isinstance(A, torch.Tensor):
        return A - mu * torch.eye(n, dtype=A.dtype, device=A.device)
    from trnscipy.sparse.linalg._interface import IdentityOperator

    return A - mu * IdentityOperator(A.shape, dtype=A.dtype)


def _exact_1_norm(A):
    if _is_sparse(A):
        return float(abs(A).sum(axis=0).max())
    return float(absolute(A).sum(dim=0).max())


def _trace(A):
    return A.trace() if _is_sparse(A) else torch.trace(A)


def _estimate_trace(A, B):
    """Hutch++ (Meyer, Musco, Musco, Woodruff 2021) with one sketch vector, as SciPy
    estimates a LinearOperator's trace: the exact trace on span(A s), Hutchinson's
    estimate on its complement; random signs from the host, products on B's device."""
    n = A.shape[0]
    dtype = _work_dtype(A, B)
    rng = np.random.default_rng()
    s, g = (torch.as_tensor(rng.choice([-1.0, 1.0], (n, 1)), dtype=dtype, device=B.device)
            for _ in range(2))
    q = A.matmat(s)
    size = torch.linalg.vector_norm(absolute(q))  # (XLA's norm takes no complex)
    # (a zero product leaves no direction: the sketch part is 0, Hutchinson's covers all)
    q = torch.where(size > 0, q / torch.where(size > 0, size, 1), torch.zeros_like(q))
    r = g - q @ (q.mH @ g)
    estimate = (q.mH @ A.matmat(q) + r.mH @ A.matmat(r)).reshape(())
    return to_host(estimate).item()  # (torch-xla's own copy garbles complex128)


def _check(A, B):
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected A to be like a square matrix")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes of matrices A {A.shape} and B {tuple(B.shape)} "
                         "are incompatible")
    if B.ndim not in (1, 2):
        raise ValueError("expected B to be like a matrix or a vector")
    return 1 if B.ndim == 1 else B.shape[1]


class _Problem:
    """A - mu I, mu, the norm information and the product, as SciPy sets them up."""

    def __init__(self, A, B, traceA):
        from trnscipy.sparse.linalg._interface import LinearOperator, _device_operator

        if isinstance(A, _si.LinearOperator) and not isinstance(A, LinearOperator):
            A = _device_operator(A, B.device)  # (offload: SciPy's operator of host data)
        self.n0 = _check(A, B)
        A = _floating(A)
        n = A.shape[0]
        if traceA is None and isinstance(A, LinearOperator):
            warnings.warn("Trace of LinearOperator not available, it will be estimated. "
                          "Provide `traceA` to ensure performance.", stacklevel=4)
            traceA = _estimate_trace(A, B)
        elif traceA is None:
            traceA = _trace(A)
        if isinstance(traceA, torch.Tensor):  # (torch-xla's own copy drops imaginary parts)
            traceA = to_host(traceA).item()
        self.mu = complex(traceA) / float(n) if _is_complex(traceA) else \
            float(traceA) / float(n)
        self.A = _shifted(A, self.mu)
        if isinstance(A, LinearOperator):
            from trnscipy.sparse.linalg import onenormest

            self.norm1 = float(onenormest(self.A))
        else:
            self.norm1 = _exact_1_norm(self.A)
        op = self.A
        self.dot = op.matvec if isinstance(op, LinearOperator) and B.ndim == 1 else \
            op.matmat if isinstance(op, LinearOperator) else op.__matmul__

    def params(self, t, n0):
        if t * self.norm1 == 0:
            return 0, 1, None
        norm_info = _NormInfo(t * self.A, A_1_norm=t * self.norm1, ell=2)
        m_star, s = _fragment_3_1(norm_info, n0, _TOL, ell=2)
        return m_star, s, norm_info


def _is_complex(x):
    if isinstance(x, torch.Tensor):
        return x.is_complex()
    return isinstance(x, complex | np.complexfloating)


class _NormInfo(LazyOperatorNormInfo):
    """SciPy's norm information; d(p) = ||(tA)^p||_1^(1/p) from the routed onenormest on the
    device operator (SciPy: onenormest of the same power operator)."""

    def d(self, p):
        if p not in self._d:
            from trnscipy.sparse.linalg import aslinearoperator, onenormest

            est = float(onenormest(_Power(aslinearoperator(self._A), p)))
            self._d[p] = est ** (1.0 / p)
        return self._scale * self._d[p]


@functools.cache
def _power_operator():
    from trnscipy.sparse.linalg._interface import _PowerLinearOperator
    from trnscipy.sparse.linalg._isolve.utils import sync

    class Power(_PowerLinearOperator):
        """A^p whose products run one by one on lazy devices: the graphs of onenormest's
        steps are then one for every p, not one chain of p products for each p."""

        def _power(self, fun, x):
            for _ in range(self.args[1]):
                x = fun(x)
                sync(x.device)
            return x

    return Power


def _Power(A, p):
    return _power_operator()(A, p)


def _simple_core(problem, B, t, m_star, s):
    """SciPy's _expm_multiply_simple_core; the Taylor terms in device blocks."""
    from trnscipy.sparse.linalg._isolve.utils import run

    mu, dot, device = problem.mu, problem.dot, B.device
    F = B
    eta = np.exp(t * mu / float(s))
    rdtype = B.real.dtype if B.is_complex() else B.dtype
    t = torch.tensor([t], dtype=rdtype, device=device)  # (data, not a graph constant)

    def step(state, st, first):
        B, F, c1, j = state
        coeff = t / (s * (j + 1)).to(rdtype)  # SciPy's t / float(s (j + 1)): one rounding
        # B, not F, is masked after the stop (B = 0 leaves F as it is): a torch.where on
        # F, which every step's norm reads, would be copied into each later kernel on XLA
        B = st.keep(coeff.to(B.dtype) * dot(B), torch.zeros_like(B))
        c2 = _inf_norm(B)
        F = F + B
        st.stop_if(c1 + c2 <= _TOL * _inf_norm(F), 0)
        return B, F, c2, j + 1

    for _ in range(s):
        if m_star:
            state = (B, F, _inf_norm(B), torch.zeros((1,), dtype=torch.int64, device=device))
            F = run(step, state, m_star, device, block=None, peel=None, loop=True)[0][1]
        F = _scale(eta, F)
        B = F
    return F


def _scale(eta, F):
    """eta * F in F's dtype (SciPy's NumPy scalar times an array keeps the array's dtype
    for float32/complex64 where eta is real)."""
    if isinstance(eta, complex | np.complexfloating) and not F.is_complex():
        F = F.to(torch.complex128)
    return F * (eta.item() if hasattr(eta, "item") else eta)


@dispatch(_scipy.expm_multiply, double_float=("neuron",),
          grad=_autograd.expm_multiply)
@solver_kernel(_scipy.expm_multiply, operators=False)
def expm_multiply(A, B, start=None, stop=None, num=None, endpoint=None, traceA=None):
    sparse_b = _is_sparse(B)
    B = _as_tensor(B, A)
    if all(arg is None for arg in (start, stop, num, endpoint)):
        problem = _Problem(A, B, traceA)
        B = B.to(_work_dtype(problem.A, B))
        m_star, s, _ = problem.params(1.0, problem.n0)
        F = _simple_core(problem, B, 1.0, m_star, s)
        if sparse_b:  # SciPy's sparse B gives a CSR result (the interval's is dense)
            from trnscipy.sparse import csr_array

            return csr_array(F)
        return F
    return _interval(A, B, start, stop, num, endpoint, traceA)


def _as_tensor(B, A):
    if isinstance(B, torch.Tensor):
        return B
    if _is_sparse(B):
        return B.toarray()  # (the Taylor terms fill in: dense work, as SciPy's is)
    return torch.as_tensor(np.asarray(B), device=A.device)


def _work_dtype(A, B):
    from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype

    a = to_numpy_dtype(A.dtype) if isinstance(A.dtype, torch.dtype) else np.dtype(A.dtype)
    dtype = np.result_type(a, to_numpy_dtype(B.dtype))
    if dtype.kind not in "fc":
        dtype = np.result_type(dtype, np.float64)
    return to_torch_dtype(dtype)


def _interval(A, B, start, stop, num, endpoint, traceA):
    """SciPy's _expm_multiply_interval and its three cores."""
    from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype

    problem = _Problem(A, B, traceA)
    kwargs = {"retstep": True}
    if num is not None:
        kwargs["num"] = num
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
    samples, step = np.linspace(start, stop, **kwargs)
    nsamples = len(samples)
    if nsamples < 2:
        raise ValueError("at least two time points are required")
    q = nsamples - 1
    h = step
    t_0, t_q = samples[0], samples[q]
    dtype = to_torch_dtype(np.result_type(to_numpy_dtype(_work_dtype(problem.A, B)), float))
    B = B.to(dtype)
    t = t_q - t_0
    m_star, s, norm_info = problem.params(t, problem.n0)
    # the samples go into one buffer, row by row on the device (index_copy, the rows as
    # data): a stack of num lazy samples would be a graph growing with num; the last
    # chunk's padding rows (see _chunk) land past the samples
    d = q // s if q > s else 1
    X = torch.zeros((nsamples + d,) + tuple(B.shape), dtype=dtype, device=B.device)
    Z = _simple_core(problem, B, t_0, m_star, s).to(dtype)
    X = _put(X, 0, Z[None])
    if q <= s:
        if problem.norm1 * t == 0 or norm_info is None:
            m, s2 = 0, 1
        else:
            norm_info.set_scale(1.0 / q)
            m, s2 = _fragment_3_1(norm_info, problem.n0, _TOL, ell=2)
            norm_info.set_scale(1)
        for k in range(q):
            Z = _simple_core(problem, Z, h, m, s2).to(dtype)
            X = _put(X, k + 1, Z[None])
    else:
        j = q // d if q % s else s
        r = q - d * j if q % s else 0
        for i in range(j + 1 if q % s else s):
            effective_d = d if (not q % s or i < j) else r
            F = _chunk(problem, Z, h, m_star, d, effective_d)
            # (SciPy's np.exp(k h mu) on the host; the padding rows' factor is 0)
            etas = np.array([np.exp(k * h * problem.mu) if k <= effective_d else 0
                             for k in range(1, d + 1)])
            if np.iscomplexobj(etas) and not F.is_complex():
                F = F.to(torch.complex128)
            F = (F * torch.as_tensor(etas).to(B.device).reshape((d,) + (1,) * B.ndim)).to(dtype)
            X = _put(X, i * d + 1, F)
            Z = F[d - 1]
    return X[:nsamples]


def _put(X, at, rows):
    """X with rows at..at+len(rows)-1 replaced, the position as data (one graph for every
    position), computed now on lazy devices (a chain of puts would be one graph per num)."""
    from trnscipy.sparse.linalg._isolve.utils import sync

    index = torch.arange(at, at + rows.shape[0]).to(X.device)
    X = X.index_copy(0, index, rows)
    sync(X.device)
    return X


def _chunk(problem, K0, h, m_star, d, effective_d):
    """The samples k = 1..effective_d of one chunk of SciPy's interval cores 1 and 2:
    F_k = sum_p k^p K_p to each sample's own stop test (c1 + c2 <= tol ||F_k||), all d
    samples at once, one product K_p = h A K_(p-1) / p per term (SciPy's, which the samples
    share).  The terms run as the simple core's do (``utils.run``): h, the k's and the
    counters are device data, so every chunk and every call of these shapes replays one
    graph; samples past effective_d (the last chunk's) start stopped."""
    from trnscipy.sparse.linalg._isolve.utils import run

    device, dot = K0.device, problem.dot
    rdtype = K0.real.dtype if K0.is_complex() else K0.dtype
    # shape (1,) uploads: torch-xla makes a 0-d 0 or 1 a graph constant
    h = torch.tensor([h], dtype=rdtype, device=device)
    ks = torch.arange(1, d + 1, dtype=rdtype).to(device)
    live = (torch.arange(1, d + 1) <= effective_d).to(device)
    lead = (d,) + (1,) * K0.ndim  # a sample's scalar against its F

    def norms(F):  # _inf_norm of each sample
        F = absolute(F)
        return F.amax(dim=-1) if F.ndim == 2 else F.sum(dim=-1).amax(dim=-1)

    def step(state, st, first):
        K, F, c1, coeff, live, p = state
        p = p + 1
        K = h * dot(K)
        # (NumPy's complex quotient by a real p is a product with 1/p; so is this one)
        K = K * (1 / p.to(rdtype)) if K.is_complex() else K / p.to(rdtype)
        coeff = coeff * ks  # k^p, exact while below 2^53 (SciPy's float(pow(k, p)))
        G = F + coeff.reshape(lead).to(K.dtype) * K
        c2 = coeff * _inf_norm(K)
        F = torch.where(live.reshape(lead), G, F)
        stop = c1 + c2 <= _TOL * norms(F)
        c1 = torch.where(live, c2, c1)
        live = live & ~stop
        st.stop_if(~live.any(), 0)
        return K, F, c1, coeff, live, p

    F = K0.unsqueeze(0).expand(lead[:1] + tuple(K0.shape)).clone()
    c1 = _inf_norm(K0).reshape(1).expand(d).clone()
    state = (K0, F, c1, torch.ones(d, dtype=rdtype, device=device), live,
             torch.zeros((1,), dtype=torch.int64, device=device))
    return run(step, state, m_star, device, block=None, peel=None, loop=True)[0][1]
