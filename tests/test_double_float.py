"""Double-float kernels (float32 arithmetic only) and the float64-accurate methods on an
emulated Neuron device (issue 11, part 4)."""

import time
import warnings

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spl

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps


def _rel(got, want):
    return np.max(np.abs(got - want)) / np.max(np.abs(want))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dia"])
def test_df_kernels_match_float64(device, fmt):
    from trnscipy._kernels import _df

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(300), rng.standard_normal(300)
    A, B = _df.from_host(a, device), _df.from_host(b, device)
    host = _df.to_host_f64
    assert abs(host(_df.dot(A, B)) - np.dot(a, b)) <= 4e-15 * np.abs(a) @ np.abs(b)
    assert _rel(host(_df.norm(A)), np.linalg.norm(a)) <= 4e-15
    assert _rel(host(_df.mul(A, B)), a * b) <= 1e-14
    assert _rel(host(_df.div(A, B)), a / b) <= 1e-14
    assert _rel(host(_df.sqrt(_df.mul(A, A))), np.abs(a)) <= 1e-14
    M, X = rng.standard_normal((40, 60)), rng.standard_normal((60, 3))
    Mp, Xp = _df.from_host(M, device), _df.from_host(X, device)
    assert _rel(host(_df.gemv(Mp, (Xp[0][:, 0], Xp[1][:, 0]))), M @ X[:, 0]) <= 1e-14
    assert _rel(host(_df.gemm(Mp, Xp)), M @ X) <= 1e-14
    if fmt == "dia":
        S = sp.dia_array((rng.standard_normal((3, 60)), [0, -1, 2]), shape=(50, 60))
        index = (S.offsets, S.data.shape[1])
    else:
        S = sp.random_array((50, 60), density=0.1, rng=1, format="csr")
        S = S.tobsr(blocksize=(5, 3)) if fmt == "bsr" else S.asformat(fmt)
        index = {"coo": lambda: (S.coords[0], S.coords[1]),
                 "bsr": lambda: (S.indptr, S.indices, S.blocksize)}.get(
                     fmt, lambda: (S.indptr, S.indices))()
    layout = _df.row_padded(S.shape, fmt, index, device)
    data = _df.from_host(S.data.reshape(-1), device)
    assert _rel(host(_df.spmv(layout, data, (Xp[0][:, 0], Xp[1][:, 0]))), S @ X[:, 0]) <= 1e-14
    assert _rel(host(_df.spmv(layout, data, Xp)), S @ X) <= 1e-14


def _poisson(k):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k, k))
    return (sp.kron(T, sp.eye_array(k)) + sp.kron(sp.eye_array(k), T)).tocsr()


def _convection_diffusion(k, c=20.0):
    h = 1.0 / (k + 1)
    T = sp.diags_array([-1 - c * h / 2, 2.0, -1 + c * h / 2], offsets=[-1, 0, 1], shape=(k, k))
    return (sp.kron(T, sp.eye_array(k)) + sp.kron(sp.eye_array(k), T)).tocsr()


def _recorded(fn):
    """Run fn on the emulated Neuron device; (result, float64 ops the device executed).
    Asserts that torch-xla ran no op on the host (aten CPU fallbacks); the graph counts of
    the last call are in ``COUNTS``."""
    import warnings

    import torch_xla

    import trnscipy
    from conformance.device_ops import DeviceArithmetic
    from tests.linalg._fallbacks import aten_fallbacks
    from trnscipy._metrics import xla_counts

    with warnings.catch_warnings():
        warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
        with aten_fallbacks(torch_xla.device()) as host, xla_counts() as counts, \
                DeviceArithmetic("xla", [torch.float64, torch.complex128]) as rec:
            out = fn()
    assert host == {}
    COUNTS[:] = [counts]
    return out, rec.ops


COUNTS = []


# graph counts of one float64 solve (first call: its graphs compile)
_MAX_COMPILES, _MAX_EXECUTIONS = 16, 400

KRYLOV = [("cg", _poisson), ("gmres", _convection_diffusion),
          ("bicgstab", _convection_diffusion), ("minres", _poisson)]


def _krylov_case(name, problem, k, how, monkeypatch):
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = problem(k)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    rtol = 1e-10
    if how == "offload":
        def run():
            with trnscipy.offload("xla"):
                return getattr(tsl, name)(A, b, rtol=rtol)
    else:
        def run():
            x, info = getattr(tsl, name)(trnscipy.to_device(A, "xla"),
                                         trnscipy.to_device(b, "xla"), rtol=rtol)
            return trnscipy.to_host(x), info
    t0 = time.perf_counter()
    (x, info), ops = _recorded(run)
    wall = time.perf_counter() - t0
    assert ops == []
    assert info == 0
    relres = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    assert relres <= rtol
    exact = spl.spsolve(A.tocsc(), b)
    xs, _ = getattr(spl, name)(A, b, rtol=rtol)
    # as accurate as SciPy's own float64 solve (both stop at rtol on the residual)
    err, err_scipy = (np.linalg.norm(v - exact) / np.linalg.norm(exact) for v in (x, xs))
    assert err <= max(10 * err_scipy, 1e-12)
    agree = np.linalg.norm(x - xs) / np.linalg.norm(xs)
    # SciPy's minres stops on its estimate rtol * ||A|| ||x||, not on ||b||: its x is
    # 5e-7 from the exact solution at 10^4 unknowns (ours 1e-13, asserted above), and no
    # answer can agree with it closer than that
    assert agree <= max(1e-8, 1.5 * err_scipy)
    c = COUNTS[0]
    print(f"\n{name} {problem.__name__} n={A.shape[0]} {how}: relres {relres:.1e} "
          f"vs SciPy {agree:.1e} error {err:.1e} (SciPy {err_scipy:.1e}) "
          f"compilations {c.compilations} executions {c.executions} wall {wall:.0f} s")
    assert c.compilations <= _MAX_COMPILES and c.executions <= _MAX_EXECUTIONS


# 60-190 s each on this shared 2-core machine at load 15 (compilations dominate): cg and
# gmres run by default; the others are marked slow.
@pytest.mark.xla
@pytest.mark.parametrize("name,problem", KRYLOV[:2] + [
    pytest.param(*case, marks=pytest.mark.slow) for case in KRYLOV[2:]])
def test_krylov_float64_small(name, problem, emulate_neuron, monkeypatch):
    _krylov_case(name, problem, 12, "to_device", monkeypatch)


@pytest.mark.xla
def test_gmres_float64_inner_cap(emulate_neuron, monkeypatch):
    """Each float32 inner solve gets at most the capped iterations (a float32 gmres that
    cannot reach the inner rtol ran to maxiter = 10 n restart cycles: the 10^4 must-show
    run did not finish); capped at one restart cycle, the refinement still converges."""
    from trnscipy.sparse.linalg._isolve import _refine

    monkeypatch.setattr(_refine, "_ONE_SPACE", {})  # gmres through the general refinement
    monkeypatch.setattr(_refine, "_INNER_MIN", 20)
    monkeypatch.setattr(_refine, "_INNER_PER_ROOT", 0)
    seen, refine = [], _refine._refine

    def recorded(name, device_solver, op, params):
        def inner(*args, **kw):
            seen.append(kw["maxiter"])
            return device_solver(*args, **kw)
        return refine(name, inner, op, params)

    monkeypatch.setattr(_refine, "_refine", recorded)
    _krylov_case("gmres", _convection_diffusion, 12, "to_device", monkeypatch)
    assert len(seen) > 2 and set(seen) == {1}


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("how", ["offload", "to_device"])
@pytest.mark.parametrize("name,problem", KRYLOV)
def test_krylov_float64_poisson_1e4(name, problem, how, emulate_neuron, monkeypatch):
    _krylov_case(name, problem, 100, how, monkeypatch)


def _backward(A, x, b):
    return (np.linalg.norm(A @ x - b, np.inf)
            / (np.linalg.norm(A, np.inf) * np.linalg.norm(x, np.inf) + np.linalg.norm(b, np.inf)))


@pytest.mark.xla
@pytest.mark.parametrize("n", [32] + [pytest.param(n, marks=pytest.mark.slow)
                                      for n in (256, 1024)])
def test_dense_float64(n, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n))
    S = A @ A.T / n + np.eye(n)
    b = rng.standard_normal(n)

    def run():
        with trnscipy.offload("xla"):
            x = tl.solve(A, b)
            c = tl.cholesky(S, lower=True)
            y = tl.cho_solve((c, True), b)
        return x, c, y

    t0 = time.perf_counter()
    (x, c, y), ops = _recorded(run)
    wall, counts = time.perf_counter() - t0, COUNTS[0]
    assert ops == []
    errors = (_backward(A, x, b),
              np.linalg.norm(c @ c.T - S, np.inf) / np.linalg.norm(S, np.inf),
              _backward(S, y, b))
    assert max(errors) <= 10 * n * EPS
    # through to_device: the result is a float64 device tensor, exact on the way back
    dev = trnscipy.to_device(S, "xla")
    (z,), ops = _recorded(lambda: (tl.solve(dev, trnscipy.to_device(b, "xla"),
                                            assume_a="pos"),))
    assert ops == []
    assert z.dtype == torch.float64
    errors += (_backward(S, trnscipy.to_host(z), b),)
    assert errors[-1] <= 10 * n * EPS
    assert np.allclose(trnscipy.to_host(z), sl.solve(S, b), rtol=1e-10)
    print(f"\nn={n} backward errors / (n eps64): solve, cholesky, cho_solve, solve pos "
          + ", ".join(f"{e / (n * EPS):.3f}" for e in errors)
          + f"; offload calls: {counts.compilations} compilations, {counts.executions} "
          f"executions, {wall:.0f} s")
    assert counts.compilations <= 16


@pytest.mark.xla
@pytest.mark.slow  # the Ozaki GEMM graphs compile for minutes on this shared machine
@pytest.mark.parametrize("n", [16, 256, 1024])
def test_eigh_float64(n, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n))
    S = A @ A.T / n + np.eye(n)

    def run():
        with trnscipy.offload("xla"):
            return tl.eigh(S)

    t0 = time.perf_counter()
    (w, v), ops = _recorded(run)
    wall, counts = time.perf_counter() - t0, COUNTS[0]
    assert ops == []
    ws = sl.eigvalsh(S)
    errors = (np.max(np.abs(w - ws)) / np.max(np.abs(ws)),
              np.linalg.norm(S @ v - v * w) / np.linalg.norm(S),
              np.linalg.norm(v.T @ v - np.eye(n)))
    print(f"\nn={n} eigh / (n eps64): eigenvalue error, residual, orthogonality "
          + ", ".join(f"{e / (n * EPS):.3f}" for e in errors)
          + f"; {counts.compilations} compilations, {counts.executions} executions, "
          f"{wall:.0f} s")
    assert errors[0] <= 10 * n * EPS  # the must-show: eigenvalues to 10 n eps64
    # vectors too (measured, n eps64: residual 0.29 / 0.022 / 0.008, ||V^T V - I||_F
    # 1.0 / 0.27 / 0.14 at n = 16 / 256 / 1024; 2 compilations, 2 executions each)
    assert errors[1] <= 10 * n * EPS and errors[2] <= 1e3 * n * EPS


def _cg_system():
    A = (_poisson(8) + sp.diags_array(np.linspace(0.0, 3.0, 64))).tocsr()
    return A, np.random.default_rng(1).standard_normal(64)


def _cg_solve(A, b, **kw):
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    x, info = tsl.cg(trnscipy.to_device(A, "xla"), trnscipy.to_device(b, "xla"), rtol=1e-11,
                     **kw)
    return trnscipy.to_host(x), info


def _relres(A, x, b):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


@pytest.mark.xla
def test_cg_float64_host_preconditioner(emulate_neuron):
    """A host (SciPy) LinearOperator as M of a float64 solve under offload (pyamg's
    ``aspreconditioner`` is one): the double-float refinement on the device, M's products
    on the host, cast to float32 there for the inner solve; its one announcement, no
    float64 op on the device, no float64 SpMV sent to the host."""
    import warnings

    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from conformance.device_ops import DeviceArithmetic

    A, b = _cg_system()
    d = A.diagonal()
    M = spl.LinearOperator(A.shape, matvec=lambda v: v / d, dtype=np.float64)
    with warnings.catch_warnings(record=True) as caught, \
            DeviceArithmetic("xla", [torch.float64, torch.complex128]) as rec:
        warnings.simplefilter("always")
        with trnscipy.offload("xla"):
            x, info = tsl.cg(A, b, rtol=1e-11, M=M)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, trnscipy.DeviceFallbackWarning)]
    assert len(messages) == 1 and "host (SciPy) operator" in messages[0], messages
    assert rec.ops == [] and info == 0 and _relres(A, x, b) <= 1e-11
    xs, _ = spl.cg(A, b, rtol=1e-11, M=M)
    assert np.linalg.norm(x - xs) <= 1e-9 * np.linalg.norm(xs)


@pytest.mark.xla
def test_cg_float64_preconditioner_maxiter(emulate_neuron, monkeypatch):
    """The double-float cg (residual replacement): a matrix preconditioner, and SciPy's
    maxiter/info (an unconverged solve is SciPy's, on the host, announced)."""
    import trnscipy

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A, b = _cg_system()
    M = trnscipy.to_device(sp.diags_array(1 / A.diagonal()).tocsr(), "xla")
    (x, info), ops = _recorded(lambda: _cg_solve(A, b, M=M))
    assert ops == [] and info == 0 and _relres(A, x, b) <= 1e-11
    assert np.linalg.norm(x - sl.solve(A.toarray(), b)) <= 1e-10 * np.linalg.norm(x)
    # unconverged: SciPy's float64 iterate, from the host (announced; an error in strict
    # mode): 3 float32 iterations on the device were 6e-8 (relative) from it
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="did not converge"):
        _cg_solve(A, b, maxiter=3)
    monkeypatch.delenv("TRNSCIPY_STRICT")
    xs, info_s = spl.cg(A, b, rtol=1e-11, maxiter=3)
    for kw in ({}, {"M": M}):
        with pytest.warns(trnscipy.DeviceFallbackWarning, match="did not converge"):
            x, info = _cg_solve(A, b, maxiter=3, **kw)
        want = spl.cg(A, b, rtol=1e-11, maxiter=3, M=trnscipy.to_host(kw["M"]))[0] \
            if "M" in kw else xs
        assert info == info_s == 3
        np.testing.assert_array_equal(x, want)


@pytest.mark.xla
@pytest.mark.parametrize("name", ["cg", "gmres"])
def test_krylov_float64_repeat_compiles_nothing(name, emulate_neuron, monkeypatch):
    """Solving again with the same device operands compiles no graph (cg's second call
    compiled one: b's double-float parts, left pending by the setup, were computed by the
    first block's replay in a graph of its own; measured 9, 1, 0, 0 per call).  gmres:
    one graph execution per restart cycle, as the float32 gmres, plus the setup's."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A, b = _cg_system()
    Ad, bd = trnscipy.to_device(A, "xla"), trnscipy.to_device(b, "xla")
    counts = []
    for _ in range(3):
        (x, info), ops = _recorded(lambda: getattr(tsl, name)(Ad, bd, rtol=1e-11))
        assert ops == [] and info == 0 and _relres(A, trnscipy.to_host(x), b) <= 1e-11
        counts.append(COUNTS[0])
    assert counts[0].compilations > 0 and [c.compilations for c in counts[1:]] == [0, 0]
    if name == "gmres":
        iterations = []
        spl.gmres(A, b, rtol=1e-11, callback=iterations.append, callback_type="pr_norm")
        cycles = -(-len(iterations) // 20)
        assert counts[1].executions <= cycles + 4


@pytest.mark.xla
@pytest.mark.slow  # the general refinement's graphs compile (about a minute here)
def test_cg_float64_handover(emulate_neuron, monkeypatch):
    """A stalled double-float cg hands its iterate over to the general refinement."""
    from trnscipy.sparse.linalg._isolve import _refine

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    monkeypatch.setattr(_refine, "_STALLED_BLOCKS", 0)  # hand over after the first block
    A, b = _cg_system()
    (x, info), ops = _recorded(lambda: _cg_solve(A, b))
    assert ops == [] and info == 0 and _relres(A, x, b) <= 1e-11


@pytest.mark.xla
@pytest.mark.slow  # compiles the eigh refinement's graphs (about 35 s here)
def test_eigh_float64_repeated_eigenvalues(emulate_neuron, monkeypatch):
    """Exactly repeated eigenvalues (gaps below double-float resolution): no rotation
    between them (the angle was 45 degrees, every step, and the identity gave NaN)."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    n = 16
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, n)))
    for d in (np.r_[[1.0] * 5, [2.0] * 3, np.linspace(3, 4, 8)], np.ones(n)):
        S = (Q * d) @ Q.T
        S = (S + S.T) / 2
        (w, v), ops = _recorded(lambda S=S: _offload_eigh(trnscipy, tl, S))
        assert ops == []
        ws = sl.eigvalsh(S)
        assert np.max(np.abs(w - ws)) <= 10 * n * EPS * np.max(np.abs(ws))
        assert np.linalg.norm(S @ v - v * w) <= 10 * n * EPS * np.linalg.norm(S)
        assert np.linalg.norm(v.T @ v - np.eye(n)) <= 10 * n * EPS


@pytest.mark.xla
@pytest.mark.slow  # compiles the eigh refinement's graphs
def test_eigh_float64_split_pair(emulate_neuron, monkeypatch):
    """Two eigenvalues 1e-12 apart (relative), resolvable in double-float: float32 eigh
    mixes their vectors by about 45 degrees, so their Rayleigh quotients are equal; the
    rotation must tell them apart by their coupling, not leave them as a repeat."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    n = 16
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, n)))
    d = np.r_[1.0, 1.0 + 1e-12, np.linspace(2, 3, n - 2)]
    S = (Q * d) @ Q.T
    S = (S + S.T) / 2
    (w, v), ops = _recorded(lambda: _offload_eigh(trnscipy, tl, S))
    assert ops == []
    ws, vs = sl.eigh(S)
    scale = np.max(np.abs(ws))
    errors = (np.max(np.abs(w - ws)) / scale,
              np.linalg.norm(S @ v - v * w) / np.linalg.norm(S),
              np.linalg.norm(v.T @ v - np.eye(n)))
    print("\nsplit pair eigh / (n eps64): eigenvalue error, residual, orthogonality "
          + ", ".join(f"{e / (n * EPS):.3f}" for e in errors))
    assert errors[0] <= 10 * n * EPS  # a mixed pair's quotients: 47 n eps64
    assert errors[1] <= 10 * n * EPS and errors[2] <= 10 * n * EPS
    # each vector of the pair against SciPy's: both are determined to about
    # eps ||S|| / gap = 7e-4 (a mixed pair: sin 45 degrees)
    sines = np.sqrt(np.maximum(0, 1 - (vs[:, :2] * v[:, :2]).sum(axis=0) ** 2))
    assert np.max(sines) <= 1e-2


def _offload_eigh(trnscipy, tl, S):
    with trnscipy.offload("xla"):
        return tl.eigh(S)


def _sparse_direct_case(problem, k, monkeypatch):
    """spsolve, splu with 8 right-hand sides and its transposed solves, float64 offload on
    the emulated Neuron device: relative residuals at double-float level, no float64 op
    on the device, nothing on the host."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = problem(k).tocsc()
    rng = np.random.default_rng(0)
    b, B = rng.standard_normal(A.shape[0]), rng.standard_normal((A.shape[0], 8))

    def run():
        with trnscipy.offload("xla"):
            lu = tsl.splu(A)
            return (tsl.spsolve(A, b), lu.solve(B), lu.solve(B, trans="T"),
                    lu.solve(B[:, 0], trans="H"))

    (x, X, XT, xH), ops = _recorded(run)
    assert ops == []
    rel = [np.linalg.norm(r) / np.linalg.norm(v)
           for r, v in ((b - A @ x, b), (B - A @ X, B), (B - A.T @ XT, B),
                        (B[:, 0] - A.T @ xH, B[:, 0]))]
    assert max(rel) <= 1e-12, rel
    exact = spl.spsolve(A, b)
    assert np.linalg.norm(x - exact) / np.linalg.norm(exact) <= 1e-12
    return rel


@pytest.mark.xla
@pytest.mark.parametrize("problem", [_poisson, _convection_diffusion])
def test_sparse_direct_float64_small(problem, emulate_neuron, monkeypatch):
    _sparse_direct_case(problem, 12, monkeypatch)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("problem", [_poisson, _convection_diffusion])
def test_sparse_direct_float64_1e4(problem, emulate_neuron, monkeypatch):
    rel = _sparse_direct_case(problem, 100, monkeypatch)
    c = COUNTS[0]
    print(f"\nsparse direct {problem.__name__} n=10^4: relres {max(rel):.1e} "
          f"compilations {c.compilations} executions {c.executions}")


@pytest.mark.xla
def test_sparse_direct_float64_singular(emulate_neuron):
    """A float32 factorization with a zero or non-finite pivot hands the matrix to SciPy
    on the host, announced: SciPy's singular-matrix behaviour (a MatrixRankWarning and NaN
    from spsolve, RuntimeError from splu)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    A = sp.csc_array(np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]]))
    b = np.ones(3)
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning):
        with pytest.warns(spl.MatrixRankWarning):
            x = tsl.spsolve(A, b)
        with pytest.raises(RuntimeError, match="singular"):
            tsl.splu(A)
    assert np.isnan(x).all()


@pytest.mark.xla
def test_sparse_direct_float64_warm_executions(emulate_neuron, monkeypatch):
    """A repeated float64 spsolve runs its refinement as one device loop that stops on
    the device (issue 27's target: within 3x of float32's graph executions): at n = 144
    at most 8 executions in all (a graph and a host read per step before: 15), and no
    compilation after the first call (the first call's leftovers, pending tensors
    computed by the next sync, made the second call's graph differ: one compile)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = _poisson(12).tocsc()
    b = np.random.default_rng(0).standard_normal(A.shape[0])

    def run():
        with trnscipy.offload("xla"):
            return tsl.spsolve(A, b)

    for _ in range(2):  # (the first call compiles)
        x, ops = _recorded(run)
    assert ops == []
    assert np.linalg.norm(b - A @ x) <= 1e-12 * np.linalg.norm(b)
    assert COUNTS[0].executions <= 8 and COUNTS[0].compilations == 0, COUNTS[0]


@pytest.mark.xla
def test_sparse_direct_float64_resident_no_recompile(emulate_neuron, monkeypatch):
    """spsolve of device-resident float64 data, its result held across the next sync (as
    a user's loop holds x): the second call compiles nothing.  Pending leftovers of the
    first call (the cached probe tables, the result's low parts and hidden alias bases)
    made the sync closing the second call run a graph that the first had not: one
    compile, a neuronx-cc compile of seconds on Trainium."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = _poisson(12).tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    dev = trnscipy.resolve_device("xla")
    Ad, bd = trnscipy.to_device(A, dev), trnscipy.to_device(b, dev)
    for _ in range(2):  # (the first call compiles)
        x, ops = _recorded(lambda: tsl.spsolve(Ad, bd))
    assert ops == []
    assert COUNTS[0].compilations == 0 and COUNTS[0].executions <= 8, COUNTS[0]
    x = trnscipy.to_host(x)
    assert np.linalg.norm(b - A @ x) <= 1e-12 * np.linalg.norm(b)


def _poisson_rect(k):
    T1 = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k, k))
    T2 = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k + 1, k + 1))
    return (sp.kron(T1, sp.eye_array(k + 1)) + sp.kron(sp.eye_array(k), T2)).tocsr()


def _eigen_case(what, k, monkeypatch):
    """float64 eigsh / lobpcg offloaded to the emulated Neuron device: the float32 solve
    refined in double-float, against SciPy's float64 eigenvalues; residuals and
    orthonormality of the vectors at double-float level; no float64 op on the device."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    # sigma=0: a k x (k+1) grid (simple eigenvalues near 0: the float32 shift-invert
    # Lanczos on XLA misses the partner of a double eigenvalue of the square grid)
    A = _poisson(k) if what != "sigma0" else _poisson_rect(k)
    X = np.random.default_rng(0).uniform(size=(A.shape[0], 4))

    def run(rng=None):
        with trnscipy.offload("xla"):
            if what == "LA":
                return tsl.eigsh(A, k=6, which="LA", rng=rng)
            if what == "sigma0":
                return tsl.eigsh(A.tocsc(), k=6, sigma=0)
            return tsl.lobpcg(A, X, largest=True, tol=1e-12, maxiter=200)

    (w, V), ops = _recorded(run)
    assert ops == []
    if what == "LA" and k <= 16:
        # a warm call: the float32 stage's While, then one read per refinement step (its
        # corrections one device loop over the k pairs; the first step from the Ritz
        # vectors' Rayleigh quotients, no read of its own): 8 (11 with a read for the
        # first step, 73 with k minres solves per step)
        (w2, _), _ = _recorded(run)
        assert np.allclose(w2, w, rtol=1e-12, atol=0)
        assert COUNTS[0].compilations == 0 and COUNTS[0].executions <= 11, COUNTS[0]
    if what == "LA":
        # the grid's double eigenvalues: starts whose float32 Lanczos misses one copy (at
        # 12 x 12 at tol=1e-5; at 16 x 16 at float32's tol=0, start 4: the deflated search)
        for rng in (4, 5):
            w_rng = _recorded(lambda: run(rng))[0][0]  # noqa: B023
            assert np.allclose(np.sort(w_rng), np.sort(spl.eigsh(A, k=6, which="LA")[0]),
                               rtol=1e-10, atol=0), rng
        ref = spl.eigsh(A, k=6, which="LA")[0]
    elif what == "sigma0":
        ref = spl.eigsh(A.tocsc(), k=6, sigma=0)[0]
    else:
        # the exact eigenvalues (SciPy's lobpcg stops short of them at 10^4 in 200
        # iterations: 1e-6 away; ours refines them in double-float)
        ref = np.sort(spl.eigsh(A, k=4, which="LA")[0])
    assert w.dtype == np.float64 and V.dtype == np.float64
    err = np.max(np.abs(np.sort(w) - np.sort(ref)) / np.abs(ref))
    assert err <= 1e-10, err
    assert np.max(np.linalg.norm(A @ V - V * w, axis=0)) <= 1e-12 * 8
    assert np.abs(V.T @ V - np.eye(V.shape[1])).max() <= 1e-12
    return err


@pytest.mark.xla
# lobpcg and svds float64 on Neuron also run in CI in the conformance suite's xla-neuron lane
# (paired with SciPy): here slow, as they cost about 2-3 min of compiles each on 2 cores
@pytest.mark.parametrize("what", ["LA", pytest.param("lobpcg", marks=pytest.mark.slow),
                                  pytest.param("sigma0", marks=pytest.mark.slow)])
def test_eigen_float64_small(what, emulate_neuron, monkeypatch):
    _eigen_case(what, 16 if what == "LA" else 12, monkeypatch)


@pytest.mark.xla
@pytest.mark.slow  # (cold compiles of eigsh's or lobpcg's graphs: about a minute on 2 cores)
@pytest.mark.parametrize("what", ["LA", "SA", "lobpcgL", "lobpcgS"])
def test_eigen_float64_double_eigenvalues(what, emulate_neuron, monkeypatch):
    """A square grid's Laplacian (double eigenvalues by its symmetry) from random starts:
    the float32 Lanczos can miss the second copy of a wanted double eigenvalue (returning
    the next value in its place: eigsh LA, start 4), and lobpcg from a normal random block
    stalled in the pair-by-pair refinement (start 2); every start gives the eigenvalues
    of SciPy's float64 eigsh, with float64 residuals, on the device (no fallback)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = _poisson(16)
    which = {"lobpcgL": "LA", "lobpcgS": "SA"}.get(what, what)
    k = 6 if what in ("LA", "SA") else 4
    ref = np.sort(spl.eigsh(A, k=k, which=which, tol=0)[0])
    for seed in (2, 4, 5):
        def run(seed=seed):
            with trnscipy.offload("xla"):
                if what in ("LA", "SA"):
                    return tsl.eigsh(A, k=k, which=which, rng=seed)
                X = np.random.default_rng(seed).standard_normal((A.shape[0], k))
                return tsl.lobpcg(A, X, largest=what == "lobpcgL", maxiter=300)

        (w, V), ops = _recorded(run)
        assert ops == []
        np.testing.assert_allclose(np.sort(w), ref, rtol=1e-10, atol=0, err_msg=str(seed))
        assert np.max(np.linalg.norm(A @ V - V * w, axis=0)) <= 1e-12 * 8, seed
        assert np.abs(V.T @ V - np.eye(k)).max() <= 1e-12, seed


@pytest.mark.xla
def test_eigen_float64_refinement_stall_runs_scipy(emulate_neuron, monkeypatch):
    """A refinement that stalls far above float64's level (here: corrections replaced by
    zeros; random directions, a third of this small space, make progress in the
    Rayleigh-Ritz with the guard pairs) is not returned: SciPy runs on the host, announced."""
    import torch

    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy import DeviceFallbackWarning
    from trnscipy.sparse.linalg._eigen import _refine

    monkeypatch.setattr(_refine, "_corrections", lambda *a: torch.zeros_like(a[-1]))
    A = _poisson(6)
    # one start vector for both: ARPACK from a random one may return a double eigenvalue
    # twice (7.0489 of this grid), so two random starts can disagree
    v0 = np.random.default_rng(0).random(A.shape[0])
    with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match="stalled"):
        w = tsl.eigsh(A, k=4, which="LA", v0=v0, return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(w), np.sort(spl.eigsh(A, k=4, which="LA", v0=v0)[0]),
                               rtol=1e-12)


@pytest.mark.xla
@pytest.mark.slow  # (the double-float eigh's compiles: 1-3 min on 2 cores)
def test_lobpcg_float64_dense_route(emulate_neuron, monkeypatch):
    """float64 lobpcg of a small problem (n < 5 k: SciPy's dense eigh) offloaded to the
    emulated Neuron device: the double-float eigh, eigenpairs to float64 level as SciPy's
    (the float32 device eigh's, 3e-8 residuals, were returned); with B, SciPy's generalized
    eigh on the host, announced."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy import DeviceFallbackWarning

    A = _poisson(3).toarray()  # n = 9, k = 2
    B = np.diag(np.linspace(1.0, 2.0, 9))
    X = np.random.default_rng(3).standard_normal((9, 2))
    for largest in (True, False):
        ref = spl.lobpcg(A, X.copy(), largest=largest)
        monkeypatch.setenv("TRNSCIPY_STRICT", "1")
        with trnscipy.offload("xla"), pytest.warns(UserWarning, match="The problem size"):
            w, V = tsl.lobpcg(A, X, largest=largest)
        monkeypatch.delenv("TRNSCIPY_STRICT")
        np.testing.assert_allclose(w, ref[0], rtol=1e-13, atol=1e-13)
        assert np.max(np.abs(A @ V - V * w)) <= 1e-13
        assert np.abs(V.T @ V - np.eye(2)).max() <= 1e-13
        ref = spl.lobpcg(A, X.copy(), B=B, largest=largest)
        with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match="eigh"):
            w, V = tsl.lobpcg(A, X, B=B, largest=largest)
        np.testing.assert_allclose(w, ref[0], rtol=1e-13, atol=1e-13)
        assert np.max(np.abs(A @ V - B @ V * w)) <= 1e-13


@pytest.mark.xla
def test_eigen_float64_scipy_operator_offloaded(emulate_neuron):
    """SciPy's aslinearoperator of a host matrix under offload (no device of its own):
    eigsh runs SciPy on the host, announced, with NumPy results (it crashed reading the
    operator's device)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy import DeviceFallbackWarning

    A = _poisson(4).toarray()
    with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match="eigsh"):
        w = tsl.eigsh(spl.aslinearoperator(A), k=2, which="LA", return_eigenvectors=False)
    assert isinstance(w, np.ndarray)
    np.testing.assert_allclose(np.sort(w), np.sort(spl.eigsh(A, k=2, which="LA")[0]),
                               rtol=1e-12)


def _generalized_case(what, mass, k, monkeypatch):
    """float64 generalized eigsh / lobpcg (A x = lam M x) offloaded to the emulated Neuron
    device: eigenvalues against SciPy's and the dense pencil's, residuals A v - lam M v at
    double-float level, V^T M V = I (lobpcg's Y: V M-orthogonal to it); no float64 op on
    the device.  lobpcg: "lobpcg" largest, "lobpcgS" smallest, "lobpcgY" smallest with
    the constraint Y, "lobpcgM" smallest with a Jacobi preconditioner."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A, M = _poisson_rect(k), _mass_rect(k, mass)
    n = A.shape[0]
    X = np.random.default_rng(0).uniform(size=(n, 4))
    # Y: the pencil's lowest mode, deflated (with Y = ones SciPy's own lobpcg does not
    # converge here in 200 iterations, nor does the float32 stage)
    Y = sl.eigh(A.toarray(), M.toarray(), subset_by_index=[0, 0])[1] if what == "lobpcgY" \
        else None
    P = sp.diags_array(1.0 / A.diagonal()).tocsr() if what == "lobpcgM" else None

    def call(lib, A, M, X):
        if what == "sigma0":
            return lib.eigsh(A.tocsc(), k=6, M=M.tocsc(), sigma=0)
        if what in ("LA", "SA"):
            return lib.eigsh(A, k=6, M=M, which=what)
        return lib.lobpcg(A, X, B=M, M=P, Y=Y, largest=what == "lobpcg", tol=1e-8,
                          maxiter=200)

    def run():
        with trnscipy.offload("xla"):
            return call(tsl, A, M, X)

    (w, V), ops = _recorded(run)
    assert ops == []
    ref = call(spl, A, M, X.copy())[0]
    assert w.dtype == np.float64 and V.dtype == np.float64
    err = np.max(np.abs(np.sort(w) - np.sort(ref)) / np.abs(ref))
    assert err <= 1e-10, err
    if what.startswith("lobpcg"):  # the dense pencil's wanted eigenvalues (on Y's complement)
        Z = np.eye(n) if Y is None else sl.null_space((M @ Y).T)
        dense = sl.eigh(Z.T @ A.toarray() @ Z, Z.T @ M.toarray() @ Z, eigvals_only=True)
        dense = dense[-X.shape[1]:] if what == "lobpcg" else dense[:X.shape[1]]
        err = np.max(np.abs(np.sort(w) - dense) / np.abs(dense))
        assert err <= 1e-10, err
    assert np.max(np.linalg.norm(A @ V - (M @ V) * w, axis=0)) <= 1e-12 * 8
    assert np.abs(V.T @ M @ V - np.eye(V.shape[1])).max() <= 1e-12
    if Y is not None:
        assert np.abs(Y.T @ M @ V).max() <= 1e-12
    return err


def _mass_rect(k, kind):
    """_mass for the k x (k + 1) grid of _poisson_rect."""
    if kind == "lumped":
        return sp.diags_array(1.0 + 0.5 * np.sin(np.arange(k * (k + 1))) ** 2).tocsr()
    M1 = sp.diags_array([1.0, 4.0, 1.0], offsets=[-1, 0, 1], shape=(k, k)) / 6
    M2 = sp.diags_array([1.0, 4.0, 1.0], offsets=[-1, 0, 1], shape=(k + 1, k + 1)) / 6
    return sp.kron(M1, M2).tocsr()


@pytest.mark.xla
@pytest.mark.parametrize("what, mass", [
    # slow: about 150 s of XLA CPU compiles and refinement (540 s under load)
    pytest.param("sigma0", "lumped", marks=pytest.mark.slow),
    pytest.param("sigma0", "consistent", marks=pytest.mark.slow),
    pytest.param("LA", "lumped", marks=pytest.mark.slow),
    pytest.param("SA", "consistent", marks=pytest.mark.slow),
    ("lobpcgS", "consistent"),
    pytest.param("lobpcg", "lumped", marks=pytest.mark.slow),
    pytest.param("lobpcgY", "consistent", marks=pytest.mark.slow),
    pytest.param("lobpcgM", "lumped", marks=pytest.mark.slow)])
def test_generalized_eigen_float64_small(what, mass, emulate_neuron, monkeypatch):
    err = _generalized_case(what, mass, 12, monkeypatch)
    c = COUNTS[0]
    print(f"\n{what} {mass} n=156: eigenvalue error {err:.1e} compilations "
          f"{c.compilations} executions {c.executions}")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("what", ["sigma0"])
def test_generalized_eigen_float64_1600(what, emulate_neuron, monkeypatch):
    err = _generalized_case(what, "consistent", 40, monkeypatch)
    c = COUNTS[0]
    print(f"\n{what} generalized n=1640: eigenvalue error {err:.1e} compilations "
          f"{c.compilations} executions {c.executions}")


def _svds_case(m, n, monkeypatch):
    """float64 svds offloaded to the emulated Neuron device: singular values against the
    dense SVD's, the vectors' residuals and orthonormality at double-float level."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = sp.random_array((m, n), density=0.005 if m > 1000 else 0.05, rng=0, format="csr")

    def run():
        with trnscipy.offload("xla"):
            return tsl.svds(A, k=5)

    (u, s, vh), ops = _recorded(run)
    assert ops == []
    ref = np.sort(np.linalg.svd(A.toarray(), compute_uv=False))[::-1][:5][::-1]
    err = np.max(np.abs(s - ref) / ref)
    assert err <= 1e-10, err
    assert np.max(np.linalg.norm(A @ vh.T - u * s, axis=0)) <= 1e-12 * ref[-1]
    assert np.abs(u.T @ u - np.eye(5)).max() <= 1e-12
    assert np.abs(vh @ vh.T - np.eye(5)).max() <= 1e-12
    return err


@pytest.mark.xla
@pytest.mark.slow  # (see test_eigen_float64_small: the conformance lane runs svds float64)
@pytest.mark.parametrize("shape", [(300, 80), (80, 300)])
def test_svds_float64_small(shape, emulate_neuron, monkeypatch):
    _svds_case(*shape, monkeypatch)


@pytest.mark.xla
@pytest.mark.slow  # (its cold compiles, as test_svds_float64_small's)
def test_svds_float64_warm_executions(emulate_neuron, monkeypatch):
    """A repeated float64 svds (values only, fixed start) within issue 27's budget of graph
    executions: the float32 Lanczos, the refinement's first step from the Ritz vectors'
    Rayleigh quotients on the device (no host Rayleigh-Ritz read), the double-float operator
    in one graph: at most 11 warm executions at 300 x 80 (13 before; 8 with the transposes'
    carried major index, reverted: a stale index gave wrong sparse norms), values to 1e-10
    of the dense SVD's."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = sp.random_array((300, 80), density=0.05, rng=0, format="csr")

    def run():
        with trnscipy.offload("xla"):
            return tsl.svds(A, k=5, rng=0, return_singular_vectors=False)

    for _ in range(2):  # (the first call compiles)
        s, ops = _recorded(run)
    assert ops == []
    ref = np.sort(np.linalg.svd(A.toarray(), compute_uv=False))[-5:]
    assert np.max(np.abs(np.sort(s) - ref) / ref) <= 1e-10
    assert COUNTS[0].compilations == 0 and COUNTS[0].executions <= 11, COUNTS[0]


@pytest.mark.xla
@pytest.mark.slow
def test_svds_float64_3000x800(emulate_neuron, monkeypatch):
    err = _svds_case(3000, 800, monkeypatch)
    c = COUNTS[0]
    print(f"\nsvds 3000x800: singular value error {err:.1e} compilations {c.compilations} "
          f"executions {c.executions}")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("what", ["LA", "sigma0", pytest.param("lobpcg", marks=pytest.mark.xfail(
    reason="eigenvalues match the exact ones to 1e-10, but one Ritz vector's residual is "
    "2.0e-11 against the 1e-12 ||A|| asked (measured 2026-11-28): the refinement's stop"))])
def test_eigen_float64_1e4(what, emulate_neuron, monkeypatch):
    err = _eigen_case(what, 100, monkeypatch)
    c = COUNTS[0]
    print(f"\n{what} n=10^4: eigenvalue error {err:.1e} compilations {c.compilations} "
          f"executions {c.executions}")


def _triangle(k, lower, unit):
    """A nonsymmetric triangle of 2-D Poisson plus random couplings, and its dense form as
    spsolve_triangular reads it (unit: ones on the diagonal)."""
    A = _poisson(k) + sp.random_array((k * k, k * k), density=3 / (k * k), rng=1)
    T = sp.tril(A, format="csr") if lower else sp.triu(A, format="csr")
    D = T.toarray()
    if unit:
        np.fill_diagonal(D, 1.0)
    return T, D


def _triangular_case(k, lower, unit, fmt, ncols, monkeypatch):
    """float64 spsolve_triangular offloaded to the emulated Neuron device: no float64 op
    on the device, nothing on the host; backward and forward errors at double-float level
    (SciPy's, within the double-float unit 2**-48), paired with SciPy."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    T, D = _triangle(k, lower, unit)
    T = T.asformat(fmt)
    rng = np.random.default_rng(0)
    b = rng.standard_normal((T.shape[0], ncols) if ncols else T.shape[0])

    def run():
        with trnscipy.offload("xla"):
            return tsl.spsolve_triangular(T, b, lower=lower, unit_diagonal=unit)

    x, ops = _recorded(run)
    assert ops == []
    xs = spl.spsolve_triangular(T, b, lower=lower, unit_diagonal=unit)
    assert x.dtype == xs.dtype and x.shape == xs.shape
    backward = np.linalg.norm(b - D @ x) / (np.linalg.norm(D, 1) * np.linalg.norm(x))
    assert backward <= 2.0 ** -48
    assert np.linalg.norm(x - xs) / np.linalg.norm(xs) <= 2.0 ** -47 * max(
        1.0, np.linalg.cond(D, 1) / 100)
    return COUNTS[0]


@pytest.mark.xla
@pytest.mark.parametrize("lower,unit,fmt,ncols", [
    (True, False, "csr", 0), (False, True, "csc", 3),
    pytest.param(True, True, "csc", 2, marks=pytest.mark.slow),
    pytest.param(False, False, "csr", 0, marks=pytest.mark.slow)])
def test_spsolve_triangular_float64(lower, unit, fmt, ncols, emulate_neuron, monkeypatch):
    c = _triangular_case(6, lower, unit, fmt, ncols, monkeypatch)
    assert c.executions <= 6


@pytest.mark.xla
@pytest.mark.slow
def test_spsolve_triangular_float64_1e4(emulate_neuron, monkeypatch):
    c = _triangular_case(100, True, False, "csr", 8, monkeypatch)
    print(f"\nspsolve_triangular float64 n=10^4, 8 columns: compilations {c.compilations} "
          f"executions {c.executions}")


@pytest.mark.xla
def test_spsolve_triangular_float64_singular(emulate_neuron, monkeypatch):
    """SciPy's LinAlgError for a zero on the diagonal (a zero that is the sum of
    duplicates in double-float too), before b's shape is checked; not with a unit
    diagonal."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    # the diagonal entry (1, 1): 1 + 2**-40 and -(1 + 2**-40) as duplicates, float32 parts
    # alone cannot tell it from a small nonzero
    T = sp.csr_array((np.array([2.0, 1.0, 1 + 2.0 ** -40, -(1 + 2.0 ** -40), 3.0]),
                      (np.array([0, 1, 1, 1, 2]), np.array([0, 0, 1, 1, 2]))), shape=(3, 3))
    for rhs in (np.ones(3), np.ones((2, 2))):
        for f in (spl.spsolve_triangular, tsl.spsolve_triangular):
            with trnscipy.offload("xla"), pytest.raises(np.linalg.LinAlgError,
                                                        match="zero entry on diagonal"):
                f(T, rhs)
    with trnscipy.offload("xla"):
        x = tsl.spsolve_triangular(T, np.ones(3), unit_diagonal=True)
    np.testing.assert_allclose(x, spl.spsolve_triangular(T, np.ones(3), unit_diagonal=True),
                               rtol=1e-15)


def _ilu_operator(ilu):
    """(M, Pr A ~ L U): the ILU operator M = Pr^T L U of the exported factors (host)."""
    import trnscipy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trnscipy.DeviceFallbackWarning)  # (host export)
        L, U, perm_r = (sp.csr_array(ilu.L), sp.csr_array(ilu.U), ilu.perm_r)
    n = L.shape[0]
    Pr = sp.csr_array((np.ones(n), (perm_r, np.arange(n))), shape=(n, n))
    return (Pr.T @ L @ U).toarray(), L, U, Pr


def _offloaded_spilu(A, rhs, monkeypatch, **options):
    """spilu(A, **options) offloaded to the emulated Neuron device under TRNSCIPY_STRICT=1
    and its solves of each (b, trans) in ``rhs`` (no float64 op, no aten fallback)."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")

    def run():
        with trnscipy.offload("xla"):
            ilu = tsl.spilu(A, **options)
            return ilu, [ilu.solve(b, trans=t) for b, t in rhs]

    (ilu, xs), ops = _recorded(run)
    assert ops == []
    monkeypatch.setenv("TRNSCIPY_STRICT", "0")
    return ilu, xs


@pytest.mark.xla
def test_spilu_float64(emulate_neuron, monkeypatch):
    """spilu of float64 data on the emulated Neuron device (SciPy's options): its solve
    applies its own ILU operator M = Pr^T L U exactly (double-float factors, refined
    solve); as good a preconditioner as SciPy's ILU (paired).  Sweeps that do not
    converge hand the matrix to SciPy's spilu, announced.  ('T', float32 and integer
    right-hand sides: the slow tests, whose graphs compile apart.)"""
    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy.sparse.linalg._dsolve import _refine

    A = _convection_diffusion(12).tocsc()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    ilu, (y,) = _offloaded_spilu(A, [(b, "N")], monkeypatch)
    M = _ilu_operator(ilu)[0]
    ref = spl.spilu(A)
    assert y.dtype == np.float64
    assert np.linalg.norm(M @ y - b) / np.linalg.norm(b) <= 1e-13
    # not SciPy's ILUTP (``_ilu``: ILU(k)): the residual of applying it within 3x SciPy's
    rel = lambda M, v: np.linalg.norm(b - M @ v) / np.linalg.norm(b)  # noqa: E731
    assert rel(A, y) <= 3 * rel(A, ref.solve(b))

    monkeypatch.setattr(_refine, "_ILU_SWEEPS", 1)  # a loop bound: no new compilation
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="did not converge"):
        x = tsl.spilu(A).solve(b)
    np.testing.assert_array_equal(x, ref.solve(b))


@pytest.mark.xla
@pytest.mark.slow  # about 9 s of XLA compiles on 2 cores (a pattern of its own)
def test_spilu_float64_complete(emulate_neuron, monkeypatch):
    """Where SciPy's ILU is a complete LU (drop_tol=0 on a small matrix) so is the
    device's: its float64 solve equals SciPy's to float64 accuracy ('N', 'T', float32 and
    small-integer right-hand sides, float64 results as SciPy's)."""
    A = _convection_diffusion(5).tocsc()
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    rhs = [(b, "N"), (b, "T"), (b.astype(np.float32), "N"),
           (np.ones(A.shape[0], dtype=np.int8), "T")]
    _, xs = _offloaded_spilu(A, rhs, monkeypatch, drop_tol=0.0)
    ref = spl.spilu(A, drop_tol=0.0)
    for got, (v, t) in zip(xs, rhs, strict=True):
        want = ref.solve(v, trans=t)
        assert got.dtype == want.dtype == np.float64
        assert np.linalg.norm(got - want) / np.linalg.norm(want) <= 1e-13


@pytest.mark.xla
@pytest.mark.slow  # about 15 s of XLA compiles on 2 cores (a pattern of its own)
def test_spilu_float64_incomplete(emulate_neuron, monkeypatch):
    """An incomplete ILU (2-D Poisson, the level-of-fill pattern of fill_factor=2, no
    dropping): L U = Pr A on the pattern to double-float accuracy, the solve applies
    M = Pr^T L U exactly, and M preconditions SciPy's gmres about as well as SciPy's ILU
    of the same options (iteration counts)."""
    A = _poisson(10).tocsc()
    b = np.random.default_rng(2).standard_normal(A.shape[0])
    options = {"drop_tol": 0.0, "fill_factor": 2}
    ilu, (x, xT) = _offloaded_spilu(A, [(b, "N"), (b, "T")], monkeypatch, **options)
    M, L, U, Pr = _ilu_operator(ilu)
    B = (Pr @ A).toarray()
    pattern = (L + U).tocoo()
    LU = (L @ U).toarray()
    assert np.abs(LU - B)[pattern.row, pattern.col].max() <= 2e-14 * np.abs(B).max()
    assert not np.allclose(LU, B)  # incomplete
    assert np.linalg.norm(M @ x - b) / np.linalg.norm(b) <= 1e-13
    assert np.linalg.norm(M.T @ xT - b) / np.linalg.norm(b) <= 1e-13

    def iterations(solve):
        count = []
        _, info = spl.gmres(A, b, M=spl.LinearOperator(A.shape, solve), rtol=1e-10,
                            callback=lambda r: count.append(r), callback_type="pr_norm")
        assert info == 0
        return len(count)

    ours = iterations(lambda v: np.linalg.solve(M, v))
    theirs = iterations(spl.spilu(A, **options).solve)
    print(f"\ngmres iterations: ours {ours}, SciPy ILU {theirs}")
    assert ours <= 1.5 * theirs + 2, (ours, theirs)


@pytest.mark.xla
@pytest.mark.parametrize("name,problem,k", [
    # (about 10-20 s of compilations each on 2 cores)
    pytest.param("gmres", _convection_diffusion, 12, marks=pytest.mark.slow),
    pytest.param("cg", _poisson, 12, marks=pytest.mark.slow),
    # (cg at 10^4 not paired: SciPy's cg with SciPy's ILUTP, not symmetric, reaches
    # maxiter there, measured)
    pytest.param("gmres", _convection_diffusion, 100, marks=pytest.mark.slow)])
def test_ilu_preconditioned_float64(name, problem, k, emulate_neuron, monkeypatch):
    """An ILU-preconditioned float64 Krylov solve, offloaded as a SciPy script writes it
    (M = LinearOperator(A.shape, spilu(A).solve)): on the device, no float64 op, to
    rtol 1e-10, paired with SciPy's."""
    import trnscipy
    import trnscipy.sparse.linalg as tsl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    A = problem(k).tocsc()
    b = np.random.default_rng(0).standard_normal(A.shape[0])

    def solve(lib):
        M = lib.LinearOperator(A.shape, lib.spilu(A).solve)
        return getattr(lib, name)(A, b, M=M, rtol=1e-10)

    def run():
        with trnscipy.offload("xla"):
            return solve(tsl)

    (x, info), ops = _recorded(run)
    xs, info_s = solve(spl)
    assert ops == [] and info == info_s == 0 and x.dtype == np.float64
    assert np.linalg.norm(b - A @ x) / np.linalg.norm(b) <= 1e-10
    assert np.linalg.norm(x - xs) / np.linalg.norm(xs) <= 1e-8
    c = COUNTS[0]
    print(f"\nILU-{name} float64 n={A.shape[0]}: relres "
          f"{np.linalg.norm(b - A @ x) / np.linalg.norm(b):.1e} compilations "
          f"{c.compilations} executions {c.executions}")


@pytest.mark.xla
@pytest.mark.slow  # (the double-float refinement's compiles: minutes on 2 cores)
def test_lobpcg_float32_matrix_float64_block(emulate_neuron, monkeypatch):
    """lobpcg of a float32 A from a float64 X (SciPy's test_maxit): SciPy computes in
    float64, and so does the device (the double-float route: A's float32 values are exact
    pairs); the float32 torch loop ran on the float64 block for minutes."""
    import scipy.sparse as sp

    import trnscipy
    import trnscipy.sparse.linalg as tsl

    n = 50
    A = sp.diags_array(np.arange(1, n + 1, dtype=np.float32)).tocsr()
    X = np.random.default_rng(0).standard_normal((n, 3))
    ref, _ = spl.lobpcg(A, X.copy(), largest=False, maxiter=60, tol=1e-8)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with trnscipy.offload("xla"):
        w, V = tsl.lobpcg(A, X, largest=False, maxiter=60, tol=1e-8)
    assert w.dtype == V.dtype == np.float64
    np.testing.assert_allclose(np.sort(w), [1.0, 2.0, 3.0], rtol=1e-10)
    np.testing.assert_allclose(np.sort(w), np.sort(ref), rtol=1e-7)  # SciPy's own reach
    assert np.max(np.abs(A @ V - V * w)) <= 1e-8 * n
