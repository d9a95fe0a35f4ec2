"""float32 input on an emulated Neuron device: results in SciPy's dtype (float64 where
SciPy promotes), computed in float32 and held exactly as double-float, with no float64
op on the device (issue 11)."""

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spl

torch = pytest.importorskip("torch")

_RNG = np.random.default_rng(0)
_A = (_RNG.standard_normal((6, 6)) / 3 + np.eye(6)).astype(np.float32)
_E = (_RNG.standard_normal((6, 6)) / 3).astype(np.float32)
_B = _RNG.standard_normal(6).astype(np.float32)

CASES = [
    ("lsqr", lambda m: m.lsqr, lambda: (sp.csr_array(_A), _B), {"iter_lim": 3}),
    ("lsmr", lambda m: m.lsmr, lambda: (sp.csr_array(_A), _B), {"maxiter": 3}),
    ("onenormest", lambda m: m.onenormest, lambda: (sp.csr_array(_A),),
     {"compute_v": True, "compute_w": True}),
    ("det", lambda m: m.det, lambda: (_A,), {}),
    pytest.param("expm_cond", lambda m: m.expm_cond, lambda: (_A[:3, :3],), {},
                 marks=pytest.mark.slow),  # n^2 expm_frechet calls: 30 s here
    ("expm_frechet", lambda m: m.expm_frechet, lambda: (_A, _E), {}),
]


def _arrays(out):
    """The results to compare: a single result, or a tuple's arrays (the solvers' x and
    var)."""
    if not isinstance(out, tuple):
        return [out]
    return [o for o in out if getattr(o, "ndim", 0) >= 1]


def _scalar_dtypes(out):
    """The dtypes of a tuple's scalars (SciPy's lsqr/lsmr: Python floats, and np.float32
    for the norms it computes from float32 vectors)."""
    if not isinstance(out, tuple):
        return []
    from trnscipy import to_host

    return [np.asarray(to_host(o) if torch.is_tensor(o) else o).dtype for o in out
            if getattr(o, "ndim", 0) == 0]


@pytest.mark.xla
@pytest.mark.parametrize("name,fn,args,kw", CASES, ids=[
    c.values[0] if hasattr(c, "values") else c[0] for c in CASES])
def test_float32_results_in_scipy_dtype(name, fn, args, kw, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl
    import trnscipy.sparse.linalg as tsl
    from tests.test_double_float import _recorded

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    module = tl if name in ("det", "expm_cond", "expm_frechet") else tsl
    host = args()
    want = fn(sl if module is tl else spl)(*host, **kw)
    dev = [trnscipy.to_device(a, "xla") for a in host]
    got, ops = _recorded(lambda: fn(module)(*dev, **kw))
    assert ops == []
    assert _scalar_dtypes(got) == _scalar_dtypes(want)
    want, got = _arrays(want), _arrays(got)
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        g = trnscipy.to_host(g)
        assert np.asarray(g).dtype == np.asarray(w).dtype
        # computed in float32 (SciPy computes these in float64)
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=1e-5 * np.max(np.abs(w)))


@pytest.mark.xla
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_toeplitz_float64_on_device(dtype, emulate_neuron, monkeypatch):
    """matmul_toeplitz and solve_toeplitz compute in float64 as SciPy (whatever the input's
    precision): double-float GEMM and the refined solve on the device, float64-accurate,
    no float64 op executed there."""
    import trnscipy
    import trnscipy.linalg as tl
    from tests.test_double_float import _recorded

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    c, r = rng.standard_normal(7).astype(dtype), rng.standard_normal(7).astype(dtype)
    c[0] = 4.0  # diagonally dominant enough to solve
    x = rng.standard_normal((7, 2)).astype(dtype)
    dev = [trnscipy.to_device(a, "xla") for a in (c, r, x)]
    for name in ("matmul_toeplitz", "solve_toeplitz"):
        want = getattr(sl, name)((c, r), x)
        got, ops = _recorded(lambda name=name: getattr(tl, name)((dev[0], dev[1]), dev[2]))
        assert ops == []
        got = trnscipy.to_host(got)
        assert got.dtype == want.dtype == np.float64
        assert np.max(np.abs(got - want)) <= 1e-14 * np.max(np.abs(want)), name


@pytest.mark.xla
def test_solve_discrete_lyapunov_float32_in_float64_on_device(emulate_neuron, monkeypatch):
    """SciPy computes solve_discrete_lyapunov in float64 for float32 input too (``double``):
    on a device without float64 the table is asked for float64, and its double-float method
    runs on the device (no fallback under TRNSCIPY_STRICT=1), SciPy's float64 result."""
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a, q = (_A / 4).astype(np.float32), (_A @ _A.T).astype(np.float32)
    want = sl.solve_discrete_lyapunov(a, q)
    da, dq = trnscipy.to_device(a, "xla"), trnscipy.to_device(q, "xla")
    got = trnscipy.to_host(tl.solve_discrete_lyapunov(da, dq))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.max(np.abs(want)))
