"""eigsh on device data: thick-restart Lanczos with ARPACK's contract.

SciPy's ARPACK is implicitly restarted Lanczos; thick-restart Lanczos (Wu and Simon)
computes the same Ritz pairs with fixed-shape state, which XLA wants:

* the basis is a fixed ``(ncv + 1, n)`` tensor, B-orthonormal (B = I, M or A as in
  ARPACK's modes), with full reorthogonalization as two GEMVs per step (classical
  Gram-Schmidt, twice); a breakdown (an invariant subspace) continues with a
  deterministic pseudo-random direction, as ARPACK does with a random one;
* where the device loop leaves on a device flag (capability ``device_while``: XLA,
  Neuron) and OP is pure tensor code, the restart cycles are one XLA While: each cycle
  (rotate the basis to the ``p`` kept Ritz vectors, expand to ``ncv`` vectors, the
  projected eigenproblem by the refined device eigh, the convergence test, the restart)
  runs on the device, and a solve is one graph execution and one read.  Elsewhere (CUDA,
  operators with host reads) one cycle is one graph execution; the host reads the
  ``ncv x ncv`` projected matrix once per cycle and solves its eigenproblem (LAPACK), as
  ARPACK does;
* ARPACK's convergence test: ``|beta * s_last| <= tol * max(eps**(2/3), |theta|)``.

On CPU tensors the ``eigen`` kernel runs SciPy's ARPACK itself on zero-copy views.
What differs on devices: shift-invert factorizes ``A - sigma M`` (and mode 2 without
``Minv`` ``M``) on the device as SciPy does (``splu``: the multifrontal LU, its
substitutions inside the cycle graph; a dense LU for dense tensors); an operator given as
functions is inverted with ``gmres`` to SciPy's ``gmres_loose`` tolerance; the iteration
count (``ArpackNoConvergence``'s) counts restart cycles.
"""

import dataclasses
import warnings

import numpy as np
import scipy.sparse.linalg as _scipy
from array_api_compat import is_torch_array
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence

from trnscipy import _autograd
from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import dispatch
from trnscipy._dtypes import to_numpy_dtype
from trnscipy._kernels import _plan, backend
from trnscipy._torch import torch
from trnscipy._transfer import to_host
from trnscipy.sparse.linalg._eigen._common import (
    eigen_kernel,
    operator,
    pseudo_random,
    read_small,
    real_dtype,
    small_eigh,
    standard_problem,
)
from trnscipy.sparse.linalg._isolve.utils import dot

__all__ = ["eigs", "eigsh", "ArpackError", "ArpackNoConvergence"]

_SEUPD_WHICH = ["LM", "SM", "LA", "SA", "BE"]
_NEUPD_WHICH = ["LM", "SM", "LR", "SR", "LI", "SI"]


def _is_linear_operator(A):
    return isinstance(A, _scipy.LinearOperator)


def _is_sparse(A):
    return getattr(A, "_trnscipy_device_object", False) and not _is_linear_operator(A)


def _is_matrix(A):
    """None, a sparse container, a dense tensor, or an operator marked as pure tensor code
    (``pure_tensor_code``: svds' X^H X of a matrix), so traceable into a device loop."""
    return A is None or _is_sparse(A) or is_torch_array(A) or getattr(A, "pure_tensor_code",
                                                                      False)


def _device_of(*xs):
    for x in xs:
        device = getattr(x, "device", None)
        if device is not None:
            return device
    return torch.device("cpu")


def _operand_dtype(A, device):
    dtype = getattr(A, "dtype", None)
    if dtype is None:
        return torch.float64
    if isinstance(dtype, torch.dtype):
        return dtype
    from trnscipy._dtypes import to_torch_dtype

    dtype = np.dtype(dtype)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    return to_torch_dtype(dtype)


def _inner_solver(solver, op, rtol, what, **kw):
    """x -> op^-1 x by a routed trnscipy Krylov solver (for operators given as functions)."""
    def solve(x):
        y, info = solver(op, x, rtol=rtol, **kw)
        if info != 0:
            raise ValueError(f"Error in inverting {what}: function {solver.__name__} did not "
                             f"converge (info = {info}).")
        return y
    return solve


def _loose_rtol(tol, dtype, n):
    """SciPy's ``gmres_loose`` tolerance for the inner solves of operators: ARPACK's
    ``tol`` (2 eps where 0), at least 1000 sqrt(n) eps."""
    eps = float(torch.finfo(real_dtype(dtype)).eps)
    return max(float(tol) if tol > 0 else 2 * eps, 1000 * np.sqrt(n) * eps)


def _shift_invert(A, M, Aop, Mop, sigma, rtol, device):
    """(x -> (A - sigma M)^-1 x, pure, factors), as SciPy's get_OPinv_matvec: a sparse LU
    (``splu``, on the device) when A and M are sparse containers, a dense LU when one is a
    dense tensor, else ``gmres`` on the shifted operator to ``rtol`` (SciPy's gmres_loose).
    ``pure``: the solve is tensor code without graph cuts or host reads (the device LU's
    substitutions), so it runs inside the Lanczos loop's graph.  ``factors``: the device
    LU's ``traced_operator`` (the solve as a function of its factors), else None."""
    from trnscipy.sparse.linalg import gmres

    matrices = all(x is None or _is_sparse(x) or is_torch_array(x) for x in (A, M))
    if not matrices:
        return _inner_solver(gmres, _shifted(Aop, Mop, sigma, device), rtol,
                             "[A-sigma*M]", atol=0.0), False, None
    if _is_sparse(A) and (M is None or _is_sparse(M)):
        from trnscipy.sparse.linalg import splu

        lu = splu(_shifted_csc(A, M, sigma))
        traced = getattr(lu, "traced_solve", None)  # the device LU (SciPy's SuperLU: none)
        if traced is not None:
            operator_ = getattr(lu, "traced_operator", None)
            return traced, True, operator_() if operator_ is not None else None
        return lu.solve, False, None
    from trnscipy.linalg import lu_factor, lu_solve

    dense = [x.toarray() if _is_sparse(x) else x for x in (A, M)]
    S = dense[0] - sigma * (dense[1] if M is not None
                            else torch.eye(A.shape[0], dtype=dense[0].dtype,
                                           device=dense[0].device))
    factors = lu_factor(S, check_finite=False)
    return (lambda x: lu_solve(factors, x, check_finite=False)), False, None


def _inverse(M, Mop, rtol, device):
    """(x -> M^-1 x, pure), as SciPy's get_inv_matvec: the LU of a matrix (sparse on the
    device), else ``gmres`` to ``rtol`` (SciPy's gmres_loose)."""
    if not (_is_sparse(M) or is_torch_array(M)):
        from trnscipy.sparse.linalg import gmres

        return _inner_solver(gmres, Mop, rtol, "M", atol=0.0), False
    solve, pure, _ = _shift_invert(M, None, Mop, None, 0.0, rtol, device)
    return solve, pure


def _shifted_csc(A, M, sigma):
    """A - sigma M (M None: the identity) as a CSC container on A's device.  The pattern
    of the sum is found on the host from the index arrays (SciPy's would be the device's
    sparse sum and conversion: 8 small graphs, with the sort of the values, about a
    quarter of shift-invert's first compile at 10^4 unknowns); the values are one graph
    of two scatters.  Entries that cancel stay as explicit zeros."""
    from trnscipy.sparse import csc_array

    n = A.shape[0]
    device = A.data.device
    if A.format not in ("csr", "csc") or (M is not None and M.format not in ("csr", "csc")):
        A = A.tocsr()
        M = M.tocsr() if M is not None else None

    def entries(X):  # (row, col) of the stored entries, in storage order
        ptr, ind = to_host(X.indptr), to_host(X.indices).astype(np.int64)
        major = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        return (major, ind) if X.format == "csr" else (ind, major)

    mdata = torch.ones(n, dtype=A.data.dtype, device=device) if M is None else M.data
    # the pattern (and, through the last container, its LU analysis) is kept in A's plan
    # for later shifts of the same A and M
    mkey = None if M is None else (M.format, M.indptr, M.indices)
    kept = _plan.get(A, None, "shifted_pattern")
    if kept is None or not _same(kept.mkey, mkey):
        rows, cols = entries(A)
        mrows, mcols = (np.arange(n), np.arange(n)) if M is None else entries(M)
        keys = np.concatenate([cols * n + rows, mcols * n + mrows])  # column-major: CSC order
        unique, position = np.unique(keys, return_inverse=True)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(unique // n, minlength=n), out=indptr[1:])
        kept = _ShiftedPattern(mkey, *(torch.from_numpy(a).to(device)
                                       for a in (position, unique % n, indptr)))
        _plan.put(A, None, "shifted_pattern", kept, _plan.STRUCTURE)
    dtype = torch.promote_types(A.data.dtype, mdata.dtype)
    values = torch.cat([A.data.to(dtype), (-sigma) * mdata.to(dtype)])
    data = torch.zeros(kept.indices.shape[0], dtype=dtype, device=device).index_add(
        0, kept.position, values)
    backend(device).materialize([data])  # (else each later graph that reads it computes it)
    if kept.last is None:
        kept.last = csc_array((data, kept.indices, kept.indptr), shape=(n, n))
        return kept.last
    shifted = kept.last._with_data(data, copy=False)  # the same index tensors: no checks
    _plan.carry(kept.last, shifted, ("lu_symbolic", False))
    return shifted


@dataclasses.dataclass
class _ShiftedPattern:
    """The pattern of A - sigma M for one M (``mkey``): where each stored entry of A and
    then M lands (``position``), the sum's CSC index arrays, and the last shifted
    container, whose plan holds the LU analysis."""
    mkey: tuple | None
    position: "torch.Tensor"  # (strings: torch is imported on first device use, not here)
    indices: "torch.Tensor"
    indptr: "torch.Tensor"
    last: object = None


def _same(key, other):
    """Whether two (format, indptr, indices) keys (or None) name the same tensors."""
    if key is None or other is None:
        return key is other
    return key[0] == other[0] and key[1] is other[1] and key[2] is other[2]


def _shifted(A, M, sigma, device):
    """A - sigma*M (M None: the identity) as an operator on ``device``, where the inner
    solve runs (its functions take the device's vectors: not the user's host code)."""
    from trnscipy.sparse.linalg._interface import LinearOperator

    def matvec(x):
        return A.matvec(x) - sigma * (x if M is None else M.matvec(x))

    dtype = np.result_type(A.dtype, *(() if M is None else (M.dtype,)),
                           np.complex64 if np.iscomplexobj(sigma) else np.float32)
    return LinearOperator(A.shape, matvec=matvec, dtype=dtype).to(device)


def _char(dtype):
    return to_numpy_dtype(dtype).char.lower()


def _check_square(A, M):
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"expected square matrix (shape={A.shape})")
    if M is not None:
        if M.shape != A.shape:
            raise ValueError(f"wrong M dimensions {M.shape}, should be {A.shape}")


@dispatch(_scipy.eigsh, double_float=("neuron",), grad=_autograd.eigen)
@eigen_kernel(_scipy.eigsh, operators=standard_problem)
def eigsh(A, k=6, M=None, sigma=None, which="LM", v0=None, ncv=None, maxiter=None, tol=0,
          return_eigenvectors=True, Minv=None, OPinv=None, mode="normal", rng=None):
    return device_eigsh(A, k, M, sigma, which, v0, ncv, maxiter, tol, return_eigenvectors,
                        Minv, OPinv, mode, rng)


def device_eigsh(A, k=6, M=None, sigma=None, which="LM", v0=None, ncv=None, maxiter=None,
                 tol=0, return_eigenvectors=True, Minv=None, OPinv=None, mode="normal",
                 rng=None):
    """eigsh's device implementation (the restarted Lanczos) without the routing and the
    kind's strategy around it: the double-float refinement's float32 searches call it."""
    device = _device_of(A, M, v0, Minv, OPinv)
    dtype = _operand_dtype(A, device)
    complex_ = dtype.is_complex
    if complex_:
        if mode != "normal":
            raise ValueError(f"mode={mode} cannot be used with complex matrix A")
        if which == "BE":
            raise ValueError("which='BE' cannot be used with complex matrix A")
        which = {"LA": "LR", "SA": "SR"}.get(which, which)
    _check_square(A, M)
    if M is not None and _char(_operand_dtype(M, device)) != _char(dtype):
        warnings.warn("M does not have the same type precision as A. This may adversely "
                      "affect ARPACK convergence", stacklevel=5)
    n = A.shape[0]
    if k <= 0:
        raise ValueError("k must be greater than 0.")
    if k >= n:
        return _dense_eigh(A, M, k, return_eigenvectors, device)

    Aop = operator(A, device)
    Mop = operator(M, device) if M is not None else None
    inner_rtol = _loose_rtol(tol, dtype, n)
    shift, factors, pure = sigma, None, True
    if sigma is None:
        if OPinv is not None:
            raise ValueError("OPinv should not be specified with sigma = None.")
        if M is None:
            if Minv is not None:
                raise ValueError("Minv should not be specified with M = None.")
            arpack_mode, op, B = 1, Aop.matvec, None
        else:
            arpack_mode = 2
            minv, pure = ((operator(Minv, device).matvec, _is_matrix(Minv))
                          if Minv is not None else _inverse(M, Mop, inner_rtol, device))
            op, B = (lambda x: minv(Aop.matvec(x))), Mop.matvec
    else:
        if Minv is not None:
            raise ValueError("Minv should not be specified when sigma is specified.")
        if mode not in ("normal", "buckling", "cayley"):
            raise ValueError(f"unrecognized mode '{mode}'")
        if OPinv is not None:
            opinv, pure = operator(OPinv, device).matvec, _is_matrix(OPinv)
        else:
            opinv, pure, factors = _shift_invert(A, M, Aop, Mop, sigma, inner_rtol, device)
        if mode == "normal":
            arpack_mode = 3
            if Mop is None:
                op, B = opinv, None
            else:
                factors = None  # (OP is not the solve alone)
                op, B = (lambda x: opinv(Mop.matvec(x))), Mop.matvec
        elif mode == "buckling":
            arpack_mode, factors = 4, None
            op, B = (lambda x: opinv(Aop.matvec(x))), Aop.matvec
        else:
            arpack_mode, factors = 5, None
            if Mop is None:
                op, B = (lambda x: opinv(Aop.matvec(x) + sigma * x)), None
            else:
                op, B = (lambda x: opinv(Aop.matvec(x) + sigma * Mop.matvec(x))), Mop.matvec
    if which not in _SEUPD_WHICH and not (complex_ and which in ("LR", "SR")):
        raise ValueError(f"which must be one of {' '.join(_SEUPD_WHICH)}")
    if maxiter is None:
        maxiter = n * 10
    if maxiter <= 0:
        raise ValueError(f"maxiter must be positive, maxiter={maxiter}")
    ncv = min(max(2 * k + 1, 20) if ncv is None else ncv, n)
    if ncv > n or ncv <= k:
        raise ValueError(f"ncv must be k<ncv<=n, ncv={ncv}")

    if v0 is None:
        host = np.random.default_rng(rng).uniform(low=-1.0, high=1.0, size=[n])
        v0 = torch.as_tensor(host).to(device=device, dtype=dtype)
    else:
        v0 = torch.as_tensor(v0, device=device).to(dtype)
        v0 = v0 if v0.ndim == 1 else v0.reshape(-1)  # (read only: no copy, no graph)
    which_ = {"LR": "LA", "SR": "SA"}.get(which, which)
    # OP as pure tensor code (matrices, the device LU's substitutions, no inner Krylov
    # solve) runs its steps in a device loop
    traceable = all(_is_matrix(x) for x in (A, M, Minv)) and pure
    def in_order(theta, X, shift=shift):
        """The results in SciPy's order as tensors (the device loop computes them in the
        solve's graph, ordered by ranks: no sort, no read)."""
        lam = _transform(theta, arpack_mode, shift)
        if return_eigenvectors or arpack_mode >= 3 or which_ == "BE":
            order = _ascending(lam)
        else:  # ARPACK's order: least wanted first
            order = torch.arange(k - 1, -1, -1, device=lam.device)
        return [lam.index_select(0, order)] + ([X.index_select(1, order)]
                                               if return_eigenvectors else [])

    theta, X, nconv, cycles, ordered = _lanczos(
        op, B, n, k, ncv, which_, v0, int(maxiter), tol, arpack_mode != 1 and B is not None,
        traceable, in_order,
        factors if np.imag(shift or 0) == 0 else None, (arpack_mode, return_eigenvectors),
        np.real(shift or 0))
    if ordered is not None and nconv >= k:
        return tuple(ordered) if return_eigenvectors else ordered[0]
    lam = _transform(theta, arpack_mode, shift)
    # The k results are ordered on the host (k numbers, read with the convergence flag):
    # torch-xla 2.9 aborted ("Check failed: buffer != nullptr") sorting them on the device
    # in a graph after the last cycle.
    lam_host = to_host(lam)
    if nconv < k:
        order = np.argsort(lam_host[:nconv], kind="stable")
        raise ArpackNoConvergence(f"No convergence ({cycles} iterations, {nconv}/{k} "
                                  "eigenvectors converged)", *_permuted(lam, X, order))
    if return_eigenvectors:
        return _permuted(lam, X, np.argsort(lam_host, kind="stable"))
    if arpack_mode >= 3 or which_ == "BE":
        return _permuted(lam, None, np.argsort(lam_host, kind="stable"))[0]
    return _permuted(lam, None, np.arange(k)[::-1])[0]  # ARPACK's order: least wanted first


def _permuted(lam, X, order):
    """``lam[order]`` (and ``X[:, order]``), computed together in one graph."""
    index = torch.as_tensor(np.ascontiguousarray(order, dtype=np.int64)).to(lam.device)
    out = [lam.index_select(0, index)]
    if X is not None:
        out.append(X.index_select(1, index))
    backend(lam.device).materialize(out)
    return tuple(out) if X is not None else (out[0], None)


def _dense_eigh(A, M, k, return_eigenvectors, device):
    warnings.warn("k >= N for N * N square matrix. Attempting to use scipy.linalg.eigh "
                  "instead.", RuntimeWarning, stacklevel=5)
    if _is_sparse(A):
        raise TypeError("Cannot use scipy.linalg.eigh for sparse A with k >= N. Use "
                        "scipy.linalg.eigh(A.toarray()) or reduce k.")
    if _is_linear_operator(A):
        raise TypeError("Cannot use scipy.linalg.eigh for LinearOperator A with k >= N.")
    if _is_linear_operator(M):
        raise TypeError("Cannot use scipy.linalg.eigh for LinearOperator M with k >= N.")
    from trnscipy.linalg import eigh

    return eigh(A, b=M, eigvals_only=not return_eigenvectors)


def _transform(nu, mode, sigma):
    """Eigenvalues of the problem from those of OP (ARPACK's modes 3-5)."""
    if mode == 3:
        return sigma + 1 / nu
    if mode == 4:
        return sigma * nu / (nu - 1)
    if mode == 5:
        return sigma * (nu + 1) / (nu - 1)
    return nu


def _wanted_order(theta, which):
    """Indices of the host array ``theta`` from most to least wanted (ARPACK's ``which``)."""
    if which == "BE":
        m = theta.shape[0]
        ends = [i for pair in zip(range(m - 1, -1, -1), range(m), strict=True)
                for i in pair][:m]
        ends = list(dict.fromkeys(ends))  # high end first, alternating, each once
        return np.argsort(theta, kind="stable")[ends]
    key = {"LM": np.abs(theta), "SM": -np.abs(theta), "LA": theta, "SA": -theta}[which]
    return np.argsort(-key, kind="stable")


def _lanczos(op, B, n, k, ncv, which, v0, maxiter, tol, getv0_op, traceable, finish,
             factors=None, finish_key=None, shift=None):
    """Thick-restart Lanczos for the k wanted eigenpairs of OP (self-adjoint in <.,.>_B).

    Returns (theta, X, nconv, cycles, finished): the k wanted Ritz values (most wanted
    first) with their B-orthonormal Ritz vectors as columns, the number converged (host
    int), the number of restart cycles and ``finish(theta, X)`` computed with them by the
    device loop (None where the host drives the cycles).  Ritz pairs are ordered:
    converged ones first.

    A Lanczos step is a function of the basis and a device step index (rows written by
    masks), so a cycle's expansion is the ``device_loop`` kernel over the step indices:
    on XLA one ``While`` whose body compiles once, not ``ncv`` unrolled steps.  A cycle
    (the previous restart's rotation of the basis, then the expansion) is a
    ``graph_function``: traced once, one execution per cycle.  The host reads T (ncv x
    ncv) and beta once per cycle and does the restart's small eigenproblem itself, as
    ARPACK does (LAPACK's eigh: on XLA the device eigh and its refinement were a third of
    the cycle graph's compile time), and sends back the rotation and the restarted T.
    ``traceable=False`` (an OP with graph cuts or host reads: inner Krylov solves,
    SciPy's SuperLU, dense LU solves, user operators) runs the steps as a Python loop;
    the device LU's substitutions (shift-invert of sparse containers) are traceable.
    Real traceable problems on ``device_while`` devices run all cycles as one device loop
    instead (``_cycles_on_device``); where OP is the device LU's solve alone (``factors``:
    its ``traced_operator``; ``finish_key`` names ``finish(theta, X, shift)``, ``shift``
    its last argument here), that loop is a graph of the factors, replayed for every
    later factorization of the pattern (``_replayed_cycles``).
    """
    device, dtype = v0.device, v0.dtype
    rdtype = real_dtype(dtype)
    eps = torch.finfo(rdtype).eps
    tol = eps if tol == 0 else float(tol)
    p = min(k + (ncv - k) // 2, ncv - 1)  # Ritz vectors kept at a restart
    loop = backend(device if traceable else torch.device("cpu")).device_loop

    def bnorm(w, Bw):
        return dot(w, Bw).real.abs().sqrt()

    def stepper(op):
        """The Lanczos step of ``op``."""

        def step(state, j):
            """Lanczos step ``j``: row j + 1 of the basis, column j of T (masked writes)."""
            V, T, beta, *BV = state
            rows = torch.arange(ncv + 1, device=device)
            w = op(V.index_select(0, j.reshape(1))[0])
            w = w if w.dtype == dtype else w.to(dtype)  # (ARPACK's precision)
            Q = BV[0] if BV else V
            upto = (rows <= j).to(dtype)
            w0 = bnorm(w, w)
            h1 = (Q.conj() @ w) * upto
            w = w - h1 @ V
            tiny = bnorm(w, w) <= 10 * eps * w0
            w = torch.where(tiny, pseudo_random(n, j, dtype, device), w)
            h2 = (Q.conj() @ w) * upto
            w = w - h2 @ V
            h = h1 + torch.where(tiny, torch.zeros_like(h2), h2)
            Bw = B(w) if B is not None else w
            beta = bnorm(w, Bw)
            safe = torch.where(beta > 0, beta, torch.ones_like(beta))
            at = (rows == j + 1)[:, None]
            V = torch.where(at, (w / safe)[None, :], V)
            BV = [torch.where(at, (Bw / safe)[None, :], X) for X in BV]
            beta = torch.where(tiny, torch.zeros_like(beta), beta)
            # T is tridiagonal plus the restart's arrow, as ARPACK's H: the other
            # reorthogonalization coefficients are rounding and stay out of T
            r, c = rows[:ncv, None], rows[None, :ncv]
            hj = (h * (rows == j).to(dtype)).sum().real.to(dtype)
            T = torch.where((r == j) & (c == j), hj, T)
            T = torch.where(((r == j + 1) & (c == j)) | ((r == j) & (c == j + 1)),
                            beta.to(dtype), T)
            return (V, T, beta, *BV)

        return step

    step = stepper(op)

    def cycle(V, packed, *rest):
        """One restart cycle: the previous restart (``packed``: the host's (ncv + 1) x
        (ncv + 1) rotation G of the basis beside the restarted T), then steps ``start`` to
        ``ncv - 1`` (the last two arguments: device integers).  Returns the basis, T and
        beta packed for one read."""
        *BV, start, stop = rest
        G, T = packed[:, :ncv + 1], packed[:ncv, ncv + 1:]
        V, BV = G @ V, [G @ X for X in BV]
        beta = torch.zeros((), dtype=rdtype, device=device)
        V, T, beta, *BV = loop(step, (V, T, beta, *BV), start, stop)
        return (V, *BV, torch.cat([T.reshape(-1), beta.to(dtype).reshape(1)]))

    on_device = (traceable and not dtype.is_complex
                 and capability(device_kind(device)).device_while)
    if on_device and factors is not None and B is None and not getv0_op:
        return _replayed_cycles(stepper, factors, v0, k, p, ncv, which, maxiter, tol, eps,
                                finish, finish_key, shift)
    v = op(v0) if getv0_op else v0
    Bv = B(v) if B is not None else v
    nrm = bnorm(v, Bv)
    V = torch.zeros((ncv + 1, n), dtype=dtype, device=device)
    V[0] = v / nrm
    BV = []
    if B is not None:
        BV = [torch.zeros_like(V)]
        BV[0][0] = Bv / nrm
    materialize = backend(device).materialize
    if on_device:
        return _cycles_on_device(step, V, BV, k, p, ncv, which, maxiter, tol, eps, finish)
    # one graph for every cycle: the first starts at step 0, the later ones at p.  The
    # step bounds are device data where device_loop takes them without a host read (XLA:
    # one graph for both starts; complex data there) and Python ints elsewhere: a CUDA
    # graph captures a loop with host bounds only
    if capability(device_kind(device)).device_while:
        bounds = [torch.tensor(i, dtype=torch.int64, device=device) for i in (0, p, ncv)]
        graph = backend(device).graph_function(cycle) if traceable else cycle
        runs = [lambda *a, s=s: graph(*a, bounds[s], bounds[2]) for s in (0, 1)]
    else:
        runs = [lambda *a, s=s: cycle(*a, s, ncv) for s in (0, p)]
        if traceable:
            runs = [backend(device).graph_function(r) for r in runs]
    hdtype = np.complex128 if dtype.is_complex else np.float64
    working = to_numpy_dtype(dtype)
    packed = np.zeros((ncv + 1, 2 * ncv + 1), dtype=hdtype)
    packed[:, :ncv + 1] = np.eye(ncv + 1)
    cycles = 0
    while True:
        *state, summary = runs[min(cycles, 1)](
            V, torch.as_tensor(packed).to(device=device, dtype=dtype), *BV)
        V, *BV = state
        materialize([V, *BV, summary])
        cycles += 1
        summary = read_small(summary)  # the cycle's one read: T and beta
        T, beta = summary[:-1].reshape(ncv, ncv), summary[-1].real
        # in the working precision, as ARPACK: float32 Lanczos finds a second copy of a
        # double eigenvalue through rounding, and a float64 eigh here missed it for 4
        # of 12 starts at 10^4 unknowns (2 of 12 in float32; SciPy's ARPACK 2 of 40)
        theta, S = np.linalg.eigh(T.astype(working))
        order = _wanted_order(theta, which)
        pos = np.argsort(order)  # place of each Ritz value in `order`
        bounds_ = beta * np.abs(S[ncv - 1])
        wanted = pos < k
        conv = wanted & (bounds_ <= tol * np.maximum(np.abs(theta), eps ** (2 / 3)))
        # converged wanted pairs first (ARPACK's nconv counts them), then the other wanted
        keep = np.argsort(pos - ncv * wanted - ncv * conv, kind="stable")[:p]
        Sk = S[:, keep]
        nconv = int(conv.sum())
        if nconv >= k or cycles >= maxiter:
            break
        # deflation, as ARPACK's dstqrb splits its tridiagonal: a coupling below
        # eps * ||T|| is zero, and that Ritz pair's residual estimate is then exactly 0
        arrow = beta * Sk[ncv - 1]
        arrow = np.where(np.abs(arrow) <= eps * np.abs(theta).max(), 0, arrow)
        packed[:] = 0
        packed[:p, :ncv] = Sk.T  # rows: the p kept Ritz vectors, the residual direction
        packed[p, ncv] = 1
        packed[np.arange(p), ncv + 1 + np.arange(p)] = theta[keep]
        packed[:p, ncv + 1 + p] = arrow.conj()
        packed[p, ncv + 1:ncv + 1 + p] = arrow
    Sk = torch.as_tensor(np.ascontiguousarray(Sk[:, :k])).to(device=device, dtype=dtype)
    X = V[:ncv].transpose(0, 1) @ Sk  # (computed with the caller's ordering of the results)
    theta = torch.as_tensor(theta[keep[:k]]).to(device=device, dtype=rdtype)
    return theta, X, nconv, cycles, None


def _cycles_on_device(step, V, BV, k, p, ncv, which, maxiter, tol, eps, finish):
    """The restart cycles as one ``device_loop`` (an XLA While leaving on the convergence
    flag): a solve is one graph execution and one read (``_cycles``)."""
    device = V.device
    theta, X, counts, finished = _cycles(
        step, V, BV, k, p, ncv, which,
        torch.tensor([maxiter], dtype=torch.int64, device=device), tol, eps, finish)
    backend(device).materialize([X, theta, *finished, counts])
    nconv, cycles = (int(c) for c in to_host(counts))
    return theta, X, nconv, cycles, finished


def _replayed_cycles(stepper, factors, v0, k, p, ncv, which, maxiter, tol, eps, finish,
                     finish_key, shift):
    """``_cycles_on_device`` for OP the device LU's solve (``factors``: its
    ``traced_operator``: the factor tensors, the solve as their function, the analysis'
    cache) as a replayed graph of the start vector, ``maxiter``, the shift and the
    factors, kept in the analysis' cache: tracing the cycle and building its While each
    call cost as much as running it (shift-invert at 10^4 unknowns on XLA)."""
    tensors, apply, cache = factors
    device, dtype = v0.device, v0.dtype
    rdtype = real_dtype(dtype)
    key = ("eigsh cycles", str(device), dtype, v0.shape[0], k, p, ncv, which, tol, eps,
           finish_key, len(tensors))
    if key not in cache:
        def run(v0, maxiter, shift, *tensors):
            step = stepper(lambda x: apply(tensors, x))
            v = v0 / dot(v0, v0).real.abs().sqrt()
            V = torch.cat([v[None], torch.zeros((ncv, v.shape[0]), dtype=dtype, device=device)])
            theta, X, counts, finished = _cycles(
                step, V, [], k, p, ncv, which, maxiter, tol, eps,
                lambda theta, X: finish(theta, X, shift.reshape(())))
            return (theta, X, counts, *finished)

        # (fresh: the arguments are the caller's vector, new scalars and the factors)
        cache[key] = backend(device).graph_function(run, fresh=True)
    theta, X, counts, *finished = cache[key](
        v0, torch.tensor([maxiter], dtype=torch.int64, device=device),
        # (shape (1,): torch-xla makes an uploaded 0-d 0 or 1 a graph constant)
        torch.tensor([float(shift)], dtype=rdtype, device=device), *tensors)
    nconv, cycles = (int(c) for c in to_host(counts))
    return theta, X, nconv, cycles, finished


def _cycles(step, V, BV, k, p, ncv, which, maxiter, tol, eps, finish):
    """The restart cycles as one ``device_loop`` leaving on the convergence flag, pending:
    (theta, X, [nconv, cycles], finish(theta, X)).  The body is a cycle: the previous
    restart's rotation of the basis, the Lanczos steps (a nested While from ``start``: 0 in
    the first cycle, ``p`` after), then the projected eigenproblem on the device
    (``_restart``).  ``maxiter`` (an int64 tensor of one element) is the While's bound,
    data: no graph depends on it.  ``finish(theta, X)`` (the results in the caller's
    order) joins the same graph."""
    device, dtype = V.device, V.dtype
    loop = backend(device).device_loop
    nb = len(BV)
    bound = torch.tensor([ncv], dtype=torch.int64, device=device)

    def cycle(carry, _):
        V, *BV = carry[:1 + nb]
        Sk, T, start, cycles, nconv, done = carry[1 + nb:]
        # the kept Ritz vectors, the residual direction, zeros (rows the steps write)
        zeros = torch.zeros((ncv - p, V.shape[1]), dtype=dtype, device=device)
        V, *BV = (torch.cat([Sk.mT @ X[:ncv], X[ncv:], zeros]) for X in (V, *BV))
        beta = torch.zeros((), dtype=dtype, device=device)
        V, T, beta, *BV = loop(step, (V, T, beta, *BV), start, bound)
        Sk, T, nconv = _restart(T, beta, which, k, p, tol, eps)
        start = torch.full_like(start, p)
        return (V, *BV, Sk, T, start, cycles + 1, nconv, nconv >= k)

    zero = torch.tensor([0], dtype=torch.int64, device=device)
    # the first rotation is the identity: Sk = [I_p; 0] keeps rows 0 to p - 1 (row 0 the
    # start vector), and row ncv moves to row p (zero, overwritten by step p - 1)
    Sk = torch.eye(ncv, p, dtype=dtype, device=device)
    T = torch.zeros((ncv, ncv), dtype=dtype, device=device)
    carry = (V, *BV, Sk, T, zero[0].clone(), zero[0].clone(), zero[0].clone(),
             torch.tensor(False, device=device))
    out = loop(cycle, carry, 0, maxiter, until=len(carry) - 1)
    V = out[0]
    Sk, T, _, cycles, nconv, _ = out[1 + nb:]
    # the restarted T has the kept Ritz values on its diagonal (a product, not a view: a
    # view would keep the loop's pending graph alive, and a later sync would run it again)
    theta = (T[:k, :k] * torch.eye(k, dtype=T.dtype, device=device)).sum(1)
    X = V[:ncv].mT @ Sk[:, :k]
    return theta, X, torch.stack([nconv, cycles]), finish(theta, X)


def _rank(key):
    """The place of each entry of ``key`` in its stable descending sort, from pairwise
    comparisons (fixed shapes, no sort op)."""
    idx = torch.arange(key.shape[0], device=key.device)
    earlier = idx[None, :] < idx[:, None]  # [i, j]: j before i (ties in index order)
    above = (key[None, :] > key[:, None]) | ((key[None, :] == key[:, None]) & earlier)
    return above.to(torch.int64).sum(1)


def _ascending(x):
    """The indices that sort ``x`` ascending, stably (np.argsort(kind='stable')), on the
    device without a sort: torch-xla 2.9 aborted ("Check failed: buffer != nullptr")
    sorting the results in a graph after the cycles."""
    rank = _rank(-x)
    idx = torch.arange(x.shape[0], device=x.device)
    return ((rank[:, None] == idx[None, :]).to(torch.int64) * idx[:, None]).sum(0)


def _restart(T, beta, which, k, p, tol, eps):
    """A restart on the device, as the host loop's: the eigenpairs of T (``small_eigh``),
    ARPACK's convergence test, the ``p`` kept Ritz vectors ``Sk`` (converged wanted, other
    wanted, the rest by ``which``; ranks by comparisons, no sort) and the restarted T
    (their Ritz values, the arrow; couplings below eps ||T|| deflated).  Returns (Sk, T,
    nconv)."""
    ncv = T.shape[0]
    dtype = T.dtype
    theta, S = small_eigh(T)
    idx = torch.arange(ncv, device=T.device)
    rank = _rank
    if which == "BE":  # ascending place q, then high end first, alternating
        q = rank(-theta)
        pos = torch.where(2 * q >= ncv - 1, 2 * (ncv - 1 - q), 2 * q + 1)
    else:
        pos = rank({"LM": theta.abs(), "SM": -theta.abs(), "LA": theta, "SA": -theta}[which])
    bounds = beta * S[ncv - 1].abs()
    wanted = pos < k
    conv = wanted & (bounds <= tol * torch.clamp(theta.abs(), min=eps ** (2 / 3)))
    # converged wanted first, then the other wanted (ARPACK's nconv counts the first)
    keep = rank(-(pos - ncv * wanted.to(torch.int64) - ncv * conv.to(torch.int64)))
    P = (keep[:, None] == idx[None, :p]).to(dtype)
    Sk = S @ P
    kept = theta @ P
    arrow = beta * Sk[ncv - 1]
    arrow = torch.where(arrow.abs() <= eps * theta.abs().max(), 0, arrow)
    r, c = idx[:, None], idx[None, :]
    pad = torch.cat([kept, torch.zeros(ncv - p, dtype=dtype, device=T.device)])
    apad = torch.cat([arrow, torch.zeros(ncv - p, dtype=dtype, device=T.device)])
    T = (torch.where(r == c, pad[:, None], 0) + torch.where(c == p, apad[:, None], 0)
         + torch.where(r == p, apad[None, :], 0))
    return Sk, T, conv.to(torch.int64).sum()


# Neuron (``_eigen/_refine_eigs.py``): real A on the device, float64 by Krylov-Schur in
# double-float; sigma (every dtype), float64 M/Minv/OPinv/OPpart and float64 operators
# of Python functions on the host, announced; complex A on the host (no complex arithmetic)
@dispatch(_scipy.eigs, double_float=("neuron",))
@eigen_kernel(_scipy.eigs, operators=standard_problem)
def eigs(A, k=6, M=None, sigma=None, which="LM", v0=None, ncv=None, maxiter=None, tol=0,
         return_eigenvectors=True, Minv=None, OPinv=None, OPpart=None, rng=None,
         basis=False):
    """Restarted Arnoldi in Krylov-Schur form (_krylov_schur.py).  What differs on
    devices: results in most-wanted-first order; the Arnoldi basis is orthonormal in the
    standard inner product in every mode; M^-1 (generalized, without ``Minv``) and
    (A - sigma M)^-1 (without ``OPinv``) are SciPy's: LU factorizations of matrices,
    ``gmres`` for operators; complex
    ``sigma`` with real A (``OPpart``) runs SciPy on the host, announced.  Neuron: float64
    by Krylov-Schur in double-float (``_eigen/_refine_eigs.py``).  ``basis``
    (trnscipy's own, for the double-float refinement): return the host Ritz values and the
    vectors' real and imaginary parts (real A only)."""
    from trnscipy.sparse.linalg._eigen.arpack._krylov_schur import krylov_schur

    device = _device_of(A, M, v0, Minv, OPinv)
    dtype = _operand_dtype(A, device)
    real = not dtype.is_complex
    _check_square(A, M)
    if M is not None and _char(_operand_dtype(M, device)) != _char(dtype):
        warnings.warn("M does not have the same type precision as A. This may adversely "
                      "affect ARPACK convergence", stacklevel=4)
    n = A.shape[0]
    if k <= 0:
        raise ValueError(f"k={k} must be greater than 0.")
    if k >= n - 1:
        return _dense_eig(A, M, return_eigenvectors)
    Aop = operator(A, device)
    Mop = operator(M, device) if M is not None else None
    inner_rtol = _loose_rtol(tol, dtype, n)
    if sigma is None:
        if OPinv is not None:
            raise ValueError("OPinv should not be specified with sigma = None.")
        if OPpart is not None:
            raise ValueError("OPpart should not be specified with sigma = None or complex A")
        if M is None:
            if Minv is not None:
                raise ValueError("Minv should not be specified with M = None.")
            op = Aop.matvec
        else:
            minv = (operator(Minv, device).matvec if Minv is not None
                    else _inverse(M, Mop, inner_rtol, device)[0])
            op = lambda x: minv(Aop.matvec(x))  # noqa: E731
    else:
        if not real and OPpart is not None:
            raise ValueError("OPpart should not be specified with sigma=None or complex A")
        if OPpart is not None and OPpart.lower() not in ("r", "i"):
            raise ValueError("OPpart must be one of ('r','i')")
        if OPpart is not None and OPpart.lower() == "i" and np.imag(sigma) == 0:
            raise ValueError("OPpart cannot be 'i' if sigma is real")
        if Minv is not None:
            raise ValueError("Minv should not be specified when sigma isspecified.")
        if real and np.imag(sigma) != 0:
            return _host_eigs(A, k, M, sigma, which, v0, ncv, maxiter, tol,
                              return_eigenvectors, OPinv, OPpart, rng, device)
        if OPinv is not None:
            opinv = operator(OPinv, device).matvec
        else:
            opinv = _shift_invert(A, M, Aop, Mop, sigma, inner_rtol, device)[0]
        op = opinv if Mop is None else (lambda x: opinv(Mop.matvec(x)))
    if which not in _NEUPD_WHICH:
        raise ValueError(f"Parameter which must be one of {' '.join(_NEUPD_WHICH)}")
    if maxiter is None:
        maxiter = n * 10
    if maxiter <= 0:
        raise ValueError(f"maxiter must be positive, maxiter={maxiter}")
    ncv = min(max(2 * k + 1, 20) if ncv is None else ncv, n)
    if ncv > n or ncv <= k + (1 if real else 0):
        raise ValueError(f"ncv must be k+1<ncv<=n, ncv={ncv}" if real else
                         f"ncv must be k<ncv<=n, ncv={ncv}")
    if v0 is None:
        host = np.random.default_rng(rng).uniform(low=-1.0, high=1.0, size=[n])
        v0 = torch.as_tensor(host).to(device=device, dtype=dtype)
    else:
        v0 = torch.as_tensor(v0, device=device).to(dtype).reshape(-1).clone()
    traceable = sigma is None and all(_is_matrix(x) for x in (A, M, Minv)) and (
        M is None or Minv is not None)
    theta, X, nconv, cycles = krylov_schur(op, n, k, ncv, which, v0, int(maxiter), tol,
                                           real, traceable, parts=basis)
    lam = theta if sigma is None else sigma + 1 / theta
    if nconv < k:
        raise ArpackNoConvergence(
            f"No convergence ({cycles} iterations, {nconv}/{k} eigenvectors converged)",
            _values(lam[:nconv], real_dtype(dtype), device),
            (X[0][:, :nconv], X[1][:, :nconv]) if basis else X[:, :nconv])
    if basis:
        return lam, X
    w = _values(lam, real_dtype(dtype), device)
    return (w, X) if return_eigenvectors else w


def _values(lam, rdtype, device):
    """The host complex values ``lam`` on the device; on a device without complex
    arithmetic (Neuron) assembled from real parts by data movement (``complex_of``)."""
    if capability(device_kind(device)).complex:
        cdtype = {torch.float32: torch.complex64, torch.float64: torch.complex128}[rdtype]
        return torch.as_tensor(lam).to(device=device, dtype=cdtype)
    from trnscipy._double_float import complex_of

    return complex_of(*(torch.as_tensor(np.ascontiguousarray(part)).to(
        device=device, dtype=rdtype) for part in (lam.real, lam.imag)))


def _dense_eig(A, M, return_eigenvectors):
    warnings.warn("k >= N - 1 for N * N square matrix. Attempting to use scipy.linalg.eig "
                  "instead.", RuntimeWarning, stacklevel=4)
    if _is_sparse(A):
        raise TypeError("Cannot use scipy.linalg.eig for sparse A with k >= N - 1. Use "
                        "scipy.linalg.eig(A.toarray()) or reduce k.")
    if _is_linear_operator(A):
        raise TypeError("Cannot use scipy.linalg.eig for LinearOperator A with k >= N - 1.")
    if _is_linear_operator(M):
        raise TypeError("Cannot use scipy.linalg.eig for LinearOperator M with k >= N - 1.")
    from trnscipy.linalg import eig

    return eig(A, b=M, right=return_eigenvectors)


def _host_eigs(A, k, M, sigma, which, v0, ncv, maxiter, tol, return_eigenvectors, OPinv,
               OPpart, rng, device):
    from trnscipy._errors import fallback
    from trnscipy._transfer import to_device
    from trnscipy.sparse.linalg._isolve.utils import host_operand

    fallback("scipy.sparse.linalg.eigs", "complex sigma with real A (OPpart) is not on the "
             "device", stacklevel=5)
    out = _scipy.eigs(host_operand(A), k, host_operand(M) if M is not None else None, sigma,
                      which, None if v0 is None else to_host(v0), ncv, maxiter, tol,
                      return_eigenvectors, None, host_operand(OPinv) if OPinv is not None
                      else None, OPpart, rng=rng)
    return to_device(out, device)
