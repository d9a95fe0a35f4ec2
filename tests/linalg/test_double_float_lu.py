"""float64 lu_factor, lu_solve, lu and inv on an emulated Neuron device (issue 11):
the float32 device LU refined to double-float, paired against SciPy."""

import time
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps


def _aten_fallbacks():
    import torch_xla.debug.metrics as met

    return sum(met.counter_value(n) or 0 for n in met.counter_names()
               if n.startswith("aten::") and n != "aten::_local_scalar_dense")


def _on_neuron(fn):
    """fn() on the emulated Neuron device: (result, float64 ops the device ran, aten
    fallbacks, XLA counts).  A DeviceFallbackWarning is an error."""
    import trnscipy
    from conformance.device_ops import DeviceArithmetic
    from trnscipy._metrics import xla_counts

    with warnings.catch_warnings():
        warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
        before = _aten_fallbacks()
        with xla_counts() as counts, DeviceArithmetic("xla", [torch.float64]) as rec:
            out = fn()
    return out, rec.ops, _aten_fallbacks() - before, counts


def linalg_on_neuron(name, *args, **kw):
    """trnscipy.linalg.<name>(*args, **kw) offloaded to the emulated Neuron device, with no
    float64 op and no aten fallback there; NumPy results."""
    import trnscipy
    import trnscipy.linalg as tl

    def run():
        with trnscipy.offload("xla"):
            return getattr(tl, name)(*args, **kw)

    out, ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0, (name, ops, aten)
    return out


def _perm(piv):
    """Row permutation of SciPy's 0-based pivots: a[perm] = L U."""
    perm = np.arange(piv.shape[0])
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return perm


def _factor_error(a, lu, piv):
    L, U = np.tril(lu, -1) + np.eye(a.shape[0]), np.triu(lu)
    return np.linalg.norm(a[_perm(piv)] - L @ U, np.inf) / np.linalg.norm(a, np.inf)


def _backward(a, x, b):
    return (np.linalg.norm(a @ x - b, np.inf)
            / (np.linalg.norm(a, np.inf) * np.linalg.norm(x, np.inf) + np.linalg.norm(b, np.inf)))


def _ill(n, cond, rng):
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return u @ np.diag(np.logspace(0, -np.log10(cond), n)) @ v.T


N = 64  # one shape for all cases: the graphs compile once


@pytest.mark.xla
def test_lu_float64(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl
    from trnscipy._double_float import is_exact

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    n = N
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, 3))
    bound = 10 * n * EPS

    def run():
        with trnscipy.offload("xla"):
            lu, piv = tl.lu_factor(a)
            xs = [tl.lu_solve((lu, piv), b[:, 0]), tl.lu_solve((lu, piv), b, trans=1),
                  tl.lu_solve((lu, piv), b, trans=2, check_finite=False)]
            return (lu, piv), xs, tl.inv(a), tl.lu(a), tl.lu(a, permute_l=True), \
                tl.lu(a, p_indices=True)

    out, ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    (lu, piv), xs, ainv, (p, l, u), (pl, u2), (pi, l3, u3) = out
    lu_s, piv_s = sl.lu_factor(a)
    # a well-conditioned matrix: the float32 LU picks LAPACK's pivots
    assert piv.dtype == np.int32 and np.array_equal(piv, piv_s)
    assert _factor_error(a, lu, piv) <= bound
    np.testing.assert_allclose(lu, lu_s, rtol=0, atol=1e-12 * np.abs(lu_s).max())
    for trans, x, rhs in zip((0, 1, 2), xs, (b[:, 0], b, b), strict=True):
        op = a if trans == 0 else a.T
        assert x.shape == rhs.shape
        assert _backward(op, x, rhs) <= bound
        np.testing.assert_allclose(x, sl.lu_solve((lu_s, piv_s), rhs, trans=trans), rtol=1e-11,
                                   atol=1e-11 * np.abs(x).max())
    assert np.linalg.norm(a @ ainv - np.eye(n), np.inf) <= bound * np.linalg.norm(
        a, np.inf) * np.linalg.norm(ainv, np.inf)
    np.testing.assert_allclose(ainv, sl.inv(a), rtol=0, atol=1e-12 * np.abs(ainv).max())
    p_s, l_s, u_s = sl.lu(a)
    assert np.array_equal(p, p_s) and np.array_equal(pi, sl.lu(a, p_indices=True)[0])
    for got, want in ((l, l_s), (u, u_s), (l3, l_s), (u3, u_s), (u2, u_s),
                      (pl, sl.lu(a, permute_l=True)[0])):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
    assert np.linalg.norm(a - p @ l @ u, np.inf) <= bound * np.linalg.norm(a, np.inf)

    # device data: float64 device tensors holding the double-float factors exactly
    dev = trnscipy.resolve_device("xla")
    ad, bd = trnscipy.to_device(a, dev), trnscipy.to_device(b, dev)
    def on_device():
        f = tl.lu_factor(ad)
        return f, tl.lu_solve(f, bd, trans=1)

    _on_neuron(on_device)  # warm-up (after a flush): the counts below are a repeat's
    ((lu_d, piv_d), x_d), ops, aten, counts = _on_neuron(on_device)
    assert ops == [] and aten == 0
    assert lu_d.dtype == torch.float64 and is_exact(lu_d) and piv_d.dtype == torch.int32
    assert np.array_equal(trnscipy.to_host(lu_d), lu)  # what offload returned, bit for bit
    # (the factors hold up to 48 bits across a gap: float64 rounds them, so the solves
    # from the two differ by rounding)
    assert _backward(a.T, trnscipy.to_host(x_d), b) <= bound
    np.testing.assert_allclose(trnscipy.to_host(x_d), xs[1], rtol=1e-11,
                               atol=1e-11 * np.abs(xs[1]).max())
    # getrf's 12 executions at n = 64, 2 Newton steps, 2 refinement steps
    assert counts.compilations == 0 and counts.executions <= 50, counts


@pytest.mark.xla
def test_lu_float64_singular_and_ill_conditioned(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    n = N
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n))
    a[:, 5] = 0
    with pytest.warns(sl.LinAlgWarning) as want:
        lu_s, piv_s = sl.lu_factor(a)
    with trnscipy.offload("xla"):
        with pytest.warns(sl.LinAlgWarning) as got:
            lu, piv = tl.lu_factor(a)
        assert str(got[0].message) == str(want[0].message)  # "Diagonal number 6 is ..."
        assert lu[5, 5] == 0 and _factor_error(a, lu, piv) <= 10 * n * EPS
        with pytest.raises(sl.LinAlgError):
            tl.inv(a)
        with pytest.raises(sl.LinAlgError):
            tl.solve(a, a[:, 0])
        # beyond float32's reach (cond 1e10): a warning, never a silent float32 answer
        c = _ill(n, 1e10, rng)
        for call in (lambda: tl.lu_factor(c), lambda: tl.inv(c),
                     lambda: tl.lu_solve(sl.lu_factor(c), c[:, 0])):
            with pytest.warns(sl.LinAlgWarning, match="did not converge"):
                call()
        # cond 1e5: refined to float64 accuracy
        c = _ill(n, 1e5, rng)
        lu, piv = tl.lu_factor(c)
        assert _factor_error(c, lu, piv) <= 10 * n * EPS
        x = tl.lu_solve((lu, piv), c[:, 1])
        assert _backward(c, x, c[:, 1]) <= 10 * n * EPS


@pytest.mark.xla
def test_float64_rectangular_or_batched_runs_on_host(emulate_neuron, monkeypatch, xla_device):
    """No double-float method for a rectangular LU or a generalized eigh (a stack too):
    SciPy on the exact values, announced (never the float32 values the device holds)."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 4))
    ad = trnscipy.to_device(a, xla_device)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="lu_factor runs on the host"):
        lu, piv = tl.lu_factor(ad)
    lu_s, piv_s = sl.lu_factor(a)
    assert np.array_equal(trnscipy.to_host(lu), lu_s) and np.array_equal(
        trnscipy.to_host(piv), piv_s)
    s = rng.standard_normal((2, 4, 4))
    s = s @ s.mT + 4 * np.eye(4)
    sd = trnscipy.to_device(s, xla_device)
    # (batched solve, inv, cholesky, cho_solve, det, lu*, eigh refine on the device:
    # test_double_float_dense)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="eigh runs on the host"):
        got = tl.eigvalsh(sd, sd)
    assert np.array_equal(trnscipy.to_host(got), sl.eigvalsh(s, s))
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(trnscipy.DeviceUnsupportedError):
        tl.lu(ad)
    with pytest.raises(trnscipy.DeviceUnsupportedError):
        tl.eigvalsh(sd, sd)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("n", [256, 1024])
def test_lu_float64_must_show(n, emulate_neuron, monkeypatch):
    """Issue 11's must-show: lu_factor + lu_solve at n = 256 and 1024, backward error
    within 10 n eps64, STRICT, no float64 op and no aten fallback on the device."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal(n)

    def run():
        with trnscipy.offload("xla"):
            f = tl.lu_factor(a)
            return f, tl.lu_solve(f, b)

    start = time.perf_counter()
    ((lu, piv), x), ops, aten, counts = _on_neuron(run)
    seconds = time.perf_counter() - start
    assert ops == [] and aten == 0
    factor, solve = _factor_error(a, lu, piv), _backward(a, x, b)
    print(f"n={n}: lu_factor backward {factor / (n * EPS):.3f} n eps, lu_solve "
          f"{solve / (n * EPS):.3f} n eps, {seconds:.1f} s, {counts}")
    assert factor <= 10 * n * EPS and solve <= 10 * n * EPS


@pytest.mark.xla
def test_orders_of_one_bucket_share_the_refinement_graphs(emulate_neuron, xla_device):
    """float64 solve (and inv) of orders 9 to 16 run at order 16 ([[A, 0], [0, I]]): a new
    order in a warm bucket compiles only its small padding and read-back graphs, not the
    refinement (SciPy's test_onenormest inverts matrices of 31 orders: a timeout on the
    XLA lane, each order compiling seconds of graphs).  Results paired with SciPy."""
    import torch_xla.debug.metrics as met

    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(31)

    def compile_ns(n):
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        before = met.metric_data("CompileTime")
        with warnings.catch_warnings():
            warnings.simplefilter("error", trnscipy.DeviceFallbackWarning)
            with trnscipy.offload(xla_device):
                ainv = tl.inv(a)
        assert ainv.shape == (n, n)
        assert _backward(a, ainv, np.eye(n)) < 8 * EPS
        after = met.metric_data("CompileTime")
        return after[1] - (before[1] if before else 0)

    cold = compile_ns(9)
    warm = compile_ns(14)
    assert warm < 0.4 * cold, (cold, warm)
