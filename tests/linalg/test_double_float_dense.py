"""float64 solve_triangular, det and qr on an emulated Neuron device (issue 27): float32
device work plus double-float refinement (trnscipy/linalg/_refine_orth.py), paired
against SciPy's float64."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _on_neuron

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps
N = 32


@pytest.mark.xla
def test_solve_triangular_float64(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    a = np.triu(rng.standard_normal((N, N))) + 4 * np.eye(N)
    b = rng.standard_normal((N, 2))
    cases = [dict(), dict(lower=True), dict(trans=1), dict(trans="T", lower=True),
             dict(unit_diagonal=True)]

    def run():
        with trnscipy.offload("xla"):
            return [tl.solve_triangular(a if not kw.get("lower") else a.T, b, **kw)
                    for kw in cases] + [tl.solve_triangular(a, b[:, 0])]

    out, ops, aten, counts = _on_neuron(run)
    assert ops == [] and aten == 0
    for kw, x in zip(cases + [dict()], out, strict=True):
        m = a if not kw.get("lower") else a.T
        op = np.tril(m) if kw.get("lower") else np.triu(m)
        if kw.get("unit_diagonal"):
            op = op - np.diag(np.diag(op)) + np.eye(N)
        op = op.T if kw.get("trans") else op
        rhs = b if x.ndim == 2 else b[:, 0]
        want = sl.solve_triangular(m, rhs, **kw)
        # backward error at float64's level (the triangular solve is backward stable)
        berr = np.abs(op @ x - rhs).max() / (np.abs(op).sum(1).max() * np.abs(x).max())
        assert berr <= 4 * N * EPS, (kw, berr)
        np.testing.assert_allclose(x, want, rtol=0, atol=1e-12 * np.abs(want).max())
    a0 = a.copy()
    a0[7, 7] = 0
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match="diagonal 7"):
        tl.solve_triangular(a0, b)


@pytest.mark.xla
@pytest.mark.slow  # about 100 s of XLA compiles (each shape's LU and pivot-product loop)
def test_det_float64(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    mats = [rng.standard_normal((N, N)), rng.standard_normal((N, N)) * 2.0,
            rng.standard_normal((3, 3)), np.array([[2.5]])]
    singular = mats[0].copy()
    singular[:, 4] = 0

    def run():
        with trnscipy.offload("xla"):
            return [tl.det(m) for m in mats]

    out, ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    for m, d in zip(mats, out, strict=True):
        want = sl.det(m)
        # relative error of the refined LU's pivot product: cond(A) eps64-sized
        assert abs(d - want) <= 1e-13 * abs(want), (d, want)
    with trnscipy.offload("xla"):
        assert tl.det(singular) == 0.0 == sl.det(singular)
        # beyond float32's exponent range the device cannot hold the result: said
        with pytest.raises(ValueError, match="exponent range"):
            tl.det(mats[0] * 1e4)


@pytest.mark.xla
@pytest.mark.parametrize("modes", [
    ("economic", "r"),
    # every shape and Q width compiles its own graphs (about 45 s each on XLA CPU)
    pytest.param(("full", "economic"), marks=pytest.mark.slow)])
def test_qr_float64(modes, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(2)
    tall, wide = rng.standard_normal((20, 12)), rng.standard_normal((12, 20))
    cases = [(tall, modes[0]), (wide, modes[1])]

    def run():
        with trnscipy.offload("xla"):
            return [tl.qr(a, mode=mode) for a, mode in cases]

    out, ops, aten, counts = _on_neuron(run)
    assert ops == [] and aten == 0
    for (a, mode), got in zip(cases, out, strict=True):
        want = sl.qr(a, mode=mode)
        k = min(a.shape)
        r = got[-1]
        assert r.shape == want[-1].shape
        # LAPACK's sign convention survives the float32 QR: R and Q's first k columns
        # match SciPy's to float64 rounding
        np.testing.assert_allclose(r, want[-1], rtol=0, atol=1e-13 * np.abs(a).max())
        if mode == "r":
            continue
        q = got[0]
        assert q.shape == want[0].shape
        np.testing.assert_allclose(q[:, :k], want[0][:, :k], rtol=0, atol=1e-13)
        # the full Q's complement is any orthonormal basis: orthogonality, backward error
        assert np.abs(q.T @ q - np.eye(q.shape[1])).max() <= 2 * a.shape[0] * EPS
        assert np.abs(a - q @ r).max() <= 2 * a.shape[0] * EPS * np.abs(a).max()


@pytest.mark.xla
@pytest.mark.slow  # the QR graphs of another shape (about 45 s)
def test_qr_float64_rank_deficient_runs_on_host(emulate_neuron):
    """A rank-deficient matrix stops the refinement (R's triangle is singular): SciPy's
    QR of the exact values, announced, never the float32 factors."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(3)
    a = rng.standard_normal((20, 12))
    a[:, 5] = a[:, 2]
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="did not converge"):
        q, r = tl.qr(a, mode="economic")
    qs, rs = sl.qr(a, mode="economic")
    assert np.array_equal(q, qs) and np.array_equal(r, rs)


@pytest.mark.xla
def test_batched_float64_one_refinement(emulate_neuron, monkeypatch):
    """Stacks of float64 systems on Neuron: solve (broadcast b, structures), inv, cholesky,
    cho_solve and solve_triangular refine the whole batch at once (a few executions, not
    one per matrix), with no float64 op on the device; SciPy's batched results to float64
    accuracy, and its LinAlgError for a singular or indefinite member."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    n, batch = 9, 6
    a = rng.standard_normal((batch, n, n)) + 6 * np.eye(n)
    b = rng.standard_normal((batch, n, 2))
    spd = a @ a.transpose(0, 2, 1)
    cases = [("solve", (a, b), {}), ("solve", (a, b[0]), {}),
             ("solve", (spd, b), {"assume_a": "pos"}), ("solve", (a, b), {"transposed": True}),
             ("inv", (a,), {}), ("cholesky", (spd,), {"lower": True}),
             ("cho_solve", ((np.linalg.cholesky(spd), True), b), {}),
             ("solve_triangular", (np.triu(a), b), {"trans": 1})]
    for name, args, kw in cases:
        def run(name=name, args=args, kw=kw):
            with trnscipy.offload("xla"):
                return getattr(tl, name)(*args, **kw)

        out, ops, aten, counts = _on_neuron(run)
        want = getattr(sl, name)(*args, **kw)
        assert ops == [] and aten == 0, name
        assert counts.executions < batch, (name, counts)
        assert out.shape == want.shape and out.dtype == np.float64, name
        # both are float64-accurate: they differ by SciPy's own error, cond * eps
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-12 * np.abs(want).max(),
                                   err_msg=name)
    singular, indefinite = a.copy(), spd.copy()
    singular[3], indefinite[2] = 0, -np.eye(n)
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match=r"\[3\]"):
        tl.solve(singular, b)
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match="positive definite"):
        tl.cholesky(indefinite)
    upper = np.triu(a)
    upper[4, 7, 7] = upper[2, 5, 5] = 0  # SciPy's loop meets member 2 first: diagonal 5
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match="diagonal 5$"):
        tl.solve_triangular(upper, b, trans=1)


@pytest.mark.xla
def test_batched_float64_eigh_one_refinement(emulate_neuron, monkeypatch):
    """A stack of float64 eigh on Neuron is one refinement: the executions of one matrix,
    not one per matrix, no float64 op on the device; SciPy's eigenvalues per matrix to
    float64 accuracy (each matrix at its own scale), eigenvectors by residual and against
    SciPy's up to sign, subset_by_index per matrix as SciPy's."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(2)
    n = 8
    a = rng.standard_normal((3, n, n))
    a = (a + a.swapaxes(-1, -2)) * np.array([1.0, 1e3, 1e-3])[:, None, None]

    def run(fn):
        def call():
            with trnscipy.offload("xla"):
                return fn()
        return _on_neuron(call)

    _, _, _, one = run(lambda: tl.eigh(a[0]))
    (w, v), ops, aten, stack = run(lambda: tl.eigh(a))
    assert ops == [] and aten == 0
    assert stack.executions <= one.executions, (one, stack)
    w_sub, ops, aten, sub = run(lambda: tl.eigvalsh(a, subset_by_index=(2, 4)))
    assert ops == [] and aten == 0 and sub.executions <= one.executions, (one, sub)
    ws, vs = sl.eigh(a)
    assert w.shape == ws.shape and v.shape == vs.shape and w.dtype == np.float64
    for k in range(a.shape[0]):
        scale = np.abs(ws[k]).max()
        np.testing.assert_allclose(w[k], ws[k], rtol=0, atol=1e-13 * scale)
        assert np.abs(a[k] @ v[k] - v[k] * w[k]).max() <= 4 * n * EPS * scale
        assert np.abs(v[k].T @ v[k] - np.eye(n)).max() <= 4 * n * EPS
        np.testing.assert_allclose(np.abs(np.sum(v[k] * vs[k], 0)), 1, rtol=0, atol=1e-12)
    want = sl.eigvalsh(a, subset_by_index=(2, 4))
    assert w_sub.shape == want.shape == (3, 3)
    scale = np.abs(ws).max(-1, keepdims=True)
    np.testing.assert_allclose(w_sub / scale, want / scale, rtol=0, atol=1e-13)


@pytest.mark.xla
def test_batched_float64_lu_det_one_refinement(emulate_neuron, monkeypatch):
    """Stacks of float64 lu_factor, lu, det and lu_solve (b broadcast, as SciPy's) on
    Neuron are one refinement: the executions of the single matrix that needs the most
    Newton steps, not one refinement per matrix; no float64 op on the device.  SciPy's
    (LAPACK's) pivots per matrix, factors, solutions and determinants to float64
    accuracy; a singular member warned and its determinant 0, as SciPy's."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(4)
    n, batch = 8, 3
    a = rng.standard_normal((batch, n, n)) * np.array([1.0, 1e2, 1e-2])[:, None, None]
    b = rng.standard_normal((batch, n, 2))

    def run(fn):
        def call():
            with trnscipy.offload("xla"):
                return fn()
        return _on_neuron(call)

    singles = [run(lambda m=m: (tl.lu_factor(m), tl.det(m)))[3].executions for m in a]
    ((lu, piv), d), ops, aten, stack = run(lambda: (tl.lu_factor(a), tl.det(a)))
    assert ops == [] and aten == 0
    assert stack.executions <= max(singles), (singles, stack)
    lu_s, piv_s = sl.lu_factor(a)
    assert piv.dtype == np.int32 and np.array_equal(piv, piv_s)
    for k in range(batch):
        np.testing.assert_allclose(lu[k], lu_s[k], rtol=0, atol=1e-12 * np.abs(lu_s[k]).max())
    np.testing.assert_allclose(d, sl.det(a), rtol=1e-13, atol=0)

    _check_lu_solve(run, [((lu_s, piv_s), b, 0), ((lu_s, piv_s), b[0], 0)])
    (p, l, u), ops, aten, _ = run(lambda: tl.lu(a))
    assert ops == [] and aten == 0
    p_s, l_s, u_s = sl.lu(a)
    assert np.array_equal(p, p_s)
    for got, want in ((l, l_s), (u, u_s)):
        scale = np.abs(want).max((-2, -1), keepdims=True)
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=1e-12)

    singular = a.copy()
    singular[2][:, 4] = 0
    with pytest.warns(sl.LinAlgWarning) as want:
        sl.lu_factor(singular)
    with trnscipy.offload("xla"):
        with pytest.warns(sl.LinAlgWarning) as got:
            tl.lu_factor(singular)
        assert str(got[0].message) == str(want[0].message)
        d = tl.det(singular)
    assert d[2] == 0 == sl.det(singular)[2]
    np.testing.assert_allclose(d[:2], sl.det(a[:2]), rtol=1e-13, atol=0)


def _check_lu_solve(run, cases):
    """lu_solve of each (lu_and_piv, b, trans) case against SciPy's: a few executions for
    the batch (one refinement), float64 accuracy, no float64 op on the device."""
    import trnscipy.linalg as tl

    for lu_and_piv, rhs, trans in cases:
        x, ops, aten, counts = run(lambda f=lu_and_piv, r=rhs, t=trans: tl.lu_solve(
            f, r, trans=t))
        want = sl.lu_solve(lu_and_piv, rhs, trans=trans)
        assert ops == [] and aten == 0 and counts.executions <= 3, counts
        assert x.shape == want.shape and x.dtype == np.float64
        np.testing.assert_allclose(x, want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.xla
@pytest.mark.slow  # graphs of their own (about 20 s)
def test_batched_float64_lu_solve_transposed_and_broadcast_lu(emulate_neuron, monkeypatch):
    """A stack's transposed solve, and one factorization broadcast against a stack of
    right-hand sides (SciPy's batch rule): one refinement each, SciPy's solutions."""
    import trnscipy

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 8, 8)), rng.standard_normal((3, 8, 2))
    lu_s, piv_s = sl.lu_factor(a)

    def run(fn):
        def call():
            with trnscipy.offload("xla"):
                return fn()
        return _on_neuron(call)

    _check_lu_solve(run, [((lu_s, piv_s), b, 1), ((lu_s[0], piv_s[0]), b, 0)])


def _check_svd(a, got, full, compute_uv):
    """Paired with SciPy's float64 SVD: singular values to float64 rounding of s_max, U
    and V orthonormal and A = U S V^T to n eps, each singular vector SciPy's up to its
    sign (the singular values here are distinct and nonzero)."""
    want = sl.svd(a, full_matrices=full)
    s = got[1] if compute_uv else got
    tol = 4 * max(a.shape) * EPS
    assert s.shape == want[1].shape and s.dtype == np.float64
    np.testing.assert_allclose(s, want[1], rtol=0, atol=1e-14 * want[1][0])
    if not compute_uv:
        return
    u, vt = got[0], got[2]
    assert u.shape == want[0].shape and vt.shape == want[2].shape
    k = min(a.shape)
    assert np.abs(u.T @ u - np.eye(u.shape[1])).max() <= tol
    assert np.abs(vt @ vt.T - np.eye(vt.shape[0])).max() <= tol
    assert np.abs(a - (u[:, :k] * s) @ vt[:k]).max() <= tol * np.abs(a).max()
    sign = np.sign(np.sum(u[:, :k] * want[0][:, :k], 0))
    np.testing.assert_allclose(u[:, :k] * sign, want[0][:, :k], rtol=0, atol=1e-12)
    np.testing.assert_allclose(vt[:k] * sign[:, None], want[2][:k], rtol=0, atol=1e-12)


_SLOW_SVD = pytest.mark.slow  # compiles of other shapes


@pytest.mark.xla
@pytest.mark.parametrize("shape,full", [
    ((12, 20), True),  # wide, the full V's complement: about 30 s of compiles
    pytest.param((20, 12), False, marks=_SLOW_SVD),
    pytest.param((16, 16), True, marks=_SLOW_SVD),
    pytest.param((30, 5), False, marks=_SLOW_SVD)])
def test_svd_float64(shape, full, emulate_neuron, monkeypatch):
    """svd and svdvals of float64 data on Neuron: the refined QR, then the float32 eigh
    of [[0, R], [R^T, 0]] refined in double-float, all on the device (no float64 op
    there, no host fallback).  A stack (SciPy's batch rule) gives exactly its single
    calls' results: the double-float method runs on each matrix (_batch.PerMatrix)."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a = np.random.default_rng(4).standard_normal(shape)
    stack = np.stack([a, np.random.default_rng(5).standard_normal(shape)])

    def run():
        with trnscipy.offload("xla"):
            return (tl.svd(a, full_matrices=full), tl.svdvals(a),
                    tl.svd(stack, full_matrices=full), tl.svd(stack[1], full_matrices=full))

    (got, s, batch, second), ops, aten, counts = _on_neuron(run)
    assert ops == [] and aten == 0
    _check_svd(a, got, full, True)
    _check_svd(a, s, full, False)
    for i, single in enumerate((got, second)):
        for x, y in zip(batch, single, strict=True):
            np.testing.assert_array_equal(x[i], y)


@pytest.mark.xla
@pytest.mark.parametrize("case", ["repeated", "rank_deficient"])
def test_svd_float64_close_values_run_on_host(case, emulate_neuron):
    """Singular values closer than 2**-16 s_max (float32 cannot separate their vectors),
    or a rank-deficient rectangular matrix (its refined QR does not converge): SciPy's SVD
    of the exact values, announced, never the float32 start."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(5)
    u, _ = np.linalg.qr(rng.standard_normal((7, 4)))
    v, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    s = [3.0, 2.0, 2.0 + 1e-9, 1.0] if case == "repeated" else [3.0, 2.0, 1.0, 0.0]
    a = (u * s) @ v.T
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="closer than|QR of a rect"):
        got = tl.svd(a)
    want = sl.svd(a)
    assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))


@pytest.mark.xla
def test_null_space_orth_float64(emulate_neuron, monkeypatch):
    """null_space and orth of float64 data on Neuron through the refined svd (SciPy's own
    route), the rank by SciPy's rule on the exact singular values: paired with SciPy, no
    float64 op on the device, no host fallback.  (The svd graphs of test_svd_float64's
    12 x 20.)"""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a = np.random.default_rng(4).standard_normal((12, 20))

    def run():
        with trnscipy.offload("xla"):
            return tl.null_space(a), tl.orth(a)

    (ns, o), ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    want_ns, want_o = sl.null_space(a), sl.orth(a)
    assert ns.shape == want_ns.shape and o.shape == want_o.shape
    assert ns.dtype == o.dtype == np.float64
    tol = 4 * max(a.shape) * EPS
    # the null space: a basis SciPy's spans (its vectors share one singular value, 0)
    assert np.abs(a @ ns).max() <= tol * np.abs(a).max()
    assert np.abs(ns.T @ ns - np.eye(ns.shape[1])).max() <= tol
    assert np.abs(ns @ ns.T - want_ns @ want_ns.T).max() <= tol
    # orth: SciPy's columns up to sign (distinct singular values)
    sign = np.sign(np.sum(o * want_o, 0))
    np.testing.assert_allclose(o * sign, want_o, rtol=0, atol=1e-12)


@pytest.mark.xla
def test_solve_1x1_float64(emulate_neuron, monkeypatch):
    """SciPy's 1x1 solve (b / a, whatever b's length) in float64 on Neuron: the quotient
    from the exact triple parts, not a float64 division on the device (float32's)."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(3)
    a = np.array([[np.pi]])
    bs = [rng.standard_normal(5), rng.standard_normal((1, 3)), np.array([1 / 3, -7.25])]

    def run():
        with trnscipy.offload("xla"):
            return [tl.solve(a, b) for b in bs] + [tl.solve(np.atleast_2d(3), bs[2])]

    out, ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    for x, want in zip(out, [sl.solve(a, b) for b in bs] + [sl.solve(np.atleast_2d(3), bs[2])],
                       strict=True):
        np.testing.assert_allclose(x, want, rtol=2 * EPS, atol=0)


@pytest.mark.xla
def test_cholesky_float64_indefinite_in_float32(emulate_neuron):
    """A float64 matrix positive definite but indefinite once rounded to float32 (SciPy's
    test_sakurai_inverse met it through cholesky_banded): SciPy's factor, computed on the
    host and announced, not a LinAlgError; a matrix indefinite beyond float32 rounding
    keeps SciPy's LinAlgError."""
    import trnscipy
    import trnscipy.linalg as tl

    a = np.array([[1.0, 1 - 1e-10], [1 - 1e-10, 1.0]])  # float32: [[1, 1], [1, 1]]
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="float32 rounding"):
        c = tl.cholesky(a)
    np.testing.assert_allclose(c, sl.cholesky(a), rtol=1e-15, atol=0)
    b = a.copy()
    b[1, 1] = 1 - 1e-6  # indefinite in float64 too
    with pytest.raises(sl.LinAlgError):
        sl.cholesky(b)
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match="positive definite"):
        tl.cholesky(b)
