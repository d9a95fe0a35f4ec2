"""Cases for scipy.linalg: fixed 4x4 inputs for every function that takes an array, bad
inputs for the main solvers and factorizations, and generated matrices of varied
conditioning (conformance.strategies) for the backward-stable methods."""

import functools

import numpy as np
import scipy.linalg as sl

from conformance import judges
from conformance.registry import Case, draw
from conformance.strategies import dense_square, matrix_from, rectangular

N = 4
DTYPES = (np.float64, np.float32)
COMPLEX = np.complex128


@functools.cache
def inputs(dtype):
    """Shared fixed inputs (one shape: fewer XLA compiles)."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(7)
    vec = np.array([2.0, -1.0, 0.5, 0.25]).astype(dtype)
    if dtype.kind == "c":
        vec = vec + 0.5j
    gen = matrix_from("gen", N, 1, 11, dtype)
    gen2 = matrix_from("gen", N, 1, 12, dtype)
    spd = matrix_from("spd", N, 1, 13, dtype)
    sym = matrix_from("sym", N, 1, 14, dtype)
    rect = rng.standard_normal((5, 3)).astype(dtype)
    mat = rng.standard_normal((N, 2)).astype(dtype)
    upper = (np.triu(gen) + 2 * np.eye(N)).astype(dtype)
    ortho = np.linalg.qr(gen)[0].astype(dtype)
    band_u = np.array([[0, -1, -1, -1], [4, 4, 4, 4]], dtype=dtype)  # tridiagonal SPD, upper
    band_g = np.array([[0, 1, 2, 3], [5, 6, 7, 8], [1, 1, 1, 0]], dtype=dtype)  # (1, 1)
    return dict(vec=vec, gen=gen, gen2=gen2, spd=spd, sym=sym, rect=rect, mat=mat,
                upper=upper, ortho=ortho, band_u=band_u, band_g=band_g,
                stable=(gen / (2 * np.abs(np.linalg.eigvals(gen)).max())).astype(dtype))


def _qr(a):
    return sl.qr(a)


# attr: (build(I) -> args, kwargs, judge, with complex128)
def _table():
    return [
        ("bandwidth", lambda I: ((I["upper"],), {}), None, False),
        ("block_diag", lambda I: ((I["gen"], I["rect"]), {}), None, False),
        ("cho_factor", lambda I: ((I["spd"],), {}), judges.cholesky, True),
        ("cho_solve", lambda I: (((sl.cho_factor(I["spd"])[0], False), I["vec"]), {}),
         lambda I: judges.solve_for(I["spd"]), True),
        ("cho_solve_banded", lambda I: (((sl.cholesky_banded(I["band_u"]), False), I["vec"]),
                                        {}), None, False),
        ("cholesky", lambda I: ((I["spd"],), {}), judges.cholesky, True),
        ("cholesky", lambda I: ((I["spd"],), {"lower": True}), judges.cholesky, True),
        ("cholesky_banded", lambda I: ((I["band_u"],), {}), None, False),
        ("circulant", lambda I: ((I["vec"],), {}), None, False),
        ("clarkson_woodruff_transform", lambda I: ((I["rect"], 2), {"rng": 0}), None, False),
        ("companion", lambda I: ((I["vec"],), {}), None, False),
        ("convolution_matrix", lambda I: ((I["vec"], 3), {}), None, False),
        ("coshm", lambda I: ((I["gen"],), {}), None, False),
        ("cosm", lambda I: ((I["gen"],), {}), None, False),
        ("cossin", lambda I: ((I["ortho"],), {"p": 2, "q": 2}), None, False),
        ("det", lambda I: ((I["gen"],), {}), None, True),
        ("diagsvd", lambda I: ((I["vec"][:3], 5, 3), {}), None, False),
        ("eig", lambda I: ((I["gen"],), {}), eig_judge, False),
        ("eig_banded", lambda I: ((I["band_u"],), {}), banded_eigh_judge, False),
        ("eigh", lambda I: ((I["spd"],), {}), judges.eigh, True),
        ("eigh", lambda I: ((I["sym"],), {"eigvals_only": True}), judges.eigh, False),
        ("eigh_tridiagonal", lambda I: ((I["vec"], I["vec"][:3]), {}), tridiagonal_judge,
         False),
        ("eigvals", lambda I: ((I["gen"],), {}), eig_judge, False),
        ("eigvals_banded", lambda I: ((I["band_u"],), {}), banded_eigh_judge, False),
        ("eigvalsh", lambda I: ((I["sym"],), {}), judges.eigvalsh, True),
        ("eigvalsh_tridiagonal", lambda I: ((I["vec"], I["vec"][:3]), {}), tridiagonal_judge,
         False),
        ("expm", lambda I: ((I["gen"],), {}), None, True),
        ("expm_cond", lambda I: ((I["gen"],), {}), None, False),
        ("expm_frechet", lambda I: ((I["gen"], I["gen2"]), {}), input_precision_judge,
         False),
        ("fiedler", lambda I: ((I["vec"],), {}), None, False),
        ("fiedler_companion", lambda I: ((I["vec"],), {}), None, False),
        ("find_best_blas_type", lambda I: (((I["gen"],),), {}), None, False),
        ("fractional_matrix_power", lambda I: ((I["spd"], 0.5), {}), None, False),
        ("funm", lambda I: ((I["sym"], np.exp), {}), None, False),
        ("hankel", lambda I: ((I["vec"],), {}), None, False),
        ("hessenberg", lambda I: ((I["gen"],), {}), None, False),
        ("inv", lambda I: ((I["gen"],), {}), judges.inverse, True),
        ("ishermitian", lambda I: ((I["sym"],), {}), None, True),
        ("issymmetric", lambda I: ((I["sym"],), {}), None, False),
        ("khatri_rao", lambda I: ((I["gen"], I["gen2"]), {}), None, False),
        ("ldl", lambda I: ((I["sym"],), {}), None, False),
        ("leslie", lambda I: ((I["vec"], I["vec"][:3]), {}), None, False),
        ("logm", lambda I: ((I["spd"],), {}), input_precision_judge, False),
        ("lstsq", lambda I: ((I["rect"], I["vec"][:1].repeat(5)), {}), None, False),
        ("lu", lambda I: ((I["gen"],), {}), judges.lu, True),
        ("lu_factor", lambda I: ((I["gen"],), {}), judges.lu_factor, True),
        ("lu_solve", lambda I: ((sl.lu_factor(I["gen"]), I["vec"]), {}),
         lambda I: judges.solve_for(I["gen"]), True),
        ("matmul_toeplitz", lambda I: ((I["vec"], I["vec"]), {}), None, False),
        ("matrix_balance", lambda I: ((I["gen"],), {}), None, False),
        ("norm", lambda I: ((I["gen"],), {}), None, True),
        ("norm", lambda I: ((I["gen"], 1), {}), None, False),
        ("norm", lambda I: ((I["gen"], 2), {}), None, False),
        ("norm", lambda I: ((I["vec"],), {}), None, False),
        ("null_space", lambda I: ((I["rect"].T,), {}), subspace_judge, False),
        ("ordqz", lambda I: ((I["gen"], I["gen2"]), {}), ordqz_judge, False),
        ("orth", lambda I: ((I["rect"],), {}), subspace_judge, False),
        ("orthogonal_procrustes", lambda I: ((I["gen"], I["gen2"]), {}), None, False),
        ("pinv", lambda I: ((I["rect"],), {}), None, False),
        ("pinvh", lambda I: ((I["spd"],), {}), None, False),
        ("polar", lambda I: ((I["gen"],), {}), None, False),
        ("qr", lambda I: ((I["gen"],), {}), judges.qr, True),
        ("qr", lambda I: ((I["rect"],), {"mode": "economic"}), judges.qr, False),
        ("qr", lambda I: ((I["gen"],), {"mode": "r"}), judges.qr, False),
        ("qr_delete", lambda I: ((*_qr(I["gen"]), 1), {}), None, False),
        ("qr_insert", lambda I: ((*_qr(I["gen"]), I["vec"], 1), {}), None, False),
        ("qr_multiply", lambda I: ((I["gen"], I["vec"]), {}), None, False),
        ("qr_update", lambda I: ((*_qr(I["gen"]), I["vec"], I["vec"][::-1].copy()), {}), None,
         False),
        ("qz", lambda I: ((I["gen"], I["gen2"]), {}), qz_judge, False),
        ("rq", lambda I: ((I["gen"],), {}), None, False),
        ("rsf2csf", lambda I: (sl.schur(I["gen"]), {}), None, False),
        ("schur", lambda I: ((I["gen"],), {}), schur_judge, False),
        ("schur", lambda I: ((I["gen"],), {"output": "complex"}), schur_judge, False),
        ("signm", lambda I: ((I["sym"],), {}), None, False),
        ("sinhm", lambda I: ((I["gen"],), {}), None, False),
        ("sinm", lambda I: ((I["gen"],), {}), None, False),
        ("solve", lambda I: ((I["gen"], I["vec"]), {}), judges.solve, True),
        ("solve", lambda I: ((I["gen"], I["mat"]), {}), judges.solve, False),
        ("solve", lambda I: ((I["spd"], I["vec"]), {"assume_a": "pos"}), judges.solve, False),
        ("solve", lambda I: ((I["sym"], I["vec"]), {"assume_a": "sym"}), judges.solve, False),
        ("solve_banded", lambda I: (((1, 1), I["band_g"], I["vec"]), {}), None, False),
        ("solve_circulant", lambda I: ((I["vec"], I["vec"][::-1].copy()), {}), None, False),
        ("solve_continuous_are", lambda I: ((I["gen"], I["ortho"], I["spd"], I["spd"]), {}),
         None, False),
        ("solve_continuous_lyapunov", lambda I: ((I["gen"], I["spd"]), {}), None, False),
        ("solve_discrete_are", lambda I: ((I["stable"], I["ortho"], I["spd"], I["spd"]), {}),
         None, False),
        ("solve_discrete_lyapunov", lambda I: ((I["stable"], I["spd"]), {}), None, False),
        ("solve_lyapunov", lambda I: ((I["gen"], I["spd"]), {}), None, False),
        ("solve_sylvester", lambda I: ((I["gen"], I["gen2"], I["mat"].repeat(2, 1)), {}),
         None, False),
        ("solve_toeplitz", lambda I: ((I["vec"][::-1].copy(), I["vec"]), {}), None, False),
        ("solve_triangular", lambda I: ((I["upper"], I["vec"]), {}), judges.solve, True),
        ("solve_triangular", lambda I: ((I["upper"].T.copy(), I["mat"]), {"lower": True}),
         judges.solve, False),
        ("solveh_banded", lambda I: ((I["band_u"], I["vec"]), {}), None, False),
        ("sqrtm", lambda I: ((I["spd"],), {}), None, False),
        # two different subspaces (angles of a subspace with itself are rounding noise)
        ("subspace_angles", lambda I: ((I["rect"], I["rect"] ** 2), {}), judges.angles, False),
        ("svd", lambda I: ((I["gen"],), {}), judges.svd, True),
        ("svd", lambda I: ((I["rect"],), {"full_matrices": False}), judges.svd, False),
        ("svdvals", lambda I: ((I["rect"],), {}), judges.svd, False),
        ("tanhm", lambda I: ((I["gen"],), {}), None, False),
        ("tanm", lambda I: ((I["sym"] / 4,), {}), None, False),
        ("toeplitz", lambda I: ((I["vec"],), {}), None, False),
    ]


def _bad_inputs():
    """Bad input: SciPy's exception type on every lane."""
    I = inputs(np.float64)
    indefinite = np.diag([1.0, -1.0, 2.0, 3.0])
    singular = np.ones((N, N))
    return [
        Case("linalg", "solve", "bad-nonsquare", (I["rect"], I["vec"][:1].repeat(5))),
        Case("linalg", "solve", "bad-rhs-length", (I["gen"], I["vec"][:3])),
        Case("linalg", "solve", "bad-singular", (singular, I["vec"])),
        Case("linalg", "cholesky", "bad-indefinite", (indefinite,)),
        Case("linalg", "inv", "bad-singular", (singular,)),
        Case("linalg", "inv", "bad-nonsquare", (I["rect"],)),
        Case("linalg", "eigh", "bad-nonsquare", (I["rect"],)),
        Case("linalg", "lu_factor", "bad-nan", (np.full((N, N), np.nan),)),
        Case("linalg", "solve_triangular", "bad-singular", (np.triu(singular) - np.eye(N),
                                                             I["vec"])),
    ]


def _no_array_input():
    """Functions of sizes and names only: nothing says which device to build on, so on a
    device lane they need trnscipy's ``device=`` keyword (not-implemented without it)."""
    I = inputs(np.float64)
    # hilbert, invhilbert and helmert build float64 matrices: their float64 case
    out = [Case("linalg", attr, "n4", (4,), device_kwarg=True,
                dtype=np.float64 if attr in ("helmert", "hilbert", "invhilbert") else None)
           for attr in ("dft", "hadamard", "helmert", "hilbert", "invhilbert", "invpascal",
                        "pascal")]
    out += [Case("linalg", "cdf2rdf", "eig-complex128", tuple(sl.eig(I["gen"])))]
    out += [Case("linalg", attr, "gemm-float64", (("gemm",), (I["gen"],)))
            for attr in ("get_blas_funcs",)]
    out += [Case("linalg", "get_lapack_funcs", "getrf-float64", (("getrf",), (I["gen"],)))]
    return out


def _generated(profile):
    """Backward-stable methods on generated matrices of varied conditioning."""
    out = []
    specs = [
        ("solve", dense_square(), lambda a: (a, np.arange(1, a.shape[0] + 1, dtype=a.dtype)),
         judges.solve),
        ("cholesky", dense_square(kinds=("spd",)), lambda a: (a,), judges.cholesky),
        ("eigh", dense_square(kinds=("spd", "sym")), lambda a: (a,), judges.eigh),
        ("inv", dense_square(kinds=("gen",)), lambda a: (a,), judges.inverse),
        ("lu", dense_square(kinds=("gen",)), lambda a: (a,), judges.lu),
        ("qr", rectangular(), lambda a: (a,), judges.qr),
        ("svd", rectangular(), lambda a: (a,), judges.svd),
    ]
    for attr, strategy, build, judge in specs:
        for i, (tag, a) in enumerate(draw(strategy, profile)):
            out.append(Case("linalg", attr, f"hyp{i}-{tag}-{a.dtype.name}", build(a),
                            judge=judge, xla=i < profile.xla_examples))
    return out


def cases(profile):
    seen = {}
    for attr, build, judge, with_complex in _table():
        dtypes = DTYPES + ((COMPLEX,) if with_complex else ())
        k = seen[attr] = seen.get(attr, 0) + 1
        for dtype in dtypes:
            I = inputs(dtype)
            args, kwargs = build(I)
            j = judge(I) if judge is not None and judge.__name__ == "<lambda>" else judge
            yield Case("linalg", attr, f"{k}-{np.dtype(dtype).name}", args, kwargs, judge=j)
    yield from _bad_inputs()
    yield from _no_array_input()
    yield from _generated(profile)
    yield from _densefun_cases()


# ----------------------------------------------------------------------------------------
# Special matrices, banded/tridiagonal solvers, matrix functions (issue 14, part 2)


def tridiagonal_judge(case, expected, actual):
    """eigh_tridiagonal/eigvalsh_tridiagonal: judges.eigh on the dense tridiagonal matrix
    (eigenvectors are unique up to sign)."""
    import dataclasses

    d, e = (np.asarray(x) for x in case.args[:2])
    dense = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    return judges.eigh(dataclasses.replace(case, args=(dense,)), expected, actual)


def banded_eigh_judge(case, expected, actual):
    """eig_banded/eigvals_banded (upper band form): judges.eigh on the dense Hermitian
    matrix of the band."""
    import dataclasses

    ab = np.asarray(case.args[0])
    u, n = ab.shape[0] - 1, ab.shape[1]
    dense = np.zeros((n, n), dtype=ab.dtype)
    for j in range(n):
        for i in range(max(0, j - u), j + 1):
            dense[i, j] = ab[u + i - j, j]
    dense = np.triu(dense) + np.triu(dense, 1).conj().T
    return judges.eigh(dataclasses.replace(case, args=(dense,)), expected, actual)


def subspace_judge(case, expected, actual):
    """null_space/orth: same shape and dtype, the same subspace (projectors agree) and an
    orthonormal basis (a basis is unique only up to a unitary factor)."""
    exp, act = np.asarray(expected), np.asarray(actual)
    if exp.shape != act.shape or exp.dtype != act.dtype:
        return f"basis {act.dtype}{act.shape} vs SciPy's {exp.dtype}{exp.shape}"
    eps = float(np.finfo(exp.dtype).eps)
    bound = 1e3 * max(exp.shape[0], 1) * eps
    gap = np.linalg.norm(exp @ exp.conj().T - act @ act.conj().T)
    if gap > bound:
        return f"subspaces differ: ||P - P_scipy|| = {gap:.3g} > {bound:.3g}"
    orth = np.linalg.norm(act.conj().T @ act - np.eye(act.shape[1]))
    return f"basis not orthonormal: {orth:.3g}" if orth > bound else None


def input_precision_judge(case, expected, actual):
    """Results SciPy returns in double precision but computes from the input's precision
    (expm_frechet's 'SPS' and logm on float32 input): values within the input's
    precision."""
    eps = float(np.finfo(case.dtype).eps)
    rtol = max(1e-10, 100 * N * eps) if np.dtype(case.dtype).itemsize < 8 else 1e-10
    for e, a in zip(expected if isinstance(expected, tuple) else (expected,),
                    actual if isinstance(actual, tuple) else (actual,), strict=True):
        e, a = np.asarray(e), np.asarray(a)
        if e.dtype != a.dtype or e.shape != a.shape:
            return f"result {a.dtype}{a.shape} vs SciPy's {e.dtype}{e.shape}"
        err = np.abs(e - a).max() if e.size else 0.0
        if err > rtol * max(np.abs(e).max(), 1e-300):
            return f"max |trn - scipy| = {err:.3g} > rtol {rtol:.3g} * max|scipy|"
    return None


def _densefun_cases():
    """Variants beyond the fixed table: keyword options, complex inputs, the device=
    keyword's options, bad inputs (SciPy's exception types)."""
    out = []
    for dtype in (np.float64, np.float32, COMPLEX):
        I = inputs(dtype)
        d = np.dtype(dtype).name
        out += [
            Case("linalg", "toeplitz", f"cr-{d}", (I["vec"], I["vec"][::-1].copy())),
            Case("linalg", "circulant", f"{d}", (I["vec"],)),
            Case("linalg", "hankel", f"cr-{d}", (I["vec"], I["vec"][::-1].copy())),
            Case("linalg", "convolution_matrix", f"same-{d}", (I["vec"], 5),
                 {"mode": "same"}),
            Case("linalg", "convolution_matrix", f"valid-{d}", (I["vec"], 5),
                 {"mode": "valid"}),
            Case("linalg", "khatri_rao", f"{d}", (I["gen"], I["gen2"])),
            Case("linalg", "block_diag", f"{d}", (I["gen"], I["vec"])),
        ]
    for dtype in (np.float64, np.float32):
        I = inputs(dtype)
        d = np.dtype(dtype).name
        band_l = I["band_u"][::-1].copy()  # the same SPD tridiagonal matrix, lower form
        out += [
            Case("linalg", "solveh_banded", f"lower-{d}", (band_l, I["vec"]), {"lower": True}),
            Case("linalg", "cholesky_banded", f"lower-{d}", (band_l,), {"lower": True}),
            Case("linalg", "solve_banded", f"matrix-rhs-{d}", ((1, 1), I["band_g"], I["mat"])),
            Case("linalg", "eigh_tridiagonal", f"select-i-{d}", (I["vec"], I["vec"][:3]),
                 {"select": "i", "select_range": (1, 2)}, judge=tridiagonal_judge),
            Case("linalg", "eigvalsh_tridiagonal", f"select-v-{d}", (I["vec"], I["vec"][:3]),
                 {"select": "v", "select_range": (-1.0, 2.0)}, judge=tridiagonal_judge),
            Case("linalg", "pinvh", f"rank-{d}", (I["rect"] @ I["rect"].T,),
                 {"return_rank": True}),
            Case("linalg", "polar", f"left-{d}", (I["gen"],), {"side": "left"}),
            Case("linalg", "sqrtm", f"gen-{d}", (I["gen"],)),
            Case("linalg", "logm", f"gen-{d}", (I["gen"],), judge=input_precision_judge),
            Case("linalg", "expm_frechet", f"block-{d}", (I["gen"], I["gen2"]),
                 {"method": "blockEnlarge"}),
        ]
    out += [Case("linalg", "pascal", f"n5-{kind}-{exact}", (5,), {"kind": kind, "exact": exact},
                 device_kwarg=True)
            for kind in ("lower", "upper") for exact in (True, False)]
    out += [Case("linalg", "invpascal", "n5-lower", (5,), {"kind": "lower"}, device_kwarg=True),
            Case("linalg", "invhilbert", "n6-exact", (6,), {"exact": True}, device_kwarg=True),
            Case("linalg", "helmert", "n4-full", (4,), {"full": True}, device_kwarg=True),
            Case("linalg", "dft", "n4-sqrtn", (4,), {"scale": "sqrtn"}, device_kwarg=True),
            Case("linalg", "hadamard", "n4-float32", (4,), {"dtype": np.float32},
                 device_kwarg=True)]
    I = inputs(np.float64)
    out += [
        Case("linalg", "leslie", "bad-lengths", (I["vec"], I["vec"])),
        Case("linalg", "companion", "bad-leading-zero", (np.array([0.0, 1.0, 2.0]),)),
        Case("linalg", "convolution_matrix", "bad-mode", (I["vec"], 3), {"mode": "x"}),
        Case("linalg", "khatri_rao", "bad-columns", (I["gen"], I["rect"])),
        Case("linalg", "solve_banded", "bad-lu", ((1, 2), I["band_g"], I["vec"])),
        Case("linalg", "solve_banded", "bad-singular", ((1, 1), np.zeros((3, N)), I["vec"])),
        Case("linalg", "solveh_banded", "bad-indefinite",
             (np.array([[0.0, 1, 1, 1], [1, -2, 1, 1]]), I["vec"])),
        Case("linalg", "eigh_tridiagonal", "bad-driver", (I["vec"], I["vec"][:3]),
             {"lapack_driver": "sterf"}),
        Case("linalg", "expm_frechet", "bad-shape", (I["gen"], I["rect"])),
        Case("linalg", "polar", "bad-side", (I["gen"],), {"side": "x"}),
        Case("linalg", "sqrtm", "bad-nonsquare", (I["rect"],)),
    ]
    return out


# -- eig, eigvals, schur: the device Francis QR (trnscipy/linalg/_francis.py) ------------
# Eigenvalues come in another order than LAPACK's and a Schur form is unique only up to
# that order and signs: judged by eigenvalues as sets, residuals and orthogonality.


def _spectrum_diff(case, w, we):
    a = np.asarray(case.args[0], dtype=np.complex128)
    key = lambda x: x[np.lexsort((np.round(x.imag, 6), np.round(x.real, 6)))]  # noqa: E731
    err = float(np.max(np.abs(key(np.asarray(w)) - key(np.asarray(we))), initial=0.0))
    bound = 1e3 * N * float(np.finfo(case.dtype).eps) * max(np.linalg.norm(a), 1.0)
    return f"eigenvalues differ by {err:.3g} > {bound:.3g}" if err > bound else None


def eig_judge(case, expected, actual):
    """eig/eigvals: dtypes as SciPy, the eigenvalues as a set, ||A v - v w|| small."""
    exp = expected if isinstance(expected, tuple) else (expected,)
    act = actual if isinstance(actual, tuple) else (actual,)
    for e, x in zip(exp, act, strict=True):
        if np.asarray(e).dtype != np.asarray(x).dtype:
            return f"dtype {np.asarray(x).dtype} vs SciPy's {np.asarray(e).dtype}"
    reason = _spectrum_diff(case, act[0], exp[0])
    if reason or len(act) == 1:
        return reason
    a = np.asarray(case.args[0], dtype=np.complex128)
    w, v = np.asarray(act[0]), np.asarray(act[1], dtype=np.complex128)
    res = float(np.linalg.norm(a @ v - v * w))
    bound = 1e3 * N * float(np.finfo(case.dtype).eps) * max(np.linalg.norm(a), 1.0)
    return f"eig residual {res:.3g} > {bound:.3g}" if res > bound else None


def qz_judge(case, expected, actual):
    """qz: Q AA Z^H = A and Q BB Z^H = B, Q and Z orthonormal, AA quasi upper triangular,
    BB upper triangular, the pencil's eigenvalues SciPy's as a set (the form is unique
    only up to their order and signs, as the Schur form)."""
    aa, bb, q, z = (np.asarray(x) for x in actual)
    if aa.dtype != np.asarray(expected[0]).dtype:
        return f"dtype {aa.dtype} vs SciPy's {np.asarray(expected[0]).dtype}"
    for m, given, what in ((aa, case.args[0], "Q AA Z^H"), (bb, case.args[1], "Q BB Z^H")):
        given = np.asarray(given, dtype=np.complex128)
        reason = judges._recon(case, q @ m @ z.conj().T, given, what)
        if reason:
            return reason
    reason = judges._orth(q, case, "Q") or judges._orth(z, case, "Z")
    if reason:
        return reason
    if np.any(np.tril(aa, -2)) or np.any(np.diagonal(aa, -1)[:-1] * np.diagonal(aa, -1)[1:]):
        return "AA is not quasi upper triangular"
    if np.any(np.tril(bb, -1)):
        return "BB is not upper triangular"
    return _spectrum_diff(case, sl.eigvals(aa, bb), sl.eigvals(*expected[:2]))


def ordqz_judge(case, expected, actual):
    """ordqz: qz_judge's checks on (AA, BB, Q, Z), alpha and beta in SciPy's dtypes, the
    leading eigenvalues (as many as SciPy's sort selects) SciPy's as a set (the order
    within the selected and the other eigenvalues is not unique)."""
    for e, x in zip(expected, actual, strict=True):
        if np.asarray(e).dtype != np.asarray(x).dtype:
            return f"dtype {np.asarray(x).dtype} vs SciPy's {np.asarray(e).dtype}"
    aa, bb, alpha, beta, q, z = (np.asarray(x) for x in actual)
    reason = qz_judge(case, (expected[0], expected[1], expected[4], expected[5]),
                      (aa, bb, q, z))
    if reason:
        return reason
    sort = sl._decomp_qz._select_function(case.kwargs.get("sort", "lhp"))
    ea, eb = np.asarray(expected[2]), np.asarray(expected[3])
    with np.errstate(all="ignore"):
        k = int(np.sum(sort(ea, eb)))
        return _spectrum_diff(case, alpha[:k] / beta[:k], ea[:k] / eb[:k])


def schur_judge(case, expected, actual):
    """schur: Z T Z^H = A, Z orthonormal, T quasi-triangular, T's eigenvalues SciPy's."""
    t, z = (np.asarray(x) for x in actual)
    if t.dtype != np.asarray(expected[0]).dtype:
        return f"dtype {t.dtype} vs SciPy's {np.asarray(expected[0]).dtype}"
    a = np.asarray(case.args[0], dtype=np.complex128)
    reason = (judges._recon(case, z @ t @ z.conj().T, a, "schur")
              or judges._orth(z, case, "Z"))
    if reason:
        return reason
    if np.any(np.tril(t, -2)) or np.any(np.diagonal(t, -1)[:-1] * np.diagonal(t, -1)[1:]):
        return "T is not quasi upper triangular"
    return _spectrum_diff(case, np.linalg.eigvals(t), np.linalg.eigvals(
        np.asarray(expected[0])))
