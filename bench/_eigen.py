"""Eigensolvers: eigsh k=6 (largest algebraic, and shift-invert near 0) on 2-D Poisson,
lobpcg k=8 and svds k=10, beside SciPy (ARPACK, SciPy's lobpcg).  CPU tensors run SciPy's
solvers on views; the XLA lane runs the device solvers (trnscipy/sparse/linalg/_eigen/)."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from bench._harness import Case
from bench._problems import poisson2d
from bench._sections import _cut_if, _device_object, _require_route, _t

__all__ = ["eigen_cases"]


def _values_relerr(ref, got):
    """Relative error of the eigen/singular values (sorted: the solvers' orders differ)."""
    ref = np.sort(np.asarray(ref, dtype=np.float64))
    got = np.sort(np.asarray(got, dtype=np.float64))
    if ref.shape != got.shape:
        return np.inf
    return np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300)


def _trn_builder(name, A, args, kwargs, device, cfg):
    def build():
        import trnscipy
        import trnscipy.sparse.linalg as tspla

        f = _require_route(getattr(tspla, name), f"trnscipy.sparse.linalg.{name}", device)
        lane = "trn_xla" if device.type == "xla" else ""
        _cut_if(lane, cfg, A.shape[0], "unknowns")
        if "sigma" in kwargs:
            _cut_if(lane, {"xla_max_work": cfg.get("xla_shift_invert_max_n")}, A.shape[0],
                    "shift-invert unknowns")
        At = _device_object(trnscipy.to_device(A, device), "trnscipy.to_device(csr_array)")
        targs = tuple(_t(a, device) for a in args)
        tkw = {k: (_t(v, device) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
        return lambda: f(At, *targs, **tkw)

    return build


def _workloads(cfg):
    for k in cfg.get("eigsh_grid", []):
        A = poisson2d(k)
        v0 = np.ones(A.shape[0])
        if k * k <= cfg.get("eigsh_la_max_n", np.inf):
            yield "eigsh", f"eigsh k=6 LA poisson2d n={k * k}", A, (), {
                "k": 6, "which": "LA", "v0": v0}, 0
        yield "eigsh", f"eigsh k=6 sigma=0 poisson2d n={k * k}", A, (), {
            "k": 6, "sigma": 0.0, "v0": v0}, 0
    for k in cfg.get("lobpcg_grid", []):
        A = poisson2d(k)
        X = np.random.default_rng(0).standard_normal((A.shape[0], 8))
        yield "lobpcg", f"lobpcg k=8 poisson2d n={k * k}", A, (X,), {
            "largest": False, "maxiter": cfg.get("lobpcg_maxiter", 20)}, 0
    for m, n, density in cfg.get("svds", []):
        A = sp.csr_array(sp.random(m, n, density=density, random_state=0, format="csr")
                         + sp.eye(m, n))
        yield "svds", f"svds k=10 {m}x{n}", A, (), {"k": 10, "rng": 0}, 1


def eigen_cases(cfg, lanes):
    import warnings

    for name, workload, A, args, kwargs, values_at in _workloads(cfg):
        f = getattr(spla, name)

        def scipy_call(f=f, A=A, args=args, kwargs=kwargs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # lobpcg's maxiter notice
                return f(A, *args, **kwargs)

        builders = {"scipy": lambda c=scipy_call: c}
        for lane in lanes:
            if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                builders[lane.name] = _trn_builder(name, A, args, kwargs, lane.device, cfg)
        # minutes per call (SuperLU's factorization at 10^6 unknowns): one timed call a lane
        once = A.shape[0] > cfg.get("timed_once_above_n", np.inf)
        yield Case("eigen", workload, {"unknowns": A.shape[0], "nnz": A.nnz},
                   builders, check=lambda r, h, i=values_at: _values_relerr(r[i], h[i]),
                   tol=cfg.get("tol", 1e-8),
                   bytes_moved=A.data.nbytes + A.indices.nbytes + A.indptr.nbytes,
                   extra={"reps": 1} if once else {})
