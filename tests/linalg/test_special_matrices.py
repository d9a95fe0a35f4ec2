"""Special matrices, block_diag, khatri_rao: paired with SciPy on the cpu and xla lanes
(tensor inputs, and trnscipy's device= keyword where SciPy's signature has no array)."""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import tensor, to_np
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")

V = np.array([2.0, -1.0, 0.5, 0.25])
VC = V + 0.5j
R = np.arange(1, 6.0).astype(np.float32)

TENSOR_CASES = [
    ("toeplitz", (V,), {}), ("toeplitz", (VC,), {}), ("toeplitz", (V, R), {}),
    ("toeplitz", (np.arange(3), R), {}),
    ("toeplitz", (np.arange(6.0).reshape(2, 3), np.arange(8.0).reshape(2, 4)), {}),
    ("circulant", (VC,), {}), ("circulant", (np.arange(6).reshape(2, 3),), {}),
    ("hankel", (V,), {}), ("hankel", (V, VC[::-1].copy()), {}),
    ("leslie", (V, V[:3]), {}), ("leslie", (np.arange(4), R[:3]), {}),
    ("companion", (V,), {}), ("companion", (np.array([1, -10, 31, -30]),), {}),
    ("companion", (R[:2],), {}), ("companion", (np.arange(1, 7.0).reshape(2, 3),), {}),
    ("fiedler", (V,), {}), ("fiedler", (np.array([1, 4, 12]),), {}), ("fiedler", (VC,), {}),
    ("fiedler", (V[:1],), {}),
    ("fiedler_companion", (np.array([1.0, -16, 86, -176, 105]),), {}),
    ("fiedler_companion", (np.arange(1, 8.0),), {}), ("fiedler_companion", (V[:2],), {}),
    ("convolution_matrix", (np.array([-1, 4, -2]), 5), {}),
    ("convolution_matrix", (np.array([-1, 4, -2]), 2), {"mode": "same"}),
    ("convolution_matrix", (V, 6), {"mode": "same"}),
    ("convolution_matrix", (R, 3), {"mode": "valid"}),
    ("khatri_rao", (np.arange(6.0).reshape(2, 3), np.arange(9).reshape(3, 3)), {}),
    ("khatri_rao", (VC.reshape(2, 2), R[:4].reshape(2, 2)), {}),
    ("block_diag", (np.arange(6.0).reshape(2, 3), np.array([[1, 2]]), np.arange(3)), {}),
    ("block_diag", (R.reshape(1, 5), VC[:2]), {}),
]


def _same(out, ref):
    out = to_np(out)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype.kind in "iub":
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=4 * np.finfo(ref.dtype).eps, atol=0)


@pytest.mark.parametrize("name,args,kwargs", TENSOR_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(TENSOR_CASES)])
def test_tensor_inputs(device, name, args, kwargs):
    ref = getattr(sl, name)(*args, **kwargs)
    targs = [tensor(a, device) if isinstance(a, np.ndarray) else a for a in args]
    with aten_fallbacks(device) as host:
        out = getattr(tl, name)(*targs, **kwargs)
        assert out.device == device
        _same(out, ref)
    assert not host


NO_ARRAY_CASES = [
    ("hadamard", (1,), {}), ("hadamard", (8,), {}), ("hadamard", (4,), {"dtype": complex}),
    ("hadamard", (4,), {"dtype": np.float32}),
    ("helmert", (5,), {}), ("helmert", (5,), {"full": True}), ("hilbert", (5,), {}),
    ("invhilbert", (6,), {}), ("invhilbert", (14,), {"exact": True}),
    ("invhilbert", (3,), {"exact": True}),
    ("pascal", (5,), {}), ("pascal", (34,), {}), ("pascal", (6,), {"kind": "lower"}),
    ("pascal", (6,), {"kind": "upper", "exact": False}), ("pascal", (7,), {"exact": False}),
    ("invpascal", (5,), {}), ("invpascal", (34,), {}), ("invpascal", (6,), {"kind": "upper"}),
    ("invpascal", (6,), {"kind": "lower", "exact": False}),
    ("invpascal", (6,), {"exact": False}),
    ("dft", (5,), {}), ("dft", (4,), {"scale": "sqrtn"}), ("dft", (3,), {"scale": "n"}),
]


@pytest.mark.parametrize("name,args,kwargs", NO_ARRAY_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(NO_ARRAY_CASES)])
def test_device_keyword(device, name, args, kwargs):
    if device.type == "xla" and args[0] > 16:
        pytest.skip("the largest exact orders on the cpu lane only (XLA compile time; "
                    "same torch code)")
    ref = getattr(sl, name)(*args, **kwargs)
    with aten_fallbacks(device) as host:
        out = getattr(tl, name)(*args, device=device, **kwargs)
        assert out.device == device
        _same(out, ref)
    assert not host
    # without device=: SciPy's own result
    host_out = getattr(tl, name)(*args, **kwargs)
    assert isinstance(host_out, np.ndarray) and host_out.dtype == ref.dtype


def test_device_keyword_signature():
    import inspect

    for name in ("hadamard", "helmert", "hilbert", "invhilbert", "pascal", "invpascal", "dft"):
        p = inspect.signature(getattr(tl, name)).parameters["device"]
        assert p.kind is p.KEYWORD_ONLY and p.default is None


BAD = [
    ("leslie", (V, V), {}), ("leslie", (V[:1], V[:0]), {}),
    ("companion", (V[:1],), {}), ("companion", (np.array([0.0, 1, 2]),), {}),
    ("fiedler_companion", (np.array([0.0, 1, 2]),), {}),
    ("convolution_matrix", (V, 0), {}), ("convolution_matrix", (V, 3), {"mode": "x"}),
    ("convolution_matrix", (V[:0], 3), {}),
    ("khatri_rao", (V, V.reshape(2, 2)), {}),
    ("khatri_rao", (np.ones((2, 3)), np.ones((2, 2))), {}),
]


@pytest.mark.parametrize("name,args,kwargs", BAD, ids=[f"{c[0]}-{i}" for i, c in
                                                       enumerate(BAD)])
def test_bad_input_as_scipy(device, name, args, kwargs):
    with pytest.raises(Exception) as expected:
        getattr(sl, name)(*args, **kwargs)
    targs = [tensor(a, device) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(expected.type) as actual:
        getattr(tl, name)(*targs, **kwargs)
    assert str(actual.value) == str(expected.value)


BAD_NO_ARRAY = [("hadamard", (6,), {}), ("pascal", (4,), {"kind": "x"}),
                ("invpascal", (4,), {"kind": "x"}), ("dft", (4,), {"scale": "x"})]


@pytest.mark.parametrize("name,args,kwargs", BAD_NO_ARRAY)
def test_bad_no_array_input_as_scipy(device, name, args, kwargs):
    with pytest.raises(ValueError) as expected:
        getattr(sl, name)(*args, **kwargs)
    with pytest.raises(ValueError) as actual:
        getattr(tl, name)(*args, device=device, **kwargs)
    assert str(actual.value) == str(expected.value)


@pytest.mark.parametrize("name,n", [("invhilbert", 15), ("pascal", 35), ("invpascal", 35)])
def test_exact_beyond_int64_is_value_error(device, name, n):
    assert getattr(sl, name)(n, exact=True).dtype == object  # SciPy: Python integers
    with pytest.raises(ValueError, match="object array"):
        getattr(tl, name)(n, exact=True, device=device)
