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
    """Stacks of float64 systems on Neuron: solve (broadcast b, structures), inv, cholesky
    and cho_solve refine the whole batch at once (a few executions, not one per matrix),
    with no float64 op on the device; SciPy's batched results to float64 accuracy, and its
    LinAlgError for a singular or indefinite member."""
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
             ("cho_solve", ((np.linalg.cholesky(spd), True), b), {})]
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


@pytest.mark.xla
def test_batched_float64_eigh_is_its_single_calls(emulate_neuron, monkeypatch):
    """A stack of float64 eigh on Neuron runs the device method per matrix: the batch is
    its single calls exactly (SciPy's test_batch.py compares them), on the device."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 8, 8))
    a = a + a.swapaxes(-1, -2)

    def run():
        with trnscipy.offload("xla"):
            return (tl.eigh(a), tl.eigvalsh(a, subset_by_index=(2, 4)),
                    [tl.eigh(m) for m in a.reshape(-1, 8, 8)])

    ((w, v), w_sub, single), ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    assert w.shape == (2, 3, 8) and v.shape == (2, 3, 8, 8) and w_sub.shape == (2, 3, 3)
    np.testing.assert_array_equal(w.reshape(-1, 8), np.stack([s[0] for s in single]))
    np.testing.assert_array_equal(v.reshape(-1, 8, 8), np.stack([s[1] for s in single]))
    np.testing.assert_allclose(w, sl.eigh(a)[0], rtol=0, atol=1e-13 * np.abs(w).max())
    np.testing.assert_allclose(w_sub, sl.eigvalsh(a, subset_by_index=(2, 4)), rtol=0,
                               atol=1e-13 * np.abs(w).max())


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
    there, no host fallback)."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a = np.random.default_rng(4).standard_normal(shape)

    def run():
        with trnscipy.offload("xla"):
            return tl.svd(a, full_matrices=full), tl.svdvals(a)

    (got, s), ops, aten, counts = _on_neuron(run)
    assert ops == [] and aten == 0
    _check_svd(a, got, full, True)
    _check_svd(a, s, full, False)


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
