"""Least squares and matrix functions: lsqr / lsmr on a 3000x800 sparse design matrix,
expm_multiply of a grid graph Laplacian (heat kernel), beside SciPy."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from bench._harness import Case
from bench._sections import _cut_if, _device_object, _relerr, _require_route, _t

__all__ = ["lsq_cases"]

_TOLS = {"atol": 1e-10, "btol": 1e-10}


def _design(m, n, density, seed=0):
    A = sp.random(m, n, density=density, random_state=seed, format="csr") + sp.eye(m, n)
    return sp.csr_array(A), np.random.default_rng(seed).standard_normal(m)


def _laplacian(k):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k, k))
    return sp.csr_array(sp.kron(sp.eye(k), T) + sp.kron(T, sp.eye(k)))


def _trn_builder(name, A, args, kwargs, device, cfg):
    def build():
        import trnscipy
        import trnscipy.sparse.linalg as tspla

        f = _require_route(getattr(tspla, name), f"trnscipy.sparse.linalg.{name}", device)
        _cut_if("trn_xla" if device.type == "xla" else "", cfg, A.shape[0], "rows")
        At = _device_object(trnscipy.to_device(A, device), "trnscipy.to_device(csr_array)")
        targs = tuple(_t(a, device) for a in args)
        return lambda: f(At, *targs, **kwargs)

    return build


def lsq_cases(cfg, lanes):
    for m, n, density in cfg.get("lsq", []):
        A, b = _design(m, n, density)
        for name in ("lsqr", "lsmr"):
            solver = getattr(spla, name)
            ref = solver(A, b, **_TOLS)
            builders = {"scipy": lambda s=solver, A=A, b=b: (lambda: s(A, b, **_TOLS))}
            for lane in lanes:
                if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                    builders[lane.name] = _trn_builder(name, A, (b,), _TOLS, lane.device, cfg)
            yield Case("lsq", f"{name} {m}x{n}",
                       {"rows": m, "cols": n, "nnz": A.nnz, "dtype": "float64",
                        "iterations": int(ref[2])},
                       builders, check=lambda r, h: _relerr(r[0], h[0]), tol=1e-8,
                       describe=lambda h: {"istop": int(h[1]), "itn": int(h[2])},
                       bytes_moved=int(ref[2]) * (2 * (A.data.nbytes + A.indices.nbytes
                                                       + A.indptr.nbytes) + 8 * 6 * (m + n)))
    for k in cfg.get("expm_grid", []):
        L = -_laplacian(k)
        b = np.zeros(k * k)
        b[k * k // 2 + k // 2] = 1.0
        builders = {"scipy": lambda L=L, b=b: (lambda: spla.expm_multiply(L, b))}
        for lane in lanes:
            if lane.name in ("trn_cpu", "trn_xla", "trn_cuda"):
                builders[lane.name] = _trn_builder("expm_multiply", L, (b,), {}, lane.device,
                                                   cfg)
        yield Case("lsq", f"expm_multiply grid Laplacian {k}x{k}",
                   {"unknowns": k * k, "dtype": "float64"}, builders,
                   check=lambda r, h: _relerr(r, h), tol=1e-10)
