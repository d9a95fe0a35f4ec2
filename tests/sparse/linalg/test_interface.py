"""LinearOperator / aslinearoperator on device data, paired with SciPy on the same data."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl

torch = pytest.importorskip("torch")


def _data(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((5, 4))
    B = rng.standard_normal((4, 4))
    if np.dtype(dtype).kind == "c":
        A = A + 1j * rng.standard_normal((5, 4))
        B = B + 1j * rng.standard_normal((4, 4))
    return A.astype(dtype), B.astype(dtype)


def _check(ours, ref, device):
    assert isinstance(ours, torch.Tensor) and ours.device == device
    np.testing.assert_allclose(trnscipy.to_host(ours), ref, rtol=1e-12, atol=1e-12)
    assert ours.shape == ref.shape


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_products_and_algebra_match_scipy(dtype, device):
    A, B = _data(dtype)
    dev = device
    At, Bt = torch.from_numpy(A).to(dev), torch.from_numpy(B).to(dev)
    ops = tsl.aslinearoperator(At), tsl.aslinearoperator(Bt)
    refs = spla.aslinearoperator(A), spla.aslinearoperator(B)
    assert isinstance(ops[0], spla.LinearOperator)
    assert ops[0].dtype == refs[0].dtype and ops[0].shape == refs[0].shape
    x4, x5 = np.arange(4.0) + 1, np.arange(5.0) - 2
    X4 = np.arange(8.0).reshape(4, 2)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    (oA, oB), (rA, rB) = ops, refs
    pairs = [
        (oA.matvec(t(x4)), rA.matvec(x4)),
        (oA.matvec(t(x4[:, None])), rA.matvec(x4[:, None])),
        (oA.rmatvec(t(x5)), rA.rmatvec(x5)),
        (oA.matmat(t(X4)), rA.matmat(X4)),
        (oA.rmatmat(t(np.ones((5, 3)))), rA.rmatmat(np.ones((5, 3)))),
        (oA @ t(x4), rA @ x4),
        (oA * t(x4), rA * x4),
        (oA.dot(t(X4)), rA.dot(X4)),
        (oA(t(x4)), rA(x4)),
        ((oA @ oB).matvec(t(x4)), (rA @ rB).matvec(x4)),
        ((oA * 2.5).matvec(t(x4)), (rA * 2.5).matvec(x4)),
        ((3 * oB - oB / 2).matvec(t(x4)), (3 * rB - rB / 2).matvec(x4)),
        ((oB + oB).rmatvec(t(x4)), (rB + rB).rmatvec(x4)),
        ((-oB).matmat(t(X4)), (-rB).matmat(X4)),
        ((oB ** 3).matvec(t(x4)), (rB ** 3).matvec(x4)),
        (oA.T.matvec(t(x5)), rA.T.matvec(x5)),
        (oA.H.matvec(t(x5)), rA.H.matvec(x5)),
        (oA.adjoint().rmatvec(t(x4)), rA.adjoint().rmatvec(x4)),
        (oA.T.T.matvec(t(x4)), rA.T.T.matvec(x4)),
        (oA.transpose().matmat(t(np.ones((5, 2)))), rA.transpose().matmat(np.ones((5, 2)))),
        ((oA @ oB).H.matvec(t(x5)), (rA @ rB).H.matvec(x5)),
    ]
    for ours, ref in pairs:
        _check(ours, ref, dev)
    for composite, ref in [(oA @ oB, rA @ rB), (oB * 2.5, rB * 2.5), (oB + oB, rB + rB),
                           (oB ** 2, rB ** 2), (oA.H, rA.H)]:
        assert isinstance(composite, tsl.LinearOperator)
        assert composite.dtype == ref.dtype and composite.shape == ref.shape


def test_custom_operator_on_tensors(device):
    A, _ = _data()
    At = torch.from_numpy(A).to(device)
    op = tsl.LinearOperator(A.shape, matvec=lambda v: At @ v, rmatvec=lambda v: At.T @ v,
                            dtype=A.dtype)
    ref = spla.LinearOperator(A.shape, matvec=lambda v: A @ v, rmatvec=lambda v: A.T @ v)
    x = np.arange(4.0)
    X = np.ones((4, 3))
    _check(op.matvec(torch.from_numpy(x).to(device)), ref.matvec(x), device)
    _check(op.matmat(torch.from_numpy(X).to(device)), ref.matmat(X), device)
    _check(op.H.matvec(torch.ones(5, dtype=torch.float64, device=device)),
           ref.H.matvec(np.ones(5)), device)
    with pytest.raises(ValueError, match="dimension mismatch"):
        op.matvec(torch.ones(5, dtype=torch.float64, device=device))


def test_host_inputs_keep_scipy_behaviour():
    A, _ = _data()
    ours, ref = tsl.aslinearoperator(A), spla.aslinearoperator(A)
    assert type(ours) is type(ref)
    np.testing.assert_array_equal(ours.matvec(np.ones(4)), ref.matvec(np.ones(4)))
    op = tsl.LinearOperator((5, 4), matvec=lambda v: A @ v)
    assert isinstance(op, spla.LinearOperator)
    out = op.matvec(np.ones(4))
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, A @ np.ones(4))
    assert (op * 2).matvec(np.ones(4)).tolist() == (2 * (A @ np.ones(4))).tolist()
    with pytest.raises(TypeError):
        tsl.aslinearoperator("not an operator")
    with pytest.raises(ValueError, match="ndim <= 2"):
        tsl.aslinearoperator(torch.ones(2, 2, 2))


def test_operator_device_and_dtype_inference():
    At = torch.ones(3, 3, dtype=torch.float32)
    op = tsl.aslinearoperator(At)
    assert op.device == At.device and op.dtype == np.float32
    assert (op + op).device == At.device
    f = tsl.LinearOperator((3, 3), matvec=lambda v: At @ v)  # rejects NumPy input
    assert f.dtype == np.float32


def test_dense_operator_float64_on_neuron_falls_back_with_warning(xla_device, emulate_neuron):
    A = np.arange(9.0).reshape(3, 3)
    op = tsl.aslinearoperator(trnscipy.to_device(A, xla_device))
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="no float64"):
        y = op.matvec(trnscipy.to_device(np.ones(3), xla_device))
    np.testing.assert_array_equal(trnscipy.to_host(y), A @ np.ones(3))


def _poisson(m=10):
    import scipy.sparse as sp

    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    return (sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))).tocsr()


@pytest.mark.xla
@pytest.mark.parametrize("Op", [spla.LinearOperator, tsl.LinearOperator],
                         ids=["scipy", "trnscipy"])
def test_numpy_preconditioner_in_offloaded_solve(xla_device, Op):
    """Issue 25: a Jacobi M written as SciPy users write it (NumPy in, NumPy out) inside
    offload('xla') failed in torch-xla ('Check failed: handle->HasValue()'): it was traced
    into the solver's device loop.  It runs between graphs now, announced."""
    from trnscipy import DeviceFallbackWarning

    A = _poisson()
    b = np.ones(A.shape[0])
    d = A.diagonal()
    M = Op(A.shape, matvec=lambda v: v / d)
    ref, ref_info = spla.cg(A, b, M=M, rtol=1e-10)
    with trnscipy.offload("xla"), pytest.warns(DeviceFallbackWarning, match="host"):
        x, info = tsl.cg(A, b, M=M, rtol=1e-10)
    assert isinstance(x, np.ndarray) and info == ref_info == 0
    np.testing.assert_allclose(x, ref, rtol=1e-8)


@pytest.mark.xla
def test_numpy_code_operator_on_device_tensors(xla_device):
    """A trnscipy LinearOperator whose function is NumPy code (``v / d``, ``d`` a NumPy
    array) given XLA tensors: NumPy cannot read them, so the function is called with NumPy
    (announced) and the float32 solve converges as SciPy's does."""
    from trnscipy import DeviceFallbackWarning

    A = _poisson().astype(np.float32)
    b = np.ones(A.shape[0], dtype=np.float32)
    d = A.diagonal()
    M = tsl.LinearOperator(A.shape, matvec=lambda v: v / d, dtype=np.float32)
    K, bt = trnscipy.to_device(A, "xla"), trnscipy.to_device(b, "xla")
    with pytest.warns(DeviceFallbackWarning, match="does not take xla tensors"):
        x, info = tsl.cg(K, bt, M=M, rtol=1e-5)
    assert info == 0 and x.device.type == "xla"
    x = trnscipy.to_host(x)
    assert np.linalg.norm(A @ x - b) <= 1e-5 * np.linalg.norm(b) * 1.01
