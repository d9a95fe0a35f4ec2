"""Methods and operators, paired against SciPy: every format, kind and dtype."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
from tests.sparse.sparse_cases import (
    DTYPES,
    FORMATS,
    KINDS,
    assert_same,
    device_case,
    scipy_case,
    skip_unless_subset,
)

torch = pytest.importorskip("torch")


def _dev(x, lane):
    if sp.issparse(x) or isinstance(x, np.ndarray):
        return trnscipy.to_device(x, lane)
    return x


UNARY = {
    "toarray": lambda A: A.toarray(),
    "todense": lambda A: A.todense(),
    "tocsr": lambda A: A.tocsr(),
    "tocsc": lambda A: A.tocsc(),
    "tocoo": lambda A: A.tocoo(),
    "tobsr": lambda A: A.tobsr(blocksize=(2, 2)),
    "todia": lambda A: A.todia(),
    "asformat": lambda A: A.asformat("csc"),
    "copy": lambda A: A.copy(),
    "transpose": lambda A: A.transpose(),
    "T": lambda A: A.T,
    "conj": lambda A: A.conj(),
    "real": lambda A: A.real,
    "imag": lambda A: A.imag,
    "astype_c128": lambda A: A.astype(np.complex128),
    "sum": lambda A: A.sum(),
    "sum0": lambda A: A.sum(axis=0),
    "sum1": lambda A: A.sum(axis=1),
    "mean": lambda A: A.mean(),
    "mean0": lambda A: A.mean(axis=0),
    "mean1": lambda A: A.mean(axis=-1),
    "diagonal": lambda A: A.diagonal(),
    "diagonal1": lambda A: A.diagonal(k=1),
    "diagonal_2": lambda A: A.diagonal(k=-2),
    "trace": lambda A: A.trace(),
    "trace1": lambda A: A.trace(offset=1),
    "count_nonzero": lambda A: A.count_nonzero(),
    "nonzero": lambda A: A.nonzero(),
    "abs": lambda A: abs(A),
    "neg": lambda A: -A,
    "round": lambda A: round(A),
    "sqrt": lambda A: A.sqrt(),
    "sin": lambda A: A.sin(),
    "expm1": lambda A: A.expm1(),
    "tanh": lambda A: A.tanh(),
    "power2": lambda A: A.power(2),
    "mul2": lambda A: A * 2,
    "rmul": lambda A: 3 * A,
    "mulc": lambda A: A * 1.5,
    "div": lambda A: A / 2,
    "div_int": lambda A: A / 4.0,
    "add0": lambda A: A + 0,
    "reshape": lambda A: A.reshape((8, 6)),
    "reshapeF": lambda A: A.reshape((4, 12), order="F"),
}
REAL_ONLY = {
    "max": lambda A: A.max(),
    "min": lambda A: A.min(),
    "argmax": lambda A: A.argmax(),
    "argmin": lambda A: A.argmin(),
    "sign": lambda A: A.sign(),
    "floor": lambda A: A.floor(),
    "ceil": lambda A: A.ceil(),
    "trunc": lambda A: A.trunc(),
    "rint": lambda A: A.rint(),
    "deg2rad": lambda A: A.deg2rad(),
    "arctan": lambda A: A.arctan(),
    "log1p_abs": lambda A: abs(A).log1p(),
    "astype_f32": lambda A: A.astype(np.float32),
    "power_half": lambda A: abs(A).power(0.5),
    "maximum0": lambda A: A.maximum(0),
    "minimum_neg": lambda A: A.minimum(-0.5),
}
BINARY = {
    "add": lambda A, B: A + B,
    "sub": lambda A, B: A - B,
    "multiply": lambda A, B: A.multiply(B),
    "mul": lambda A, B: A * B.T if not isinstance(A, (sp.sparray, trnscipy.sparse.sparray))
    else A * B,
    "matmul_T": lambda A, B: A @ B.T,
    "maximum": lambda A, B: A.maximum(B),
    "minimum": lambda A, B: A.minimum(B),
}
DENSE_BINARY = {
    "add_dense": lambda A, D: A + D,
    "radd_dense": lambda A, D: D + A,
    "sub_dense": lambda A, D: A - D,
    "rsub_dense": lambda A, D: D - A,
    "multiply_dense": lambda A, D: A.multiply(D),
    "multiply_row": lambda A, D: A.multiply(D[:1]),
}


# Methods the XLA lane runs (a few graphs each; the CPU lane runs all).
XLA_OPS = {"toarray", "tocsc", "transpose", "sum0", "diagonal", "abs", "div", "max",
           "argmax", "add", "multiply", "add_dense", "mul"}


def _run(op, lane, *args):
    host = op(*args)
    dev = op(*(_dev(a, lane) for a in args))
    return dev, host


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary(lane, fmt, kind, dtype):
    skip_unless_subset(lane, fmt, kind, dtype)
    ops = dict(UNARY)
    if np.dtype(dtype).kind != "c":
        ops.update(REAL_ONLY)
    if lane == "xla":
        ops = {k: v for k, v in ops.items() if k in XLA_OPS}
    failures = []
    for name, op in ops.items():
        host = scipy_case(fmt, kind, dtype)
        dev = device_case(host, lane)
        try:
            with warnings.catch_warnings(), np.errstate(invalid="ignore"):
                warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
                want = op(host)
        except (AttributeError, ValueError):
            continue  # SciPy lacks it here (dia.max) or fails (bsr_matrix.mean)
        try:
            assert_same(op(dev), want)
        except Exception as exc:  # collect all, report together
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary(lane, fmt, kind, dtype):
    skip_unless_subset(lane, fmt, kind, dtype)
    if lane == "xla" and fmt != "csr":
        pytest.skip("XLA lane: one binary case")
    failures = []
    rng = np.random.default_rng(5)
    dense = rng.standard_normal((6, 8)).astype(dtype)
    for name, op in {**BINARY, **DENSE_BINARY}.items():
        if lane == "xla" and name not in XLA_OPS:
            continue
        if name in ("maximum", "minimum") and np.dtype(dtype).kind == "c":
            continue
        A = scipy_case(fmt, kind, dtype)
        B = scipy_case(fmt, kind, dtype, seed=7) if name in BINARY else dense
        try:
            assert_same(*_run(op, lane, A, B))
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr"])
@pytest.mark.parametrize("kind", KINDS)
def test_in_place_structure_ops(lane, fmt, kind):
    skip_unless_subset(lane, fmt, kind, "float32")
    for name in ("sum_duplicates", "eliminate_zeros", "sort_indices", "prune"):
        if fmt == "coo" and name in ("sort_indices", "prune"):
            continue
        host = scipy_case(fmt, kind, "float64")
        host.data[::3] = 0
        dev = device_case(host, lane)
        getattr(host, name)()
        getattr(dev, name)()
        assert_same(dev, host)
        assert dev.nnz == host.nnz, name
        if name in ("sum_duplicates", "sort_indices") and fmt != "coo":
            assert dev.has_sorted_indices
    host = scipy_case("csr", kind, "float64")
    dev = device_case(host, lane)
    assert_same(dev.sorted_indices(), host.sorted_indices())
    assert not dev.has_sorted_indices


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("kind", KINDS)
def test_setdiag_resize(lane, fmt, kind):
    skip_unless_subset(lane, fmt, kind, "float32")
    for k, values in ((0, 7.0), (1, [1.0, 2.0, 3.0]), (-2, np.arange(4.0) + 1)):
        host = scipy_case(fmt, kind, "float64")
        dev = device_case(host, lane)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
            host.setdiag(values, k)
        dev.setdiag(values, k)
        assert_same(dev, host)
    for shape in ((4, 5), (8, 9)):
        host = scipy_case(fmt, kind, "float64")
        dev = device_case(host, lane)
        host.resize(shape)
        dev.resize(shape)
        assert_same(dev, host)


def test_matrix_power_and_array_power():
    lane = "cpu"
    for kind in KINDS:
        host = scipy_case("csr", kind, "float64", shape=(6, 6))
        dev = device_case(host, lane)
        assert_same(dev ** 2, host ** 2)
        assert_same(dev ** 3, host ** 3)
    with pytest.raises(NotImplementedError):
        device_case(scipy_case("csr", "array", "float64"), lane).power(0)


def test_max_axis_matrix():
    host = scipy_case("csr", "matrix", "float64")
    dev = device_case(host, "cpu")
    assert_same(dev.max(axis=0), host.max(axis=0))
    assert_same(dev.min(axis=1), host.min(axis=1))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_argmin_argmax_axis(kind, dtype):
    rng = np.random.default_rng(11)
    dense = rng.integers(-2, 3, (7, 6)).astype(dtype)
    dense[:, 4] = 0  # an all-zero column
    dense[5] = 0  # an all-zero row
    dense[:, 1] = np.abs(dense[:, 1]) + 1  # a column without zeros
    host = getattr(sp, f"csr_{kind}")(dense)
    host.data[::4] = 0  # explicit zeros
    dev = device_case(host, "cpu")
    for name in ("argmax", "argmin"):
        for axis in (0, 1, -1):
            assert_same(getattr(dev, name)(axis=axis), getattr(host, name)(axis=axis))


def test_errors_match_scipy():
    host = scipy_case("csr", "array", "float64")
    dev = device_case(host, "cpu")
    for op in (lambda A: A + 1, lambda A: A.power(0)):
        with pytest.raises(NotImplementedError):
            op(host)
        with pytest.raises(NotImplementedError):
            op(dev)
    other = scipy_case("csr", "array", "float64", shape=(3, 3))
    for op in (lambda A, B: A + B, lambda A, B: A.multiply(B)):
        with pytest.raises(ValueError):
            op(host, other)
        with pytest.raises(ValueError):
            op(dev, device_case(other, "cpu"))
    empty = sp.csr_array((0, 0))
    with pytest.raises(ValueError):
        empty.max()
    with pytest.raises(ValueError):
        device_case(empty, "cpu").max()


def test_empty_matrices(lane):
    for shape in ((0, 0), (0, 4), (3, 0), (4, 4)) if lane == "cpu" else ((0, 4),):
        host = sp.csr_array(shape)
        dev = device_case(host, lane)
        assert_same(dev.toarray(), host.toarray())
        assert_same(dev.sum(axis=0), host.sum(axis=0))
        assert_same(dev.T, host.T)
        assert_same(dev + dev, host + host)
        assert_same(dev.tocoo(), host.tocoo())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_comparisons(lane, fmt, kind):
    if lane != "cpu" and (fmt, kind) != ("csr", "array"):
        pytest.skip("XLA lane: one format proves the path")
    host = scipy_case(fmt, kind, "float64")
    other = scipy_case(fmt, kind, "float64", seed=9)
    dev, dother = device_case(host, lane), device_case(other, lane)
    dense = np.random.default_rng(2).standard_normal((6, 8))
    ops = [lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b,
           lambda a, b: a > b, lambda a, b: a <= b, lambda a, b: a >= b]
    scalars = (0.5, 0, -0.5)
    if lane != "cpu":  # the stored-entries route once (XLA compile time)
        ops, scalars = ops[1:2], (0.5,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        for op in ops:  # sparse results where zero-vs-zero (or -scalar) is False
            assert_same(op(dev, dother), op(host, other))
            assert_same(op(dev, dev), op(host, host))
            for scalar in scalars:
                assert_same(op(dev, scalar), op(host, scalar))
            assert_same(op(dev, trnscipy.to_device(dense, lane)), np.asarray(op(host, dense)))


def test_sparse_comparisons_stay_sparse():
    """!=, <, > against sparse or scalar operands never build the M x N dense array
    (here 10^12 entries): SciPy computes them on the stored entries too."""
    n = 10**6
    host = sp.csr_array((np.array([1.0, -2.0, 3.0]), (np.array([0, 5, n - 1]),
                                                     np.array([1, 5, n - 1]))), shape=(n, n))
    other = sp.csr_array((np.array([1.0, 4.0]), (np.array([0, 7]), np.array([1, 2]))),
                         shape=(n, n))
    dev, dother = device_case(host, "cpu"), device_case(other, "cpu")
    def same(ours, ref):
        assert (ours.format, ours.dtype, ours.shape) == (ref.format, ref.dtype, ref.shape)
        got, want = ours.to_scipy().tocoo(), ref.tocoo()
        entries = [sorted(zip(c.row, c.col, c.data, strict=True)) for c in (got, want)]
        assert entries[0] == entries[1]

    for op in (lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a > b):
        same(op(dev, dother), op(host, other))
        same(op(dev, 0), op(host, 0))


@pytest.mark.xla
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_neuron_value_arithmetic_runs_on_host_with_warning(xla_device, emulate_neuron, dtype):
    """Under Neuron's limits, methods that compute on float64/complex values run on the
    host with a DeviceFallbackWarning (complex128 parts intact), and their results come
    back to the device; data movement (transpose, tocsc) stays there without one."""
    from conformance.device_ops import DeviceArithmetic

    host = scipy_case("csr", "array", dtype)
    A = trnscipy.to_device(host, xla_device)
    calls = {"sum": (lambda a: a.sum(axis=0)), "scale": (lambda a: a * 2.5),
             "neg": (lambda a: -a), "abs": abs,
             "astype": (lambda a: a.astype(np.complex64)),
             "count_nonzero": (lambda a: a.count_nonzero())}
    if dtype == "complex128":  # a real conj is a copy; float64 sparse sums run on the
        calls["conj"] = lambda a: a.conj()  # device (tests/test_double_float_constructors)
        calls["add"] = lambda a: a + a
    for name, call in calls.items():
        with pytest.warns(trnscipy.DeviceFallbackWarning, match="neuron devices have no"):
            ours = call(A)
        if isinstance(ours, torch.Tensor):
            assert ours.device.type == "xla", name
        elif not isinstance(ours, int):
            assert ours.device.type == "xla", name
        assert_same(ours, call(host))
    with DeviceArithmetic("xla", [torch.float64, torch.complex128]) as rec:
        moved = A.T.tocsc()
    assert rec.ops == []
    assert_same(moved, host.T.tocsc())


@pytest.mark.xla
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_xla_complex_quotients(xla_device, dtype):
    """mean and sparse / sparse (where b is nonzero: 0 / 0 differs between NumPy and torch)
    on complex data: torch-xla 2.9 labels a complex quotient float32 (``_dtypes.divide``),
    which these returned (imaginary part dropped)."""
    A = scipy_case("csr", "array", dtype)
    B = scipy_case("csr", "array", dtype, seed=7)
    calls = {"mean": lambda a, b: a.mean(), "mean0": lambda a, b: a.mean(axis=0),
             "mean1": lambda a, b: a.mean(axis=1), "div_sparse": lambda a, b: (a / b)[
                 b.toarray() != 0] if isinstance(a, sp.sparray) else (a / b)[
                     torch.from_numpy(b.to_scipy().toarray() != 0).to(xla_device)]}
    for name, call in calls.items():
        with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
            want = call(A, B)
            got = call(*(trnscipy.to_device(x, xla_device) for x in (A, B)))
        try:
            assert_same(got, want)
        except AssertionError as exc:
            raise AssertionError(name) from exc
