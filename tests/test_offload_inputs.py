"""Offload mode takes whatever SciPy takes (issue 25): array-likes compute on the offload
device, converted as SciPy converts them; a dtype, format or dimensionality the device
cannot hold runs on SciPy with a DeviceFallbackWarning; SciPy's results, warnings and
exception types either way.  Every case is paired against SciPy itself."""

import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

import trnscipy
import trnscipy.linalg
import trnscipy.sparse.linalg

pytest.importorskip("torch")

SPD = [[8, 2, 3], [2, 9, 3], [3, 3, 6]]


def _diag_list(n):
    return np.diag(np.arange(1.0, n + 1)).tolist()


def _scipy_outcome(call):
    """SciPy's result, or the exception it raised."""
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001 -- the outcome to compare against
        return None, exc


def _paired(lane, scipy_call, trn_call, fallback=False, warns=None):
    """Run ``trn_call`` inside offload(lane): SciPy's exception type where SciPy raises,
    else its result (returned, with SciPy's, for the caller to compare).  ``fallback``:
    the device cannot take the input, so a DeviceFallbackWarning must come.  ``warns``:
    a warning of SciPy's that must come too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy's own warnings: checked where they matter
        expected, error = _scipy_outcome(scipy_call)
    with trnscipy.offload(lane), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if error is not None:
            with pytest.raises(type(error)):
                trn_call()
            result = None
        else:
            result = trn_call()
    fell_back = any(issubclass(w.category, trnscipy.DeviceFallbackWarning) for w in caught)
    assert fell_back == fallback, [str(w.message) for w in caught]
    if warns is not None:
        assert any(issubclass(w.category, warns) for w in caught), [str(w.message) for w in caught]
    return result, expected


def test_cholesky_of_a_nested_list(lane):
    got, expected = _paired(lane, lambda: scipy.linalg.cholesky(SPD),
                            lambda: trnscipy.linalg.cholesky(SPD))
    assert type(got) is np.ndarray and got.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-14)


def test_array_likes_in_linalg(lane):
    """Lists and scalars for every operand; SciPy's dtype rules (ints compute in float64)."""
    b = [1, 2, 3]
    got, expected = _paired(lane, lambda: scipy.linalg.solve(SPD, b),
                            lambda: trnscipy.linalg.solve(SPD, b))
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    got, expected = _paired(lane, lambda: scipy.linalg.cho_solve((SPD, False), b),
                            lambda: trnscipy.linalg.cho_solve((SPD, False), b))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    # a scalar: SciPy's ValueError (not a matrix)
    _paired(lane, lambda: scipy.linalg.cholesky(4.0), lambda: trnscipy.linalg.cholesky(4.0))


@pytest.mark.parametrize("name", ["eigsh", "svds"])
def test_eigsh_and_svds_on_nested_lists(lane, name):
    """SciPy's eigsh and svds refuse a nested-list A (AttributeError, TypeError): so does
    offload; a list v0 with an array A computes."""
    A = _diag_list(8)
    scipy_f, trn_f = getattr(scipy.sparse.linalg, name), getattr(trnscipy.sparse.linalg, name)
    _paired(lane, lambda: scipy_f(A, k=2), lambda: trn_f(A, k=2))
    v0 = [1.0] * 8
    got, expected = _paired(lane, lambda: scipy_f(np.array(A), k=2, v0=v0),
                            lambda: trn_f(np.array(A), k=2, v0=v0))
    values = (lambda r: r[0]) if name == "eigsh" else (lambda r: r[1])
    np.testing.assert_allclose(np.sort(values(got)), np.sort(values(expected)), rtol=1e-10)


def test_expm_multiply_of_float128_runs_on_scipy(lane):
    A = np.diag(np.arange(1, 5)).astype(np.longdouble) / 4
    b = np.ones(4, dtype=np.longdouble)
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.expm_multiply(A, b),
                            lambda: trnscipy.sparse.linalg.expm_multiply(A, b), fallback=True)
    assert got.dtype == expected.dtype == np.longdouble
    np.testing.assert_array_equal(got, expected)


def test_linear_operator_of_clongdouble_runs_on_scipy(lane):
    """A host LinearOperator computing in a dtype no device holds (SciPy's test_expm_multiply
    dtype tests): SciPy computes, announced."""
    A = (np.diag(np.arange(1, 5)) / 4 + 0.5j * np.eye(4, k=1)).astype(np.clongdouble)
    b = np.ones(4, dtype=np.complex128)

    def call(module):
        return module.expm_multiply(module.aslinearoperator(A), b, traceA=complex(np.trace(A)))

    got, expected = _paired(lane, lambda: call(scipy.sparse.linalg),
                            lambda: call(trnscipy.sparse.linalg), fallback=True)
    assert got.dtype == expected.dtype == np.clongdouble
    np.testing.assert_array_equal(got, expected)


def test_lil_array_to_spsolve_runs_on_scipy(lane):
    A = scipy.sparse.lil_array(np.array([[4.0, 1, 0], [1, 4, 1], [0, 1, 4]]))
    b = np.array([1.0, 2.0, 3.0])
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.spsolve(A, b),
                            lambda: trnscipy.sparse.linalg.spsolve(A, b), fallback=True,
                            warns=scipy.sparse.SparseEfficiencyWarning)  # SciPy's own, kept
    np.testing.assert_array_equal(got, expected)


def test_formats_and_dimensions_without_device_form(lane):
    dok = scipy.sparse.dok_array(np.array([[1.0, -2.0], [0.0, 3.0]]))
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.norm(dok, 1),
                            lambda: trnscipy.sparse.linalg.norm(dok, 1), fallback=True)
    assert got == expected
    coo3 = scipy.sparse.coo_array(np.arange(8.0).reshape(2, 2, 2))
    _paired(lane, lambda: scipy.sparse.linalg.norm(coo3),
            lambda: trnscipy.sparse.linalg.norm(coo3), fallback=True)


@pytest.mark.parametrize("dtype", [np.uint64, np.uint16, np.uint32, object])
@pytest.mark.parametrize("name", ["solve", "inv", "det"])
def test_dtypes_without_device_form_run_on_scipy(lane, name, dtype):
    a = np.array([[3, 1], [1, 2]], dtype=dtype)
    args = (a, np.array([1, 2], dtype=dtype)) if name == "solve" else (a,)
    got, expected = _paired(lane, lambda: getattr(scipy.linalg, name)(*args),
                            lambda: getattr(trnscipy.linalg, name)(*args), fallback=True)
    if expected is not None:
        assert np.asarray(got).dtype == np.asarray(expected).dtype
        np.testing.assert_array_equal(got, expected)


def test_uint32_sparse_data_runs_on_scipy(lane):
    A = scipy.sparse.csr_array(np.array([[2, 1], [1, 3]], dtype=np.uint32))
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.norm(A, 1),
                            lambda: trnscipy.sparse.linalg.norm(A, 1), fallback=True)
    assert got == expected


def test_sparse_norm_bsr_and_integer_data(lane):
    """BSR stores its values in blocks; integer data gives float64 vector norms."""
    dense = np.array([[1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 5, 6], [0, 0, 7, 8]])
    bsr = scipy.sparse.bsr_array(dense.astype(np.float64), blocksize=(2, 2))
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.norm(bsr),
                            lambda: trnscipy.sparse.linalg.norm(bsr))
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    coo = scipy.sparse.coo_array(dense)
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.norm(coo, axis=0),
                            lambda: trnscipy.sparse.linalg.norm(coo, axis=0))
    assert got.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_sparse_expm_of_nested_tuple(lane):
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.expm(((1,),)),
                            lambda: trnscipy.sparse.linalg.expm(((1,),)))
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_spsolve_of_a_dense_list(lane):
    A, b = [[4.0, 1.0], [1.0, 3.0]], [1.0, 2.0]
    got, expected = _paired(lane, lambda: scipy.sparse.linalg.spsolve(A, b),
                            lambda: trnscipy.sparse.linalg.spsolve(A, b),
                            warns=scipy.sparse.SparseEfficiencyWarning)
    np.testing.assert_allclose(got, expected, rtol=1e-14)


def test_solve_toeplitz_singular_leading_minor(lane):
    """SciPy's Levinson recursion raises LinAlgError on a singular leading minor (the
    matrix itself may be regular): every lane raises it (the CPU runs SciPy's recursion,
    the others solve the dense system after SciPy's recursion checked c and r)."""
    y = np.random.RandomState(1234).randn(3)
    for c in ([2, 2, 1], ([1.0, 2.0, 3.0], [1.0, 1.0, 2.0])):
        cr = tuple(np.asarray(x) for x in c) if isinstance(c, tuple) else c
        _paired(lane, lambda cr=cr: scipy.linalg.solve_toeplitz(cr, y),
                lambda cr=cr: trnscipy.linalg.solve_toeplitz(cr, y))
    got, expected = _paired(lane, lambda: scipy.linalg.solve_toeplitz([4, 1, 0.5], y),
                            lambda: trnscipy.linalg.solve_toeplitz([4, 1, 0.5], y))
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def _same(got, expected):
    """Results equal to SciPy's: values, shapes and dtypes, item by item."""
    if isinstance(expected, tuple | list):
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _same(g, e)
        return
    if isinstance(expected, int) and not isinstance(expected, bool):
        assert got == expected
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got, expected)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)


_EMPTY = np.empty
# SciPy's edge cases (its own test files' scalar, empty and argument checks) that offload
# answered differently: (name, args, kwargs)
EDGE_CASES = [
    ("solve", (1, [1, 2, 3]), {}),
    ("solve", (0, 1), {}),
    ("solve", ([[0]], [0, 1]), {}),
    ("solve", (np.zeros((1, 1)), 1), {}),
    ("solve", ([[2.0]], [[1.0, 2.0], [3.0, 4.0]]), {}),
    ("inv", (np.eye(2),), {"assume_a": "kaboom"}),
    ("det", (_EMPTY((0, 0, 3)),), {}),
    ("det", (np.array([]),), {}),
    ("det", (np.array([[]]),), {}),
    ("lstsq", (np.zeros((4, 0)), np.ones(4)), {}),
    ("lstsq", (np.zeros((4, 0)), np.ones((4, 2))), {}),
    ("lstsq", (np.zeros((0, 2)), np.ones(0)), {}),
    ("qr", (np.zeros((2, 0)),), {"mode": "raw"}),
    ("qr", (np.zeros((2, 0)),), {"mode": "raw", "pivoting": True}),
    ("qr", (np.zeros((0, 2)),), {"pivoting": True}),
    ("qr", (np.zeros((2, 0)), ), {"mode": "economic", "pivoting": True}),
    ("qr", ([[8, 2, 3], [2, 9, 3], [5, 3, 6]],), {"lwork": 2}),
    ("qr", (np.ones((5, 3)),), {"lwork": 3}),
    ("qr", (np.ones((5, 3)),), {"lwork": 3, "mode": "economic"}),
    ("qr", (np.ones((3, 3)),), {"overwrite_a": {"lwork": 0}}),
    ("svd", ([[1.0]],), {"lapack_driver": 1.0}),
    ("lu", (_EMPTY((3, 0), dtype=np.complex64),), {}),
    ("lu", (_EMPTY((3, 0), dtype=np.complex64),), {"p_indices": True}),
    ("lu", (_EMPTY((0, 0, 3)),), {}),
    ("lu", (np.array([]),), {}),
    ("block_diag", (), {}),
    ("expm", (1,), {}),
    ("expm", (np.array([0.5j]),), {}),
    ("expm", (np.array([1.0, 2.0]),), {}),
    ("khatri_rao", (np.empty((0, 2)), np.empty((3, 2))), {}),
    ("khatri_rao", (np.ones((2, 0)), np.ones((3, 0))), {}),
    ("sqrtm", (np.array([[2, 4], [0, -2]], dtype=np.int8),), {}),
    ("sqrtm", (np.eye(3, dtype=np.int16),), {}),
    ("sqrtm", (np.eye(3, dtype=np.float16),), {}),
    ("clarkson_woodruff_transform", (np.arange(40.0).reshape(20, 2), 5), {"seed": 7}),
]


@pytest.mark.parametrize("name,args,kwargs", EDGE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(EDGE_CASES)])
def test_scipy_edge_cases_cpu(name, args, kwargs):
    """Scalar, empty and argument-check cases from SciPy's own tests: SciPy's results
    (shapes, dtypes, values) and exception types under offload (the lane they failed on;
    the checks run before any device arithmetic)."""
    got, expected = _paired("cpu", lambda: getattr(scipy.linalg, name)(*args, **kwargs),
                            lambda: getattr(trnscipy.linalg, name)(*args, **kwargs))
    if expected is not None:
        _same(got, expected)


def test_integer_sparse_matrix_to_tfqmr_cpu():
    """tfqmr converts an int64 matrix itself (A.astype): the CPU lane hands integer
    containers to SciPy's loop as SciPy sparse, not as its float-only product operator."""
    A = scipy.sparse.csr_array(np.diag(np.arange(1, 6)) + np.diag(np.ones(4, int), 1))
    b = np.arange(1.0, 6.0)
    got, expected = _paired("cpu", lambda: scipy.sparse.linalg.tfqmr(A, b),
                            lambda: trnscipy.sparse.linalg.tfqmr(A, b))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    assert got[1] == expected[1]


def test_solve_with_a_1x1_complex_a(lane):
    """A 1x1 ``a`` divides b (SciPy's rule) in complex arithmetic on every lane (torch-xla
    2.9 drops the imaginary part of a complex tensor division)."""
    a, b = np.array([[2.0 + 1.0j]]), np.array([1.0 + 1.0j, 3.0 - 1.0j])
    got, expected = _paired(lane, lambda: scipy.linalg.solve(a, b),
                            lambda: trnscipy.linalg.solve(a, b))
    np.testing.assert_allclose(got, expected, rtol=1e-14)
