"""qr_update, qr_insert, qr_delete paired with SciPy: the device methods (SciPy's rotation
and reflector sequences, run on CPU tensors through the generic kernels and on XLA) give
SciPy's Q and R to rounding, signs and a full Q's free columns included; bad arguments
raise SciPy's exceptions with its messages."""

import re as re_
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")


def _rand(rng, *shape, dtype=np.float64):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _case(name, dtype=np.float64, seed=0):
    """(call, operands) of one variant: a 5x3 A (full and economic factors), a 4x4 one."""
    rng = np.random.default_rng(seed)
    a = _rand(rng, 5, 3, dtype=dtype)
    q, r = sl.qr(a)
    qe, re = sl.qr(a, mode="economic")
    qs, rs = sl.qr(_rand(rng, 4, 4, dtype=dtype))
    ops = {
        "update_rank1_full": (lambda m, *x: m.qr_update(*x), (q, r, _rand(rng, 5, dtype=dtype),
                                                              _rand(rng, 3, dtype=dtype))),
        "update_rank2_full": (lambda m, *x: m.qr_update(*x),
                              (q, r, _rand(rng, 5, 2, dtype=dtype), _rand(rng, 3, 2, dtype=dtype))),
        "update_rank3_square": (lambda m, *x: m.qr_update(*x),
                                (qs, rs, _rand(rng, 4, 3, dtype=dtype),
                                 _rand(rng, 4, 3, dtype=dtype))),
        "update_rank1_economic": (lambda m, *x: m.qr_update(*x),
                                  (qe, re, _rand(rng, 5, dtype=dtype), _rand(rng, 3, dtype=dtype))),
        "update_rank2_economic": (lambda m, *x: m.qr_update(*x),
                                  (qe, re, _rand(rng, 5, 2, dtype=dtype),
                                   _rand(rng, 3, 2, dtype=dtype))),
        "insert_row": (lambda m, *x: m.qr_insert(*x, 2), (q, r, _rand(rng, 3, dtype=dtype))),
        "insert_rows": (lambda m, *x: m.qr_insert(*x, 1), (q, r, _rand(rng, 2, 3, dtype=dtype))),
        "insert_row_economic": (lambda m, *x: m.qr_insert(*x, 0),
                                (qe, re, _rand(rng, 3, dtype=dtype))),
        "insert_rows_economic": (lambda m, *x: m.qr_insert(*x, 4),
                                 (qe, re, _rand(rng, 3, 3, dtype=dtype))),
        "insert_col": (lambda m, *x: m.qr_insert(*x, 1, which="col"),
                       (q, r, _rand(rng, 5, dtype=dtype))),
        "insert_col_last": (lambda m, *x: m.qr_insert(*x, -3, which="col"),
                            (q, r, _rand(rng, 5, dtype=dtype))),
        "insert_cols": (lambda m, *x: m.qr_insert(*x, 1, which="col"),
                        (q, r, _rand(rng, 5, 2, dtype=dtype))),
        "insert_cols_wide": (lambda m, *x: m.qr_insert(*x, 3, which="col"),
                             (qs, rs, _rand(rng, 4, 2, dtype=dtype))),
        "insert_col_economic": (lambda m, *x: m.qr_insert(*x, 3, "col"),
                                (qe, re, _rand(rng, 5, dtype=dtype))),
        "insert_cols_economic": (lambda m, *x: m.qr_insert(*x, 1, "col"),
                                 (qe, re, _rand(rng, 5, 3, dtype=dtype))),
        "insert_rows_after": (lambda m, *x: m.qr_insert(*x, 5),
                              (q, r, _rand(rng, 2, 3, dtype=dtype))),
        "delete_row": (lambda m, *x: m.qr_delete(*x, 3), (q, r)),
        "delete_rows": (lambda m, *x: m.qr_delete(*x, 1, 3), (q, r)),
        "delete_row_economic": (lambda m, *x: m.qr_delete(*x, 2), (qe, re)),
        "delete_rows_economic": (lambda m, *x: m.qr_delete(*x, 1, 3), (qe, re)),
        "delete_col": (lambda m, *x: m.qr_delete(*x, 0, which="col"), (q, r)),
        "delete_col_economic": (lambda m, *x: m.qr_delete(*x, 1, which="col"), (qe, re)),
        "delete_cols": (lambda m, *x: m.qr_delete(*x, 1, 2, which="col"), (q, r)),
        "delete_cols_square": (lambda m, *x: m.qr_delete(*x, -3, 2, which="col"), (qs, rs)),
    }
    return ops[name]


NAMES = ["update_rank1_full", "update_rank2_full", "update_rank3_square",
         "update_rank1_economic", "update_rank2_economic", "insert_row", "insert_rows",
         "insert_row_economic", "insert_rows_economic", "insert_col", "insert_col_last",
         "insert_cols", "insert_cols_wide", "insert_col_economic", "insert_cols_economic",
         "insert_rows_after", "delete_row", "delete_rows",
         "delete_row_economic", "delete_rows_economic",
         "delete_col", "delete_col_economic", "delete_cols", "delete_cols_square"]


@pytest.fixture
def generic_kernels(monkeypatch):
    """CPU tensors through the device methods (the generic kernels), not SciPy on views."""
    import trnscipy._kernels as seam

    seam.kernel("linalg.qr_update", torch.device("cpu"))  # (the family's modules loaded)
    for key in [k for k in seam._IMPLS if k[1] == "cpu" and k[0].startswith("linalg.qr_")]:
        monkeypatch.delitem(seam._IMPLS, key)


def _check(name, dtype, device, rtol):
    call, operands = _case(name, dtype)
    ref = call(sl, *operands)
    out = call(tl, *(trnscipy.to_device(x, device) for x in operands))
    assert len(out) == len(ref) == 2
    for o, r in zip(out, ref, strict=True):
        o = trnscipy.to_host(o)
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_allclose(o, r, rtol=rtol, atol=rtol * np.abs(r).max())
    return operands, out


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("name", NAMES)
def test_device_methods_equal_scipy(name, dtype, generic_kernels):
    """Q and R as SciPy's to rounding, signs and the free columns of a full Q included."""
    _check(name, dtype, torch.device("cpu"), 1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_device_methods_float32_backward_error(name, generic_kernels):
    """float32: SciPy's Q and R to 2e-5; Q orthonormal and Q R SciPy's product to 1e-6."""
    call, operands = _case(name, np.float32)
    _, (q, r) = _check(name, np.float32, torch.device("cpu"), 2e-5)
    qs, rs = (x.astype(np.float64) for x in call(sl, *operands))
    q, r = q.numpy().astype(np.float64), r.numpy().astype(np.float64)
    assert np.abs(q.T @ q - np.eye(q.shape[1])).max() < 1e-6
    assert np.abs(q @ r - qs @ rs).max() < 1e-6 * np.abs(rs).max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_update_u_exactly_in_the_span_of_q(dtype, generic_kernels):
    """u in Q's span leaves a zero remainder: SciPy's factors (scipy/scipy#9733), not NaN."""
    q = np.array([[0, 0], [0, 0], [1, 0], [0, 1]], dtype)
    operands = (q, np.eye(2, dtype=dtype), np.array([0, 0, 0, -1], dtype),
                np.array([1, 2], dtype))
    ref = sl.qr_update(*operands)
    out = tl.qr_update(*(torch.from_numpy(x) for x in operands))
    for o, r in zip(out, ref, strict=True):
        np.testing.assert_allclose(o.numpy(), r, rtol=0, atol=4 * np.finfo(dtype).eps)


def test_stacks_with_a_k_per_matrix(generic_kernels):
    """SciPy's batch rule: a k per matrix (masks in one sweep), u of the stack or shared."""
    rng = np.random.default_rng(5)
    q, r = sl.qr(_rand(rng, 4, 5, 5))
    k = np.array([0, 4, 2, 1])
    for call, ops in ((lambda m, q, r, u: m.qr_insert(q, r, u, k), (q, r, _rand(rng, 4, 3, 5))),
                      (lambda m, q, r, u: m.qr_insert(q, r, u, k, which="col"),
                       (q, r, _rand(rng, 5))),
                      (lambda m, q, r: m.qr_delete(q, r, k[:, None] % 3), (q, r[None])),
                      (lambda m, q, r: m.qr_delete(q, r, k % 3, 2, "col"), (q, r))):
        ref = call(sl, *ops)
        out = call(tl, *(torch.from_numpy(x) for x in ops))
        for o, s in zip(out, ref, strict=True):
            assert o.shape == s.shape
            np.testing.assert_allclose(o.numpy(), s, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_column_in_span_raises_as_scipy(dtype, generic_kernels):
    """Economic column insertion of a column in Q's span: SciPy's LinAlgError, its message
    (but for the estimate it prints for float64: a rounding-level remainder's)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 3)).astype(dtype)
    qe, re = sl.qr(a, mode="economic")
    for u, rcond in ((a[:, 1] * 3, None), (a[:, :2] @ [1, 2.0], 1e-3)):
        u = u.astype(dtype)
        with pytest.raises(np.linalg.LinAlgError) as expected:
            sl.qr_insert(qe, re, u, 1, "col", rcond=rcond)
        with pytest.raises(np.linalg.LinAlgError) as got:
            tl.qr_insert(*(torch.from_numpy(x) for x in (qe, re, u)), 1, "col", rcond=rcond)
        texts = [str(e.value) for e in (got, expected)]
        if dtype == np.float64:  # (the estimate of a rounding-level remainder)
            texts = [re_.sub(r"number of \S+ for", "number of X for", t) for t in texts]
        assert texts[0] == texts[1]


def _errors():
    rng = np.random.default_rng(7)
    q, r = sl.qr(rng.standard_normal((5, 3)))
    qe, re = sl.qr(rng.standard_normal((5, 3)), mode="economic")
    u, v = rng.standard_normal(5), rng.standard_normal(3)
    nan = r.copy()
    nan[0, 0] = np.nan
    return [
        lambda m: m.qr_update(q, r[:2], u, v),
        lambda m: m.qr_update(q[:, :4], r[:4], u, v),
        lambda m: m.qr_update(q, r.astype(np.float32), u, v),
        lambda m: m.qr_update(q.astype(int), r.astype(int), u, v),
        lambda m: m.qr_update(q, r, u[:4], v),
        lambda m: m.qr_update(q, r, u, v[:2]),
        lambda m: m.qr_update(q, r, u.astype(np.float32), v),
        lambda m: m.qr_update(q, r, u[:, None], v),
        lambda m: m.qr_update(q, r, np.ones((5, 2)), np.ones((3, 3))),
        lambda m: m.qr_update(q, r, np.ones((5, 4)), np.ones((3, 4))),
        lambda m: m.qr_update(q, r, np.ones((5, 3)), np.ones((3, 3))),
        lambda m: m.qr_update(q, nan, u, v),
        lambda m: m.qr_update(q, nan, u[:4], v),  # (Q and R checked first)
        lambda m: m.qr_update(q, r, u * np.inf, v),
        lambda m: m.qr_insert(q, r, v, 6),
        lambda m: m.qr_insert(q, r, v, -6),
        lambda m: m.qr_insert(q, r, u, 1),
        lambda m: m.qr_insert(q, r, np.ones((2, 4)), 1),
        lambda m: m.qr_insert(q, r, v, 1, rcond=1e-3),
        lambda m: m.qr_insert(q, r, v, 1, which="x"),
        lambda m: m.qr_insert(q, r, v, 1, which="col"),
        lambda m: m.qr_insert(q, r, u, 4, which="col"),
        lambda m: m.qr_insert(q, r, u, 1, which="col", rcond=1e-3),
        lambda m: m.qr_insert(q, r, u.astype(np.complex128), 1, which="col"),
        lambda m: m.qr_insert(q, r, v * np.nan, 1),
        lambda m: m.qr_insert(qe, re, u, 1),
        lambda m: m.qr_delete(q, r, 5),
        lambda m: m.qr_delete(q, r, 4, 2),
        lambda m: m.qr_delete(q, r, 0, 0),
        lambda m: m.qr_delete(q, r, 3, which="col"),
        lambda m: m.qr_delete(q, r, 2, 2, which="col"),
        lambda m: m.qr_delete(q, r, 0, which="x"),
        lambda m: m.qr_delete(q, nan, 0, which="col"),
        lambda m: m.qr_delete(qe, re[:2], 0),
    ]


@pytest.mark.parametrize("index", range(len(_errors())))
def test_errors_as_scipy(index):
    """SciPy's exception type and message for each bad call (CPU tensors)."""
    call = _errors()[index]
    with pytest.raises(Exception) as expected:
        call(sl)
    to = trnscipy.to_device

    def torch_module(m):
        class Wrapped:
            def __getattr__(self, name):
                func = getattr(tl, name)
                return lambda *a, **k: func(*(to(x, "cpu") if isinstance(x, np.ndarray)
                                              else x for x in a), **k)
        return Wrapped()

    with pytest.raises(expected.type) as got:
        call(torch_module(tl))
    assert str(got.value) == str(expected.value)


XLA_NAMES = ["update_rank1_full", "delete_rows"]


@pytest.mark.xla
@pytest.mark.parametrize("name", XLA_NAMES + [
    pytest.param(n, marks=pytest.mark.slow) for n in NAMES if n not in XLA_NAMES])
def test_xla_strict_no_host_ops(name, xla_device, monkeypatch):
    """On XLA under TRNSCIPY_STRICT=1 (a host fallback raises), no aten op on the host:
    SciPy's Q and R, float64 to 1e-12, float32 to 2e-5."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        with aten_fallbacks(xla_device) as host, warnings.catch_warnings():
            warnings.simplefilter("error")
            _check(name, dtype, xla_device, rtol)
        assert not host


@pytest.mark.parametrize("kernels", ["scipy", "device"])
def test_overwrite_writes_the_callers_tensor(kernels, request):
    """overwrite_qr / overwrite_qruv: the results are written into the given tensors where
    SciPy computes in the caller's arrays (what SciPy's test_decomp_update checks);
    without the flag the operands stay as they were."""
    if kernels == "device":
        request.getfixturevalue("generic_kernels")
    rng = np.random.default_rng(9)
    q0, r0 = sl.qr(rng.standard_normal((6, 4)))
    u, v = rng.standard_normal(6), rng.standard_normal(4)
    for call, at_q, at_r in (
            (lambda q, r, w: tl.qr_delete(q, r, 2, 2, overwrite_qr=w),
             (slice(2, None), slice(2, None)), (slice(2, None), slice(None))),
            (lambda q, r, w: tl.qr_delete(q, r, 1, which="col", overwrite_qr=w),
             (slice(None), slice(None)), (slice(None), slice(None, -1))),
            (lambda q, r, w: tl.qr_update(q, r, torch.from_numpy(u), torch.from_numpy(v),
                                          overwrite_qruv=w),
             (slice(None), slice(None)), (slice(None), slice(None)))):
        q, r = torch.from_numpy(q0.copy()), torch.from_numpy(r0.copy())
        call(q, r, False)
        assert np.array_equal(q.numpy(), q0) and np.array_equal(r.numpy(), r0)
        q1, r1 = call(q, r, True)
        np.testing.assert_array_equal(q[at_q].numpy(), q1.numpy())
        np.testing.assert_array_equal(r[at_r].numpy(), r1.numpy())


NEURON_NAMES = ["update_rank3_square", "delete_rows_economic"]


@pytest.mark.xla
@pytest.mark.parametrize("name", NEURON_NAMES + [
    pytest.param(n, marks=pytest.mark.slow) for n in NAMES if n not in NEURON_NAMES])
def test_neuron_float64_refined(name, emulate_neuron):
    """float64 on an emulated Neuron device: the float32 update refined in double-float, no
    float64 op and no aten fallback on the device, no host fallback.  R and Q's first
    min(m, n) columns are SciPy's to float64 rounding (signs included); the free trailing
    columns of a full Q are an orthonormal complement (float32-close to SciPy's)."""
    from tests.linalg.test_double_float_lu import EPS, _on_neuron

    call, operands = _case(name, np.float64)
    ref = call(sl, *operands)

    def run():
        with trnscipy.offload("xla"):
            return call(tl, *operands)

    (q, r), ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    assert q.shape == ref[0].shape and r.shape == ref[1].shape
    k = min(r.shape)
    # (SciPy's own sequence of updates rounds: 1e-13, as qr's float64 test)
    np.testing.assert_allclose(r, ref[1], rtol=0, atol=1e-13 * np.abs(ref[1]).max())
    np.testing.assert_allclose(q[:, :k], ref[0][:, :k], rtol=0, atol=1e-13)
    np.testing.assert_allclose(q[:, k:], ref[0][:, k:], rtol=0, atol=1e-6)
    assert np.abs(q.T @ q - np.eye(q.shape[1])).max() <= 20 * EPS


@pytest.mark.xla
def test_neuron_float64_delete_every_row(emulate_neuron):
    """Deleting every row leaves empty factors (SciPy's shapes), nothing to refine."""
    from tests.linalg.test_double_float_lu import _on_neuron

    q, r = sl.qr(np.random.default_rng(0).random((1, 8)))

    def run():
        with trnscipy.offload("xla"):
            return tl.qr_delete(q, r, 0, 1, "row")

    (q1, r1), ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    assert q1.shape == (0, 0) and r1.shape == (0, 8) and q1.dtype == r1.dtype == np.float64
