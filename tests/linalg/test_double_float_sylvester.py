"""solve_sylvester and the Lyapunov solvers on an emulated Neuron device (issue 27): the
real Bartels-Stewart (real Schur forms, no complex tensor) in float32, and float64 by
double-float refinement, paired against SciPy with no host fallback and no float64 op on
the device."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import linalg_on_neuron

torch = pytest.importorskip("torch")

N = 6


def _pair(n, rng, shift=0.0):
    """A real n x n matrix with complex eigenvalue pairs (2x2 blocks in its real Schur
    form) and one real eigenvalue when n is odd, real parts of the sign of ``shift``."""
    blocks = []
    for k in range(n // 2):
        re, im = shift * (1 + 0.5 * k), 1.0 + k
        blocks.append(np.array([[re, im], [-im, re]]))
    if n % 2:
        blocks.append(np.array([[shift * 0.75]]))
    d = sl.block_diag(*blocks)
    s = rng.standard_normal((n, n)) + n * np.eye(n)
    return s @ d @ np.linalg.inv(s)


_run = linalg_on_neuron


def _backward(a, b, q, x):
    """Backward error of A X + X B = Q (Frobenius norms)."""
    resid = np.linalg.norm(a @ x + x @ b - q)
    return resid / ((np.linalg.norm(a) + np.linalg.norm(b)) * np.linalg.norm(x)
                    + np.linalg.norm(q))


def _close(got, want, rtol=1e-12):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == np.float64, (got.shape, got.dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.abs(want).max())


@pytest.mark.xla
def test_sylvester_float32_real_blocks(emulate_neuron, monkeypatch):
    """float32: on the device (strict), 1x1 and 2x2 blocks in both Schur forms, SciPy's
    dtype, backward error at float32 level."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    for n, m in ((N, N - 1), (3, 1)):
        a = _pair(n, rng, 1.0).astype(np.float32)
        b = _pair(m, rng, 2.0).astype(np.float32)
        q = rng.standard_normal((n, m)).astype(np.float32)
        x = _run("solve_sylvester", a, b, q)
        want = sl.solve_sylvester(a, b, q)
        assert x.dtype == want.dtype == np.float32 and x.shape == want.shape
        assert _backward(a, b, q, x.astype(np.float64)) <= 50 * np.finfo(np.float32).eps


@pytest.mark.xla
def test_sylvester_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    a, b = _pair(N, rng, 1.0), _pair(N - 1, rng, 2.0)
    q = rng.standard_normal((N, N - 1))
    x = _run("solve_sylvester", a, b, q)
    want = sl.solve_sylvester(a, b, q)
    _close(x, want)
    assert _backward(a, b, q, x) <= 10 * np.finfo(np.float64).eps


@pytest.mark.xla
def test_lyapunov_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(2)
    a = _pair(N, rng, -1.0)  # stable: complex pairs, 2x2 blocks
    q = rng.standard_normal((N, N))
    q = q + q.T
    for name in ("solve_continuous_lyapunov", "solve_lyapunov"):
        _close(_run(name, a, q), sl.solve_continuous_lyapunov(a, q))
    d = a / 4  # spectral radius below 1
    for method in ("direct", "bilinear"):
        _close(_run("solve_discrete_lyapunov", d, q, method=method),
               sl.solve_discrete_lyapunov(d, q, method=method))
    # float32 input: SciPy computes (and returns) float64 there
    d32, q32 = d.astype(np.float32), q.astype(np.float32)
    _close(_run("solve_discrete_lyapunov", d32, q32),
           sl.solve_discrete_lyapunov(d32, q32))


@pytest.mark.xla
def test_lyapunov_float32(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(3)
    a = _pair(N, rng, -1.0).astype(np.float32)
    q = rng.standard_normal((N, N)).astype(np.float32)
    x = _run("solve_continuous_lyapunov", a, q)
    assert x.dtype == np.float32
    assert _backward(a, a.T, q, x.astype(np.float64)) <= 50 * np.finfo(np.float32).eps


@pytest.mark.xla
def test_sylvester_complex_announced(emulate_neuron):
    """Complex input: the complex Schur route, on the host with a DeviceFallbackWarning."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    b, q = rng.standard_normal((2, 2)), rng.standard_normal((3, 2))
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning):
        x = tl.solve_sylvester(a, b, q)
    _close(x.real, sl.solve_sylvester(a, b, q).real)


@pytest.mark.xla
def test_sylvester_singular_and_empty(emulate_neuron, monkeypatch):
    """A and -B share an eigenvalue: SciPy's trsyl perturbs its pivots and returns a large
    finite array (no exception); so does the device (float64: with a LinAlgWarning, the
    refinement cannot converge).  Empty input: SciPy's empty result."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a = np.diag([1.0, 2.0, 3.0])
    b = np.diag([-2.0, 5.0])
    q = np.ones((3, 2))
    want = sl.solve_sylvester(a, b, q)
    assert np.isfinite(want).all()
    with pytest.warns(sl.LinAlgWarning, match="did not converge"):
        x = _run("solve_sylvester", a, b, q)
    assert x.shape == want.shape and x.dtype == want.dtype and np.isfinite(x).all()
    # the solvable rows (1 and 3) as SciPy's
    np.testing.assert_allclose(x[[0, 2]], want[[0, 2]], rtol=1e-12)
    a32, b32, q32 = a.astype(np.float32), b.astype(np.float32), q.astype(np.float32)
    x = _run("solve_sylvester", a32, b32, q32)
    want = sl.solve_sylvester(a32, b32, q32)
    assert x.dtype == want.dtype and np.isfinite(x).all()
    np.testing.assert_allclose(x[[0, 2]], want[[0, 2]], rtol=1e-5)
    for a0, b0, q0 in ((np.zeros((0, 0)), np.eye(2), np.zeros((0, 2))),
                       (np.eye(2, dtype=np.float32), np.zeros((0, 0), np.float32),
                        np.zeros((2, 0), np.float32))):
        got, ref = _run("solve_sylvester", a0, b0, q0), sl.solve_sylvester(a0, b0, q0)
        assert got.shape == ref.shape and got.dtype == ref.dtype


@pytest.mark.xla
@pytest.mark.slow  # about 140 s of XLA compiles (the float32 sign iteration, eigvalsh, df solves)
def test_continuous_are_float64(emulate_neuron, monkeypatch):
    """float64 (and float32 input, which SciPy computes in float64): the float32 sign
    function start, then double-float Newton steps; e and s through the double-float
    standard form; SciPy's errors for a non-symmetric q and a singular r."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(5)
    n = 4
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, 2))
    q, r = np.eye(n), np.eye(2)
    _close(_run("solve_continuous_are", a, b, q, r), sl.solve_continuous_are(a, b, q, r))
    e = np.eye(n) + 0.1 * rng.standard_normal((n, n))
    s = 0.1 * rng.standard_normal((n, 2))
    _close(_run("solve_continuous_are", a, b, q, r, e, s),
           sl.solve_continuous_are(a, b, q, r, e, s))
    f32 = [x.astype(np.float32) for x in (a, b, q, r)]
    _close(_run("solve_continuous_are", *f32), sl.solve_continuous_are(*f32))
    # asymmetric by 1e-9 (below float32's resolution: seen in the low parts) and singular
    for bad, match in (((a, b, q + 1e-9 * np.triu(np.ones((n, n)), 1), r), "symmetric"),
                       ((a, b, q, np.diag([1.0, 0.0])), "singular")):
        with pytest.raises(ValueError, match=match):
            sl.solve_continuous_are(*bad)
        with pytest.raises(ValueError, match=match):
            _run("solve_continuous_are", *bad)


@pytest.mark.xla
@pytest.mark.slow  # 10-150 s of XLA compiles
def test_continuous_are_far_start_goes_to_host(emulate_neuron):
    """SciPy's CAREX case 12 (entries near 1e6): the float32 X0 is too far for the frozen
    Jacobian and the double-float Newton steps diverge; SciPy's X on the host, announced
    (the steps overflowed and an all-NaN X came back without a word)."""
    import trnscipy
    import trnscipy.linalg as tl

    a = np.array([[0, 0.4, 0, 0], [0, 0, 0.345, 0], [0, -0.524e6, -0.465e6, 0.262e6],
                  [0, 0, 0, -1e6]])
    b, q, r = np.array([[0, 0, 0, 1e6]]).T, np.diag([1.0, 0, 1, 0]), np.eye(1)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="did not converge"), \
            trnscipy.offload("xla"):
        got = tl.solve_continuous_are(a, b, q, r)
    _close(got, sl.solve_continuous_are(a, b, q, r))


@pytest.mark.xla
@pytest.mark.slow  # about 2 minutes of XLA compiles (the float32 doubling, df solves)
def test_discrete_are_float64(emulate_neuron, monkeypatch):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(6)
    n = 4
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, 2))
    q, r = np.eye(n), np.eye(2)
    _close(_run("solve_discrete_are", a, b, q, r), sl.solve_discrete_are(a, b, q, r))
    e = np.eye(n) + 0.1 * rng.standard_normal((n, n))
    s = 0.1 * rng.standard_normal((n, 2))
    _close(_run("solve_discrete_are", a, b, q, r, e, s),
           sl.solve_discrete_are(a, b, q, r, e, s))


@pytest.mark.xla
def test_sylvester_float64_stack(emulate_neuron, monkeypatch):
    """A float64 stack as one refinement (strict): B's 2x2 blocks where the matrices'
    differ (a real spectrum, complex pairs), scales 1e6 apart; each equation's solution
    SciPy's, and the discrete 'bilinear' method through it."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(4)
    a = np.stack([_pair(N, rng, 1.0), _pair(N, rng, 1.0)])
    b = np.stack([_pair(N - 1, rng, 2.0), np.triu(rng.random((N - 1, N - 1))) + np.eye(N - 1)])
    q = rng.standard_normal((2, N, N - 1)) * np.array([1e3, 1e-3])[:, None, None]
    x = _run("solve_sylvester", a, b, q)
    want = sl.solve_sylvester(a, b, q)
    for i in range(2):
        _close(x[i], want[i])
    d = np.stack([_pair(N, rng, -1.0), _pair(N, rng, -2.0)]) / 8
    c = rng.standard_normal((2, N, N))
    x = _run("solve_discrete_lyapunov", d, c, method="bilinear")
    want = sl.solve_discrete_lyapunov(d, c, method="bilinear")
    for i in range(2):
        _close(x[i], want[i])


@pytest.mark.xla
@pytest.mark.slow  # about 2 minutes of XLA compiles
@pytest.mark.parametrize("fn", ["solve_continuous_are", "solve_discrete_are"])
def test_riccati_float64_stack(fn, emulate_neuron, monkeypatch):
    """A float64 stack (strict): the float32 start and the double-float Newton steps for
    the whole stack, each matrix its own stop (q scaled 1e3 apart); each X SciPy's; SciPy's
    error where one matrix's q is not symmetric (seen in the low parts only)."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 4, 4))
    a = a - 3 * np.eye(4) if fn == "solve_continuous_are" else a / 4
    b, r = rng.standard_normal((3, 4, 2)), np.eye(2)
    q = np.eye(4) * np.array([1.0, 1e3, 1e-2])[:, None, None]
    x, want = _run(fn, a, b, q, r), getattr(sl, fn)(a, b, q, r)
    for i in range(3):
        _close(x[i], want[i], rtol=1e-13)
    q[1, 0, 1] += 1e-9
    with pytest.raises(ValueError, match="symmetric"):
        _run(fn, a, b, q, r)
