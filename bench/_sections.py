"""The workloads: each section yields Cases whose lanes go through public APIs only.

SciPy: scipy.sparse / scipy.sparse.linalg / scipy.linalg on NumPy data.
torch (hand-written): what a user would write without trnscipy -- torch.sparse CSR/BSR
tensors @ dense, torch.linalg for dense; no Krylov solvers exist there.
trnscipy lanes: trnscipy.sparse.csr_array((data, indices, indptr)) / bsr_array built
from torch tensors on the lane's device, ``A @ x``, trnscipy.sparse.linalg.cg/gmres,
trnscipy.linalg.*.  A route that is missing, or that falls back to the host
(DeviceFallbackWarning), is reported as n/a.
"""

import inspect

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from bench._harness import Case, Cut, NotAvailable
from bench._problems import (
    convdiff2d,
    general_matrix,
    poisson2d,
    random_bsr,
    random_csr,
    spd_matrix,
)

__all__ = ["spmv_cases", "bsr_cases", "solver_cases", "dense_cases", "batch_cases",
           "defer_cases"]


def _torch():
    import torch

    return torch


def _t(a, device):
    return _torch().from_numpy(np.ascontiguousarray(a)).to(device)


def _require_route(obj, what, device=None):
    """NotAvailable unless trnscipy has a device route for ``obj`` on this build (and,
    given ``device``, the capability table does not send it to the host there)."""
    from trnscipy._capabilities import host_kinds
    from trnscipy._device import device_kind
    from trnscipy._mirror import route_of

    if route_of(obj) != "device":
        raise NotAvailable(f"{what} has no device route on this build (route: {route_of(obj)})")
    scipy_func = getattr(obj, "__wrapped__", None)
    if device is not None and scipy_func is not None:
        kind = device_kind(device)
        if kind in host_kinds(f"{scipy_func.__module__}.{scipy_func.__name__}"):
            raise NotAvailable(f"host fallback: {what} is declared to run on the host on "
                               f"{kind}")
    return obj


def _device_object(obj, what):
    if not getattr(obj, "_trnscipy_device_object", False):
        raise NotAvailable(f"{what} returned {type(obj).__module__}.{type(obj).__name__}, "
                           "not a trnscipy device object (no device route on this build)")
    return obj


def _relerr(ref, got):
    ref = np.asarray(ref.toarray() if sp.issparse(ref) else ref, dtype=np.float64)
    got = np.asarray(got.toarray() if sp.issparse(got) else got, dtype=np.float64)
    if ref.shape != got.shape:
        return np.inf
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)


def _tol(dtype, n=1, c=30):
    return c * max(n, 1) * np.finfo(dtype).eps


def _cut_if(lane, cfg, work, what):
    limit = cfg.get("xla_max_work")
    if lane == "trn_xla" and limit is not None and work > limit:
        raise Cut(f"{what} ({work:.2g}) above this run's XLA-lane limit {limit:.2g} "
                  "(PJRT CPU too slow for the time budget)")


# ------------------------------------------------------------------ SpMV / SpMM


def _spmv_bytes(A, N):
    m, n = A.shape
    item = A.data.dtype.itemsize
    return (A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
            + n * N * item + m * N * item)


def _dense_operand(n, N, dtype, seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n if N == 1 else (n, N)).astype(dtype)


def _trn_csr_builder(A, X, device, cfg, N):
    def build():
        import trnscipy.sparse as tsp

        _require_route(tsp.csr_array, "trnscipy.sparse.csr_array")
        _cut_if("trn_xla" if device.type == "xla" else "", cfg, A.nnz * N, "nnz x N")
        At = tsp.csr_array((_t(A.data, device), _t(A.indices, device), _t(A.indptr, device)),
                           shape=A.shape)
        _device_object(At, "trnscipy.sparse.csr_array(torch tensors)")
        Xt = _t(X, device)
        return lambda: At @ Xt

    return build


def _trn_bsr_builder(B, X, device, cfg, N):
    def build():
        import trnscipy.sparse as tsp

        _require_route(tsp.bsr_array, "trnscipy.sparse.bsr_array")
        _cut_if("trn_xla" if device.type == "xla" else "", cfg, B.data.size * N,
                "stored values x N")
        Bt = tsp.bsr_array((_t(B.data, device), _t(B.indices, device), _t(B.indptr, device)),
                           shape=B.shape, blocksize=B.blocksize)
        _device_object(Bt, "trnscipy.sparse.bsr_array(torch tensors)")
        Xt = _t(X, device)
        return lambda: Bt @ Xt

    return build


def _torch_sparse_builder(A, X, device, layout):
    def build():
        torch = _torch()
        if layout == "bsr":
            At = torch.sparse_bsr_tensor(_t(A.indptr, device), _t(A.indices, device),
                                         _t(A.data, device), size=A.shape)
        else:
            At = torch.sparse_csr_tensor(_t(A.indptr, device), _t(A.indices, device),
                                         _t(A.data, device), size=A.shape)
        Xt = _t(X, device)
        return lambda: At @ Xt

    return build


def _cupy_builder(A, X):
    def build():
        import cupy
        import cupyx.scipy.sparse as csp

        Ac = csp.csr_matrix(A.tocsr())
        Xc = cupy.asarray(X)
        return lambda: Ac @ Xc

    return build


def _sparse_lanes(A, X, cfg, N, layout, lanes):
    torch = _torch()
    trn = _trn_bsr_builder if layout == "bsr" else _trn_csr_builder
    builders = {"scipy": lambda: (lambda: A @ X),
                "torch": _torch_sparse_builder(A, X, torch.device("cpu"), layout),
                "trn_cpu": trn(A, X, torch.device("cpu"), cfg, N)}
    for lane in lanes:
        if lane.name == "trn_xla":
            builders["trn_xla"] = trn(A, X, lane.device, cfg, N)
        elif lane.name == "trn_cuda":
            builders["trn_cuda"] = trn(A, X, lane.device, cfg, N)
        elif lane.name == "torch_cuda":
            builders["torch_cuda"] = _torch_sparse_builder(A, X, lane.device, layout)
        elif lane.name == "cupy":
            builders["cupy"] = _cupy_builder(A, X)
    return builders


def _spmv_matrices(cfg):
    for k in cfg["poisson_k"]:
        yield f"poisson2d {k}x{k}", lambda k=k: poisson2d(k)
    for m, density in cfg["random"]:
        yield f"random d={density:g}", lambda m=m, d=density: random_csr(m, d)


def spmv_cases(cfg, lanes):
    for name, make in _spmv_matrices(cfg):
        A = make()
        for N in cfg["N"]:
            X = _dense_operand(A.shape[1], N, A.dtype)
            yield Case("spmv", name,
                       {"rows": A.shape[0], "nnz": A.nnz, "N": N, "dtype": str(A.dtype)},
                       _sparse_lanes(A, X, cfg, N, "csr", lanes), check=_relerr,
                       tol=_tol(A.dtype, 1, 1e3), bytes_moved=_spmv_bytes(A, N))


def bsr_cases(cfg, lanes):
    block = cfg["block"]
    for mb, nb in cfg["shapes"]:
        for density in cfg["densities"]:
            B = random_bsr(mb, nb, block, density)
            item = B.data.dtype.itemsize
            for N in cfg["N"]:
                X = _dense_operand(B.shape[1], N, B.dtype)
                moved = (B.data.nbytes + B.indices.nbytes + B.indptr.nbytes
                         + (B.shape[0] + B.shape[1]) * N * item)
                yield Case("bsr", f"bsr {mb}x{nb} blocks of {block}",
                           {"shape": f"{B.shape[0]}x{B.shape[1]}", "block_density": density,
                            "blocks": len(B.indices), "N": N, "dtype": str(B.dtype)},
                           _sparse_lanes(B, X, cfg, N, "bsr", lanes), check=_relerr,
                           tol=_tol(B.dtype, 1, 1e3), bytes_moved=moved)


# ------------------------------------------------------------------ Krylov solvers


def _scipy_iterations(solver, A, b, kwargs):
    count = [0]

    def callback(_):
        count[0] += 1

    extra = {"callback_type": "pr_norm"} if solver is spla.gmres else {}
    solver(A, b, callback=callback, **kwargs, **extra)
    return count[0]


def _trn_solver_builder(name, workload, A, b, device, kwargs, cfg):
    def build():
        import trnscipy.sparse as tsp
        import trnscipy.sparse.linalg as tspla

        solver = _require_route(getattr(tspla, name), f"trnscipy.sparse.linalg.{name}", device)
        _require_route(tsp.csr_array, "trnscipy.sparse.csr_array")
        _cut_if("trn_xla" if device.type == "xla" else "", cfg, A.shape[0], "unknowns")
        At = tsp.csr_array((_t(A.data, device), _t(A.indices, device), _t(A.indptr, device)),
                           shape=A.shape)
        _device_object(At, "trnscipy.sparse.csr_array(torch tensors)")
        bt = _t(b, device)
        return lambda: solver(At, bt, **kwargs)

    return build


def _solver_traffic(name, A, restart):
    """Approximate compulsory bytes of one iteration: one SpMV plus the vector passes
    (cg: 2 dots + 3 updates ~ 13 vector reads/writes; gmres: modified Gram-Schmidt
    against restart/2 basis vectors on average ~ 5 per vector + 3)."""
    n = A.shape[0]
    vec = n * A.data.dtype.itemsize
    passes = 13 if name == "cg" else 5 * restart / 2 + 3
    return _spmv_bytes(A, 1) + passes * vec


def solver_cases(cfg, lanes):
    for problem, k, name, dtype, maxiter in cfg["cases"]:
        make = poisson2d if problem == "poisson2d" else convdiff2d
        A = make(k, dtype=np.dtype(dtype))
        b = np.ones(A.shape[0], dtype=A.dtype)
        kwargs = {"rtol": cfg["rtol"]}
        if maxiter is not None:
            kwargs["maxiter"] = maxiter
        restart = min(20, A.shape[0])
        solver = getattr(spla, name)
        iterations = _scipy_iterations(solver, A, b, kwargs)
        bnorm = np.linalg.norm(b)

        def describe(host, A=A, b=b, bnorm=bnorm):
            x, info = host
            relres = np.linalg.norm(b - A @ np.asarray(x, dtype=A.dtype)) / bnorm
            return {"info": int(info), "relres": float(relres)}

        def check(ref, host, A=A, b=b, bnorm=bnorm, rtol=cfg["rtol"]):
            ref_res = np.linalg.norm(b - A @ ref[0]) / bnorm
            res = np.linalg.norm(b - A @ np.asarray(host[0], dtype=A.dtype)) / bnorm
            return res / max(ref_res, rtol)

        workload = f"{name} {problem} {k}x{k}"
        builders = {"scipy": lambda s=solver, A=A, b=b, kw=kwargs: (lambda: s(A, b, **kw))}
        for lane in lanes:
            if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                builders[lane.name] = _trn_solver_builder(name, workload, A, b, lane.device,
                                                          kwargs, cfg)
        if any(lane.name == "cupy" for lane in lanes):
            builders["cupy"] = _cupy_solver_builder(name, A, b, kwargs)
        if name == "cg" and A.dtype == np.float32 and any(lane.name == "jax" for lane in lanes):
            builders["jax"] = _jax_cg_builder(A, b, kwargs)
        yield Case("solvers", workload,
                   {"unknowns": A.shape[0], "dtype": str(A.dtype), "rtol": cfg["rtol"],
                    "maxiter": maxiter, "iterations": iterations},
                   builders, check=check, tol=10.0, describe=describe,
                   bytes_moved=iterations * _solver_traffic(name, A, restart))


def _jax_cg_builder(A, b, kwargs):
    """jax.scipy.sparse.linalg.cg with a BCOO matrix, one jit for the whole solve (its
    stop test is SciPy's: ||r|| <= max(rtol ||b||, atol))."""
    def build():
        import jax
        import jax.experimental.sparse as jsp
        import jax.scipy.sparse.linalg as jspla

        Aj, bj = jsp.BCOO.from_scipy_sparse(A), jax.numpy.asarray(b)
        kw = {"tol": kwargs["rtol"], "maxiter": kwargs.get("maxiter") or 10 * A.shape[0]}
        solve = jax.jit(lambda rhs: jspla.cg(lambda v: Aj @ v, rhs, **kw)[0])

        def run():
            x = solve(bj).block_until_ready()
            return np.asarray(x), 0

        return run

    return build


def _cupy_solver_builder(name, A, b, kwargs):
    def build():
        import cupy
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cspla

        Ac, bc = csp.csr_matrix(A), cupy.asarray(b)
        solver = getattr(cspla, name)
        # CuPy before 14 calls SciPy's rtol "tol"
        rtol = "rtol" if "rtol" in inspect.signature(solver).parameters else "tol"
        kw = {rtol if k == "rtol" else k: v for k, v in kwargs.items()}
        return lambda: solver(Ac, bc, **kw)

    return build


# ------------------------------------------------------------------ dense linalg


def _dense_op(op, torch):
    """(scipy call, torch.linalg call, trnscipy call name, invariant check, bytes factor)."""
    def lu_err(A, host):
        p, l, u = (np.asarray(h, dtype=np.float64) for h in host)
        return np.linalg.norm(p @ l @ u - A) / np.linalg.norm(A)

    def qr_err(A, host):
        q, r = (np.asarray(h, dtype=np.float64) for h in host[:2])
        return np.linalg.norm(q @ r - A) / np.linalg.norm(A)

    def chol_err(A, host):
        r = np.asarray(host, dtype=np.float64)
        return np.linalg.norm(r.T @ r - A) / np.linalg.norm(A)

    table = {
        "cholesky": (lambda A: sla.cholesky(A), lambda A: torch.linalg.cholesky(A, upper=True),
                     lambda A, ref, host: chol_err(A, host), 2),
        "eigh": (lambda A: sla.eigh(A), lambda A: torch.linalg.eigh(A),
                 lambda A, ref, host: _relerr(ref[0], host[0]), 2),
        "solve": (None, None, lambda A, ref, host: _relerr(ref, host), 1),
        "lu": (lambda A: sla.lu(A), lambda A: torch.linalg.lu(A),
               lambda A, ref, host: lu_err(A, host), 4),
        "qr": (lambda A: sla.qr(A), lambda A: torch.linalg.qr(A),
               lambda A, ref, host: qr_err(A, host), 3),
        "svd": (lambda A: sla.svd(A), lambda A: torch.linalg.svd(A),
                lambda A, ref, host: _relerr(ref[1], host[1]), 3),
    }
    return table[op]


def dense_cases(cfg, lanes):
    torch = _torch()
    for op, sizes in cfg["ops"].items():
        for n in sizes:
            for dtype in cfg["dtypes"]:
                dtype = np.dtype(dtype)
                A = (spd_matrix(n, dtype) if op in ("cholesky", "eigh", "solve")
                     else general_matrix(n, dtype))
                scipy_call, torch_call, invariant, factor = _dense_op(op, torch)
                args = (A,)
                if op == "solve":
                    args = (A, np.ones(n, dtype=dtype))
                    scipy_call = sla.solve
                    torch_call = torch.linalg.solve
                builders = {"scipy": lambda f=scipy_call, a=args: (lambda: f(*a)),
                            "torch": _torch_dense_builder(torch_call, args, torch.device("cpu"))}
                for lane in lanes:
                    if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                        builders[lane.name] = _trn_dense_builder(op, args, lane.device, cfg, n)
                    elif lane.name == "torch_cuda":
                        builders[lane.name] = _torch_dense_builder(torch_call, args, lane.device)
                yield Case("dense", op, {"n": n, "dtype": str(dtype)}, builders,
                           check=lambda ref, host, A=A, f=invariant: f(A, ref, host),
                           tol=_tol(dtype, n, 100), bytes_moved=factor * n * n * dtype.itemsize)


def batch_cases(cfg, lanes):
    """SciPy's batch rule: stacks of systems, one batched call against a Python loop."""
    torch = _torch()
    for batch, n in cfg["solve"]:
        for dtype in cfg["dtypes"]:
            yield from _batched_solve_cases(batch, n, np.dtype(dtype), lanes, torch)


def _batched_solve_cases(batch, n, dtype, lanes, torch):
    """A stack of ``batch`` n x n systems: one batched call (SciPy's batch rule) and a
    Python loop of single solves over the matrices held one by one (a loop over slices of
    a device stack would compile one graph per slice on XLA), on every lane."""
    rng = np.random.default_rng(5)
    A = (rng.standard_normal((batch, n, n)) + n * np.eye(n)).astype(dtype)
    b = rng.standard_normal((batch, n, 1)).astype(dtype)  # (a 2-D b is one matrix)

    def check(ref, host):
        x = np.stack([np.asarray(h) for h in host]) if isinstance(host, list | tuple) \
            else host
        x = np.asarray(x, dtype=np.float64)
        r = np.einsum("bij,bjk->bik", A.astype(np.float64), x) - b
        return float(np.linalg.norm(r) / np.linalg.norm(b))

    for route in ("one batched call", "Python loop of single solves"):
        looped = route != "one batched call"
        builders = {"scipy": _batch_builder(sla.solve, A, b, looped, np.asarray),
                    "torch": _batch_builder(torch.linalg.solve, A, b, looped,
                                            lambda a: _t(a, torch.device("cpu")))}
        for lane in lanes:
            if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                builders[lane.name] = _trn_batched_builder(A, b, looped, lane.device)
        yield Case("dense", "solve (batch)", {"batch": batch, "n": n, "dtype": str(dtype),
                                              "route": route}, builders, check=check,
                   tol=_tol(dtype, n, 100), bytes_moved=batch * n * n * dtype.itemsize)


def _batch_builder(f, A, b, looped, to):
    def build():
        if not looped:
            a, bb = to(A), to(b)
            return lambda: f(a, bb)
        pairs = [(to(A[i]), to(b[i])) for i in range(len(A))]
        return lambda: [f(a, bb) for a, bb in pairs]

    return build


def _trn_batched_builder(A, b, looped, device):
    def build():
        import trnscipy.linalg as tla

        f = _require_route(tla.solve, "trnscipy.linalg.solve", device)
        return _batch_builder(f, A, b, looped, lambda a: _t(a, device))()

    return build


def _torch_dense_builder(call, args, device):
    def build():
        targs = tuple(_t(a, device) for a in args)
        return lambda: call(*targs)

    return build


def _trn_dense_builder(op, args, device, cfg, n):
    def build():
        import trnscipy.linalg as tla

        f = _require_route(getattr(tla, op), f"trnscipy.linalg.{op}", device)
        if device.type == "xla" and n > cfg.get("xla_max_n", {}).get(op, n):
            reason = cfg.get("xla_cut_reason", {}).get(op, "PJRT CPU too slow for the "
                                                               "time budget")
            raise Cut(f"n={n} above this run's XLA-lane limit for {op} ({reason})")
        targs = tuple(_t(a, device) for a in args)
        return lambda: f(*targs)

    return build


# ------------------------------------------------------------------ defer path


def defer_cases(cfg):
    """trnscipy called with NumPy/SciPy inputs (it must hand them to SciPy) vs SciPy."""
    import trnscipy.linalg as tla
    import trnscipy.sparse as tsp
    import trnscipy.sparse.linalg as tspla

    n = cfg["n"]
    S = spd_matrix(n, np.float64)
    b = np.ones(n)
    P = poisson2d(cfg["grid"])
    pb = np.ones(P.shape[0])
    data, indices, indptr = P.data, P.indices, P.indptr
    calls = [
        ("linalg.cholesky", f"{n}x{n}", sla.cholesky, tla.cholesky, (S,)),
        ("linalg.solve", f"{n}x{n}", sla.solve, tla.solve, (S, b)),
        ("linalg.eigh", f"{n}x{n}", sla.eigh, tla.eigh, (S,)),
        ("sparse.csr_array", f"{P.shape[0]} rows", sp.csr_array, tsp.csr_array,
         ((data, indices, indptr),)),
        ("sparse.eye_array", f"{P.shape[0]}", sp.eye_array, tsp.eye_array, (P.shape[0],)),
        ("sparse.linalg.cg", f"poisson {P.shape[0]} unknowns", spla.cg, tspla.cg, (P, pb)),
        ("sparse.linalg.spsolve", f"poisson {P.shape[0]} unknowns", spla.spsolve,
         tspla.spsolve, (P, pb)),
    ]
    for name, size, scipy_f, trn_f, args in calls:
        builders = {"scipy": lambda f=scipy_f, a=args: (lambda: f(*a)),
                    "trn_host": lambda f=trn_f, a=args: (lambda: f(*a))}
        yield Case("defer", name, {"size": size}, builders,
                   check=lambda ref, host: _relerr(ref[0] if isinstance(ref, tuple) else ref,
                                                   host[0] if isinstance(host, tuple) else host),
                   tol=0.0)
