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
    var; their norms are Python floats here, NumPy scalars in SciPy)."""
    if not isinstance(out, tuple):
        return [out]
    return [o for o in out if getattr(o, "ndim", 0) >= 1]


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
    want, got = _arrays(want), _arrays(got)
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        g = trnscipy.to_host(g)
        assert np.asarray(g).dtype == np.asarray(w).dtype
        # computed in float32 (SciPy computes these in float64)
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=1e-5 * np.max(np.abs(w)))
