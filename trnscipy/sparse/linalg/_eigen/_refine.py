"""float64 eigsh and lobpcg on a Neuron device (the 'neuron' registration of the ``eigen``
kernel): the float32 device solver finds the wanted subspace, and double-float
Rayleigh-Ritz steps with Jacobi-Davidson corrections refine it.

The device has no float64 arithmetic; a float64 matrix there is held exactly as
double-float pairs (``trnscipy._transfer.df_parts``).  One refinement step:

1. Rayleigh-Ritz on the basis S (n x m pairs): G = S^T S and H = S^T A S in double-float
   (A S by the double-float sparse product, the small products by Ozaki GEMMs), read to
   the host as two m x m float64 matrices (ARPACK too solves its projected problem on the
   host), H y = theta G y solved there, the k wanted pairs kept;
2. U = S Y and the residuals R = A U - U Theta in double-float (A U = (A S) Y);
3. converged when every ||r_i|| <= max(tol |theta_i|, floor) (ARPACK's test; the floor is
   the double-float product's own rounding, 2**-44 ||A||_F, and tol=0 means that floor),
   or when the residuals stop shrinking;
4. otherwise each pair's correction t_i solves (I - Q Q^T)(A - theta_i I)(I - Q Q^T) t =
   -r_i (Q the float32 Ritz vectors) by float32 MINRES on the device to a relative
   residual of 1e-4 (all k columns in one device loop), and S becomes [U, T]: the error of
   each pair shrinks by about that factor per step (the eigenvalues' by its square).

Multiple and clustered eigenvalues (a square grid's Laplacian): the basis carries guard
pairs beside the k wanted ones (the float32 stage asks for k + max(2, k // 2); their
corrections widen the Rayleigh-Ritz basis, the test is on the k wanted), the Rayleigh-Ritz
drops the basis's nearly dependent directions (two corrections of one eigenspace), and a
float32 Lanczos on A with the refined pairs deflated finds copies of a multiple eigenvalue
the float32 stage missed (a single-vector Krylov space sees one vector of each eigenspace),
which then join the seed (eigsh without sigma or BE; lobpcg without Y).

Steps 2-4 and the next step's projections are one graph: the residual norms are read with
the next G and H, so a step costs one graph execution and one read.  The first step skips
step 1 for a fresh float32 solve's Ritz vectors (``ritz``): their Rayleigh quotients and
norms in double-float on the device stand for its Ritz pairs (no read of the seed's G and H).

Generalized problems (eigsh's ``M``, lobpcg's ``B``, symmetric positive definite float64
matrices): the float32 stage solves the pencil (ARPACK's mode 2 with inner cg solves of M,
or shift-invert by the device LU of A - sigma M; lobpcg with B), and every step above runs
in the B inner product: G = S^T B S, residuals R = A U - B U Theta, the test relative to
||B u_i|| with the floor 2**-44 (||A||_F + |theta_i| ||B||_F) ||u_i||, corrections with
P = I - B Q Q^T on the left and P^T on the right; the vectors come back B-orthonormal.
lobpcg's ``Y``: the basis is made B-orthogonal to Y in double-float at every step and the
corrections deflate Y too; its ``M`` preconditions the float32 stage only.

Supported: eigsh with every ``which``, ``sigma`` (``mode='normal'``), ``M`` a float64
matrix; lobpcg with ``B`` a float64 matrix, ``M``, ``Y``.  ``Minv``, ``OPinv``, the
buckling and cayley modes, eigsh's ``M`` and lobpcg's ``B`` as operators of functions, and
lobpcg's histories run on the host, announced.
"""

import inspect
import warnings

import numpy as np
import scipy.linalg as _sl
import scipy.sparse.linalg as _scipy

from trnscipy import _transfer
from trnscipy._dtypes import to_numpy_dtype
from trnscipy._errors import fallback
from trnscipy._kernels import _df, backend, register
from trnscipy._torch import torch
from trnscipy.linalg._refine import _mm
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _float32_operator, _parts
from trnscipy.sparse.linalg._isolve.utils import sync

__all__ = ["eigen"]

_MAX_STEPS = 10
_FLOOR = 2.0 ** -44
_INNER_RTOL = 1e-4
_STALL = 0.9  # a step that shrinks no residual by this much ends the refinement
_WRONG = 2.0 ** -26  # a residual still above this (relative to ||A||) when the refinement
# stalls is not a float64 answer (a pair the float32 seed missed): SciPy runs on the host

_MAX_ROUNDS = 3  # deflated float32 searches for missed copies of multiple eigenvalues
_COPY = 2.0 ** -17  # (relative) a deflated value beyond the k-th by more is a missed copy
_DEPENDENT = 1e-12  # a basis direction with G's eigenvalue below this (relative) is dropped
# the float32 stage's looser tolerance, tried when it cannot reach the user's
_TOL32 = 1e-5


class _Stalled(Exception):
    """The refinement stalled far above float64 accuracy (see _WRONG)."""


def _dtype(x):
    """The NumPy dtype of a device matrix or an operator (None if it has none)."""
    dtype = getattr(x, "dtype", None)
    if getattr(x, "format", None) is not None:
        dtype = x.data.dtype
    return None if dtype is None else to_numpy_dtype(dtype)


def _is_df(x):
    """A float64 operand (a float64 device matrix, or an operator of float64 dtype)."""
    return _dtype(x) == np.float64


def _is_matrix(x):
    return isinstance(x, torch.Tensor) or (getattr(x, "format", None) is not None
                                           and getattr(x, "_trnscipy_device_object", False))


@register("eigen", "neuron")
def eigen(scipy_func, device_func, args, kwargs, host_operand, operators):
    """float64 eigsh/lobpcg/svds/eigs refined in double-float; everything else as on XLA."""
    if scipy_func not in (_scipy.eigsh, _scipy.lobpcg, _scipy.svds, _scipy.eigs):
        return device_func(*args, **kwargs)
    params = inspect.signature(scipy_func).bind(*args, **kwargs)
    params.apply_defaults()
    p = params.arguments
    if scipy_func is _scipy.eigs:
        from trnscipy.sparse.linalg._eigen._refine_eigs import eigs

        return eigs(device_func, p, _is_df(p["A"]))
    if not (_is_df(p["A"]) or scipy_func is _scipy.lobpcg and _float32_with_float64_x(p)):
        return device_func(*args, **kwargs)
    if not _is_matrix(p["A"]):
        return _on_host(scipy_func, p, "an operator given by functions has no double-float "
                        "product")
    if scipy_func is _scipy.eigsh:
        return _eigsh(device_func, p)
    if scipy_func is _scipy.svds:
        return _svds(device_func, p)
    return _lobpcg(device_func, p)


def _float32_with_float64_x(p):
    """lobpcg of a float32 A from a float64 X: SciPy computes in float64 (A's float32
    values are exact double-float pairs)."""
    return _dtype(p["A"]) == np.float32 and _dtype(p["X"]) == np.float64


def _on_host(scipy_func, p, reason, device=None):
    """SciPy's ``scipy_func`` on host copies of the arguments ``p``, announced; results
    back on ``device`` (default: A's)."""
    fallback(f"scipy.sparse.linalg.{scipy_func.__name__}", reason, stacklevel=7)
    # (a SciPy operator of host data, under offload, has no device: results stay NumPy)
    device = getattr(p["A"], "device", None) if device is None else device
    host = {k: _transfer.to_host(v) if isinstance(v, torch.Tensor) or getattr(
        v, "_trnscipy_device_object", False) else v for k, v in p.items()}
    out = scipy_func(**host)

    def back(o):
        return _transfer.tensor_on(o, device) if isinstance(o, np.ndarray) and device \
            else o

    return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)


def _as_device(x, device):
    """A start vector or block on the device: a tensor as it is (torch ops on a float64
    one would be float64 device arithmetic), host data exactly (double-float storage)."""
    if isinstance(x, torch.Tensor):
        return x
    return _transfer.tensor_on(np.asarray(x, dtype=np.float64), device)


def _operator(A):
    op = _df_operator(A)
    if isinstance(A, torch.Tensor):  # dense: the product of several columns by Ozaki GEMMs
        return op, lambda x: _mm(op.parts, x)
    return op, op.product


def _seed(device_func, tol, *args, **kwargs):
    """The float32 solve whose vectors seed the refinement, at the user's tolerance (0: float32's
    precision), then at ``_TOL32`` if it does not converge.  Stopping a restarted Lanczos early
    misses the second copy of a double eigenvalue (ARPACK's too: eigsh of a square grid's
    Laplacian at tol=1e-5); at the user's tol=0 it resolves them as SciPy's run does."""
    with warnings.catch_warnings():  # the seeding solve's notices are not the user's
        warnings.simplefilter("ignore", UserWarning)
        try:
            return device_func(*args, tol=float(tol), **kwargs)
        except _scipy.ArpackNoConvergence:
            if float(tol) >= _TOL32:
                raise
            return device_func(*args, tol=_TOL32, **kwargs)


def _eigsh(device_func, p):
    A, k, sigma, which, M = p["A"], int(p["k"]), p["sigma"], p["which"], p["M"]
    n = A.shape[0]
    if p["Minv"] is not None or p["OPinv"] is not None or p["mode"] != "normal":
        return _on_host(_scipy.eigsh, p, "Minv, OPinv and the buckling/cayley modes have no "
                        "double-float method")
    if M is not None and not (_is_matrix(M) and _is_df(M)):
        return _on_host(_scipy.eigsh, p, "M has a double-float method only as a float64 "
                        "matrix")
    if not 0 < k < n - 1 or which not in ("LM", "SM", "LA", "SA", "BE"):
        return device_func(**p)  # the dense route (double-float eigh) or SciPy's errors
    op, product = _operator(A)
    v0 = p["v0"]
    if v0 is not None:
        v0 = _parts(_as_device(v0, A.device).reshape(-1))[0]
    kw = {name: p[name] for name in ("ncv", "maxiter", "rng")}
    B = None if M is None else _B(M)
    # guard pairs: the Rayleigh-Ritz basis reaches past the k-th value, into its cluster
    guards = 0 if which == "BE" else max(0, min(_guards(k), n - 2 - k, (
        n if p["ncv"] is None else int(p["ncv"])) - 1 - k))
    try:
        _, X = _seed(device_func, p["tol"], op.float32, k=k + guards, sigma=sigma,
                     which=which, v0=v0, return_eigenvectors=True,
                     M=None if B is None else B.float32, **kw)
    except _scipy.ArpackNoConvergence:
        return _on_host(_scipy.eigsh, p, "the float32 solve that seeds the double-float "
                        "refinement did not converge")
    A32 = op.float32
    pick = _wanted(which, sigma)
    try:
        lam, U = _refine(product, lambda w: A32 @ w, _frobenius(A32), X, k, pick,
                         float(p["tol"]), B=B, ritz=True)
        if sigma is None and which != "BE":
            lam, U = _missed_copies(device_func, A32, B, lam, U, X, k, which, kw, (
                lambda X: _refine(product, lambda w: A32 @ w, _frobenius(A32), X, k, pick,
                                  float(p["tol"]), B=B)))
    except _Stalled as stalled:
        return _on_host(_scipy.eigsh, p, str(stalled))
    if p["return_eigenvectors"]:
        order = np.argsort(lam, kind="stable")
    elif sigma is not None or which == "BE":
        order = np.argsort(lam, kind="stable")
    else:  # ARPACK's order: least wanted first
        order = _wanted(which, sigma)(lam, k)[::-1]
    values = _transfer.tensor_on(lam[order], A.device)
    if not p["return_eigenvectors"]:
        return values
    index = torch.as_tensor(np.ascontiguousarray(order)).to(A.device)
    return values, _transfer.df_tensor(U[0].index_select(1, index),
                                       U[1].index_select(1, index))


def _guards(k):
    """How many guard pairs refine beside k wanted ones."""
    return max(2, k // 2)


def _missed_copies(eigsh32, A32, B, lam, U, X, k, which, kw, refine):
    """(lam, U) with the copies of multiple eigenvalues the float32 Lanczos missed: a
    single-vector Krylov space holds one vector of each eigenspace (the others only through
    rounding), so a restarted Lanczos stopped at float32's tolerance can return lambda_{k+1}
    in place of a second copy of a wanted double eigenvalue (SciPy's float64 ARPACK at tol=0
    finds it).  A float32 Lanczos on A with the refined pairs deflated (moved to the unwanted
    end) finds the missed copies as its wanted values; they join the seed and the refinement
    runs again, until the deflated operator has no value beyond the k-th (float32's accuracy)."""
    from trnscipy.sparse.linalg._interface import LinearOperator

    guards = X.shape[1] - k
    scale = float(np.max(np.abs(lam)))
    # (the deflated pairs' value: the far unwanted end, or 0 for LM)
    far = {"LA": lam.min() - 2 * scale, "SA": lam.max() + 2 * scale, "LM": 0.0,
           "SM": 4 * scale}[which]
    for _ in range(_MAX_ROUNDS):
        Q = U[0]  # (computed: the refinement's last read ran its graph)
        BQ = Q
        if B is not None:
            BQ = B.float32 @ Q
            sync(Q.device)  # (the loop's operator takes computed tensors)
        shift = _transfer.tensor_on(np.asarray(lam - far, dtype=np.float32), Q.device)

        def matvec(w, Q=Q, BQ=BQ, shift=shift):  # A - B U (Lambda - far) U^T B
            return A32 @ w - BQ @ (shift[:, None] * (BQ.mT @ w)) if w.ndim == 2 else \
                A32 @ w - BQ @ (shift * (BQ.mT @ w))

        op = LinearOperator(A32.shape, matvec=matvec, matmat=matvec,
                            dtype=np.float32).to(Q.device)
        op.pure_tensor_code = True  # (materialized tensors: Lanczos traces it into its loop)
        want = max(1, guards)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                mu, V = eigsh32(op, k=want, which=which, tol=_TOL32, return_eigenvectors=True,
                                M=None if B is None else B.float32,
                                **{name: kw[name] for name in ("maxiter", "rng")})
        except _scipy.ArpackNoConvergence:
            return lam, U
        mu = np.asarray(_transfer.to_host(mu), dtype=np.float64)
        key = {"LA": lambda x: -x, "SA": lambda x: x, "LM": lambda x: -np.abs(x),
               "SM": np.abs}[which]
        # a deflated value more wanted than the k-th, beyond float32's accuracy: missed
        missed = np.flatnonzero(key(mu) < key(lam).max() - _COPY * scale)
        if missed.size == 0:
            return lam, U
        missed = missed[np.argsort(key(mu[missed]), kind="stable")][:max(guards, 1)]
        new = V.to(torch.float32).index_select(1, torch.as_tensor(missed).to(Q.device))
        keep = min(k, k + guards - new.shape[1])  # U's columns: most wanted first
        fill = k + guards - keep - new.shape[1]  # the rest: the old seed's guards
        X = torch.cat([Q[:, :keep], new, X[:, k:k + fill].to(torch.float32)], dim=1)
        lam, U = refine(X)
    return lam, U


class _B:
    """The matrix of a generalized problem's inner product (eigsh's M, lobpcg's B): its
    double-float product, float32 copy and the norm bound of its residual floor."""

    def __init__(self, M):
        op, self.product = _operator(M)
        self.float32 = op.float32
        self.norm = _frobenius(op.float32)


def _lobpcg(device_func, p):
    if p["retLambdaHistory"] or p["retResidualNormsHistory"]:
        return _on_host(_scipy.lobpcg, p, "a history has no double-float method")
    A, X, B, Y = p["A"], p["X"], p["B"], p["Y"]
    if B is not None and not (_is_matrix(B) and _is_df(B)):
        return _on_host(_scipy.lobpcg, p, "B has a double-float method only as a float64 "
                        "matrix")
    X = _as_device(X, A.device)
    if X.ndim == 1:
        X = X[:, None]
    k = X.shape[1]
    if Y is not None:
        Y = _as_device(Y, A.device)
        if Y.ndim != 2:  # lobpcg ignores it, with its warning
            return device_func(**p)
    if 5 * k > A.shape[0] - (0 if Y is None else Y.shape[1]):
        return device_func(**p)  # SciPy's dense route (double-float eigh)
    op, product = _operator(A)
    B = None if B is None else _B(B)
    kw = {name: p[name] for name in ("maxiter", "largest", "verbosityLevel")}
    tol = p["tol"]
    n = A.shape[0]
    # guard columns (random, from a fixed seed): the block reaches past the k-th value into
    # its cluster (lobpcg converges at the rate of the gap after the block's last value)
    guards = max(0, min(_guards(k), (n - (0 if Y is None else Y.shape[1])) // 5 - k))
    X32 = _parts(X)[0]
    if guards:
        extra = np.random.default_rng(0).standard_normal((n, guards)).astype(np.float32)
        X32 = torch.cat([X32, torch.as_tensor(extra).to(X32.device)], dim=1)
    with warnings.catch_warnings():  # the seeding solve's notices are not the user's
        warnings.simplefilter("ignore", UserWarning)
        # the preconditioner acts on the float32 iteration only (its float32 part); its
        # tolerance: the user's, or SciPy's float64 default (float32's default, sqrt(eps) n,
        # stops at the random start), not below float32's reach
        _, X32 = device_func(op.float32, X32, B=None if B is None else B.float32,
                             M=_float32_operator(p["M"]),
                             Y=None if Y is None else _parts(Y)[0],
                             tol=max(float(tol) if tol is not None and tol > 0 else
                                     np.sqrt(np.finfo(np.float64).eps) * n, _TOL32), **kw)
    which = "LA" if p["largest"] else "SA"
    A32 = op.float32
    pick = _wanted(which, None)

    def refine(X32, ritz=False):
        return _refine(product, lambda w: A32 @ w, _frobenius(A32), X32, k, pick, 0.0, B=B,
                       Y=None if Y is None else _parts(Y), ritz=ritz)

    try:
        lam, U = refine(X32, ritz=True)
        if Y is None:  # (the deflated search below has no constraints)
            from trnscipy.sparse.linalg._eigen.arpack.arpack import device_eigsh

            lam, U = _missed_copies(device_eigsh, A32, B, lam, U, X32, k, which,
                                    {"maxiter": None, "rng": 0}, refine)
    except _Stalled as stalled:
        return _on_host(_scipy.lobpcg, p, str(stalled))
    order = np.argsort(-lam if p["largest"] else lam, kind="stable")  # lobpcg's order
    index = torch.as_tensor(np.ascontiguousarray(order)).to(A.device)
    return (_transfer.tensor_on(lam[order], A.device),
            _transfer.df_tensor(U[0].index_select(1, index), U[1].index_select(1, index)))


def _svds(device_func, p):
    """svds from the eigenpairs of A^T A (A A^T for a wide A) refined in double-float: the
    singular values are their square roots, the other side's vectors A v / s."""
    A, k = p["A"], int(p["k"])
    if p["solver"] != "arpack" or p["which"] not in ("LM", "SM"):
        return _on_host(_scipy.svds, p, f"solver={p['solver']!r} has no double-float method")
    m, n = A.shape
    wide = m < n
    op, product = _operator(A)
    opT, productT = _operator(A.T)
    gram = (lambda x: product(productT(x))) if wide else (lambda x: productT(product(x)))
    A32, AT32 = op.float32, opT.float32
    gram32 = (lambda w: A32 @ (AT32 @ w)) if wide else (lambda w: AT32 @ (A32 @ w))
    kw = {name: p[name] for name in ("ncv", "maxiter", "rng")}
    try:
        u32, _, vh32 = _seed(device_func, p["tol"], A32, k=k, which=p["which"],
                             return_singular_vectors=True, **kw)
    except _scipy.ArpackNoConvergence:
        return _on_host(_scipy.svds, p, "the float32 solve that seeds the double-float "
                        "refinement did not converge")
    seed = u32 if wide else vh32.mT
    anorm = _frobenius(A32)
    try:
        lam, V = _refine(gram, gram32, anorm * anorm, seed, k, _wanted(p["which"], None),
                         float(p["tol"]) ** 2, ritz=True)
    except _Stalled as stalled:
        return _on_host(_scipy.svds, p, str(stalled))
    order = np.argsort(lam, kind="stable")  # SciPy's: ascending singular values
    s = np.sqrt(np.maximum(lam[order], 0.0))
    index = torch.as_tensor(np.ascontiguousarray(order)).to(A.device)
    V = (V[0].index_select(1, index), V[1].index_select(1, index))
    values = _transfer.tensor_on(s, A.device)
    jobs = p["return_singular_vectors"]
    if jobs is False:
        return values
    inv = _df.from_host(np.broadcast_to(1.0 / np.where(s > 0, s, 1.0), (m if not wide else n,
                                                                     k)).copy(), A.device)
    W = _df.mul(productT(V) if wide else product(V), inv)  # the other side's vectors
    left, right = (V, W) if wide else (W, V)
    u = _transfer.df_tensor(*left) if jobs in (True, "u") else None
    vh = _transfer.df_tensor(right[0].mT, right[1].mT) if jobs in (True, "vh") else None
    return u, values, vh


def _wanted(which, sigma):
    """``pick(theta, k)``: the indices of the k wanted values, most wanted first (ARPACK's
    rule; with ``sigma`` applied to 1 / (theta - sigma), as its shift-invert mode does)."""
    def pick(theta, k):
        nu = theta if sigma is None else 1.0 / (theta - sigma)
        key = {"LA": -nu, "SA": nu, "LM": -np.abs(nu), "SM": np.abs(nu)}.get(which)
        if key is not None:
            return np.argsort(key, kind="stable")[:k]
        up = np.argsort(-nu, kind="stable")  # BE: from both ends, one more from the top
        down = np.argsort(nu, kind="stable")
        chosen = list(up[:k - k // 2]) + [i for i in down[:k // 2] if i not in up[:k - k // 2]]
        return np.array(chosen[:k])

    return pick


def _host_f64(*pairs):
    """Double-float pairs read to the host in one transfer, as float64 arrays.  The
    pending graph runs first as a whole: reading only ``flat`` would leave the step's
    other lazy tensors (S, A S) to be recomputed in every later graph (measured on XLA
    CPU: 20 s per read at n=144, 30x the whole solve with the cut); ``flat`` is part of it,
    so the read is one execution."""
    flat = torch.cat([t.reshape(-1) for pair in pairs for t in pair])
    sync(pairs[0][0].device)
    host = np.asarray(_transfer.to_host(flat), dtype=np.float64)
    out, at = [], 0
    for pair in pairs:
        size = pair[0].numel()
        hi, lo = host[at:at + size], host[at + size:at + 2 * size]
        out.append((hi + lo).reshape(tuple(pair[0].shape)))
        at += 2 * size
    return out


def _t(pair):
    return pair[0].mT.contiguous(), pair[1].mT.contiguous()


def _refine(product, matvec32, anorm, X32, k, pick, tol, B=None, Y=None, ritz=False):
    """The k wanted eigenpairs of a symmetric operator (of the pencil (A, B) with ``B``, a
    ``_B``) to double-float accuracy from float32 vectors ``X32``: (eigenvalues as a float64
    array, the vectors, B-orthonormal, as an (n, k) double-float pair).  ``product``: the
    operator on double-float pairs; ``matvec32``: on float32 vectors; ``anorm``: a bound of
    its norm (the floor of the residual test; a 0-d device tensor, read with the first
    projections, as ``B.norm``); ``Y``: a double-float pair of constraint
    columns the vectors are kept B-orthogonal to.  ``ritz``: X32's columns are the float32
    solver's Ritz vectors (B-orthonormal to float32's precision): the first step takes their
    Rayleigh quotients on the device in place of a Rayleigh-Ritz on the host (one graph
    execution and read fewer; the next Rayleigh-Ritz mixes them in double-float)."""
    device = X32.device
    X32 = X32.to(torch.float32)
    m = X32.shape[1]  # k wanted and m - k guard columns
    # S has 2m columns from the start (the seed, then zeros: its Rayleigh-Ritz on the first
    # m), so every step is the same compiled graph
    S = (torch.cat([X32, torch.zeros_like(X32)], dim=1), torch.zeros_like(X32).repeat(1, 2))
    BY = None
    if Y is not None:
        Y, BY = _orthonormal(Y, (lambda x: x) if B is None else B.product)
    best = np.inf
    bounds = torch.stack([anorm, anorm if B is None else B.norm])
    U = norms = lam = quotients = None
    wanted = slice(0, k)  # the k wanted columns of U (most wanted first after a Rayleigh-Ritz)
    if ritz:
        U, quotients, norms, S = _quotient_step(product, matvec32, B, Y, BY, X32)
    # a step's residual norms are read with the next step's projections (one read per step;
    # the last step's correction is computed and not used)
    for step in range(_MAX_STEPS + 1):
        if Y is not None:  # S - Y (BY^T S): B-orthogonal to the constraints
            S = _df.sub(S, _df.gemm(Y, _df.gemm(_t(BY), S)))
        AS = product(S)
        BS = S if B is None else B.product(S)
        pairs = [_df.gemm(_t(S), BS), _df.gemm(_t(S), AS), (bounds, bounds * 0)]
        if norms is not None:
            pairs.append((norms, norms * 0))
        if quotients is not None:  # (the first step's, with ``ritz``)
            pairs.append(quotients)
        G, H, (anorm, bnorm), *rest = _host_f64(*pairs)
        floor = _FLOOR * anorm
        if quotients is not None:
            rest, lam, quotients = rest[:-1], rest[-1], None
            wanted = pick(lam, k)
        if norms is not None:
            if B is None:
                (rn,) = rest
                target = np.maximum(tol * np.abs(lam), floor)
            else:  # ARPACK's test relative to ||B u||, the floor that of A u - lam B u
                rn, un, bun = rest[0]
                target = np.maximum(tol * np.abs(lam) * bun,
                                    _FLOOR * (anorm + np.abs(lam) * bnorm) * un)
            # the test on the k wanted pairs (the guards only widen the Rayleigh-Ritz basis)
            rn, target = rn[wanted], target[wanted]
            worst = float(np.max(rn - target))
            if worst <= 0 or np.max(rn) > _STALL * best or step == _MAX_STEPS:
                break
            best = float(np.max(rn))
            wanted = slice(0, k)
        w = m if U is None else 2 * m
        theta, Z = _ritz(H[:w, :w], G[:w, :w])
        chosen = pick(theta, min(m, len(theta)))
        lam, Z = theta[chosen], np.pad(Z[:, chosen], ((0, 2 * m - w), (0, m - len(chosen))))
        lam = np.pad(lam, (0, m - len(lam)), mode="edge")  # (a dependent seed: zero columns)
        Zp = _df.from_host(Z, device)
        U, AU = _df.gemm(S, Zp), _df.gemm(AS, Zp)
        BU = U if B is None else _df.gemm(BS, Zp)
        L = _df.from_host(np.broadcast_to(lam, U[0].shape).copy(), device)
        norms, S = _residual_step(matvec32, B, Y, BY, U, AU, BU, L,
                                  torch.as_tensor(np.asarray(lam, dtype=np.float32)).to(device))
    if isinstance(wanted, slice):
        lam, U = lam[:k], (U[0][:, :k], U[1][:, :k])
    else:  # (the seed's Ritz vectors passed the first test)
        index = torch.as_tensor(np.ascontiguousarray(wanted)).to(device)
        lam, U = lam[wanted], (U[0].index_select(1, index), U[1].index_select(1, index))
    if worst > 0 and np.max(rn) > _WRONG * anorm:
        raise _Stalled(f"the double-float refinement stalled at residual {np.max(rn):.1e} "
                       f"(||A||_F {anorm:.1e}), far above float64's level")
    if worst > 0:  # never silently less accurate than asked
        warnings.warn(f"double-float eigenpair refinement stopped at residual "
                      f"{np.max(rn):.1e} above its target (tol {tol:g}, floor {floor:.1e}): "
                      "the eigenpairs may be less accurate than float64",
                      _sl.LinAlgWarning, stacklevel=5)
    return lam, U


def _quotient_step(product, matvec32, B, Y, BY, X32):
    """The first step from the float32 Ritz vectors ``X32`` on the device: the vectors
    B-normalized in double-float, their Rayleigh quotients (a double-float pair of m
    values), residual norms and the next basis (as ``_residual_step``)."""
    X = (X32, torch.zeros_like(X32))
    if Y is not None:
        X = _df.sub(X, _df.gemm(Y, _df.gemm(_t(BY), X)))
    AX = product(X)
    BX = X if B is None else B.product(X)
    g, h = (tuple(p.diagonal() for p in _df.gemm(_t(X), P)) for P in (BX, AX))
    quotients = _df.div(h, g)
    one = torch.ones_like(g[0])
    positive = g[0] > 0  # (a zero column stays zero)
    g = (torch.where(positive, g[0], one), torch.where(positive, g[1], 0 * one))
    scale = _df.div((one * positive, 0 * one), _df.sqrt(g))
    scale = (scale[0].expand_as(X32), scale[1].expand_as(X32))
    U, AU, BU = (_df.mul(P, scale) for P in (X, AX, BX))
    L = (quotients[0].expand_as(X32), quotients[1].expand_as(X32))
    norms, S = _residual_step(matvec32, B, Y, BY, U, AU, BU, L, quotients[0])
    return U, quotients, norms, S


def _residual_step(matvec32, B, Y, BY, U, AU, BU, L, shift):
    """The residuals R = A U - B U L of the Ritz pairs (U, L) in double-float, their
    norms (with those of U and B U for a pencil) and the next basis [U, T], T their float32
    corrections (shifted by the float32 tensor ``shift``)."""
    R = _df.sub(AU, _df.mul(BU, L))
    norms = torch.linalg.vector_norm(R[0] if B is None else torch.stack([R[0], U[0], BU[0]]),
                                     dim=-2)
    Q, BQ = U[0], BU[0]
    if Y is not None:  # the corrections deflate the constraints too
        Q, BQ = torch.cat([Q, Y[0]], dim=1), torch.cat([BQ, BY[0]], dim=1)
    T = _corrections(matvec32, None if B is None else (lambda w: B.float32 @ w), Q, BQ,
                     shift, R[0])
    return norms, (torch.cat([U[0], T], dim=1), torch.cat([U[1], torch.zeros_like(T)], dim=1))


def _ritz(H, G):
    """The Ritz pairs of H y = theta G y (host float64), G-orthonormal, with G's nearly
    dependent directions dropped (two corrections of one multiple eigenvalue can be nearly
    parallel: a Cholesky of G would fail or amplify their rounding)."""
    # columns scaled to unit norm first (the corrections are small next to the vectors)
    diag = np.diag(G).copy()
    unit = 1.0 / np.sqrt(np.where(diag > 0, diag, 1.0)) * (diag > 0)
    d, W = np.linalg.eigh((G + G.T) / 2 * unit[:, None] * unit[None, :])
    keep = d > _DEPENDENT * d[-1]
    C = unit[:, None] * W[:, keep] / np.sqrt(d[keep])
    theta, Y = np.linalg.eigh(C.T @ ((H + H.T) / 2) @ C)
    return theta, C @ Y


def _orthonormal(Y, bproduct):
    """(Y C^-1/2 ... as Y L^-T with C = Y^T B Y = L L^T, its B-product): the constraint
    columns B-orthonormal in double-float (C's Cholesky factor on the host)."""
    BY = bproduct(Y)
    (C,) = _host_f64(_df.gemm(_t(Y), BY))
    W = _sl.solve_triangular(_sl.cholesky((C + C.T) / 2, lower=True), np.eye(C.shape[0]),
                             lower=True).T
    Wp = _df.from_host(np.ascontiguousarray(W), Y[0].device)
    return _df.gemm(Y, Wp), _df.gemm(BY, Wp)


def _frobenius(A32):
    """||A||_F from the float32 values (a bound of ||A||_2), a 0-d device tensor."""
    data = A32 if isinstance(A32, torch.Tensor) else A32.data
    return torch.linalg.vector_norm(data.reshape(-1))


def _corrections(matvec32, bmatvec32, Q, BQ, shift, R):
    """The float32 Jacobi-Davidson corrections: t_i with Q^T B t_i = 0 and
    P (A - lam_i B) P^T t_i = -P r_i, P = I - B Q Q^T (Q B-orthonormal; B = I without
    ``bmatvec32``), by MINRES on all k columns at once: one Lanczos process and Givens QR
    per column (its scalars are k-vectors), as one device loop that leaves when every column
    reaches ``_INNER_RTOL`` (one compiled graph, one execution, whatever the shifts)."""
    n, k = R.shape
    device = Q.device

    def project(v, Q=Q, BQ=BQ):  # P
        return v - BQ @ (Q.mT @ v)

    def project_t(v, Q=Q, BQ=BQ):  # P^T
        return v - Q @ (BQ.mT @ v)

    def op(V, Q, BQ, shift):  # column i: P (A - lam_i B) P^T v_i
        W = project_t(V, Q, BQ)
        return project(matvec32(W) - (W if bmatvec32 is None else bmatvec32(W)) * shift,
                       Q, BQ)

    rhs = project(-R)
    scale = torch.linalg.vector_norm(rhs, dim=0).clamp_min(torch.finfo(torch.float32).tiny)
    zeros, ones = torch.zeros_like(rhs), torch.ones(k, dtype=rhs.dtype, device=device)
    nought = torch.zeros(k, dtype=rhs.dtype, device=device)
    tiny = torch.finfo(torch.float32).tiny

    def body(carry, _):
        v_old, v, w_old2, w_old, x, beta, c2, s2, c1, s1, eta, done, Q, BQ, shift = carry
        live = eta.abs() > _INNER_RTOL
        z = op(v, Q, BQ, shift) - v_old * beta
        alpha = (v * z).sum(0)
        z = z - v * alpha
        beta_next = torch.linalg.vector_norm(z, dim=0)
        # column j of the tridiagonal through the two previous rotations and a new one
        rho3 = s2 * beta
        rho2 = c1 * c2 * beta + s1 * alpha
        delta = c1 * alpha - s1 * c2 * beta
        rho1 = torch.sqrt(delta * delta + beta_next * beta_next)
        safe = torch.where(rho1 > tiny, rho1, ones)
        c, s = delta / safe, beta_next / safe
        w = (v - w_old2 * rho3 - w_old * rho2) / safe
        x_new = x + w * (c * eta)
        v_new = z / torch.where(beta_next > tiny, beta_next, ones)
        eta_new = torch.where(beta_next > tiny, -s * eta, nought)  # invariant: exact

        def keep(new, old):
            return torch.where(live, new, old)

        out = (keep(v, v_old), keep(v_new, v), keep(w_old, w_old2), keep(w, w_old),
               keep(x_new, x), keep(beta_next, beta), keep(c1, c2), keep(s1, s2),
               keep(c, c1), keep(s, s1), keep(eta_new, eta))
        finished = ~((out[-1].abs() > _INNER_RTOL) & live).any()
        return (*out, finished, Q, BQ, shift)

    start = (zeros, rhs / scale, zeros, zeros, zeros, nought, ones, nought, ones, nought,
             ones, torch.zeros((), dtype=torch.bool, device=device), Q, BQ, shift)
    # Q, BQ (pending: the step's Ritz vectors) travel in the carry, not the body's closure
    # (a pending closure tensor would be recomputed in the body): the loop runs in the
    # step's graph, with no execution of its own
    x = backend(device).device_loop(body, start, 0, min(2 * n, 1000), until=11)[4]
    return project_t(x) * scale
