"""float64 matrix_balance, solve_circulant and expm_cond on an emulated Neuron device
(issue 27): float32 arithmetic only (triple-float norms and DFTs, double-float
compositions), paired against SciPy's float64 under TRNSCIPY_STRICT=1 with no host
fallback and no float64 op on the device.  Small shapes shared between cases: XLA
compiles few graphs."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import linalg_on_neuron

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps


def _run(monkeypatch, name, *args, **kw):
    """trnscipy.linalg.<name> offloaded to the emulated Neuron device, strict, its float64
    ops and aten fallbacks checked; NumPy results."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    return linalg_on_neuron(name, *args, **kw)


def _balance_case(rng, n=6):
    """Entries over 16 orders of magnitude (scaling happens), full 53-bit mantissas, a
    row with only its diagonal (the permutation isolates it)."""
    a = rng.standard_normal((n, n)) * np.exp(rng.uniform(-18, 18, (n, n)))
    a[2, :] = 0
    a[2, 2] = 1 / 3
    return a


def _balance_same(got, want, separate=False):
    assert got[0].dtype == np.float64
    np.testing.assert_array_equal(got[0], want[0])
    if separate:
        np.testing.assert_array_equal(got[1][0], want[1][0])
        np.testing.assert_array_equal(got[1][1], want[1][1])
    else:
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.xla
def test_matrix_balance_float64(emulate_neuron, monkeypatch):
    """Powers-of-two scaling: SciPy's balanced matrix, scaling and permutation bitwise."""
    a = _balance_case(np.random.default_rng(27))
    for kw in ({}, {"separate": True}):
        _balance_same(_run(monkeypatch, "matrix_balance", a, **kw),
                      sl.matrix_balance(a, **kw), **kw)
    # the scaling did something (not a test that passes on the identity)
    assert not np.array_equal(sl.matrix_balance(a)[0], a)
    for x in (np.array([[2.5]]), np.zeros((0, 0))):
        _balance_same(_run(monkeypatch, "matrix_balance", x), sl.matrix_balance(x))
    with pytest.raises(ValueError, match="square"):
        _run(monkeypatch, "matrix_balance", a[:3])


@pytest.mark.xla
@pytest.mark.slow  # 10-20 s more of XLA compiles (the unpermuted sweeps' graphs)
def test_matrix_balance_float64_options(emulate_neuron, monkeypatch):
    """permute=False, scale=False, and a batch (SciPy loops over it)."""
    rng = np.random.default_rng(27)
    a = _balance_case(rng)
    for kw in ({"permute": False}, {"scale": False}):
        _balance_same(_run(monkeypatch, "matrix_balance", a, **kw),
                      sl.matrix_balance(a, **kw))
    stack = np.stack([a, _balance_case(rng)])
    _balance_same(_run(monkeypatch, "matrix_balance", stack), sl.matrix_balance(stack))


N = 8  # solve_circulant: one order for every case (its graphs compile once per shape)


@pytest.mark.xla
@pytest.mark.slow  # about 50 s of XLA compiles (four triple-float DFT graphs); the
# conformance suite's xla-neuron lane runs a float64 case in CI
def test_solve_circulant_float64(emulate_neuron, monkeypatch):
    rng = np.random.default_rng(28)
    c = rng.standard_normal(N) * np.exp(rng.uniform(-3, 3, N))
    b = rng.standard_normal(N)
    got, want = _run(monkeypatch, "solve_circulant", c, b), sl.solve_circulant(c, b)
    assert got.dtype == np.float64 and got.shape == want.shape
    # the solution to float64 accuracy (SciPy's own error: eps cond)
    cond = np.abs(np.fft.fft(c)).max() / np.abs(np.fft.fft(c)).min()
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * EPS * cond * np.abs(want).max())
    # exactly singular (fft(ones) has n - 1 zeros): SciPy's LinAlgError, or its
    # least-squares solution with the near-zero modes left out
    ones = np.ones(N)
    with pytest.raises(np.linalg.LinAlgError, match="near singular"):
        _run(monkeypatch, "solve_circulant", ones, b)
    got = _run(monkeypatch, "solve_circulant", ones, b, singular="lstsq")
    want = sl.solve_circulant(ones, b, singular="lstsq")
    np.testing.assert_allclose(got, want, rtol=4 * EPS)
    # a given tol decides the same modes as SciPy's (|fft(c)| straddles it)
    tol = np.sort(np.abs(np.fft.fft(c)))[2]
    got = _run(monkeypatch, "solve_circulant", c, b, singular="lstsq", tol=tol)
    want = sl.solve_circulant(c, b, singular="lstsq", tol=tol)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * EPS * cond * np.abs(want).max())
    assert not np.allclose(want, sl.solve_circulant(c, b))  # (the tol mattered)


@pytest.mark.xla
@pytest.mark.slow  # about 40 s of XLA compiles (the stacked shapes' DFT graphs)
def test_solve_circulant_float64_stacked(emulate_neuron, monkeypatch):
    """b with several columns (baxis 0) and a stack of c (SciPy broadcasts them);
    outaxis."""
    rng = np.random.default_rng(29)
    c = rng.standard_normal((2, N))
    b = rng.standard_normal((N, 2))
    for kw in ({}, {"outaxis": -1}):
        got = _run(monkeypatch, "solve_circulant", c, b, **kw)
        want = sl.solve_circulant(c, b, **kw)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max())


@pytest.mark.xla
@pytest.mark.slow  # about 100 s of XLA compiles (expm of order 2 n^2 = 18, the refined
# svdvals of K, expm of A); the conformance suite's xla-neuron lane runs a float64 case
def test_expm_cond_float64(emulate_neuron, monkeypatch):
    """One double-float expm of the Kronecker block, the refined 2-norm, the quotient in
    triple-float; against SciPy's (within its own and the double-float expm's rounding:
    expm's squarings leave about 1e-14 relative)."""
    rng = np.random.default_rng(30)
    a = rng.standard_normal((3, 3))
    got, want = _run(monkeypatch, "expm_cond", a), sl.expm_cond(a)
    assert np.asarray(got).dtype == np.float64 and np.ndim(got) == 0
    assert abs(got - want) <= 2e-13 * want
    with pytest.raises(ValueError, match="square"):
        _run(monkeypatch, "expm_cond", a[:2])
    with pytest.raises(ValueError):  # SciPy's error for the empty matrix
        _run(monkeypatch, "expm_cond", np.zeros((0, 0)))


@pytest.mark.xla
@pytest.mark.slow  # about 90 s of XLA compiles (the double-float reflector loop's body,
# with and without Q); the conformance suite's xla-neuron lane runs a float64 case
def test_hessenberg_float64(emulate_neuron, monkeypatch):
    """Householder reduction in double-float: SciPy's H and Q (LAPACK's reflector signs)
    to double-float rounding (2**-48 per operation, n steps: about 1e-14 of ||A||, where a
    sign convention differing would give O(1)), Q orthogonal and Q H Q^T = A to that
    accuracy; a batch (SciPy loops), and the orders SciPy returns as they are."""
    rng = np.random.default_rng(31)
    a = rng.standard_normal((6, 6))
    scale = np.abs(a).max()
    h = _run(monkeypatch, "hessenberg", a)
    assert h.dtype == np.float64
    np.testing.assert_allclose(h, sl.hessenberg(a), rtol=0, atol=1e-13 * scale)
    assert (np.tril(h, -2) == 0).all()
    h, q = _run(monkeypatch, "hessenberg", a, calc_q=True)
    h0, q0 = sl.hessenberg(a, calc_q=True)
    np.testing.assert_allclose(h, h0, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(q, q0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(q.T @ q, np.eye(6), rtol=0, atol=1e-14)
    np.testing.assert_allclose(q @ h @ q.T, a, rtol=0, atol=1e-13 * scale)
    stack = np.stack([a, a.T])
    np.testing.assert_allclose(_run(monkeypatch, "hessenberg", stack),
                               sl.hessenberg(stack), rtol=0, atol=1e-13 * scale)
    for x in (np.array([[1.5]]), np.arange(4.0).reshape(2, 2) / 3, np.zeros((0, 0))):
        got, want = _run(monkeypatch, "hessenberg", x, calc_q=True), sl.hessenberg(
            x, calc_q=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def _ldl_close(got, want, scale):
    """SciPy's factors to double-float rounding and its permutation exactly (the same
    pivots: a different choice changes the factors at O(1))."""
    lu, d, perm = got
    assert lu.dtype == d.dtype == np.float64
    np.testing.assert_array_equal(perm, want[2])
    np.testing.assert_allclose(lu, want[0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(d, want[1], rtol=0, atol=1e-13 * scale)
    assert ((d != 0) == (want[1] != 0)).all()  # 2x2 blocks where SciPy's are


@pytest.mark.xla
@pytest.mark.slow  # about 12 s of XLA compiles (two sizes, both forms, a batch); the
# conformance suite's xla-neuron lane runs a float64 case in CI
def test_ldl_float64(emulate_neuron, monkeypatch):
    """Bunch-Kaufman in double-float: SciPy's pivots (1x1 with and without interchange,
    2x2 blocks), both forms, a batch, singular, 1x1, empty."""
    rng = np.random.default_rng(32)
    a = rng.standard_normal((5, 5))
    a = a + a.T
    a[0, 0] = 1e-3  # a small pivot: interchanges
    z = np.array([[0, 1, 2, 3, 1], [1, 0, 4, 5, 2], [2, 4, 0, 6, 3], [3, 5, 6, 0, 4],
                  [1, 2, 3, 4, 0]]) / 7  # zero diagonal: 2x2 pivots
    assert (sl.ldl(z)[1] != np.diag(np.diag(sl.ldl(z)[1]))).any()
    for m in (a, z):
        for lower in (True, False):
            _ldl_close(_run(monkeypatch, "ldl", m, lower=lower), sl.ldl(m, lower=lower),
                       np.abs(m).max())
    _ldl_close(_run(monkeypatch, "ldl", np.stack([a, z])), sl.ldl(np.stack([a, z])),
               np.abs(a).max())
    for m in (np.zeros((5, 5)), np.array([[-2.5]]), np.zeros((0, 0))):
        _ldl_close(_run(monkeypatch, "ldl", m), sl.ldl(m), 1.0)
    with pytest.raises(ValueError, match="square"):
        _run(monkeypatch, "ldl", a[:3])


@pytest.mark.xla
def test_solve_circulant_float64_large_on_host(emulate_neuron):
    """Beyond the n^2 method's size SciPy runs on the exact host values, announced."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(33)
    c, b = rng.standard_normal(1500), rng.standard_normal(1500)
    c[0] += 40.0  # well conditioned
    with trnscipy.offload("xla"), pytest.warns(trnscipy.DeviceFallbackWarning,
                                               match="O\\(n\\^2\\)"):
        got = tl.solve_circulant(c, b)
    np.testing.assert_array_equal(got, sl.solve_circulant(c, b))
