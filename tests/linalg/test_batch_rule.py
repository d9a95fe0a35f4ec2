"""SciPy's batch rule on device tensors (trnscipy/_batch.py, ``dispatch(batch=, stacks=)``).

Paired with SciPy's own batched call on the same stacks: CPU tensors (the implementation
looped or given the stacks) and XLA (one execution for a batch where the implementation
takes stacks, the implementation looped, as its single calls run, where it has none).
"""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl
from trnscipy import DeviceFallbackWarning

torch = pytest.importorskip("torch")

rng = np.random.default_rng(1234)
A = rng.random((2, 3, 4, 4)) + 4 * np.eye(4)
H = A + A.swapaxes(-1, -2)
B = rng.random((3, 4, 2))  # batch (3,) broadcasts against A's (2, 3)


def _dev(x, device):
    return trnscipy.to_device(x, device)


@pytest.mark.parametrize("call", [
    lambda m, a, b: m.solve(a, b),
    lambda m, a, b: m.cholesky(a + a.swapaxes(-1, -2)),
    lambda m, a, b: m.eigvalsh(a + a.swapaxes(-1, -2)),
    lambda m, a, b: m.solve_triangular(a, b, lower=True),
    lambda m, a, b: m.sinm(a / 4),
    # (XLA compiles lu_factor's and svd's step graphs for a minute: slow)
    pytest.param(lambda m, a, b: m.lu_factor(a)[0], marks=pytest.mark.slow),
    pytest.param(lambda m, a, b: m.svdvals(a), marks=pytest.mark.slow),
], ids=["solve", "cholesky", "eigvalsh", "solve_triangular", "sinm", "lu_factor",
        "svdvals"])
def test_stacks_paired(call, device):
    """Broadcast batches: same shape and values as SciPy's batched call."""
    ref = call(sl, A, B)
    out = trnscipy.to_host(call(tl, _dev(A, device), _dev(B, device)))
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)


def test_cho_solve_takes_batched_flags(device):
    """A batched cho_factor gives one ``lower`` flag per matrix; cho_solve takes them as
    an array or as a device tensor (what offload mode makes of them: SciPy's
    test_batch.py::test_cho_solve on xla)."""
    c, lower = tl.cho_factor(_dev(H, device))
    flags = _dev(np.asarray(lower), device)
    assert tuple(flags.shape) == H.shape[:-2]
    ref = sl.cho_solve(sl.cho_factor(H), B)
    for flag in (lower, flags):
        out = trnscipy.to_host(tl.cho_solve((c, flag), _dev(B, device)))
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_cpu_loop_matches_scipy():
    """A function without a batched form loops on CPU tensors, as SciPy's decorator."""
    ref = sl.sinm(A)
    out = tl.sinm(torch.from_numpy(A))
    assert isinstance(out, torch.Tensor) and out.shape == ref.shape
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    w, v = tl.eig_banded(torch.from_numpy(rng.random((2, 3, 2, 5))))
    assert w.shape == (2, 3, 5) and v.shape == (2, 3, 5, 5)


def test_tuple_operands_and_scalar_cores():
    """solve_banded's per-matrix (l, u) and solve_toeplitz's (c, r) follow SciPy."""
    ab = rng.random((2, 3, 3, 5)) + np.array([0, 4, 0])[:, None]
    b = rng.random((5, 2))
    ref = sl.solve_banded(([1, 1, 1], [1, 1, 1]), ab, b)
    out = tl.solve_banded(([1, 1, 1], [1, 1, 1]), torch.from_numpy(ab), torch.from_numpy(b))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    c, r = rng.random((2, 3, 5)) + 3, rng.random((2, 3, 5))
    ref = sl.solve_toeplitz((c, r), b)
    out = tl.solve_toeplitz((torch.from_numpy(c), torch.from_numpy(r)), torch.from_numpy(b))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10)


def test_errors_as_scipy():
    """Non-broadcasting batches and empty batches: SciPy's ValueError."""
    a = torch.from_numpy(A)
    with pytest.raises(ValueError):
        tl.eigvals(a, torch.from_numpy(rng.random((5, 4, 4))))
    with pytest.raises(ValueError, match="zero-size batches"):
        tl.eig(torch.ones((3, 0, 5, 5), dtype=torch.float64))


@pytest.mark.xla
def test_xla_one_execution_per_batch(xla_device):
    """A broadcast batch of solves is one device execution, not one per matrix, and
    gives SciPy's batched result (float32: by backward error)."""
    from trnscipy._metrics import xla_counts

    a32, b32 = A.astype(np.float32), B.astype(np.float32)
    a, b = _dev(a32, xla_device), _dev(b32, xla_device)
    tl.solve(a, b)  # compile outside the count
    with xla_counts() as counts:
        x = tl.solve(a, b)
        x.cpu()
    assert counts.executions <= 2  # the solve, and check_finite's flag
    ref = sl.solve(a32, b32)
    x = trnscipy.to_host(x)
    assert x.shape == ref.shape == (2, 3, 4, 2) and x.dtype == ref.dtype
    resid = np.linalg.norm(A @ x - B, axis=(-2, -1)) / (
        np.linalg.norm(A, axis=(-2, -1)) * np.linalg.norm(x, axis=(-2, -1)))
    assert resid.max() < 10 * np.finfo(np.float32).eps
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.xla
def test_xla_expm_batch_scales_each_matrix(xla_device):
    """expm of a batch takes each matrix's own Pade degree and scaling, as its single
    call does: a small matrix batched with a large one keeps its accuracy (scaled by the
    large one's 2^-s, 1 + a_ii rounds to 1 in float32 and exp(a)_ii loses a_ii)."""
    small = 1e-3 * (np.eye(3) + 0.5 * rng.random((3, 3)))
    k = rng.random((3, 3))
    big = 1e5 * (k - k.T)  # norm ~1e5 (s ~ 15), exp bounded (a rotation)
    stack = np.stack([small, big]).astype(np.float32)
    out = trnscipy.to_host(tl.expm(_dev(stack, xla_device)))
    single = trnscipy.to_host(tl.expm(_dev(stack[0], xla_device)))
    np.testing.assert_allclose(out[0], sl.expm(stack[0]), rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(out[0], single, rtol=2e-6, atol=1e-9)
    assert np.abs(out[1]).max() < 2  # (15 float32 squarings of a rotation: loose)


@pytest.mark.xla
def test_xla_loop_gives_the_single_calls(xla_device):
    """A function with no batched device form (signm) loops over its device
    implementation, unannounced: the batch is bit for bit its single calls (SciPy's
    test_batch.py compares them at rtol 1e-7, tighter than float32 host-against-device)."""
    a32 = A.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        out = tl.signm(_dev(a32, xla_device))
        assert out.device.type == "xla" and tuple(out.shape) == A.shape
        single = tl.signm(_dev(a32[1, 2], xla_device))
    np.testing.assert_array_equal(trnscipy.to_host(out)[1, 2], trnscipy.to_host(single))
    # (signm of these matrices is I: float32 noise ~1e-7 off the diagonal)
    np.testing.assert_allclose(trnscipy.to_host(out), sl.signm(a32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("separate", [False, True])
def test_loop_stacks_nested_results(separate, device):
    """matrix_balance(separate=True) returns (B, (scale, perm)) per matrix; a batch stacks
    the pair as NumPy does in SciPy's loop: one (..., 2, n) array (the loop crashed)."""
    out = tl.matrix_balance(_dev(A, device), separate=separate)
    ref = sl.matrix_balance(A, separate=separate)
    assert len(out) == len(ref) == 2
    for o, r in zip(out, ref, strict=True):
        o = trnscipy.to_host(o)
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-12)
