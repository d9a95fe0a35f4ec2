"""float64 on a device that holds it as float32 (Trainium; the XLA lane under
TRNSCIPY_EMULATE=neuron): exact storage as float32 parts, the emulation of what torch-xla
does to every other float64 value, and the warning for float64 data held as float32."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
import trnscipy.sparse
import trnscipy.sparse.linalg
from tests.conftest import HAVE_TORCH
from trnscipy import DeviceFallbackWarning, DeviceUnsupportedError, Float32StorageWarning
from trnscipy._double_float import LO_SCALE, TAIL_SCALE, split

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")


def _awkward(rng, n=200):
    """float64 values with all 53 bits in use, over float32's exponent range."""
    return rng.standard_normal(n) * np.exp(rng.uniform(-60, 60, n))


def test_split_is_exact_over_float32_range():
    rng = np.random.default_rng(0)
    edges = np.array([0.0, -0.0, 1 / 3, np.pi, 3.3e38, -3.2e-30, float(np.float32(1.5e-38))])
    for a in (_awkward(rng), edges, _awkward(rng) + 1j * _awkward(rng)):
        hi, lo, tail = split(a)
        assert hi.dtype == (np.complex64 if a.dtype.kind == "c" else np.float32)
        back = (hi.astype(a.dtype) + lo.astype(a.dtype) / LO_SCALE
                + tail.astype(a.dtype) / TAIL_SCALE)
        np.testing.assert_array_equal(back, a)
        np.testing.assert_array_equal(hi, a.astype(hi.dtype))  # hi is what the device holds


@pytest.mark.parametrize("value", [1e39, -3.5e38, 1e-39 + 1e-50, 1e-300])
def test_split_refuses_values_outside_float32_range(value):
    with pytest.raises(ValueError, match="cannot be held exactly"):
        split(np.array([1.0, value]))


def test_split_keeps_inf_and_nan():
    hi, lo, tail = split(np.array([np.inf, -np.inf, np.nan, 1 / 3]))
    assert np.isinf(hi[:2]).all() and np.isnan(hi[2]) and (lo[:3] == 0).all()


@pytest.mark.xla
def test_to_device_round_trip_is_exact(xla_device, emulate_neuron):
    import torch

    rng = np.random.default_rng(1)
    for a in (_awkward(rng).reshape(20, 10), _awkward(rng) - 2j * _awkward(rng)):
        t = trnscipy.to_device(a, xla_device)
        assert t.dtype == (torch.complex128 if a.dtype.kind == "c" else torch.float64)
        np.testing.assert_array_equal(trnscipy.to_host(t), a)
        np.testing.assert_array_equal(trnscipy.to_host(t.to("cpu")), a)
        np.testing.assert_array_equal(t.cpu().numpy(), a)  # .cpu() of exact data: exact
        # what the device holds is float32 (the dtype still says float64)
        narrow = np.complex64 if a.dtype.kind == "c" else np.float32
        hi = t.to(torch.complex64 if a.dtype.kind == "c" else torch.float32)
        np.testing.assert_array_equal(trnscipy.to_host(hi), a.astype(narrow))


@pytest.mark.xla
def test_data_movement_keeps_float64_exact(xla_device, emulate_neuron):
    rng = np.random.default_rng(2)
    A = sp.random_array((30, 20), density=0.2, rng=rng, format="csr")
    A.data = _awkward(rng, A.nnz)
    dA = trnscipy.to_device(A, xla_device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moved = {"T": dA.T, "tocsc": dA.tocsc(), "tocoo": dA.tocoo(), "slice": dA[3:17, 2:9],
                 "hstack": trnscipy.sparse.hstack([dA, dA]), "copy": dA.copy(),
                 "tobsr": dA.tobsr(blocksize=(2, 2))}
    ref = {"T": A.T, "tocsc": A.tocsc(), "tocoo": A.tocoo(), "slice": A[3:17, 2:9],
           "hstack": sp.hstack([A, A]), "copy": A, "tobsr": A.tobsr(blocksize=(2, 2))}
    for name, ours in moved.items():
        np.testing.assert_array_equal(trnscipy.to_host(ours).toarray(), ref[name].toarray(),
                                      err_msg=name)


@pytest.mark.xla
def test_emulation_rounds_float64_computed_on_the_device(xla_device, emulate_neuron):
    """torch float64 arithmetic on a NeuronCore gives float32 values: so does the
    emulation, whatever the path."""
    import torch

    a = np.array([1 / 3, 2 / 3, np.pi])
    t = trnscipy.to_device(a, xla_device)
    third = (t / 3).cpu().numpy()
    np.testing.assert_array_equal(third, (a / 3).astype(np.float32))
    plain = torch.tensor(a, device=xla_device)  # torch's own transfer: rounded, as there
    np.testing.assert_array_equal(plain.cpu().numpy(), a.astype(np.float32))


@pytest.mark.xla
def test_real_to_complex_cast_keeps_float64_exact(xla_device, emulate_neuron):
    """float64 -> complex128 is movement: the low parts follow (toeplitz of a real column
    and a complex row; SciPy's test_solve_toeplitz::test_solve_equivalence)."""
    import scipy.linalg as sl
    import torch

    import trnscipy.linalg

    rng = np.random.default_rng(4)
    c, r = _awkward(rng, 6), _awkward(rng, 6) + 1j * _awkward(rng, 6)
    t = trnscipy.to_device(c, xla_device).to(torch.complex128)
    np.testing.assert_array_equal(trnscipy.to_host(t), c.astype(np.complex128))
    with trnscipy.offload(xla_device):
        got = trnscipy.linalg.toeplitz(c, r)
    np.testing.assert_array_equal(got, sl.toeplitz(c, r))


@pytest.mark.xla
def test_real_matrix_complex_rhs_runs_on_scipy_exactly(xla_device, emulate_neuron):
    """A real a with a complex b computes in complex: a device without complex arithmetic
    sends the call to SciPy (announced) with the exact values, SciPy's result bit for bit."""
    import scipy.linalg as sl

    import trnscipy.linalg

    rng = np.random.default_rng(5)
    a = rng.standard_normal((10, 10)) + 10 * np.eye(10)
    b = rng.standard_normal(10) + 1j * rng.standard_normal(10)
    with trnscipy.offload(xla_device), pytest.warns(DeviceFallbackWarning,
                                                     match="no complex arithmetic"):
        got = trnscipy.linalg.solve(a, b)
    np.testing.assert_array_equal(got, sl.solve(a, b))


@pytest.mark.xla
@pytest.mark.parametrize("name", ["schur"])
def test_array_likes_ask_the_table_in_their_dtype(xla_device, emulate_neuron, monkeypatch,
                                                  name):
    """Lists only (no device operand): the capability table is asked for the dtype NumPy
    reads them as (float64), not skipped (it ran float32 arithmetic, 7e-8 off, or crashed
    in polar, before polar had a double-float method: SciPy's test_procrustes /
    test_decomp_polar on xla-neuron; orthogonal_procrustes, rq, khatri_rao,
    solve_circulant and expm_cond, the names this test used, have double-float methods
    now, and so has schur: its declaration is taken away here, no function with
    arithmetic of its own is left undeclared)."""
    import scipy.linalg as sl

    import trnscipy.linalg
    from trnscipy import _capabilities

    monkeypatch.delitem(_capabilities._DECLARED, getattr(trnscipy.linalg, name)._trnscipy_name)

    rng = np.random.default_rng(6)
    args = (rng.standard_normal((4, 4)).tolist(),)
    with trnscipy.offload(xla_device), pytest.warns(DeviceFallbackWarning,
                                                     match="no float64 arithmetic"):
        got = getattr(trnscipy.linalg, name)(*args)
    np.testing.assert_array_equal(got, getattr(sl, name)(*args))


@pytest.mark.xla
def test_host_fallback_reads_exact_data(xla_device, emulate_neuron):
    """A function with no float64 device method runs on SciPy with the exact values."""
    rng = np.random.default_rng(3)
    A = sp.random_array((40, 40), density=0.1, rng=rng, format="csr") + sp.eye_array(40) * 4
    A.data = A.data + _awkward(rng, A.nnz) * 1e-6
    import scipy.linalg as sl

    import trnscipy.linalg

    # (sparse norm and expm have double-float methods now; sqrtm has none)
    D = A.toarray()
    want = sl.sqrtm(D)
    with pytest.warns(DeviceFallbackWarning):
        got = trnscipy.linalg.sqrtm(trnscipy.to_device(D, xla_device))
    np.testing.assert_array_equal(trnscipy.to_host(got), want)
    with trnscipy.offload(xla_device), pytest.warns(DeviceFallbackWarning):
        got = trnscipy.linalg.sqrtm(D)
    np.testing.assert_array_equal(got, want)


@pytest.mark.xla
def test_float64_tensor_from_torch_warns_and_strict_raises(xla_device, emulate_neuron,
                                                          monkeypatch):
    import torch

    a = np.array([[4.0, 1 / 3], [1 / 3, 3.0]])
    t = torch.from_numpy(a).to(xla_device)
    # held as double-float with zero low parts: its nonzeros found on the device
    with pytest.warns(Float32StorageWarning, match=r"torch.float64 tensor of shape \(2, 2\)"):
        A = trnscipy.sparse.csr_array(t)
    np.testing.assert_array_equal(trnscipy.to_host(A).toarray(), a.astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32StorageWarning)  # exact data: no complaint
        B = trnscipy.sparse.csr_array(trnscipy.to_device(a, xla_device))
    np.testing.assert_array_equal(trnscipy.to_host(B).toarray(), a)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(DeviceUnsupportedError, match="holds float32 values"):
        trnscipy.sparse.csr_array(t)


@pytest.mark.xla
def test_no_float64_op_runs_on_the_device_moving_data(xla_device, emulate_neuron):
    import torch

    from conformance.device_ops import DeviceArithmetic

    A = sp.random_array((20, 20), density=0.2, rng=np.random.default_rng(4), format="csr")
    with DeviceArithmetic("xla", [torch.float64, torch.complex128]) as rec:
        dA = trnscipy.to_device(A, xla_device)
        back = trnscipy.to_host(dA.T.tocsr())
    assert rec.ops == []
    np.testing.assert_array_equal(back.toarray(), A.T.toarray())


@pytest.mark.xla
def test_user_matvec_float64_result_announced(xla_device, emulate_neuron, monkeypatch):
    """A LinearOperator's user function computes in float32 on a device without float64
    (its torch ops are the user's, not trnscipy's): a float64 result is announced, and
    is what the device computed; float32 data computes without a word."""
    import torch

    a = np.array([[4.0, 1 / 3], [1 / 7, 3.0]])
    v = np.array([1 / 3, 2 / 3])
    A, x = trnscipy.to_device(a, xla_device), trnscipy.to_device(v, xla_device)
    op = trnscipy.sparse.linalg.LinearOperator((2, 2), matvec=lambda w: A @ w,
                                               rmatvec=lambda w: A.T @ w, dtype=np.float64)
    for product in (op.matvec, op.rmatvec):
        with pytest.warns(Float32StorageWarning, match="result of a LinearOperator's user "
                          r"function \((r?matvec)"):
            y = trnscipy.to_host(product(x))
        want = (a if product == op.matvec else a.T) @ v
        np.testing.assert_allclose(y, want, rtol=1e-6)
        assert np.max(np.abs(y - want)) > 1e-12  # float32 arithmetic, as announced
    a32 = a.astype(np.float32)
    A32 = torch.from_numpy(a32).to(xla_device)
    op32 = trnscipy.sparse.linalg.LinearOperator((2, 2), matvec=lambda w: A32 @ w,
                                                 dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = op32.matvec(torch.from_numpy(v.astype(np.float32)).to(xla_device))
    np.testing.assert_allclose(y.cpu().numpy(), a32 @ v.astype(np.float32), rtol=1e-6)
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(DeviceUnsupportedError, match="user function"):
        op.matvec(x)
