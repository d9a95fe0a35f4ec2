"""trnscipy.sparse.linalg.cg_batched (an extension: many right-hand sides through one cg
iteration), paired column by column with SciPy's cg: the same info, the same iterate."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl

torch = pytest.importorskip("torch")


def _poisson(k):
    T = sp.diags_array([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], offsets=[-1, 0, 1])
    return (sp.kron(sp.eye_array(k), T) + sp.kron(T, sp.eye_array(k))).tocsr()


def _check(A, B, device, dtype, **kw):
    """cg_batched on ``device`` against SciPy's cg per column (kw: SciPy's arguments;
    M and x0 given as host data, moved for the device call)."""
    dkw = {key: trnscipy.to_device(v, device) if key in ("M", "x0") else v
           for key, v in kw.items()}
    X, info = tsl.cg_batched(trnscipy.to_device(A.astype(dtype), device),
                             trnscipy.to_device(B.astype(dtype), device), **dkw)
    X, info = trnscipy.to_host(X), trnscipy.to_host(info)
    assert X.shape == B.shape and X.dtype == dtype and info.dtype == np.int64
    tol = 1e-10 if dtype == np.float64 else 1e-4
    for j in range(B.shape[1]):
        jkw = dict(kw, x0=kw["x0"][:, j]) if "x0" in kw else kw
        xs, info_s = spla.cg(A.astype(dtype), B[:, j].astype(dtype), **jkw)
        assert info[j] == info_s, (j, info[j], info_s)
        np.testing.assert_allclose(X[:, j], xs, rtol=tol, atol=tol * np.abs(xs).max())
    return X, info


def _cases(n):
    rng = np.random.default_rng(0)
    B = rng.standard_normal((n, 4))
    B[:, 1] = 0  # SciPy returns a zero right-hand side's b at once
    return B, rng.standard_normal((n, 4))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cg_batched_cpu_matches_scipy_per_column(dtype):
    A = _poisson(10)
    B, x0 = _cases(A.shape[0])
    M = sp.diags_array(1 / A.diagonal()).tocsr().astype(dtype)
    _check(A, B, "cpu", dtype)
    _, info = _check(A, B, "cpu", dtype, maxiter=5)  # unconverged columns: maxiter
    assert sorted(set(info.tolist())) == [0, 5]
    _check(A, B, "cpu", dtype, M=M, x0=x0.astype(dtype), rtol=1e-8 if dtype == np.float64
           else 1e-4)


def test_cg_batched_host_inputs_and_errors():
    A = _poisson(6)
    B, _ = _cases(A.shape[0])
    X, info = tsl.cg_batched(A, B)  # NumPy/SciPy data: SciPy's cg per column
    for j in range(B.shape[1]):
        xs, i = spla.cg(A, B[:, j])
        np.testing.assert_array_equal(X[:, j], xs)
        assert info[j] == i
    dA = trnscipy.to_device(A, "cpu")
    with pytest.raises(ValueError, match="2-D"):
        tsl.cg_batched(dA, trnscipy.to_device(B[:, 0], "cpu"))
    with pytest.raises(ValueError, match="incompatible"):
        tsl.cg_batched(dA, trnscipy.to_device(B[:-1], "cpu"))
    with pytest.raises(ValueError, match="2-D"):
        tsl.cg_batched(A, B[:, 0])


@pytest.mark.xla
def test_cg_batched_xla_one_loop(xla_device):
    """On XLA every column runs to its stop in one device loop: the executions per solve
    do not grow with the iterations or the columns."""
    from trnscipy._metrics import xla_counts

    A = _poisson(12)
    B, x0 = _cases(A.shape[0])
    _check(A, B, xla_device, np.float32)
    _check(A, B, xla_device, np.float64, M=sp.diags_array(1 / A.diagonal()).tocsr(),
           x0=x0, rtol=1e-9)
    dA = trnscipy.to_device(A.astype(np.float32), xla_device)
    counts = []
    for k in (2, 8):
        dB = trnscipy.to_device(np.ones((A.shape[0], k), np.float32), xla_device)
        tsl.cg_batched(dA, dB)
        with xla_counts() as c:
            X, _ = tsl.cg_batched(dA, dB)
            trnscipy.to_host(X)
        counts.append(c.executions)
    assert counts[0] == counts[1] <= 3, counts


@pytest.mark.xla
def test_cg_batched_float64_on_neuron_is_scipy_announced(xla_device, emulate_neuron):
    A = _poisson(5)
    B, _ = _cases(A.shape[0])
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="no float64 arithmetic"):
        X, info = tsl.cg_batched(trnscipy.to_device(A, xla_device),
                                 trnscipy.to_device(B, xla_device))
    for j in range(B.shape[1]):
        xs, i = spla.cg(A, B[:, j])
        np.testing.assert_allclose(trnscipy.to_host(X)[:, j], xs, rtol=1e-12, atol=1e-14)
        assert trnscipy.to_host(info)[j] == i
