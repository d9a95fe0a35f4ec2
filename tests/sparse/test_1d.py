"""1-D sparse arrays (SciPy 1.17's 1-D coo_array / csr_array) and the 1-D results of
sparse arrays (integer indexing, reductions along an axis), paired with SciPy."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
import trnscipy.sparse as ts
from tests.sparse.sparse_cases import assert_same, scipy_case

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "complex128"]
N = 9


def host_1d(fmt, dtype, seed=0):
    """A 1-D SciPy array with unsorted and duplicate coordinates and an explicit zero."""
    rng = np.random.default_rng(seed)
    idx = np.array([7, 1, 4, 1, 0, 5, 8])
    data = rng.standard_normal(idx.size) + 3
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(idx.size)
    data[5] = 0
    coo = sp.coo_array((data.astype(dtype), (idx,)), shape=(N,))
    return coo if fmt == "coo" else coo.tocsr()


def host_2d(fmt, kind="array", dtype="float64"):
    dense = np.array([[1.0, 0, 2, 0, -1], [0, 0, 3, 0, 0], [4, 0, 0, -5, 0],
                      [0, 0, 0, 0, 0]], dtype=dtype)
    return getattr(sp, f"{fmt}_{kind}")(dense)


def is_host(x):
    return not getattr(x, "_trnscipy_device_object", False)


def paired(op, host, dev, **kw):
    """op(host) vs op(dev): the same exception type, or the same result.

    SciPy gets a copy: some of its 1-D methods change a non-canonical COO in place
    (``tocsr`` sums duplicates into the shared data array)."""
    host = host.copy() if sp.issparse(host) else host
    dev = dev.copy() if not (is_host(dev) or isinstance(dev, type)) else dev
    try:
        want = op(host)
    except Exception as exc:  # SciPy's exception is the spec
        with pytest.raises(type(exc)):
            op(dev)
        return
    assert_same(op(dev), want, **kw)


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def test_construction_and_attributes():
    dense = np.array([0.0, 2, 0, -3, 5])
    t = torch.from_numpy(dense)
    for fmt in ("coo", "csr"):
        cls, host_cls = getattr(ts, f"{fmt}_array"), getattr(sp, f"{fmt}_array")
        cases = [
            (cls(t), host_cls(dense)),
            (cls(dense, device="cpu"), host_cls(dense)),
            (cls((5,), device="cpu"), host_cls((5,))),
            (cls((f64([1.0, 2]), (torch.tensor([0, 3]),)), shape=(5,)),
             host_cls(([1.0, 2], (np.array([0, 3]),)), shape=(5,))),
            (cls((f64([1.0, 2]), (torch.tensor([0, 3]),))),
             host_cls(([1.0, 2], (np.array([0, 3]),)))),
        ]
        if fmt == "csr":
            parts = (np.array([1.0, 2]), np.array([0, 2]), np.array([0, 2]))
            cases.append((cls(tuple(torch.from_numpy(p) for p in parts), shape=(4,)),
                          host_cls(parts, shape=(4,))))
        for ours, theirs in cases:
            assert_same(ours, theirs)
            assert isinstance(ours, cls) and isinstance(ours, ts.sparray)
            assert ours.ndim == theirs.ndim == 1
            assert ours.nnz == theirs.nnz
            assert ours.size == theirs.size
            assert_same(ours.toarray(), theirs.toarray())
            assert_same(ours.todense(), theirs.todense())
            assert_same(trnscipy.to_device(theirs, "cpu"), theirs)
            if fmt == "coo":
                assert len(ours.coords) == 1
                np.testing.assert_array_equal(trnscipy.to_host(ours.coords[0]), theirs.coords[0])
                np.testing.assert_array_equal(trnscipy.to_host(ours.col), theirs.col)
                np.testing.assert_array_equal(trnscipy.to_host(ours.row), theirs.row)
            else:
                np.testing.assert_array_equal(trnscipy.to_host(ours.indptr), theirs.indptr)
                np.testing.assert_array_equal(trnscipy.to_host(ours.indices), theirs.indices)
    with pytest.raises(ValueError):
        sp.coo_array(dense).row = np.zeros(3)
    with pytest.raises(ValueError):
        ts.coo_array(t).row = torch.zeros(3)
    # sparse matrices stay 2-D
    assert_same(ts.csr_matrix(t), sp.csr_matrix(dense))
    assert_same(ts.coo_matrix(t), sp.coo_matrix(dense))


def test_bad_input():
    dense = np.array([0.0, 2, 0])
    t = torch.from_numpy(dense)
    for name in ("csc_array", "bsr_array", "dia_array"):
        with pytest.raises(ValueError):
            getattr(sp, name)(dense)
        with pytest.raises(ValueError):
            getattr(ts, name)(t)
    for name in ("csc_array", "csr_matrix"):
        with pytest.raises(ValueError):
            getattr(sp, name)((5,))
        with pytest.raises(ValueError):
            getattr(ts, name)((5,), device="cpu")
    for args, kwargs in (((([1.0, 2], ([-1, 3],)),), {}),
                         ((([1.0, 2], ([0, 7],)),), {"shape": (5,)}),
                         ((([1.0, 2, 3], ([0, 3],)),), {"shape": (5,)}),
                         ((([1.0, 2], ([0, 3],)),), {"shape": (5, 5)})):
        host_args = args
        dev_args = ((f64(args[0][0]), (torch.tensor(args[0][1][0]),)),)
        with pytest.raises(ValueError):
            sp.coo_array(*host_args, **kwargs)
        with pytest.raises(ValueError):
            ts.coo_array(*dev_args, **kwargs)
    host = host_1d("coo", "float64")
    dev = trnscipy.to_device(host, "cpu")
    for x, y in ((host, dev), (host.tocsr(), dev.tocsr())):
        for op in (lambda a: a.tocsc(), lambda a: a.tobsr(), lambda a: a.todia(),
                   lambda a: a.sum(axis=1), lambda a: a.max(axis=1),
                   lambda a: a.argmin(axis=1), lambda a: a.diagonal(), lambda a: a[N],
                   lambda a: a[-N - 1], lambda a: a[[0, N]], lambda a: a[1, 2],
                   lambda a: a @ np.ones(N + 1), lambda a: a + np.ones(N + 1),
                   lambda a: a + sp.coo_array(np.ones(N + 1)), lambda a: a @ 2,
                   lambda a: a.reshape((2, 5))):
            paired(op, x, y)
        with pytest.raises(TypeError):
            len(y)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_methods(fmt, dtype):
    host = host_1d(fmt, dtype)
    dev = trnscipy.to_device(host, "cpu")
    ops = [
        lambda a: a.tocoo(), lambda a: a.tocsr(), lambda a: a.asformat("csr"),
        lambda a: a.astype(np.complex128), lambda a: a.astype(np.float32), lambda a: a.copy(),
        lambda a: a.sum(), lambda a: a.sum(axis=0), lambda a: a.sum(axis=-1),
        lambda a: a.mean(), lambda a: a.mean(axis=0),
        lambda a: a.T, lambda a: a.transpose(), lambda a: a.conj(), lambda a: a.real,
        lambda a: a.imag, lambda a: abs(a), lambda a: -a, lambda a: a * 2, lambda a: 3 * a,
        lambda a: a / 2, lambda a: a.power(2), lambda a: a.sqrt(), lambda a: a.expm1(),
        lambda a: a.reshape((1, N)), lambda a: a.reshape((N, 1)), lambda a: a.reshape(-1, 1),
        lambda a: a.reshape((N,)), lambda a: a.count_nonzero(), lambda a: a.nonzero(),
    ]
    if dtype != "complex128":  # trnscipy: ValueError for complex (SciPy: lexicographic)
        ops += [lambda a: a.max(), lambda a: a.min(axis=0), lambda a: a.nanmax(),
                lambda a: a.nanmin(), lambda a: a.argmax(), lambda a: a.argmin(axis=-1)]
    for op in ops:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # sqrt of negatives
            paired(op, host, dev)
    for method in ("sum_duplicates", "eliminate_zeros"):
        h, d = host.copy(), dev.copy()
        getattr(h, method)()
        getattr(d, method)()
        assert_same(d, h)
        assert d.nnz == h.nnz
    for shape in ((4,), (N + 3,), (2, N)):
        h, d = host.copy(), dev.copy()
        h.resize(shape)
        d.resize(shape)
        assert_same(d, h)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_operations(fmt, dtype):
    host, other = host_1d(fmt, dtype), host_1d("coo", dtype, seed=1)
    dev, dev_other = (trnscipy.to_device(x, "cpu") for x in (host, other))
    rng = np.random.default_rng(3)
    vec = rng.standard_normal(N).astype(dtype)
    mat, matT = rng.standard_normal((N, 3)).astype(dtype), rng.standard_normal((3, N))
    vec_t, mat_t, matT_t = (torch.from_numpy(x) for x in (vec, mat, matT))
    sparse2d = sp.csr_array(mat * (np.abs(mat) > 0.5))
    sparse2d_t = trnscipy.to_device(sparse2d, "cpu")
    pairs = [
        (lambda a, b: a + b, other, dev_other), (lambda a, b: a - b, other, dev_other),
        (lambda a, b: a * b, other, dev_other), (lambda a, b: a.multiply(b), other, dev_other),
        (lambda a, b: a @ b, other, dev_other), (lambda a, b: a.dot(b), other, dev_other),
        (lambda a, b: a != b, other, dev_other),
        (lambda a, b: a + b, vec, vec_t), (lambda a, b: a - b, vec, vec_t),
        (lambda a, b: b - a, vec, vec_t), (lambda a, b: a * b, vec, vec_t),
        (lambda a, b: a @ b, vec, vec_t), (lambda a, b: b @ a, vec, vec_t),
        (lambda a, b: a @ b, mat, mat_t), (lambda a, b: b @ a, matT, matT_t),
        (lambda a, b: a * b, matT, matT_t),
        (lambda a, b: a @ b, sparse2d, sparse2d_t),
        (lambda a, b: b.T @ a, sparse2d, sparse2d_t),
        (lambda a, b: b.T.multiply(a), sparse2d, sparse2d_t),
    ]
    if dtype != "complex128":
        pairs += [(lambda a, b: a.maximum(b), other, dev_other),
                  (lambda a, b: a.minimum(b), other, dev_other),
                  (lambda a, b: a.maximum(b), 1.5, 1.5), (lambda a, b: a.minimum(b), 0, 0),
                  (lambda a, b: a < b, 1.0, 1.0), (lambda a, b: a > b, 0.0, 0.0),
                  (lambda a, b: a > b, other, dev_other), (lambda a, b: a <= b, vec, vec_t)]
    for op, h, d in pairs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
            h = h.copy() if sp.issparse(h) else h
            paired(lambda a, op=op, h=h, d=d: op(a, h if is_host(a) else d), host, dev)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_indexing_1d(fmt):
    host = host_1d(fmt, "float64")
    host.sum_duplicates()
    dev = trnscipy.to_device(host, "cpu")
    mask = np.arange(N) % 3 == 0
    for key in (1, -2, np.int64(4), (5,), slice(1, 6), slice(None, None, -1),
                slice(2, None, 3), [0, 4, 4, -1], np.array([8, 1]), mask):
        paired(lambda a, key=key: a[key], host, dev)
    paired(lambda a: a[mask] if is_host(a) else a[torch.from_numpy(mask)], host, dev)


KEYS_1D = [1, -1, (2, slice(None)), (slice(None), 0), (slice(None), -2), (1, [0, 2, 4]),
           ([0, 3, 2], 2), (0, slice(1, 4)), (slice(None, None, -1), 3),
           (np.array([True, False, True, False]), 0)]


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_integer_index_on_arrays_gives_1d(fmt):
    host = host_2d(fmt)
    dev = trnscipy.to_device(host, "cpu")
    for key in KEYS_1D:
        paired(lambda a, key=key: a[key], host, dev)
        assert dev[key].ndim == 1
    for key in (4, -5, (0, 5), ([0, 4], 1)):
        paired(lambda a, key=key: a[key], host, dev)


def test_matrices_stay_2d():
    for fmt in ("csr", "csc"):
        host = host_2d(fmt, "matrix")
        dev = trnscipy.to_device(host, "cpu")
        for key in (1, (slice(None), 1), (1, [0, 2]), ([0, 2], 1)):
            assert_same(dev[key], host[key])
        assert_same(dev.max(axis=0), host.max(axis=0))
        assert_same(dev.nanmin(axis=1), host.nanmin(axis=1))
        assert_same(dev.argmax(axis=0), host.argmax(axis=0))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_axis_reductions_on_arrays(fmt, dtype):
    dense = np.array([[1.0, 0, 2, np.nan, -1], [0, 0, 3, np.nan, 0], [4, 0, 0, np.nan, 5],
                      [-2, 0, 0, np.nan, 7]], dtype=dtype)
    for values in (np.nan_to_num(dense, nan=-6.0), dense):
        host = getattr(sp, f"{fmt}_array")(values)
        dev = trnscipy.to_device(host, "cpu")
        names = ("nanmax", "nanmin") if np.isnan(values).any() else (
            "max", "min", "nanmax", "nanmin", "argmax", "argmin", "sum", "mean")
        for name in names:
            for axis in (0, 1, -1, None):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices
                    paired(lambda a, name=name, axis=axis: getattr(a, name)(axis=axis),
                           host, dev)
    with pytest.raises(ValueError):
        trnscipy.to_device(sp.csr_array(np.ones((2, 2), dtype=complex)), "cpu").max(axis=0)


def test_reshape_2d_array_to_1d():
    for fmt, kind in (("csr", "array"), ("coo", "array"), ("csc", "array"), ("csr", "matrix")):
        host = host_2d(fmt, kind)
        dev = trnscipy.to_device(host, "cpu")
        for shape in (20, (20,), (-1,)):
            paired(lambda a, shape=shape: a.reshape(shape), host, dev)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_expand_dims(fmt):
    host = host_1d(fmt, "float64")
    dev = trnscipy.to_device(host, "cpu")
    for axis in (0, 1, -1, -2, 2, -3, 1.0):
        paired(lambda a, axis=axis: ts.expand_dims(a, axis=axis), host, dev)
    assert_same(ts.expand_dims(dev, axis=0).tocsr(), sp.expand_dims(host, axis=0).tocsr())


def test_expand_dims_of_2d_is_scipys_on_the_host():
    host = host_2d("csr")
    dev = trnscipy.to_device(host, "cpu")
    want = sp.expand_dims(host, axis=1)
    with pytest.warns(trnscipy.DeviceFallbackWarning):
        got = ts.expand_dims(dev, axis=1)
    assert type(got) is type(want) and got.shape == want.shape == (4, 1, 5)
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    with pytest.raises(ValueError):
        ts.expand_dims(dev, axis=4)
    one_d = host_1d("coo", "float64")
    with pytest.warns(trnscipy.DeviceFallbackWarning):
        got = trnscipy.to_device(one_d, "cpu").reshape((1, N, 1))
    want = one_d.reshape((1, N, 1))
    assert type(got) is type(want) and got.shape == want.shape
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def test_offloaded_expand_dims():
    host = host_1d("csr", "float64")
    with trnscipy.offload("cpu"):
        got = ts.expand_dims(host, axis=-1)
    want = sp.expand_dims(host, axis=-1)
    assert type(got) is type(want) and got.shape == want.shape
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def test_xla_lane_1d(lane):
    """A few small 1-D paths on the lane's device (one shape, reused graphs)."""
    host = host_1d("coo", "float32")
    dev = trnscipy.to_device(host, lane)
    vec = np.arange(N, dtype=np.float32)
    vec_t = trnscipy.to_device(vec, lane)
    for op in (lambda a: a.toarray(), lambda a: a[2:7],
               lambda a: a @ (vec if is_host(a) else vec_t)):
        paired(op, host, dev)
    A = host_2d("csr", dtype="float32")
    A_dev = trnscipy.to_device(A, lane)
    for op in (lambda a: a.max(axis=0), lambda a: a[1]):
        paired(op, A, A_dev)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_stacking_and_kron_of_1d(fmt):
    host = host_1d(fmt, "float64")
    host.sum_duplicates()
    dev = trnscipy.to_device(host, "cpu")
    small = np.array([0.0, 2.0, -1.0])
    ops = [
        lambda m, a: m.hstack([a, a]), lambda m, a: m.vstack([a, a]),
        lambda m, a: m.hstack([a, a], format="csr"), lambda m, a: m.block_diag([a, a]),
        lambda m, a: m.kron(a, a), lambda m, a: m.kron(a, a, format="csr"),
        lambda m, a: m.kron(a, sp.coo_array(small) if m is sp else ts.coo_array(
            torch.from_numpy(small))),
        lambda m, a: m.kron(a, sp.csr_array(np.eye(2)) if m is sp else ts.csr_array(
            torch.eye(2, dtype=torch.float64))),
    ]
    for op in ops:
        paired(lambda a, op=op: op(sp if is_host(a) else ts, a), host, dev)


@pytest.mark.parametrize("name", ["csr_array", "csc_array", "bsr_array", "dia_array",
                                  "coo_array", "csr_matrix", "coo_matrix"])
def test_one_dimensional_constructor_inputs(name):
    """Each format and kind takes or rejects 1-D inputs as SciPy does."""
    data, idx = np.array([1.0, 2.0]), np.array([0, 3])
    cases = [(((5,),), {}), (((data, (idx,)),), {}), (((data, (idx,)),), {"shape": (5,)}),
             (((data, np.array([0, 2]), np.array([0, 2])),), {"shape": (4,)}),
             ((np.array([1.0, 0.0, 2.0]),), {})]
    for i, (args, kwargs) in enumerate(cases):
        dev_args = trnscipy.to_device(args, "cpu") if i else args
        paired(lambda c, a=args, d=dev_args, k=kwargs: c(*a, **k) if c.__module__.startswith(
            "scipy") else c(*d, device="cpu", **k), getattr(sp, name), getattr(ts, name))


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc"])
def test_random_array_1d(fmt):
    kwargs = {"density": 0.2, "format": fmt}
    paired(lambda f: f((50,), rng=3, **kwargs) if f is sp.random_array else f(
        (50,), rng=3, device="cpu", **kwargs), sp.random_array, ts.random_array)
    if fmt != "csc":  # a torch generator: SciPy's kind, format, shape and nnz
        ours = ts.random_array((50,), rng=torch.Generator().manual_seed(1), device="cpu",
                               **kwargs)
        theirs = sp.random_array((50,), rng=1, **kwargs)
        assert (ours.format, ours.shape, ours.nnz, ours.dtype) == (
            theirs.format, theirs.shape, theirs.nnz, theirs.dtype)
        assert ours.ndim == 1 and isinstance(ours, getattr(ts, f"{fmt}_array"))


@pytest.mark.parametrize("fmt,kind", [("csr", "array"), ("csc", "array"), ("coo", "array"),
                                      ("csr", "matrix")])
def test_paired_index_arrays(fmt, kind):
    """A[[i0, i1], [j0, j1]]: dense for CSR/CSC arrays, 1-D COO for COO arrays, 1 x k for
    matrices (SciPy: np.matrix); duplicate entries summed."""
    host = scipy_case(fmt, kind, "float64")  # unsorted, with duplicates
    dev = trnscipy.to_device(host, "cpu")
    rows, cols = (trnscipy.to_host(t).astype(np.int64) for t in dev.tocoo().coords)
    for key in ((rows, cols), (rows[:3], cols[:1]), ([-1, 1], [-1, 4]), ([0, 2], [1, 2, 0]),
                ([0, 6], [0, 0])):
        paired(lambda a, key=key: a[key], host, dev)


@pytest.mark.xla
def test_expand_dims_float64_on_neuron(xla_device, emulate_neuron, monkeypatch):
    """expand_dims moves data only: float64 stays exact on a device without float64, with
    no warning; a 2-D input's 3-D result is SciPy's, announced, from the exact data."""
    from tests.test_double_float import _recorded

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    host = host_1d("coo", "float64")
    host.data = host.data / 3  # all 53 bits in use
    dev = trnscipy.to_device(host, xla_device)
    got, ops = _recorded(lambda: ts.expand_dims(dev, axis=1))
    assert ops == [] and got.device.type == "xla"
    want = sp.expand_dims(host, axis=1)
    assert got.shape == want.shape
    np.testing.assert_array_equal(trnscipy.to_host(got).toarray(), want.toarray())
    monkeypatch.delenv("TRNSCIPY_STRICT")
    host2 = sp.coo_array(np.arange(1, 7).reshape(2, 3) / 3)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="more than 2 dimensions"):
        got = ts.expand_dims(trnscipy.to_device(host2, xla_device), axis=0)
    assert type(got) is sp.coo_array
    np.testing.assert_array_equal(got.toarray(), sp.expand_dims(host2, axis=0).toarray())
