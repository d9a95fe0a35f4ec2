"""Sparse direct solvers: spsolve, the factorization (splu) and the solve with its factors,
separately, beside SciPy's SuperLU.  CPU tensors run SuperLU on the data; the XLA lane
runs the device factorization (trnscipy/sparse/linalg/_dsolve/_multifrontal.py)."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from bench._harness import Case
from bench._problems import poisson2d
from bench._sections import _cut_if, _relerr, _require_route, _t

__all__ = ["dsolve_cases"]


def poisson3d(k, dtype=np.float64):
    """7-point Laplacian on a k x k x k grid, CSC."""
    T = sp.diags_array([np.full(k - 1, -1.0), np.full(k, 2.0), np.full(k - 1, -1.0)],
                       offsets=[-1, 0, 1])
    eye = sp.eye_array(k)
    A = (sp.kron(sp.kron(eye, eye), T) + sp.kron(sp.kron(eye, T), eye)
         + sp.kron(sp.kron(T, eye), eye))
    return sp.csc_array(A, dtype=dtype)


def _trn_builder(op, A, b, device, cfg):
    def build():
        import trnscipy.sparse as tsp
        import trnscipy.sparse.linalg as tspla

        fn = _require_route(getattr(tspla, "spsolve" if op == "spsolve" else "splu"),
                            f"trnscipy.sparse.linalg.{op}", device)
        _cut_if("trn_xla" if device.type == "xla" else "", cfg, A.shape[0], "unknowns")
        At = tsp.csc_array((_t(A.data, device), _t(A.indices, device), _t(A.indptr, device)),
                           shape=A.shape)
        bt = _t(b, device)
        if op == "spsolve":
            return lambda: fn(At, bt)
        if op == "splu":
            return lambda: fn(At)  # the factorization (it reads its singularity flag)
        lu = fn(At)
        return lambda: lu.solve(bt)

    return build


def dsolve_cases(cfg, lanes):
    for name, k in cfg["problems"]:
        A = sp.csc_array(poisson2d(k)) if name == "poisson2d" else poisson3d(k)
        n = A.shape[0]
        b = np.random.default_rng(0).standard_normal(n)
        scipy_lu = spla.splu(A)
        scipy = {"spsolve": lambda A=A, b=b: spla.spsolve(A, b),
                 "splu": lambda A=A: (spla.splu(A), np.empty(0)),  # a host result
                 "solve": lambda lu=scipy_lu, b=b: lu.solve(b)}
        for op in ("spsolve", "splu", "solve"):
            builders = {"scipy": lambda f=scipy[op]: f}
            for lane in lanes:
                if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                    builders[lane.name] = _trn_builder(op, A, b, lane.device, cfg)
            check = None if op == "splu" else _relerr
            yield Case("dsolve", f"{op} {name} n={n}", {"unknowns": n, "nnz": A.nnz},
                       builders, check=check, tol=1e-8,
                       bytes_moved=(A.data.nbytes + A.indices.nbytes + 2 * b.nbytes))
