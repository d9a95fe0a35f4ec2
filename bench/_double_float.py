"""float64 on an emulated Neuron device (double-float storage and refinement, float32
arithmetic only) versus the plain float32 solve of the same problem there (issue 11).

XLA lane only, under ``TRNSCIPY_EMULATE=neuron`` and ``TRNSCIPY_STRICT=1`` (a host
fallback fails the row).  Krylov: cg and gmres on 2-D Poisson, float64 at rtol 1e-10 and
1e-5 against float32 at rtol 1e-5 (float32 reaches no further).  Dense: solve, cholesky,
eigh.  The other families (issue 27; section double_float_families, ``family_cases``):
spsolve, eigsh (largest and shift-invert), lobpcg, svds, lsqr, lsmr, expm_multiply, each
float64 against the same call on float32 data.  The
ratio table divides the modelled trn1 times (bench/_model.py) of each float64 row by its
float32 row's; Poisson 10^6 is modelled from the 10^4 counts (see ``krylov_scaled``), not
run.
"""

import contextlib
import math
import os

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla

from bench._harness import Case
from bench._model import modelled_seconds
from bench._problems import poisson2d, spd_matrix
from bench._sections import _relerr, _require_route, _scipy_iterations

__all__ = ["double_float_cases", "double_float_table"]

_TARGETS = {"krylov": 2.0, "dense": 1.5, "family": 3.0}


@contextlib.contextmanager
def _emulated(device):
    """Neuron's limits on the XLA lane: no float64 arithmetic, float64 held as float32,
    host fallbacks raise."""
    from trnscipy._transfer import device_storage

    saved = {k: os.environ.get(k) for k in ("TRNSCIPY_EMULATE", "TRNSCIPY_STRICT")}
    os.environ.update(TRNSCIPY_EMULATE="neuron", TRNSCIPY_STRICT="1")
    try:
        with device_storage(device):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _builder(routed, fn, host_args, device):
    """build() for the XLA lane: the operands moved by trnscipy.to_device (exact
    double-float storage for float64), every call ``fn(*operands)`` under the emulation;
    ``routed``: the trnscipy function it calls."""
    def build():
        import trnscipy

        with _emulated(device):
            _require_route(routed, routed.__name__, device)
            args = tuple(trnscipy.to_device(a, device) for a in host_args)

        def run():
            with _emulated(device):
                return fn(*args)

        return run

    return build


def _krylov_cases(cfg, lanes):
    import trnscipy.sparse.linalg as tspla

    xla = [lane for lane in lanes if lane.name == "trn_xla"]
    for name, k in cfg.get("krylov", []):
        A64 = poisson2d(k)
        b64 = np.random.default_rng(0).standard_normal(A64.shape[0])
        for dtype, rtol in (("float64", 1e-10), ("float64", 1e-5), ("float32", 1e-5)):
            A, b = A64.astype(dtype), b64.astype(dtype)
            kw = {"rtol": rtol}
            solver = getattr(tspla, name)
            scipy_solver = getattr(spla, name)
            iterations = _scipy_iterations(scipy_solver, A, b, kw)
            builders = {"scipy": lambda s=scipy_solver, A=A, b=b, kw=kw: (lambda: s(A, b, **kw))}
            for lane in xla:
                builders["trn_xla"] = _builder(solver, lambda A, b, s=solver, kw=kw: s(A, b, **kw),
                                               (A, b), lane.device)

            def describe(host, A=A64, b=b64):
                relres = np.linalg.norm(b - A @ np.asarray(host[0], np.float64))
                return {"info": int(host[1]), "relres": float(relres / np.linalg.norm(b))}

            def check(ref, host, A=A64, b=b64, rtol=rtol):
                res = np.linalg.norm(b - A @ np.asarray(host[0], np.float64))
                return res / np.linalg.norm(b) / rtol  # the true residual against rtol

            # float32 iterations (4 B values, int32 indices, 13 vector passes); float64: plus
            # one double-float residual (12 B values, int64 layout) per residual
            # replacement (cg: a block of 25 iterations; gmres: a restart cycle of 20)
            per = {"cg": 25, "gmres": 20}[name]
            steps = math.ceil(iterations / per) if dtype == "float64" else 0
            moved = (iterations * (A.nnz * 8 + 13 * A.shape[0] * 4)
                     + steps * (A.nnz * 20 + 6 * A.shape[0] * 4))
            yield Case("double_float", f"{name} poisson2d {k}x{k}",
                       {"unknowns": A.shape[0], "dtype": dtype, "rtol": rtol,
                        "scipy_iterations": iterations},
                       builders, check=check, tol=1.0 if dtype == "float64" else 10.0,
                       describe=describe,
                       bytes_moved=moved)


def _dense_cases(cfg, lanes):
    import trnscipy.linalg as tla

    xla = [lane for lane in lanes if lane.name == "trn_xla"]
    for op, sizes in cfg.get("dense", {}).items():
        for n in sizes:
            S64 = spd_matrix(n, np.float64)
            b64 = np.random.default_rng(1).standard_normal(n)
            for dtype in ("float64", "float32"):
                S, b = S64.astype(dtype), b64.astype(dtype)
                args = (S, b) if op == "solve" else (S,)
                scipy_call = {"solve": sla.solve, "cholesky": sla.cholesky,
                              "eigh": sla.eigvalsh}[op]
                trn_call = {"solve": tla.solve, "cholesky": tla.cholesky,
                            "eigh": tla.eigh}[op]
                builders = {"scipy": lambda f=scipy_call, a=args: (lambda: f(*a))}
                for lane in xla:
                    builders["trn_xla"] = _builder(trn_call, trn_call, args, lane.device)
                eps = np.finfo(dtype).eps

                def check(ref, host, op=op, S=S64, b=b64, n=n, eps=eps):
                    if op == "solve":
                        x = np.asarray(host, np.float64)
                        err = (np.linalg.norm(S @ x - b, np.inf)
                               / (np.linalg.norm(S, np.inf) * np.linalg.norm(x, np.inf)))
                    elif op == "cholesky":
                        r = np.asarray(host, np.float64)
                        err = np.linalg.norm(r.T @ r - S, np.inf) / np.linalg.norm(S, np.inf)
                    else:  # eigenvalues: SciPy's eigvalsh, trnscipy's eigh (w, v)
                        err = _relerr(ref, host[0] if isinstance(host, tuple) else host)
                    return err / (10 * n * eps)  # backward (eigenvalue) error in 10 n eps

                yield Case("double_float", op, {"n": n, "dtype": dtype}, builders,
                           check=check, tol=1.0,
                           bytes_moved=(2 if op == "cholesky" else 1) * n * n * (
                               12 if dtype == "float64" else 4))


def _family_calls(cfg):
    """(workload, operand builder, SciPy call, trnscipy call name, kwargs, check) of the
    families beside Krylov and dense; check(ref, host, dtype) -> error / allowed error
    (float64: the issue's must-show accuracy; float32: float32's reach)."""
    from bench._lsq import _design, _laplacian

    def rel(x, y):
        return _relerr(x, y)

    calls = []
    for k in cfg.get("poisson", []):
        A = poisson2d(k)
        b = np.random.default_rng(2).standard_normal(A.shape[0])
        X = np.random.default_rng(6).standard_normal((A.shape[0], 4))
        name = f"poisson2d {k}x{k}"

        def residual(ref, host, dtype, A=A, b=b):
            r = np.linalg.norm(b - A @ np.asarray(host, np.float64)) / np.linalg.norm(b)
            return r / (1e-12 if dtype == "float64" else 1e-4)

        def values(ref, host, dtype):
            err = rel(np.sort(ref[0] if isinstance(ref, tuple) else ref),
                      np.sort(host[0] if isinstance(host, tuple) else host))
            return err / (1e-10 if dtype == "float64" else 1e-4)

        # SciPy's lobpcg stops about 1e-7 short of the eigenvalues in 300 iterations: lobpcg
        # rows (largest=True, its default) are checked against the grid's exact eigenvalues
        # mu_i + mu_j, mu_i = 2 - 2 cos(i pi / (k + 1))
        mu = 2.0 - 2.0 * np.cos(np.arange(1, k + 1) * np.pi / (k + 1))
        exact = np.sort((mu[:, None] + mu[None, :]).ravel())[-4:]

        def lobpcg_values(ref, host, dtype, exact=exact):
            return values(exact, host, dtype)

        # eigsh LA: one shared start (a random start misses a copy of the grid's double
        # eigenvalues in some float32 calls, SciPy's ARPACK as ours)
        v0 = np.random.default_rng(0).standard_normal(A.shape[0])
        calls += [
            (f"spsolve {name}", (A, b), "spsolve", {}, residual),
            (f"eigsh k=6 LA {name}", (A,), "eigsh", {"k": 6, "which": "LA", "v0": v0},
             values),
            (f"eigsh k=6 sigma=0 {name}", (A,), "eigsh", {"k": 6, "sigma": 0}, values),
            (f"lobpcg k=4 {name}", (A, X), "lobpcg", {"maxiter": 300}, lobpcg_values),
        ]
    for m, n, density in cfg.get("lsq", []):
        A, b = _design(m, n, density)

        def solution(ref, host, dtype):
            return rel(ref[0], host[0]) / (1e-8 if dtype == "float64" else 1e-3)

        def singular(ref, host, dtype):
            return rel(np.sort(ref), np.sort(host)) / (1e-10 if dtype == "float64" else 1e-4)

        tols = {"atol": 1e-10, "btol": 1e-10}
        calls += [(f"svds k=5 {m}x{n}", (A,), "svds", {"k": 5, "return_singular_vectors": False},
                   singular),
                  (f"lsqr {m}x{n}", (A, b), "lsqr", tols, solution),
                  (f"lsmr {m}x{n}", (A, b), "lsmr", tols, solution)]
    for k in cfg.get("expm_grid", []):
        L = -_laplacian(k)
        b = np.zeros(k * k)
        b[k * k // 2 + k // 2] = 1.0
        calls.append((f"expm_multiply grid Laplacian {k}x{k}", (L, b), "expm_multiply", {},
                      lambda ref, host, dtype: rel(ref, host) / (
                          1e-10 if dtype == "float64" else 1e-4)))
    return calls


def family_cases(cfg, lanes):
    import trnscipy.sparse.linalg as tspla

    xla = [lane for lane in lanes if lane.name == "trn_xla"]
    for workload, operands, name, kw, check in _family_calls(cfg):
        for dtype in ("float64", "float32"):
            args = tuple(a.astype(dtype) for a in operands)
            kw_d = {key: v.astype(dtype) if isinstance(v, np.ndarray) else v
                    for key, v in kw.items()}  # (eigsh's v0 in the call's dtype)
            if name == "lobpcg" and dtype == "float32":
                kw_d["tol"] = 1e-3  # (SciPy's default, sqrt(eps) n, stops at iteration 0)
            scipy_call, trn_call = getattr(spla, name), getattr(tspla, name)
            builders = {"scipy": lambda f=scipy_call, a=args, kw=kw_d: (lambda: f(*a, **kw))}
            for lane in xla:
                builders["trn_xla"] = _builder(
                    trn_call, lambda *a, f=trn_call, kw=kw_d: f(*a, **kw), args, lane.device)
            A = args[0]
            value = 12 if dtype == "float64" else 4  # (double-float: hi, lo and a tail)
            yield Case("double_float_families", workload,
                       {"unknowns": A.shape[0], "dtype": dtype, "family": name},
                       builders, check=lambda ref, host, c=check, d=dtype: c(ref, host, d),
                       tol=1.0, bytes_moved=A.nnz * (value + 4) + sum(
                           a.size * value for a in args[1:]))


def double_float_cases(cfg, lanes):
    yield from _krylov_cases(cfg, lanes)
    yield from _dense_cases(cfg, lanes)


# ---------------------------------------------------------------- the ratio table


def _xla(row):
    entry = row["lanes"].get("trn_xla", {})
    return entry if entry.get("status") == "ok" and "xla" in entry else None


def _fmt(s):
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def krylov_scaled(row, factor):
    """Counts of the same solve on a grid ``factor`` times finer per side (10^4 -> 10^6:
    factor 10), modelled: Krylov iterations on 2-D Poisson grow as sqrt(cond) ~ k, so
    bytes grow by factor**3 (n x factor**2, iterations x factor); executions stay (the
    iterations of cg and gmres, float32 and double-float, are one device loop that
    leaves on the stop flag: one execution however many), and so do compilations (graph
    shapes change, not their number)."""
    return dict(_xla(row)["xla"]["warm"]), (row["bytes_moved"] or 0) * factor ** 3


def double_float_table(rows):
    """float64 (double-float) rows against their float32 partner: modelled trn1 time."""
    f32 = {(r["workload"], r["params"].get("unknowns", r["params"].get("n"))): r
           for r in rows if r["params"]["dtype"] == "float32" and _xla(r)}
    header = ["workload", "size", "float64 rtol", "executions df / f32 (warm)",
              "compiles (cold) df / f32", "bytes df / f32", "MODEL trn1 warm df / f32",
              "ratio warm (low-high)", "ratio cold", "target"]
    body = []

    def line(row, base, size, counts, bytes_moved, base_counts, base_bytes, note=""):
        m, m32 = modelled_seconds(counts, bytes_moved), modelled_seconds(base_counts, base_bytes)
        kind = ("family" if "family" in row["params"] else
                "krylov" if "rtol" in row["params"] else "dense")
        ratio = [m[b] / m32[b] for b in ("low", "high")]
        cold_df, cold_32 = _xla(row)["xla"]["cold"], _xla(base)["xla"]["cold"]
        # (a row whose graphs an earlier row compiled has no cold figure of its own)
        cold = "-"
        if cold_df["compilations"] and cold_32["compilations"]:
            cold = (modelled_seconds(cold_df, bytes_moved)["low"]
                    / modelled_seconds(cold_32, base_bytes)["low"])
            cold = f"{cold:.2f}x"
        met = "met" if max(ratio) <= _TARGETS[kind] else \
            f"missed by {max(ratio) / _TARGETS[kind]:.2f}x"
        body.append([row["workload"] + note, size, row["params"].get("rtol", "-"),
                     f"{counts['executions']} / {base_counts['executions']}",
                     f"{cold_df['compilations']} / {cold_32['compilations']}",
                     f"{bytes_moved / 1e6:.3g} / {base_bytes / 1e6:.3g} MB",
                     f"{_fmt(m['low'])} / {_fmt(m32['low'])}",
                     f"{ratio[0]:.2f}-{ratio[1]:.2f}x", cold,
                     f"<= {_TARGETS[kind]}x: {met}"])

    for row in rows:
        size = row["params"].get("unknowns", row["params"].get("n"))
        base = f32.get((row["workload"], size))
        if row["params"]["dtype"] != "float64" or not _xla(row) or base is None:
            continue
        line(row, base, size, _xla(row)["xla"]["warm"], row["bytes_moved"] or 0,
             _xla(base)["xla"]["warm"], base["bytes_moved"] or 0)
        if "rtol" in row["params"]:
            counts, moved = krylov_scaled(row, 10)
            base_counts, base_moved = krylov_scaled(base, 10)
            line(row, base, size * 100, counts, moved, base_counts, base_moved,
                 " (MODELLED: 10x finer grid, from these counts)")
    if not body:
        return ["(no double-float rows measured)"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
