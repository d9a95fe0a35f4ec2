"""Cases for scipy.sparse.linalg: the Krylov solvers (iterates at maxiter 1 and 3 equal to
SciPy's; converged solutions judged by residual), with dense and CSR operands; the
direct solvers, eigensolvers, matrix functions and norms on a fixed CSC/CSR matrix."""

import functools

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from conformance import judges
from conformance.compare import values_diff
from conformance.device_ops import user_code
from conformance.registry import Case
from conformance.strategies import matrix_from

N = 6
DTYPES = (np.float64, np.float32)
# solver: the matrix kind it needs
KRYLOV = {"cg": "spd", "minres": "sym", "bicg": "gen", "bicgstab": "gen", "cgs": "gen",
          "gmres": "gen", "lgmres": "gen", "qmr": "gen", "gcrotmk": "gen", "tfqmr": "gen"}


@functools.cache
def inputs(dtype):
    dtype = np.dtype(dtype)
    tri = (np.diag(np.full(N, 4.0)) + np.diag(np.full(N - 1, -1.0), 1)
           + np.diag(np.full(N - 1, -1.0), -1)).astype(dtype)
    return dict(
        spd=matrix_from("spd", N, 2, 21, dtype),
        sym=matrix_from("sym", N, 1, 22, dtype),
        gen=(matrix_from("gen", N, 1, 23, dtype) + 2 * np.eye(N)).astype(dtype),
        b=np.linspace(1.0, 2.0, N).astype(dtype),
        B=np.stack([np.linspace(1.0, 2.0, N), np.ones(N)], axis=1).astype(dtype),
        tri=tri,
        lower=np.tril(tri).astype(dtype),
        v0=np.ones(N, dtype=dtype),
    )


def _krylov(dtype, profile):
    I = inputs(dtype)
    d = np.dtype(dtype).name
    for solver, kind in KRYLOV.items():
        # On the XLA lanes a small solve compiles for seconds to a minute (measured): the
        # fast profile runs only cg there, nightly all of them.
        xla = solver == "cg" or profile.xla_per_name is None
        for layout in ("csr", "dense"):  # the first case of a name runs on the XLA lanes
            a = I[kind] if layout == "dense" else sp.csr_array(I[kind])
            for maxiter in (3, 1):
                yield Case("sparse.linalg", solver, f"{layout}-maxiter{maxiter}-{d}",
                           (a, I["b"]), {"maxiter": maxiter}, judge=judges.krylov, xla=xla)
            yield Case("sparse.linalg", solver, f"{layout}-converged-{d}", (a, I["b"]),
                       {"rtol": 1e-5 if d == "float32" else 1e-10}, judge=judges.krylov,
                       xla=xla)
        yield Case("sparse.linalg", solver, f"zero-rhs-{d}", (I[kind], np.zeros(N, dtype)),
                   judge=judges.krylov, xla=xla)
        yield Case("sparse.linalg", solver, f"x0-maxiter3-{d}", (I[kind], I["b"]),
                   {"x0": I["v0"], "maxiter": 3}, judge=judges.krylov, xla=xla)
    for solver, key in (("lsqr", "iter_lim"), ("lsmr", "maxiter")):
        # first: the case the XLA lanes run (float64 on Neuron: the double-float method)
        tight = 1e-10 if d == "float64" else 1e-5
        yield Case("sparse.linalg", solver, f"converged-{d}", (sp.csr_array(I["gen"]), I["b"]),
                   {"atol": tight, "btol": tight}, rtol=1e-8 if d == "float64" else 1e-3,
                   judge=judges.least_squares)
        for it in (1, 3):
            yield Case("sparse.linalg", solver, f"iter{it}-{d}", (sp.csr_array(I["gen"]), I["b"]),
                       {key: it}, rtol=1e-8 if d == "float64" else 1e-3)


def _bad():
    I = inputs(np.float64)
    return [
        Case("sparse.linalg", "cg", "bad-tol-keyword", (I["spd"], I["b"]), {"tol": 1e-5}),
        Case("sparse.linalg", "cg", "bad-rhs-length", (I["spd"], I["b"][:3])),
        Case("sparse.linalg", "gmres", "bad-rhs-length", (I["gen"], I["b"][:3])),
        Case("sparse.linalg", "spsolve", "bad-rhs-length", (sp.csr_array(I["gen"]),
                                                            I["b"][:3])),
    ]


def _operator_matvec(dtype):
    def call(cls, a, x):
        # the matvec is the user's computation, not trnscipy's (conformance.device_ops)
        return cls(a.shape, matvec=user_code(lambda v: a @ v), dtype=dtype) @ x

    return call


def _sorted_values(rtol):
    def judge(case, expected, actual):
        return values_diff(np.sort(expected), np.sort(actual), rtol)

    return judge


def _other(dtype):
    I = inputs(dtype)
    d = np.dtype(dtype).name
    csr, csc = sp.csr_array(I["gen"]), sp.csc_array(I["gen"])
    spd_csr = sp.csr_array(I["tri"])
    m = "sparse.linalg"
    return [
        Case(m, "aslinearoperator", f"dense-{d}", (I["gen"],)),
        Case(m, "aslinearoperator", f"csr-{d}", (csr,)),
        Case(m, "LinearOperator", f"matvec-{d}", (I["gen"], I["b"]),
             call=_operator_matvec(np.dtype(dtype))),
        Case(m, "eigs", f"k2-{d}", (csr,), {"k": 2, "v0": I["v0"]},
             judge=lambda case, e, a: values_diff(
                 np.sort_complex(e[0]), np.sort_complex(a[0]), judges.cond_rtol(I["gen"], d))),
        Case(m, "eigsh", f"k2-{d}", (spd_csr,), {"k": 2, "v0": I["v0"],
                                                  "return_eigenvectors": False},
             judge=_sorted_values(60 * N * np.finfo(d).eps)),
        Case(m, "expm", f"csc-{d}", (csc,)),
        Case(m, "expm_multiply", f"csr-{d}", (csr, I["b"])),
        Case(m, "factorized", f"csc-{d}", (csc, I["b"]), call=lambda f, a, b: f(a)(b),
             judge=judges.solve_for(I["gen"])),
        # f is a matrix function (np.exp, elementwise, made SciPy's own result change by
        # 26% when b moved by one ulp: the restart after the exhausted 6-dimensional space
        # then adds rounding noise times exp(0) = 1 entries)
        Case(m, "funm_multiply_krylov", f"exp-{d}", (scipy.linalg.expm, csr, I["b"]),
             rtol=1e-5),
        Case(m, "inv", f"csc-{d}", (csc,)),
        Case(m, "is_sptriangular", f"lower-{d}", (sp.csr_array(I["lower"]),)),
        Case(m, "lobpcg", f"k1-{d}", (spd_csr, I["B"][:, :1].copy()), {"maxiter": 50},
             judge=lambda case, e, a: values_diff(e[0], a[0], 1e-4)),
        Case(m, "matrix_power", f"csr-{d}", (csr, 3)),
        Case(m, "norm", f"fro-{d}", (csr,)),
        Case(m, "norm", f"one-{d}", (csr, 1)),
        Case(m, "onenormest", f"csr-{d}", (csr,)),
        Case(m, "spbandwidth", f"csr-{d}", (spd_csr,)),
        Case(m, "spilu", f"solve-{d}", (csc, I["b"]), call=lambda f, a, b: f(a).solve(b),
             judge=judges.solve_for(I["gen"])),
        Case(m, "splu", f"solve-{d}", (csc, I["b"]), call=lambda f, a, b: f(a).solve(b),
             judge=judges.solve_for(I["gen"])),
        Case(m, "spsolve", f"csr-{d}", (csr, I["b"]), judge=judges.solve_for(I["gen"])),
        Case(m, "spsolve", f"csr-matrix-rhs-{d}", (csr, sp.csr_array(I["B"]))),
        Case(m, "spsolve_triangular", f"lower-{d}", (sp.csr_array(I["lower"]), I["b"]),
             judge=judges.solve_for(I["lower"])),
        Case(m, "svds", f"k2-{d}", (csr,), {"k": 2, "v0": I["v0"],
                                             "return_singular_vectors": False},
             judge=_sorted_values(60 * N * np.finfo(d).eps)),
    ]


def cases(profile):
    for dtype in DTYPES:
        yield from _krylov(dtype, profile)
        yield from _other(dtype)
        yield from _lobpcg(dtype)
    yield from _bad()


# -- lobpcg on the device (issue 12): 1-D Poisson of 40 unknowns, k = 3 ----------------------

def _lobpcg(dtype):
    d = np.dtype(dtype).name
    n = 40
    A = sp.csr_array((np.diag(np.full(n, 2.0)) + np.diag(np.full(n - 1, -1.0), 1)
                      + np.diag(np.full(n - 1, -1.0), -1)).astype(dtype))
    rng = np.random.default_rng(12)
    X = rng.standard_normal((n, 3)).astype(dtype)
    B = sp.csr_array(np.diag(rng.uniform(1.0, 2.0, n)).astype(dtype))
    Y = np.eye(n, 1, dtype=dtype)
    tol = 1e-4 if d == "float32" else 1e-8

    def values(case, e, a):
        return values_diff(e[0], a[0], tol)

    m = "sparse.linalg"
    # the lobpcg iteration follows SciPy's step for step: few iterations compare tightly
    kw = {"maxiter": 5}
    yield Case(m, "lobpcg", f"largest-maxiter5-{d}", (A, X), kw, judge=values)
    yield Case(m, "lobpcg", f"smallest-maxiter5-{d}", (A, X), {**kw, "largest": False},
               judge=values, xla=False)
    yield Case(m, "lobpcg", f"generalized-maxiter5-{d}", (A, X), {**kw, "B": B},
               judge=values, xla=False)
    yield Case(m, "lobpcg", f"constrained-maxiter5-{d}", (A, X), {**kw, "Y": Y},
               judge=values, xla=False)
