"""Sparse constructors and find/tril/triu, paired against SciPy on the device lanes.

Every device result is checked against SciPy's result for the same inputs:
kind (array/matrix) and format (the type of its host copy), shape, dtype, index
dtype, nnz and values; and that it lives on the lane's device.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import trnscipy
import trnscipy.sparse as ts
from tests.sparse.strategies import FLOAT_DTYPES, sparse_matrices
from trnscipy import to_device, to_host

torch = pytest.importorskip("torch")

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def cpu():
    return torch.device("cpu")


def _index_dtypes(M):
    if M.format in ("csr", "csc", "bsr"):
        return M.indices.dtype, M.indptr.dtype
    if M.format == "coo":
        return tuple(c.dtype for c in M.coords)
    if M.format == "dia":
        return (M.offsets.dtype,)
    return ()


def assert_same(ours, theirs, device, nnz=True):
    """``ours`` (device object) is SciPy's ``theirs`` on ``device``."""
    assert getattr(ours, "_trnscipy_device_object", False), type(ours)
    assert ours.device.type == device.type
    host = to_host(ours)
    assert type(host) is type(theirs)
    assert host.shape == theirs.shape
    assert host.dtype == theirs.dtype
    assert _index_dtypes(host) == _index_dtypes(theirs)
    if nnz:
        assert host.nnz == theirs.nnz
    assert_array_equal(host.toarray(), theirs.toarray())


def _tensor(a, device):
    return torch.as_tensor(np.asarray(a)).to(device)


# --------------------------------------------------------------------------- host route


def test_host_inputs_give_scipy_objects_untouched():
    A = sp.random_array((4, 5), density=0.5, rng=0, format="csr")
    cases = [
        (ts.eye(3, k=1), sp.eye(3, k=1)),
        (ts.diags([1.0, 2.0, 3.0], 1), sp.diags([1.0, 2.0, 3.0], 1)),
        (ts.kron(A, A.T), sp.kron(A, A.T)),
        (ts.hstack([A, A]), sp.hstack([A, A])),
        (ts.block_diag([A, [[1, 2]]]), sp.block_diag([A, [[1, 2]]])),
        (ts.tril(A), sp.tril(A)),
        (ts.random(3, 4, density=0.5, rng=1), sp.random(3, 4, density=0.5, rng=1)),
    ]
    for ours, theirs in cases:
        assert type(ours) is type(theirs) and type(ours).__module__.startswith("scipy")
        assert_array_equal(ours.toarray(), theirs.toarray())
    for got, want in zip(ts.find(A), sp.find(A), strict=True):
        assert isinstance(got, np.ndarray)
        assert_array_equal(got, want)


def test_constructors_are_not_offloaded():
    with trnscipy.offload("cpu"):
        result = ts.eye(3, format="csr")
    assert type(result) is sp.csr_matrix


def test_signature_and_docstring_name_device():
    import inspect

    for f in (ts.eye, ts.eye_array, ts.identity, ts.diags, ts.diags_array, ts.spdiags,
              ts.random, ts.random_array, ts.rand):
        assert "device" in inspect.signature(f).parameters
        assert "device" in f.__doc__
    assert "torch" in ts.random_array.__doc__


# --------------------------------------------------------------------------- eye, identity


EYE_CASES = [(3, None, 0, None, float), (3, None, 0, "csr", np.float32),
             (3, None, 0, "csc", np.int32), (3, None, 0, "coo", np.complex128),
             (4, 2, 1, None, float), (2, 5, -1, "csr", np.float64), (3, 3, 2, "csc", float),
             (0, None, 0, "csr", float), (4, 3, -2, "coo", np.int64)]


@pytest.mark.parametrize("m,n,k,fmt,dtype", EYE_CASES)
def test_eye_device_keyword(cpu, m, n, k, fmt, dtype):
    assert_same(ts.eye(m, n, k, dtype=dtype, format=fmt, device=cpu),
                sp.eye(m, n, k, dtype=dtype, format=fmt), cpu)
    assert_same(ts.eye_array(m, n, k=k, dtype=dtype, format=fmt, device="cpu"),
                sp.eye_array(m, n, k=k, dtype=dtype, format=fmt), cpu)


def test_eye_offset_out_of_bounds(cpu):
    with pytest.raises(ValueError):
        sp.eye(3, 3, 5)
    with pytest.raises(ValueError):
        ts.eye(3, 3, 5, device=cpu)


@pytest.mark.parametrize("fmt", [None, "csr"])
def test_eye_identity_on_lanes(device, fmt):
    assert_same(ts.identity(4, format=fmt, device=device), sp.identity(4, format=fmt), device)
    assert_same(ts.eye_array(3, 4, k=1, dtype=np.float32, format=fmt, device=device),
                sp.eye_array(3, 4, k=1, dtype=np.float32, format=fmt), device)


# --------------------------------------------------------------------------- diagonals


DIAG_CASES = [
    dict(diagonals=[[1.0, 2.0, 3.0], [4.0, 5.0]], offsets=[0, 1]),
    dict(diagonals=[[1, 2], [3, 4, 5], [6, 7]], offsets=[-1, 0, 1], dtype=None),
    dict(diagonals=[[1.5j, 2.0]], offsets=[-2], shape=(4, 3), format="csr"),
    dict(diagonals=[1, -2, 1], offsets=[-1, 0, 1], shape=(5, 5), dtype=np.float32),
    dict(diagonals=[1.0, 2.0, 3.0], offsets=1, format="coo"),
    dict(diagonals=[[1.0, 2.0, 3.0, 4.0]], offsets=[2], shape=(2, 6), format="csc"),
]


@pytest.mark.parametrize("case", DIAG_CASES)
def test_diags_device_keyword(cpu, case):
    case = dict(case)
    diagonals = case.pop("diagonals")
    for ours_f, sp_f in ((ts.diags, sp.diags), (ts.diags_array, sp.diags_array)):
        assert_same(ours_f(diagonals, device=cpu, **case), sp_f(diagonals, **case), cpu)


def test_diags_from_tensors_on_lanes(device):
    diagonals = [np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0], np.float32)]
    tensors = [_tensor(d, device) for d in diagonals]
    assert_same(ts.diags(tensors, [0, -1], format="csr"), sp.diags(diagonals, [0, -1],
                                                                   format="csr"), device)
    assert_same(ts.diags_array(tensors, offsets=[0, 1]), sp.diags_array(diagonals,
                                                                        offsets=[0, 1]), device)
    data = np.arange(8.0).reshape(2, 4)
    assert_same(ts.spdiags(_tensor(data, device), [0, 2], 4, 4),
                sp.spdiags(data, [0, 2], 4, 4), device)


def test_spdiags_device_keyword(cpu):
    data = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert_same(ts.spdiags(data, [0, -1], device=cpu), sp.spdiags(data, [0, -1]), cpu)
    assert_same(ts.spdiags(data, [1, -1], (3, 5), format="csr", device=cpu),
                sp.spdiags(data, [1, -1], (3, 5), format="csr"), cpu)


def test_diags_integer_input_warns_as_scipy(cpu):
    with pytest.warns(FutureWarning):
        theirs = sp.diags([[1, 2], [3]], [0, 1])
    with pytest.warns(FutureWarning):
        ours = ts.diags([[1, 2], [3]], [0, 1], device=cpu)
    assert_same(ours, theirs, cpu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts.diags([[1.0, 2.0]], [0], device=cpu)


@pytest.mark.parametrize("args,kwargs", [
    (([[1, 2, 3], [4, 5]], [0, 1]), dict(shape=(4, 4))),   # diagonal too short
    (([[1, 2], [3]], [0]), {}),                            # more diagonals than offsets
    (([[1, 2, 3]], [5]), dict(shape=(3, 3))),              # offset out of bounds
    (([[1, 2, 3], [4, 5, 6]], 0), {}),                     # scalar offset, two diagonals
    (([[1, 2, 3], [4, 5, 6]], [0, 0]), {}),                # repeated offsets
])
def test_diags_errors_as_scipy(cpu, args, kwargs):
    with pytest.raises(ValueError):
        sp.diags(*args, dtype=None, **kwargs)
    with pytest.raises(ValueError):
        ts.diags(*args, dtype=None, device=cpu, **kwargs)
    with pytest.raises(ValueError):
        ts.diags([_tensor(d, cpu) for d in args[0]], args[1], dtype=None, **kwargs)


# --------------------------------------------------------------------------- kron, kronsum


def _operand(A, device, how):
    return to_device(A, device) if how == "sparse" else _tensor(A.toarray(), device)


@pytest.mark.parametrize("kind_a,kind_b,fmt", [
    ("sparse", "sparse", None), ("sparse", "dense", "csr"), ("dense", "sparse", None),
    ("dense", "dense", None), ("sparse", "sparse", "bsr"), ("sparse", "sparse", "coo")])
@pytest.mark.parametrize("array", [True, False])
def test_kron(cpu, kind_a, kind_b, fmt, array):
    cls = sp.csr_array if array else sp.csr_matrix
    A = cls(np.array([[1.0, 0, 2], [0, 0, 3]]))
    B = sp.coo_array(np.array([[0, 4], [5, 6]], dtype=np.float32)) if array else \
        sp.coo_matrix(np.array([[0, 4], [5, 6]], dtype=np.float32))
    theirs = sp.kron(A if kind_a == "sparse" else A.toarray(),
                     B if kind_b == "sparse" else B.toarray(), format=fmt)
    ours = ts.kron(_operand(A, cpu, kind_a), _operand(B, cpu, kind_b), format=fmt)
    assert_same(ours, theirs, cpu)


def test_kron_on_lanes(device):
    A = sp.random_array((3, 4), density=0.4, rng=2, format="csr")
    B = sp.random_array((2, 5), density=0.3, rng=3, format="coo")
    assert_same(ts.kron(to_device(A, device), to_device(B, device)), sp.kron(A, B), device)
    dense = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert_same(ts.kron(to_device(A, device), _tensor(dense, device)), sp.kron(A, dense), device)


def test_kron_with_empty_operand(cpu):
    A = sp.csr_matrix((2, 3))
    B = sp.csr_matrix(np.eye(2))
    for fmt in (None, "csr"):
        assert_same(ts.kron(to_device(A, cpu), to_device(B, cpu), format=fmt),
                    sp.kron(A, B, format=fmt), cpu)


@pytest.mark.parametrize("fmt", [None, "csr"])
def test_kronsum(device, fmt):
    A = sp.csr_array(np.array([[2.0, -1], [-1, 2]]))
    B = sp.csr_array(np.array([[1.0, 0, 3], [0, 1, 0], [2, 0, 1]], dtype=np.float32))
    assert_same(ts.kronsum(to_device(A, device), to_device(B, device), format=fmt),
                sp.kronsum(A, B, format=fmt), device)


def test_kronsum_rejects_non_square(cpu):
    A = sp.csr_matrix(np.ones((2, 3)))
    with pytest.raises(ValueError):
        sp.kronsum(A, A)
    with pytest.raises(ValueError):
        ts.kronsum(to_device(A, cpu), to_device(A, cpu))


# --------------------------------------------------------------------------- stacking


def _blocks(fmt, array, dtypes=(np.float64, np.float64, np.float64, np.float64)):
    rng = np.random.default_rng(5)
    cls = getattr(sp, f"{fmt}_{'array' if array else 'matrix'}")
    shapes = [(2, 3), (2, 1), (4, 3), (4, 1)]
    return [cls(np.where(rng.random(s) < 0.5, rng.integers(1, 9, s), 0).astype(d))
            for s, d in zip(shapes, dtypes, strict=True)]


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("array", [True, False])
@pytest.mark.parametrize("out", [None, "csr", "coo"])
def test_stacks(cpu, fmt, array, out):
    a, b, c, d = _blocks(fmt, array, (np.float64, np.float32, np.int32, np.float64))
    da, db, dc, dd = (to_device(x, cpu) for x in (a, b, c, d))
    assert_same(ts.hstack([da, db], format=out), sp.hstack([a, b], format=out), cpu)
    assert_same(ts.vstack([da, dc], format=out), sp.vstack([a, c], format=out), cpu)
    assert_same(ts.bmat([[da, db], [dc, dd]], format=out),
                sp.bmat([[a, b], [c, d]], format=out), cpu)
    assert_same(ts.bmat([[da, None], [None, dd]], format=out, dtype=np.complex64),
                sp.bmat([[a, None], [None, d]], format=out, dtype=np.complex64), cpu)
    assert_same(ts.block_array([[da, db], [dc, None]], format=out),
                sp.block_array([[a, b], [c, None]], format=out), cpu)


def test_blocks_in_an_object_array(cpu):
    a, b, c, d = _blocks("csr", False)
    grid = np.empty((2, 2), dtype=object)
    grid[:] = [[a, b], [c, None]]
    theirs = sp.bmat(grid)
    grid[:] = [[to_device(a, cpu), to_device(b, cpu)], [to_device(c, cpu), None]]
    assert_same(ts.bmat(grid), theirs, cpu)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_stacks_on_lanes(device, fmt):
    a, b, c, d = _blocks(fmt, True)
    da, db, dc, dd = (to_device(x, device) for x in (a, b, c, d))
    assert_same(ts.bmat([[da, db], [dc, dd]]), sp.bmat([[a, b], [c, d]]), device)
    assert_same(ts.block_array([[da, None], [None, dd]], format="csr"),
                sp.block_array([[a, None], [None, d]], format="csr"), device)


@given(A=sparse_matrices(formats=("csr", "csc"), dtypes=FLOAT_DTYPES, shape=(3, 4)),
       B=sparse_matrices(formats=("csr", "csc"), dtypes=FLOAT_DTYPES, shape=(3, 2)))
@SETTINGS
def test_stacks_keep_duplicates_and_order(cpu, A, B):
    assert_same(ts.hstack([to_device(A, cpu), to_device(B, cpu)]), sp.hstack([A, B]), cpu)
    assert_same(ts.vstack([to_device(A.T, cpu), to_device(B.T, cpu)]),
                sp.vstack([A.T, B.T]), cpu)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dia"])
@pytest.mark.parametrize("array", [True, False])
def test_stacks_index_dtype_int64_as_scipy(cpu, fmt, array):
    # sparse arrays keep an int64 index dtype they are given; matrices downcast
    a, b, c, _ = _blocks(fmt, array)
    if fmt == "coo":
        a.coords = tuple(x.astype(np.int64) for x in a.coords)
    elif fmt != "dia":
        a.indices, a.indptr = a.indices.astype(np.int64), a.indptr.astype(np.int64)
    da, db, dc = (to_device(x, cpu) for x in (a, b, c))
    for out in (None, "csr"):
        assert_same(ts.hstack([da, db], format=out), sp.hstack([a, b], format=out), cpu)
        assert_same(ts.vstack([da, dc], format=out), sp.vstack([a, c], format=out), cpu)
        assert_same(ts.block_diag([da, db], format=out), sp.block_diag([a, b], format=out), cpu)
    assert_same(ts.kron(da, db), sp.kron(a, b), cpu)
    assert_same(ts.kron(da, db, format="coo"), sp.kron(a, b, format="coo"), cpu)


def test_stack_errors_as_scipy(cpu):
    a, b, c, _ = _blocks("csr", True)
    da, db, dc = (to_device(x, cpu) for x in (a, b, c))
    for f, args in ((sp.hstack, [a, c]), (sp.vstack, [a, b]), (sp.bmat, [[a, c]]),
                    (sp.bmat, [a, b]), (sp.bmat, [[a, None], [b]])):
        with pytest.raises(ValueError):
            f(args)
    for f, args in ((ts.hstack, [da, dc]), (ts.vstack, [da, db]), (ts.bmat, [[da, dc]]),
                    (ts.bmat, [da, db]), (ts.bmat, [[da, None], [db]])):
        with pytest.raises(ValueError):
            f(args)


@pytest.mark.parametrize("array", [True, False])
@pytest.mark.parametrize("fmt", [None, "csr"])
def test_block_diag(cpu, array, fmt):
    a, _, c, _ = _blocks("csr", array, (np.float32, np.float64, np.float64, np.float64))
    dense = np.array([[1.0, 0.0], [0.0, 2.0]])
    theirs = sp.block_diag([a, dense, [[0, 3]], 7, c], format=fmt)
    ours = ts.block_diag([to_device(a, cpu), _tensor(dense, cpu), [[0, 3]], 7,
                          to_device(c, cpu)], format=fmt)
    assert_same(ours, theirs, cpu)
    assert_same(ts.block_diag([to_device(a, cpu), to_device(c, cpu)], dtype=np.complex128),
                sp.block_diag([a, c], dtype=np.complex128), cpu)


def test_block_diag_on_lanes(device):
    a, _, c, _ = _blocks("coo", True)
    assert_same(ts.block_diag([to_device(a, device), to_device(c, device)], format="csr"),
                sp.block_diag([a, c], format="csr"), device)


# --------------------------------------------------------------------------- find, tril, triu


@given(A=sparse_matrices(), k=st.integers(-3, 3), fmt=st.sampled_from([None, "csr", "coo"]))
@SETTINGS
def test_find_tril_triu(cpu, A, k, fmt):
    dA = to_device(A, cpu)
    assert_same(ts.tril(dA, k, format=fmt), sp.tril(A, k, format=fmt), cpu)
    assert_same(ts.triu(dA, k, format=fmt), sp.triu(A, k, format=fmt), cpu)
    got, want = ts.find(dA), sp.find(A)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, torch.Tensor) and g.device == cpu
        assert to_host(g).dtype == w.dtype
    # SciPy sums duplicates into a canonical order: compare as sets of entries
    triples = sorted(zip(*(to_host(g).tolist() for g in got), strict=True), key=repr)
    assert triples == sorted(zip(*(w.tolist() for w in want), strict=True), key=repr)


def test_find_tril_triu_on_lanes(device):
    A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 3, 0, 4], [5, 0, 0, 6]]))
    dA = to_device(A, device)
    assert_same(ts.tril(dA, -1), sp.tril(A, -1), device)
    assert_same(ts.triu(dA, 1, format="csr"), sp.triu(A, 1, format="csr"), device)
    assert_same(ts.triu(_tensor(A.toarray(), device)), sp.triu(A.toarray()), device)
    for g, w in zip(ts.find(dA), sp.find(A), strict=True):
        assert g.device.type == device.type
        assert_array_equal(to_host(g), w)


# --------------------------------------------------------------------------- random


def _check_random(ours, theirs, device):
    """Structure as SciPy's (same arguments, NumPy's draws): values may differ."""
    assert getattr(ours, "_trnscipy_device_object", False)
    assert ours.device.type == device.type
    host = to_host(ours)
    assert type(host) is type(theirs)
    assert (host.shape, host.dtype, host.nnz) == (theirs.shape, theirs.dtype, theirs.nnz)
    assert _index_dtypes(host) == _index_dtypes(theirs)
    coo = host.tocoo()
    assert len(set(zip(coo.row.tolist(), coo.col.tolist(), strict=True))) == coo.nnz
    return coo.data


@pytest.mark.parametrize("dtype", [None, np.float32, np.complex64, np.int8])
@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_random_structure(cpu, dtype, fmt):
    ours = ts.random_array((6, 7), density=0.3, format=fmt, dtype=dtype, device=cpu)
    theirs = sp.random_array((6, 7), density=0.3, format=fmt, dtype=dtype, rng=0)
    data = _check_random(ours, theirs, cpu)
    if np.dtype(dtype).kind == "c":
        assert ((data.real >= 0) & (data.real < 1) & (data.imag >= 0) & (data.imag < 1)).all()
    elif np.dtype(dtype).kind == "f":
        assert ((data >= 0) & (data < 1)).all()
    _check_random(ts.random(5, 4, 0.5, fmt, dtype, device=cpu),
                  sp.random(5, 4, 0.5, fmt, dtype, rng=0), cpu)
    _check_random(ts.rand(4, 6, density=0.25, format=fmt, device=cpu),
                  sp.rand(4, 6, density=0.25, format=fmt, rng=0), cpu)


def test_random_on_lanes(device):
    _check_random(ts.random_array((8, 5), density=0.4, format="csr", device=device),
                  sp.random_array((8, 5), density=0.4, format="csr", rng=0), device)
    _check_random(ts.random(3, 3, density=1.0, dtype=np.float32, device=device),
                  sp.random(3, 3, density=1.0, dtype=np.float32, rng=0), device)


def test_random_values_are_uniform(cpu):
    data = to_host(ts.random_array((200, 100), density=0.5, device=cpu)).data
    assert data.size == 10000 and data.min() >= 0 and data.max() < 1
    assert abs(data.mean() - 0.5) < 0.02  # 10 standard deviations of the mean


def test_random_large_sparse_shape(cpu):
    # 4e6 positions, 400 drawn: the sampling-with-rejection route
    ours = ts.random(2000, 2000, density=1e-4, format="csr", device=cpu)
    _check_random(ours, sp.random(2000, 2000, density=1e-4, format="csr", rng=0), cpu)


def test_random_torch_generator(cpu):
    def draw(seed):
        return to_host(ts.random_array((5, 6), density=0.5, rng=torch.Generator().manual_seed(
            seed)))

    a, b, c = draw(7), draw(7), draw(8)
    assert_array_equal(a.toarray(), b.toarray())
    assert not np.array_equal(a.toarray(), c.toarray())
    ours = ts.random(4, 4, rng=torch.Generator().manual_seed(1))  # builds on its device
    assert ours.device.type == "cpu"


@pytest.mark.parametrize("source", ["generator", "seed"])
def test_random_numpy_source_gives_scipy_values(cpu, source):
    theirs = sp.random_array((5, 6), density=0.4, format="csr", rng=np.random.default_rng(3))
    rng = np.random.default_rng(3) if source == "generator" else 3
    assert_same(ts.random_array((5, 6), density=0.4, format="csr", rng=rng, device=cpu),
                theirs, cpu)


def test_random_data_samplers(cpu):
    ours = ts.random(4, 5, density=0.5, data_rvs=lambda n: np.full(n, 2.0), device=cpu)
    assert (to_host(ours).data == 2.0).all()
    ours = ts.random_array((4, 5), density=0.5, dtype=np.float32, device=cpu,
                           data_sampler=lambda size: torch.full((size,), 3.0))
    theirs = sp.random_array((4, 5), density=0.5, dtype=np.float32, rng=0,
                             data_sampler=lambda size: np.full(size, 3.0))
    assert (_check_random(ours, theirs, cpu) == 3.0).all()


def test_random_bad_density(cpu):
    for density in (-0.1, 1.5):
        with pytest.raises(ValueError):
            sp.random(3, 3, density=density)
        with pytest.raises(ValueError):
            ts.random(3, 3, density=density, device=cpu)


# --------------------------------------------------------------------------- device keyword


def test_device_keyword_errors():
    with pytest.raises(ValueError):
        ts.eye(3, device="nonsense")
    with pytest.raises(TypeError):
        ts.eye(3, device=3)


@pytest.mark.xla
def test_device_keyword_conflicting_operand(xla_device):
    with pytest.raises(ValueError):
        ts.diags([torch.ones(3)], [0], device=xla_device)


@pytest.mark.xla
def test_xla_repeated_constructors_do_not_recompile(xla_device):
    from trnscipy._metrics import xla_counts

    A = to_device(sp.random_array((6, 5), density=0.4, rng=0, format="csr"), xla_device)
    calls = [lambda: ts.eye(6, format="csr", device=xla_device),
             lambda: ts.diags_array([[1.0, 2.0], [3.0, 4.0, 5.0]], offsets=[1, 0],
                                    device=xla_device),
             lambda: ts.kron(A, A, format="coo"),
             lambda: ts.vstack([A, A])]
    for call in calls:
        call()
        with xla_counts() as counts:
            call()
        assert counts.compilations == 0, counts
        assert counts.executions <= 6, counts


@pytest.mark.xla
def test_neuron_limits_send_complex_builds_to_host(xla_device, emulate_neuron):
    """float64 ones are built on the device as exact storage (no warning); complex, which
    a NeuronCore does not hold, is built on the host (warned)."""
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="complex"):
        ours = ts.eye(3, dtype=complex, format="csr", device=xla_device)
    assert_same(ours, sp.eye(3, dtype=complex, format="csr"), xla_device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.float32, np.float64):
            assert_same(ts.eye(3, dtype=dtype, device=xla_device),
                        sp.eye(3, dtype=dtype), xla_device)


@pytest.mark.xla
def test_neuron_float64_from_dense_and_stacking_on_device(xla_device, emulate_neuron):
    """Finding the nonzeros of an exact (double-float) dense float64 tensor compares its
    float32 high parts with zero (device, no float64 op, no warning); a cast to float32
    rounds float64 values (host, warned under Neuron's limits); stacking float64 matrices
    only moves stored values (device, no warning)."""
    from conformance.device_ops import DeviceArithmetic

    dense = np.array([[1 / 3, 0, 2], [0, 0, 3], [4, 5, 0.1]])
    t = to_device(dense, xla_device)
    for fmt, kw in (("csr", {}), ("bsr", {"blocksize": (1, 1)}), ("dia", {})):
        with DeviceArithmetic("xla", [torch.float64]) as rec:
            ours = getattr(ts, f"{fmt}_array")(t, **kw)
        assert rec.ops == []
        assert_same(ours, getattr(sp, f"{fmt}_array")(dense, **kw), xla_device)
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="float64"):
        ts.csr_array(t, dtype=np.float32)  # a cast rounds float64 values
    host = sp.csr_array(dense)
    a = to_device(host, xla_device)
    with DeviceArithmetic("xla", [torch.float64]) as rec:  # no warning either
        ours = ts.hstack([a, ts.vstack([a, a])[1:4]])
    assert rec.ops == []
    assert_same(ours, sp.hstack([host, sp.vstack([host, host])[1:4]]), xla_device)


@pytest.mark.xla
def test_neuron_float64_duplicate_sums_and_scatter_on_device(xla_device, emulate_neuron):
    """Summing duplicates of exact float64 data is double-float addition on the device (no
    float64 op, no warning; 1 + 2**-40 keeps its low part, a single 1/3 all its bits);
    densifying a canonical matrix is a scatter of stored values (device, no warning)."""
    from conformance.device_ops import DeviceArithmetic

    host = sp.coo_array((np.array([1.0, 2.0 ** -40, 1 / 3, 4.0]), (np.array([0, 0, 1, 2]),
                                                                 np.array([1, 1, 0, 2]))),
                        shape=(3, 3))
    c = to_device(host, xla_device)
    with DeviceArithmetic("xla", [torch.float64]) as rec:
        ours = c.tocsr()
        assert_array_equal(to_host(c.toarray()), host.toarray())
    assert rec.ops == []
    assert_same(ours, host.tocsr(), xla_device)
    with DeviceArithmetic("xla", [torch.float64]) as rec:
        dense = ours.toarray()
    assert rec.ops == []
    assert_array_equal(to_host(dense), host.toarray())
