"""float64 pinvh, orthogonal_procrustes, subspace_angles, coshm, sinhm, tanhm, cosm, sinm,
tanm and expm_frechet on an emulated Neuron device (issue 27): composed from the double-float
eigh, svd, orth, expm and solve, paired against SciPy's float64 with no host fallback
and no float64 op on the device."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import linalg_on_neuron

torch = pytest.importorskip("torch")

N = 6


_run = linalg_on_neuron


def _close(got, want, rtol=1e-13):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.abs(want).max())


@pytest.mark.xla
@pytest.mark.slow  # 30-40 s of compiles; conformance runs pinvh float64 on xla-neuron in CI
def test_pinvh_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((N, N)))
    a = q @ np.diag([3.0, -2.0, 1.5, 1.0, -0.75, 0.5]) @ q.T  # symmetric indefinite
    x, rank = _run("pinvh", a, return_rank=True)
    want, want_rank = sl.pinvh(a, return_rank=True)
    assert rank == want_rank == N
    _close(x, want)
    # an upper triangle only (lower=False): SciPy reads that one
    _close(_run("pinvh", np.triu(a), lower=False), sl.pinvh(np.triu(a), lower=False))
    # rank-deficient: SciPy's default cutoff (5 eps max|w|) separates the zero eigenvalues
    g = np.random.default_rng(7).standard_normal((5, 3))
    x, rank = _run("pinvh", g @ g.T, return_rank=True)
    want, want_rank = sl.pinvh(g @ g.T, return_rank=True)
    assert rank == want_rank == 3
    _close(x, want, rtol=1e-12)  # (SciPy's own error: eps cond of the kept part)
    with pytest.raises(ValueError, match="positive"):
        _run("pinvh", a, atol=-1.0)


@pytest.mark.xla
def test_orthogonal_procrustes_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((N + 2, N)), rng.standard_normal((N + 2, N))
    r, scale = _run("orthogonal_procrustes", a, b)
    r0, scale0 = sl.orthogonal_procrustes(a, b)
    _close(r, r0)
    assert abs(scale - scale0) <= 1e-13 * abs(scale0)
    with pytest.raises(ValueError, match="shapes"):
        _run("orthogonal_procrustes", a, b[:, :3])


@pytest.mark.xla
@pytest.mark.slow  # about 130 s of XLA compiles (orth's svd, the eigh, the angles' loops)
def test_subspace_angles_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 3))
    b = a ** 2  # two 3-D subspaces of R^5: they intersect (one zero angle)
    got = _run("subspace_angles", a, b)
    want = sl.subspace_angles(a, b)
    # SciPy's zero angle is arccos(1 - eps) ~ 1.5e-8, its rounding: absolute sqrt(eps);
    # the others to float64 accuracy
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-13)
    assert abs(got[2] - want[2]) <= 3e-8


@pytest.mark.xla
@pytest.mark.slow  # about 50 s of XLA compiles (expm's graphs, the solve's); the conformance
# suite's xla-neuron lane runs its float64 cases in CI
def test_hyperbolic_float64(emulate_neuron, monkeypatch):
    """coshm, sinhm from two double-float expm (of A and -A); tanhm through the
    double-float solve.  One shape: the expm and solve graphs are shared."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((N, N)) / 2
    for name in ("coshm", "sinhm", "tanhm"):
        _close(_run(name, a), getattr(sl, name)(a), rtol=2e-13)
    with pytest.raises(ValueError, match="square"):
        _run("coshm", a[:3])


@pytest.mark.xla
@pytest.mark.slow  # about a minute of XLA compiles (expm of the 2n block, the solve); the
# conformance suite's xla-neuron lane runs their float64 cases in CI
def test_trigonometric_float64(emulate_neuron, monkeypatch):
    """cosm, sinm, tanm of a real matrix in real arithmetic: the double-float expm of
    [[0, -A], [A, 0]] (SciPy's expm(iA) needs complex arithmetic, which Neuron lacks);
    tanm through the double-float solve; a stack as its single calls."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(6)
    a = rng.standard_normal((N, N)) / 2
    for name in ("cosm", "sinm", "tanm"):
        _close(_run(name, a), getattr(sl, name)(a), rtol=2e-13)
    stack = np.stack([a, a.T])
    _close(_run("cosm", stack), sl.cosm(stack), rtol=2e-13)


@pytest.mark.xla
@pytest.mark.slow  # about 45 s of XLA compiles (expm of the 2n block); the conformance
# suite's xla-neuron lane runs its float64 cases in CI
def test_expm_frechet_float64(emulate_neuron, monkeypatch):
    """SciPy's block method in double-float: expm([[A, E], [0, A]]); both methods, both
    return forms, against SciPy's (its SPS and its block method agree to rounding)."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(3)
    a, e = rng.standard_normal((N, N)) / 2, rng.standard_normal((N, N))
    ea, l0 = sl.expm_frechet(a, e)
    got_ea, got_l = _run("expm_frechet", a, e)
    _close(got_ea, ea, rtol=2e-13)
    _close(got_l, l0, rtol=2e-13)
    _close(_run("expm_frechet", a, e, method="blockEnlarge", compute_expm=False), l0,
           rtol=2e-13)
    with pytest.raises(ValueError, match="same shape"):
        _run("expm_frechet", a, e[:3, :3])


def _spd_band(n):
    """An SPD pentadiagonal matrix in upper band storage, and the dense matrix."""
    ab = np.zeros((3, n))
    ab[0, 2:], ab[1, 1:], ab[2] = 0.5, -1.0 - 0.1 * np.arange(n - 1), 5.0 + np.arange(n)
    dense = np.diag(ab[2]) + np.diag(ab[1, 1:], 1) + np.diag(ab[0, 2:], 2)
    return ab, dense + np.triu(dense, 1).T


@pytest.mark.xla
@pytest.mark.slow  # about 60 s of XLA compiles (solve, cholesky, cho_solve); the conformance
# suite's xla-neuron lane runs its float64 cases in CI
def test_banded_solvers_float64(emulate_neuron, monkeypatch):
    """solve_banded, solveh_banded, cholesky_banded, cho_solve_banded: the band expanded
    exactly on the device, then the dense double-float solve and cholesky."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(4)
    ab, a = _spd_band(N)
    lower_ab = np.zeros_like(ab)  # the same matrix in lower storage
    lower_ab[0], lower_ab[1, :-1], lower_ab[2, :-2] = ab[2], ab[1, 1:], ab[0, 2:]
    gen = rng.standard_normal((4, N)) + np.array([[0], [0], [6], [0]])  # (2, 1) band
    b = rng.standard_normal((N, 2))
    _close(_run("solve_banded", (2, 1), gen, b), sl.solve_banded((2, 1), gen, b))
    _close(_run("solve_banded", (2, 1), gen, b[:, 0]), sl.solve_banded((2, 1), gen, b[:, 0]))
    _close(_run("solveh_banded", ab, b), sl.solveh_banded(ab, b))
    _close(_run("solveh_banded", lower_ab, b[:, 0], lower=True),
           sl.solveh_banded(lower_ab, b[:, 0], lower=True))
    cb = _run("cholesky_banded", ab)
    _close(cb, sl.cholesky_banded(ab))
    _close(_run("cholesky_banded", lower_ab, lower=True),
           sl.cholesky_banded(lower_ab, lower=True))
    _close(_run("cho_solve_banded", (cb, False), b), sl.cho_solve_banded((cb, False), b))
    indefinite = ab.copy()
    indefinite[2, 3] = -1.0
    with pytest.raises(sl.LinAlgError):
        _run("solveh_banded", indefinite, b)
    with pytest.raises(sl.LinAlgError):
        _run("cholesky_banded", indefinite)


@pytest.mark.xla
@pytest.mark.slow  # about 110 s of XLA compiles (eigh, its subsets); the conformance
# suite's xla-neuron lane runs its float64 cases in CI
def test_banded_eigen_float64(emulate_neuron, monkeypatch):
    """eig_banded, eigvals_banded, eigh_tridiagonal, eigvalsh_tridiagonal through the
    double-float eigh of the expanded matrix; SciPy's select options."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    ab, a = _spd_band(N)
    d, e = ab[2].copy(), ab[1, 1:].copy()
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)

    def check_pairs(got, want, m):
        w, v = got
        _close(w, want[0])
        # eigenvectors by residual and orthonormality (signs are free)
        assert np.abs(m @ v - v * w).max() <= 1e-13 * np.abs(w).max()
        assert np.abs(v.T @ v - np.eye(v.shape[1])).max() <= 1e-13

    check_pairs(_run("eig_banded", ab), sl.eig_banded(ab), a)
    check_pairs(_run("eig_banded", ab, select="i", select_range=(1, 3)),
                sl.eig_banded(ab, select="i", select_range=(1, 3)), a)
    _close(_run("eigvals_banded", ab, select="v", select_range=(4.0, 8.0)),
           sl.eigvals_banded(ab, select="v", select_range=(4.0, 8.0)))
    check_pairs(_run("eigh_tridiagonal", d, e), sl.eigh_tridiagonal(d, e), t)
    _close(_run("eigvalsh_tridiagonal", d, e, select="i", select_range=(0, 2)),
           sl.eigvalsh_tridiagonal(d, e, select="i", select_range=(0, 2)))
    with pytest.raises(ValueError):
        _run("eigh_tridiagonal", d, e[:2])


@pytest.mark.xla
def test_banded_past_the_cap_runs_on_host(emulate_neuron):
    """Past the dense cap (n > 2048) SciPy's band solver on the exact host values,
    announced."""
    import trnscipy
    import trnscipy.linalg as tl

    n = 2049
    ab = np.vstack([np.full(n, -1.0), np.full(n, 4.0), np.full(n, -1.0)])
    b = np.ones(n)
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="n > 2048"):
        x = tl.solve_banded((1, 1), ab, b)
    assert np.array_equal(x, sl.solve_banded((1, 1), ab, b))


@pytest.mark.xla
@pytest.mark.slow  # about 45 s of XLA compiles (the double-float qr's graphs)
def test_rq_qr_multiply_float64(emulate_neuron, monkeypatch):
    """rq: the double-float qr of the reversed transpose (data movement around it);
    qr_multiply: its Q times c as a double-float product."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(5)
    a, c = rng.standard_normal((N, N)), rng.standard_normal((N, 2))
    r, q = _run("rq", a)
    r0, q0 = sl.rq(a)
    _close(r, r0)  # LAPACK's signs survive the float32 start, as in qr's tests
    _close(q, q0)
    for mode, cc in (("left", c), ("right", c.T)):
        got, rr = _run("qr_multiply", a, cc, mode=mode)
        want, rw = sl.qr_multiply(a, cc, mode=mode)
        _close(got, want)
        _close(rr, rw)
