"""SciPy's batch rule on device tensors (trnscipy/_batch.py, ``dispatch(batch=, stacks=)``).

Paired with SciPy's own batched call on the same stacks: CPU tensors (the implementation
looped or given the stacks) and XLA (one execution for a batch where the implementation
takes stacks, the implementation looped, as its single calls run, where it has none).
"""

import re
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl
from trnscipy import DeviceFallbackWarning
from trnscipy._scipy_version import scipy_at_least

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
    """A stack the batched method cannot take (fractional_matrix_power's matrices taking
    floor and ceil powers: PerMatrix) loops over the device implementation, unannounced:
    the batch is bit for bit its single calls (SciPy's test_batch.py compares them at rtol
    1e-7, tighter than float32 host-against-device)."""
    from trnscipy._batch import PerMatrix
    from trnscipy.linalg import _kernels_struct

    a32 = A.astype(np.float32)
    a32[1, 1] = np.diag([1e-3, 1, 2, 3]) + np.tril(A[1, 1], -1) / 10  # ill-conditioned
    with pytest.raises(PerMatrix):
        _kernels_struct.fractional_matrix_power(_dev(a32, xla_device), 1.8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        out = tl.fractional_matrix_power(_dev(a32, xla_device), 1.8)
        assert out.device.type == "xla" and tuple(out.shape) == A.shape
        single = tl.fractional_matrix_power(_dev(a32[1, 1], xla_device), 1.8)
    np.testing.assert_array_equal(trnscipy.to_host(out)[1, 1], trnscipy.to_host(single))
    np.testing.assert_allclose(trnscipy.to_host(out), sl.fractional_matrix_power(a32, 1.8),
                               rtol=1e-4, atol=1e-4)  # (SciPy: float32)


@pytest.mark.xla
@pytest.mark.parametrize("func", ["inv", "solve_triangular"])
def test_xla_float32_stack_rounds_as_single_calls(func, xla_device):
    """XLA's CPU compiler switches its triangular solve and LU inverse method above 8
    matrices: a stack of 15 float32 matrices gives its single calls' values (SciPy's
    test_batch.py at rtol 1e-7) and SciPy's batched result (float32: to rounding)."""
    a32 = (rng.random((5, 3, 4, 4)) + 2 * np.eye(4)).astype(np.float32)
    b32 = rng.random((5, 3, 4, 2)).astype(np.float32)
    call = {"inv": lambda m, a, b: m.inv(a),
            "solve_triangular": lambda m, a, b: m.solve_triangular(a, b, lower=True)}[func]
    out = trnscipy.to_host(call(tl, _dev(a32, xla_device), _dev(b32, xla_device)))
    for i, j in [(0, 0), (2, 1), (4, 2)]:
        single = trnscipy.to_host(call(tl, _dev(a32[i, j], xla_device),
                                       _dev(b32[i, j], xla_device)))
        np.testing.assert_allclose(out[i, j], single, rtol=1e-7, atol=0)
    ref = call(sl, a32, b32)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.xla
@pytest.mark.parametrize("func", ["qr", "rq"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_xla_qr_stack_rounds_as_single_calls(func, dtype, xla_device):
    """XLA's CPU compiler rounds the blocked Householder QR of one matrix otherwise than
    of a stack: a single matrix runs as a pair, so a batch equals its single calls
    exactly (SciPy's test_batch.py::test_polar_qr_rq failed at rtol 1e-7 in float32)."""
    a = rng.random((2, 3, 5, 5)) + (1j * rng.random((2, 3, 5, 5)) if dtype == np.complex64
                                    else 0)
    a = a.astype(dtype)
    out = [_host(o) for o in getattr(tl, func)(_dev(a, xla_device))]
    for i, j in [(0, 0), (1, 2)]:
        single = [_host(o) for o in getattr(tl, func)(_dev(a[i, j], xla_device))]
        for o, s in zip(out, single, strict=True):
            np.testing.assert_array_equal(o[i, j], s)
    for o, r in zip(out, getattr(sl, func)(a), strict=True):
        assert o.dtype == r.dtype
        np.testing.assert_allclose(np.abs(o), np.abs(r), rtol=1e-4, atol=1e-5)


@pytest.mark.xla
def test_xla_sylvester_stack_rounds_as_single_calls(xla_device):
    """The batched Bartels-Stewart: a float32 stack's matrices equal their single calls
    exactly (one equation runs as a pair on PJRT CPU; alone it rounded otherwise, and
    SciPy's test_batch.py::test_sylvester[float32] failed at rtol 1e-7)."""
    a, b, q = (rng.random((2, 3, 5, 5)).astype(np.float32) for _ in range(3))
    out = _host(tl.solve_sylvester(*(_dev(x, xla_device) for x in (a, b, q))))
    for i, j in [(0, 0), (1, 2)]:
        single = _host(tl.solve_sylvester(*(_dev(x[i, j], xla_device) for x in (a, b, q))))
        np.testing.assert_array_equal(out[i, j], single)
    assert out.dtype == sl.solve_sylvester(a, b, q).dtype
    # float32 backward error (an equation of the stack is ill-conditioned: forward errors
    # of SciPy's float32 solution too are percent-level there)
    x = out.astype(np.float64)
    res = np.abs(a @ x + x @ b - q).max((-2, -1))
    scale = np.abs(a).max((-2, -1)) * np.abs(x).max((-2, -1)) * 5 + 1
    assert (res <= 1e-5 * scale).all()


def test_stack_padding_only_for_pjrt_cpu(monkeypatch):
    """The padding above is a PJRT CPU compiler quirk: elsewhere (Trainium, GPU) a stack
    runs as given, not at up to 9 times its work."""
    from trnscipy.linalg import _kernels as lk

    seen = []
    a = torch.ones(3, 4, 4)
    for cpu, count in ((True, lk._XLA_BATCH_SWITCH), (False, 3)):
        monkeypatch.setattr(lk, "_pjrt_cpu", lambda cpu=cpu: cpu)
        out = lk.as_stack(lambda t: seen.append(t.shape[0]) or t * 2, a,
                          at_least=lk._XLA_BATCH_SWITCH)
        assert seen[-1] == count and tuple(out.shape) == (3, 4, 4)


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


# ---- functions whose device implementation takes SciPy's broadcast stacks --------------
# (name -> (call, operands, their core dimensions)); C broadcasts against A's batch (2, 3)
C = rng.random((3, 4, 4))
S = rng.random((2, 3, 4))
SYM = H.copy()
SYM[0, 1, 0, 3] += 1e-2  # not symmetric, even with atol=1e-3
SYM[1, 2, 2, 1] += 1e-4  # symmetric with atol=1e-3 only
HBAND = rng.random((2, 3, 2, 4)) + np.array([[4], [0]])  # lower form: the diagonal first
BAND = np.asarray([np.triu(A[0, 0], k) for k in range(-3, 3)]).reshape(2, 3, 4, 4)
UNBAL = A * np.logspace(-3, 3, 4)  # columns scaled apart: balancing scales them back
UNBAL[1, 2, 0, 1:] = 0  # an isolated eigenvalue in one matrix: its own permutation
LDL = np.random.default_rng(77).standard_normal((2, 3, 4, 4))
LDL = LDL + LDL.swapaxes(-1, -2)  # symmetric indefinite: 1x1 and 2x2 pivots, interchanges
LDL[0, 1][np.diag_indices(4)] *= 1e-3  # 2x2 pivots only
LDL[1, 2, :, 0] = LDL[1, 2, 0, :] = 0  # a singular column
HALF = A / 2
HALF[1, 0] *= 3  # an eigenvalue beyond 5: funm's _lift maps it off the real axis
SIGN = A - 5 * np.eye(4)
SIGN[0, 1] = np.triu(np.full((4, 4), 0.5)) + np.diag([2, 2, -3, -3])  # defective: Newton
LOG = A.copy()
LOG[0, 2] *= -1  # negative eigenvalues: a complex logarithm, the others' real
QA, RA = np.linalg.qr(A, mode="complete")  # (factors to update: any orthogonal Q, any R)
STACKS = {
    "tanm": (lambda m, a: m.tanm(a / 8), (A,), (2,)),
    "coshm": (lambda m, a: m.coshm(a / 8), (A,), (2,)),
    "sinhm": (lambda m, a: m.sinhm(a / 8), (A,), (2,)),
    "tanhm": (lambda m, a: m.tanhm(a / 8), (A,), (2,)),
    "pinv": (lambda m, a: m.pinv(a, return_rank=True), (A,), (2,)),
    "pinvh": (lambda m, a: m.pinvh(a, return_rank=True), (H,), (2,)),
    "polar": (lambda m, a: m.polar(a, side="left"), (A,), (2,)),
    "orthogonal_procrustes": (lambda m, a, c: m.orthogonal_procrustes(a, c), (A, C), (2, 2)),
    "issymmetric": (lambda m, a: m.issymmetric(a, atol=1e-3), (SYM,), (2,)),
    "ishermitian": (lambda m, a: m.ishermitian(a), (SYM,), (2,)),
    "bandwidth": (lambda m, a: m.bandwidth(a), (BAND,), (2,)),
    "khatri_rao": (lambda m, a, c: m.khatri_rao(a, c), (A, C), (2, 2)),
    "diagsvd": (lambda m, s: m.diagsvd(s, 6, 4), (S,), (1,)),
    "leslie": (lambda m, f, s: m.leslie(f, s[..., :3]), (S, S[0]), (1, 1)),
    "lstsq": (lambda m, a, b: m.lstsq(a[..., :3], b), (A, B), (2, 2)),
    "expm_frechet": (lambda m, a, c: m.expm_frechet(a / 8, c), (A, C), (2, 2)),
    "rq": (lambda m, a: m.rq(a[..., :3, :]), (A,), (2,)),
    "qr_multiply": (lambda m, a, c: m.qr_multiply(a, c, mode="left"), (A, C), (2, 2)),
    "qr_multiply_vector": (lambda m, a, v: m.qr_multiply(a, v), (A, S[0, 0]), (2, 1)),
    "eigh_tridiagonal": (lambda m, d, e: m.eigh_tridiagonal(d, e[..., :3]), (S, S[0]), (1, 1)),
    "eigvalsh_tridiagonal": (lambda m, d, e: m.eigvalsh_tridiagonal(d, e[..., 1:], select="i",
                                                                    select_range=(1, 2)),
                             (S, S), (1, 1)),
    "eig_banded": (lambda m, a: m.eig_banded(a[..., :2, :]), (A,), (2,)),
    "cholesky_banded": (lambda m, a: m.cholesky_banded(a, lower=True), (HBAND,), (2,)),
    "solveh_banded": (lambda m, a, b: m.solveh_banded(a, b, lower=True), (HBAND, S[0, 0]),
                      (2, 1)),
    "solveh_banded_matrix": (lambda m, a, b: m.solveh_banded(a, b, lower=True), (HBAND, B),
                             (2, 2)),
    "eigvals_banded": (lambda m, a: m.eigvals_banded(a[..., :2, :], lower=True), (A,), (2,)),
    "solve_banded": (lambda m, a, b: m.solve_banded((1, 1), a[..., 1:, :], b), (A, B),
                     (2, 2)),
    "solve_banded_vector": (lambda m, a, v: m.solve_banded((1, 1), a[..., 1:, :], v),
                            (A, S[0, 0]), (2, 1)),
    "matmul_toeplitz": (lambda m, c, x: m.matmul_toeplitz((c, 2 * c), x), (S, B[..., :4, :]),
                        (1, 2)),
    "matmul_toeplitz_vector": (lambda m, c, v: m.matmul_toeplitz(c, v), (S, S[0, 0]), (1, 1)),
    "solve_toeplitz": (lambda m, c, b: m.solve_toeplitz(c + np.eye(4)[0] * 4, b), (S, B),
                       (1, 2)),
    "cho_solve_banded": (lambda m, c, b: m.cho_solve_banded((c, True), b),
                         (sl.cholesky_banded(HBAND, lower=True), B), (2, 2)),
    "hessenberg": (lambda m, a: m.hessenberg(a, calc_q=True), (A,), (2,)),
    "matrix_balance": (lambda m, a: m.matrix_balance(a), (UNBAL,), (2,)),
    "ldl": (lambda m, a: (*m.ldl(a), *m.ldl(a, lower=False)), (LDL,), (2,)),
    "matrix_balance_separate": (lambda m, a: m.matrix_balance(a, separate=True), (UNBAL,),
                                (2,)),
    "solve_discrete_lyapunov": (lambda m, a, c: m.solve_discrete_lyapunov(a / 8, c), (A, C),
                                (2, 2)),
    "solve_discrete_are": (lambda m, a, b, q, r: m.solve_discrete_are(a / 8, b, q, r),
                           (A, B, np.eye(4), np.eye(2)), (2, 2, 2, 2)),
    "subspace_angles": (lambda m, a, c: m.subspace_angles(a[..., :2], c[..., 2:]), (A, C),
                        (2, 2)),
    "solve_sylvester": (lambda m, a, c: m.solve_sylvester(a, c, a @ c), (A, C), (2, 2)),
    "expm_cond": (lambda m, a: m.expm_cond(a / 8), (A,), (2,)),
    "qr_update": (lambda m, q, r, u: m.qr_update(q, r, u, 2 * u), (QA, RA, B), (2, 2, 2)),
    "qr_insert": (lambda m, q, r, s: m.qr_insert(q, r, s, 2), (QA, RA, S[..., None, :]),
                  (2, 2, 2)),
    "qr_delete": (lambda m, q, r: m.qr_delete(q, r, 1, 2, "col"), (QA, RA), (2, 2)),
    "solve_continuous_lyapunov": (lambda m, a, c: m.solve_continuous_lyapunov(-a, c), (A, C),
                                  (2, 2)),
    "solve_discrete_lyapunov_bilinear": (
        lambda m, a, c: m.solve_discrete_lyapunov(a / 8, c, method="bilinear"), (A, C), (2, 2)),
    "solve_continuous_are": (lambda m, a, b, q, r: m.solve_continuous_are(a, b, q, r),
                             (A - 6 * np.eye(4), B, np.eye(4), np.eye(2)), (2, 2, 2, 2)),
    "funm": (lambda m, a: m.funm(a, _lift), (HALF,), (2,)),
    "funm_disp": (lambda m, a: m.funm(a, _lift, disp=False), (HALF,), (2,)),
    "signm": (lambda m, a: m.signm(a), (SIGN,), (2,)),
    "logm": (lambda m, a: m.logm(a), (LOG,), (2,)),
    "fractional_matrix_power": (lambda m, a: m.fractional_matrix_power(a, 0.3), (A,), (2,)),
    "fractional_matrix_power_int": (lambda m, a: m.fractional_matrix_power(a, -2), (A,),
                                    (2,)),
}


def _lift(w):
    """w^2, plus i where Re w > 5: real F for a real matrix with no such eigenvalue (its
    values conjugate-symmetric), complex F for the others (funm's real/complex choice)."""
    return w * w + (w.real > 5) * 1j


def _parts(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _signed(v):
    """Eigenvectors with their largest entries positive (LAPACK's signs are its own)."""
    top = np.take_along_axis(v, np.abs(v).argmax(-2)[..., None, :], -2)
    return v * np.sign(top)


def _paired_stacks(name, device, rtol, single_rtol):
    """The batch through the device implementation's stacks: SciPy's batched call's
    shapes, dtypes and values, and its single calls' values."""
    call, arrays, cores = STACKS[name]
    wrapper = getattr(tl, re.sub("_(vector|matrix|separate|bilinear|disp|int)$", "", name))
    assert wrapper._trnscipy_batch[1], "the implementation takes stacks"
    ref = _parts(call(sl, *arrays))
    out = [_host(o) for o in _parts(call(tl, *(_dev(x, device) for x in arrays)))]
    assert len(out) == len(ref)
    for k, (o, r) in enumerate(zip(out, ref, strict=True)):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape and o.dtype == r.dtype
        if name in ("eig_banded", "eigh_tridiagonal") and k == 1:  # eigenvectors' signs
            o, r = _signed(o), _signed(r)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=rtol)
    batch = (2, 3)
    for idx in ((0, 0), (1, 2)):  # (the first and the last: C's batch broadcast)
        items = [np.broadcast_to(x, batch + x.shape[x.ndim - c:])[idx] if x.ndim > c else x
                 for x, c in zip(arrays, cores, strict=True)]
        single = _parts(call(tl, *(_dev(np.ascontiguousarray(x), device) for x in items)))
        for o, s in zip(out, single, strict=True):
            np.testing.assert_allclose(np.asarray(o)[idx], _host(s), rtol=single_rtol,
                                       atol=single_rtol)


@pytest.mark.parametrize("where", [
    "cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device")])])
@pytest.mark.parametrize("name", sorted(STACKS))
def test_stacks_equal_scipy_and_single_calls(name, where):
    """CPU (and CUDA) tensors: every function given stacks (float64)."""
    _paired_stacks(name, where, 1e-10, 1e-12)


@pytest.mark.parametrize("name", ["funm", "funm_disp", "signm", "logm",
                                  "fractional_matrix_power", "fractional_matrix_power_int"])
def test_matfunc_device_kernels_take_stacks(name, monkeypatch):
    """The device kernels (CUDA, XLA: the generic ones, Schur form included) on CPU
    tensors: each matrix's route as its single call (real or complex, Newton or not)."""
    _generic_kernels(monkeypatch)
    _paired_stacks(name, "cpu", 1e-10, 1e-12)


def _generic_kernels(monkeypatch):
    """CPU tensors through the device kernels (no SciPy on views).  The table is edited in
    place: kernel modules loaded meanwhile register into it for good (a replaced table
    lost them on restore, and XLA's svd then fell back to torch's)."""
    import trnscipy._kernels as seam

    for key in [k for k in seam._IMPLS if k[1] == "cpu" and k[0].startswith("linalg.")]:
        monkeypatch.delitem(seam._IMPLS, key)


def test_matfunc_stacks_per_matrix_messages(capsys, monkeypatch):
    """What SciPy's loop says per matrix, from one batched computation: funm's and signm's
    printed estimates, logm's singular warnings; signm's tuple only where every matrix
    took the Newton iteration; fractional_matrix_power's stack whose matrices take floor
    and ceil powers runs as the loop (PerMatrix)."""
    from trnscipy._batch import PerMatrix
    from trnscipy.linalg import _kernels_struct

    _generic_kernels(monkeypatch)
    defective = np.triu(np.ones((2, 3, 3, 3))) + (np.arange(6).reshape(2, 3, 1, 1) + 0.5
                                                  ) * np.eye(3)
    stack = A[:, :, :3, :3].copy()
    stack[0, 1], stack[1, 2] = defective[0, 1], defective[1, 2]
    for call, x, lines in ((lambda m, a: m.funm(a, lambda w: w ** 0.5), stack, 2),
                           (lambda m, a: m.signm(a), stack - 2 * np.eye(3), 0)):
        ref = call(sl, x)
        printed = capsys.readouterr().out
        out = _host(call(tl, torch.from_numpy(x)))
        assert capsys.readouterr().out == printed and printed.count("\n") == lines
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)
    if not scipy_at_least(1, 18):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = sl.signm(defective - 3 * np.eye(3), disp=False)
            out = tl.signm(torch.from_numpy(defective - 3 * np.eye(3)), disp=False)
        assert len(out) == len(ref) == 2 and out[1].dtype == torch.float64
        for o, r in zip(out, ref, strict=True):
            np.testing.assert_allclose(_host(o), r, rtol=1e-10, atol=1e-14)
    singular = A.copy()  # (triangular: zeros on the diagonal stay exact in the Schur form)
    singular[0, 1], singular[1, 0] = np.triu(A[0, 1]), np.triu(A[1, 0])
    singular[0, 1, 2, 2], singular[1, 0, 0, 0] = 0, 1e-22  # exactly, nearly singular
    found = []
    for m, a in ((sl, singular), (tl, torch.from_numpy(singular))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found.append((m.logm(a), [type(w.message) for w in caught]))
    assert found[0][1] == found[1][1] and len(found[0][1]) == 2
    np.testing.assert_allclose(_host(found[1][0]), found[0][0], rtol=1e-10, atol=1e-10)
    split = A[0, :2].copy()
    split[1] = np.diag([1e-3, 1, 2, 3]) + np.tril(A[0, 1], -1) / 10  # ill-conditioned
    with pytest.raises(PerMatrix):  # (the first: floor(p), the second: ceil(p))
        _kernels_struct.fractional_matrix_power(torch.from_numpy(split), 1.8)
    ref = sl.fractional_matrix_power(split, 1.8)
    np.testing.assert_allclose(_host(tl.fractional_matrix_power(torch.from_numpy(split), 1.8)),
                               ref, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.parametrize("name", sorted(STACKS))
def test_stacks_equal_scipy_and_single_calls_xla(name, xla_device):
    """XLA (float64 on torch-xla's CPU client): the batched graphs (minutes of compiles
    for all: slow; test_xla_stacks_one_execution covers the lane in CI)."""
    _paired_stacks(name, xla_device, 1e-10, 1e-12)


def test_maybe_real_decides_per_matrix():
    """coshm & co. keep a stack real where each matrix's imaginary part is negligible,
    as SciPy's loop decides: a stack mixing both is complex, the real matrices' imaginary
    parts zero (NumPy's promotion of the loop's results)."""
    from trnscipy.linalg._matfuncs import _maybe_real

    a = torch.from_numpy(A[0, :2])
    b = torch.from_numpy(A[0, :2] + 1j * np.stack([np.full((4, 4), 1e-12), np.ones((4, 4))]))
    out = _maybe_real(a, b).numpy()
    assert out.dtype == np.complex128
    np.testing.assert_array_equal(out[0], A[0, 0].astype(np.complex128))
    np.testing.assert_array_equal(out[1], b[1].numpy())
    assert _maybe_real(a, b.real + 1e-12j).dtype == torch.float64


@pytest.mark.xla
@pytest.mark.parametrize("name", ["issymmetric", "pinvh", "khatri_rao", "solve_banded",
                                  "hessenberg", "subspace_angles", "solve_discrete_lyapunov",
                                  "expm_cond", "qr_update"])
def test_xla_stacks_one_execution(name, xla_device):
    """A batch of 6 matrices costs the device executions of one single call (a loop
    costs one single call's per matrix), with SciPy's batched result (float32)."""
    from trnscipy._metrics import xla_counts

    call, arrays, cores = STACKS[name]
    arrays = tuple(x.astype(np.float32) for x in arrays)
    stacks = tuple(_dev(x, xla_device) for x in arrays)
    singles = tuple(_dev(np.ascontiguousarray(x[(0,) * (x.ndim - c)]), xla_device)
                    for x, c in zip(arrays, cores, strict=True))
    counted = {}
    for key, operands in (("single", singles), ("batch", stacks)):
        with xla_counts():  # compiled outside the count (its exit runs what the call
            warm = call(tl, *operands)  # left pending, the results kept alive)
        with xla_counts() as counts:
            out = call(tl, *operands)
        del warm
        counted[key] = counts.executions
    assert counted["batch"] == counted["single"] >= 1
    for o, r in zip(_parts(out), _parts(call(sl, *arrays)), strict=True):
        o, r = _host(o), np.asarray(r)
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


@pytest.mark.xla
@pytest.mark.parametrize("name", [
    "matrix_balance_separate", "solve_discrete_are", "ldl", "solve_sylvester",
    # (two minutes of compiles: the sign iteration and the Lyapunov steps' Schur forms)
    pytest.param("solve_continuous_are", marks=pytest.mark.slow)] + [
    # (the Schur forms of 6 and 24 matrices compile for 6 to 15 s each)
    pytest.param(name, marks=pytest.mark.slow)
    for name in ("funm", "signm", "logm", "fractional_matrix_power")])
def test_xla_stack_shares_reads(name, xla_device):
    """Host-driven loops (matrix_balance's reads per row and sweep, the Riccati solvers'
    iterations, ldl's pivot steps, the Schur forms' QR sweeps under solve_sylvester and
    funm, logm's roots, signm's Newton iteration, the Schur-Pade roots) run
    for the whole stack at once, until its slowest matrix is done: four copies
    of a stack cost the executions of one; each matrix as SciPy's batched call gives it."""
    from trnscipy._metrics import xla_counts

    call, arrays, cores = STACKS[name]
    counted = {}
    for copies in (1, 4):
        stacks = tuple(np.concatenate([np.broadcast_to(x, (2, 3) + x.shape[x.ndim - c:])]
                                      * copies) for x, c in zip(arrays, cores, strict=True))
        operands = tuple(_dev(np.ascontiguousarray(x), xla_device) for x in stacks)
        call(tl, *operands)  # (compiled outside the count)
        with xla_counts() as counts:
            out = call(tl, *operands)
        counted[copies] = counts.executions
    assert counted[4] == counted[1] >= 1
    for o, r in zip(_parts(out), _parts(call(sl, *stacks)), strict=True):
        np.testing.assert_allclose(_host(o), r, rtol=1e-12, atol=1e-14)


@pytest.mark.xla
def test_xla_lstsq_float32_residual(xla_device):
    """float32 lstsq on XLA (SVD, then one refinement step with the residual): residuals
    of underdetermined stacks within SciPy's test_batch.py bound (2e-6, LAPACK's about
    1e-6), where the SVD alone left 3.9e-6."""
    r = np.random.default_rng(8342310302941288912051)
    r.random((2, 3, 4, 5)), r.random(4)  # (SciPy's test with one b before this one)
    a = r.random((2, 3, 4, 5)).astype(np.float32)
    b = r.random((4, 3)).astype(np.float32)
    x = _host(tl.lstsq(_dev(a, xla_device), _dev(b, xla_device))[0])
    assert x.dtype == np.float32
    assert np.abs(a @ x - b).max() <= 2e-6
    np.testing.assert_allclose(x, sl.lstsq(a, b)[0], rtol=2e-5, atol=2e-5)


def _host(x):
    return trnscipy.to_host(x) if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.mark.parametrize("call", [
    lambda m, a: m.cholesky_banded(a, lower=True),
    lambda m, a: m.solveh_banded(a, S[0, 0], lower=True),
    lambda m, a: m.pinv(a[..., :1, :] * np.nan),
], ids=["cholesky_banded", "solveh_banded", "pinv"])
def test_stacks_raise_scipy_errors(call):
    """A matrix of the stack SciPy refuses (not positive definite, not finite): SciPy's
    exception and message, as its loop raises for the first such matrix."""
    bad = HBAND.copy()
    bad[1, 1, 0, 2] = -1.0
    with pytest.raises(Exception) as ref:
        call(sl, bad)
    with pytest.raises(type(ref.value), match=str(ref.value)):
        call(tl, torch.from_numpy(bad))


def test_device_lstsq_takes_stacks():
    """The device lstsq (CUDA, XLA) on CPU tensors: a stack's solutions, residues, ranks
    and singular values as SciPy's batched call; PerMatrix (SciPy's loop) where the
    residues' shapes differ per matrix (a tall stack with a rank-deficient matrix)."""
    from trnscipy._batch import PerMatrix
    from trnscipy.linalg import _kernels

    tall, wide = A[..., :3], A[..., :3, :].copy()
    wide[0, 1, 2] = wide[0, 1, 1]  # rank 2 of 3 rows
    for a, b in ((tall, B[0, :, 0]), (tall, B), (wide, B[:, :3])):
        ref = sl.lstsq(a, b)
        out = _kernels.lstsq(torch.from_numpy(a), torch.from_numpy(b).expand(
            a.shape[:-2] + b.shape[-2:]) if b.ndim > 1 else torch.from_numpy(b))
        for o, r in zip(out, ref, strict=True):
            o, r = np.asarray(o), np.asarray(r)
            assert o.shape == r.shape and o.dtype == r.dtype
            np.testing.assert_allclose(o, r, rtol=1e-10, atol=1e-12)
    deficient = tall.copy()
    deficient[1, 0, :, 2] = deficient[1, 0, :, 1]
    with pytest.raises(PerMatrix):
        _kernels.lstsq(torch.from_numpy(deficient), torch.from_numpy(B[0, :, 0]))


@pytest.mark.parametrize("name", ["lstsq", "pinv", "bandwidth"])
def test_declared_core_dims_are_scipys(name):
    """Functions that declare their core dimensions (SciPy 1.18 batches them without the
    wrapper trnscipy reads): the declaration is what SciPy's wrapper says where it has one."""
    from trnscipy._batch import core_dims

    wrapper = getattr(tl, name)
    found = core_dims(wrapper.__wrapped__)
    assert wrapper._trnscipy_batch[1]
    if found is not None:
        assert wrapper._trnscipy_batch[0] == found


@pytest.mark.parametrize("name", ["orth", "null_space"])
def test_rank_revealing_stacks(name):
    """CPU tensors (XLA compiles the svd for a minute; the stacks path is the same there):
    orth and null_space take stacks (one svd, one host read of the ranks): the
    subspaces of SciPy's loop; matrices of different ranks raise NumPy's ValueError of
    SciPy's loop (the loop's torch.stack raised RuntimeError)."""
    fn = getattr(tl, name)
    assert fn._trnscipy_batch[1], "the implementation takes stacks"
    a = rng.random((2, 3, 5, 4))
    a[..., 3] = a[..., 0]  # rank 3 each
    ref, out = getattr(sl, name)(a), _host(fn(_dev(a, "cpu")))
    assert out.shape == ref.shape
    proj = lambda q: q @ q.swapaxes(-1, -2)  # noqa: E731  (bases: unique up to rotation)
    np.testing.assert_allclose(proj(out), proj(ref), atol=1e-12)
    a[0, 1, :, 3] = rng.random(5)  # rank 4
    with pytest.raises(ValueError, match="same shape"):
        getattr(sl, name)(a)
    with pytest.raises(ValueError, match="same shape"):
        fn(_dev(a, "cpu"))


def test_sylvester_stack_mixes_block_patterns():
    """The batched real Bartels-Stewart (the kernel XLA, CUDA and Neuron's float32 run; here
    on CPU tensors, SciPy's Schur forms under it): matrices of one stack whose B has its
    2x2 blocks (complex eigenvalue pairs) in different columns, or none, each solved by
    its own blocks: SciPy's solution of each."""
    from trnscipy._kernels import kind_kernel

    rot = np.array([[1.0, 2.0], [-3.0, 1.0]])  # eigenvalues 1 +- i sqrt(6)
    b = np.stack([np.triu(rng.random((4, 4))) + np.eye(4)] + [np.eye(4) * 2 for _ in range(3)])
    b[1, :2, :2], b[2, 1:3, 1:3], b[3, 2:, 2:] = rot, rot, rot
    q = np.linalg.qr(rng.random((4, 4)))[0]  # (an orthogonal similarity mixes the entries)
    b = q @ b @ q.T
    a, rhs = A[0, :1].repeat(4, 0) + np.eye(4), rng.random((4, 4, 4))
    out = kind_kernel("linalg.solve_sylvester", "generic")(
        *(torch.from_numpy(x) for x in (a, b, rhs)))
    for i in range(4):
        ref = sl.solve_sylvester(a[i], b[i], rhs[i])
        np.testing.assert_allclose(out[i].numpy(), ref, rtol=1e-11, atol=1e-12)
