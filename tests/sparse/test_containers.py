"""Construction of the device containers: every SciPy form, kinds, validation, dtypes."""

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
import trnscipy.sparse as ts
from tests.sparse.sparse_cases import FORMATS, assert_same

torch = pytest.importorskip("torch")

DENSE = np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 5, 0, 0], [0, 0, 0, 6]])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_from_dense_tensor(lane, fmt, kind):
    if lane == "xla" and fmt not in ("csr", "bsr"):
        pytest.skip("XLA lane: representative subset")
    cls = getattr(ts, f"{fmt}_{kind}")
    ours = cls(torch.tensor(DENSE, device=trnscipy.resolve_device(lane)))
    assert ours.device.type == lane
    assert_same(ours, getattr(sp, f"{fmt}_{kind}")(DENSE))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_host_input_gives_scipy_object(fmt, kind):
    cls = getattr(ts, f"{fmt}_{kind}")
    obj = cls(DENSE)
    assert type(obj) is getattr(sp, f"{fmt}_{kind}")
    assert isinstance(obj, cls)
    other = "matrix" if kind == "array" else "array"
    assert not isinstance(obj, getattr(ts, f"{fmt}_{other}"))
    assert isinstance(obj, ts.sparray if kind == "array" else ts.spmatrix)
    assert ts.issparse(obj)
    assert ts.isspmatrix(obj) == (kind == "matrix")
    assert getattr(ts, f"isspmatrix_{fmt}")(obj) == (kind == "matrix")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_device_kind_predicates(fmt, kind):
    ours = getattr(ts, f"{fmt}_{kind}")(DENSE, device="cpu")
    assert type(ours).__module__.startswith("trnscipy")
    assert isinstance(ours, getattr(ts, f"{fmt}_{kind}"))
    assert isinstance(ours, ts.sparray if kind == "array" else ts.spmatrix)
    assert not isinstance(ours, ts.spmatrix if kind == "array" else ts.sparray)
    assert ts.issparse(ours) and ts.isspmatrix(ours) == (kind == "matrix")
    assert getattr(ts, f"isspmatrix_{fmt}")(ours) == (kind == "matrix")
    assert not ts.issparse(torch.ones(2))


def test_compressed_tuple_forms(lane):
    dev = trnscipy.resolve_device(lane)
    data, indices, indptr = [1.0, 2, 3, 4], [2, 0, 1, 1], [0, 2, 2, 4]
    t = [torch.tensor(v, device=dev) for v in (data, indices, indptr)]
    t[0] = t[0].double()
    for kind in ("array", "matrix"):
        ours = getattr(ts, f"csr_{kind}")(tuple(t), shape=(3, 3))
        assert_same(ours, getattr(sp, f"csr_{kind}")((data, indices, indptr), shape=(3, 3)))
        assert not ours.has_sorted_indices
        ours = getattr(ts, f"csc_{kind}")(tuple(t))
        assert_same(ours, getattr(sp, f"csc_{kind}")((data, indices, indptr)))


def test_coo_tuple_forms_with_duplicates(lane):
    dev = trnscipy.resolve_device(lane)
    data, row, col = [1.0, 2, 3, 4], [2, 0, 2, 1], [1, 0, 1, 3]
    tr = torch.tensor(row, device=dev)
    tc = torch.tensor(col, device=dev)
    td = torch.tensor(data, device=dev, dtype=torch.float64)
    for fmt in ("coo", "csr", "csc"):
        for kind in ("array", "matrix"):
            ours = getattr(ts, f"{fmt}_{kind}")((td, (tr, tc)))
            theirs = getattr(sp, f"{fmt}_{kind}")((data, (row, col)))
            assert_same(ours, theirs)
            assert ours.nnz == theirs.nnz


def test_bsr_and_dia_tuple_forms():
    data = torch.arange(12.0).reshape(3, 2, 2)
    indices, indptr = torch.tensor([0, 1, 1]), torch.tensor([0, 2, 3])
    ours = ts.bsr_array((data, indices, indptr), shape=(4, 4))
    theirs = sp.bsr_array((data.numpy(), indices.numpy(), indptr.numpy()), shape=(4, 4))
    assert_same(ours, theirs)
    assert ours.blocksize == (2, 2) and ours.nnz == theirs.nnz
    ddata, offsets = torch.arange(8.0).reshape(2, 4) + 1, torch.tensor([0, -1])
    ours = ts.dia_matrix((ddata, offsets), shape=(4, 4))
    theirs = sp.dia_matrix((ddata.numpy(), offsets.numpy()), shape=(4, 4))
    assert_same(ours, theirs)
    assert ours.nnz == theirs.nnz


def test_from_other_sparse_and_dtype_copy():
    ours = ts.csr_array(torch.tensor(DENSE))
    for fmt in FORMATS:
        conv = getattr(ts, f"{fmt}_matrix")(ours, dtype=np.complex128)
        assert_same(conv, getattr(sp, f"{fmt}_matrix")(sp.csr_array(DENSE),
                                                       dtype=np.complex128))
    shared = ts.csr_array(ours)
    copied = ts.csr_array(ours, copy=True)
    assert shared.data.data_ptr() == ours.data.data_ptr()
    assert copied.data.data_ptr() != ours.data.data_ptr()
    from_host = ts.csr_matrix(sp.csr_matrix(DENSE), device="cpu")
    assert_same(from_host, sp.csr_matrix(DENSE))


def test_shape_only_and_empty(lane):
    for fmt in FORMATS:
        for shape in [(3, 4), (0, 0), (0, 5)]:
            if fmt == "bsr" and shape == (0, 5):
                continue
            ours = getattr(ts, f"{fmt}_array")(shape, device=lane)
            theirs = getattr(sp, f"{fmt}_array")(shape)
            assert_same(ours, theirs)
            assert ours.nnz == 0
            x = torch.ones(shape[1], dtype=torch.float64, device=ours.device)
            assert_same(ours @ x, theirs @ np.ones(shape[1]))


@pytest.mark.parametrize("bad, match", [
    ((np.array([1.0, 2]), np.array([0, 5]), np.array([0, 1, 2])), "column index"),
    ((np.array([1.0, 2]), np.array([0, -1]), np.array([0, 1, 2])), "column index"),
    ((np.array([1.0, 2]), np.array([0, 1]), np.array([0, 2, 1])), "non-decreasing"),
    ((np.array([1.0, 2]), np.array([0, 1]), np.array([1, 1, 2])), "start with 0"),
    ((np.array([1.0, 2]), np.array([0, 1]), np.array([0, 1, 3])), "Last value"),
    ((np.array([1.0, 2, 3]), np.array([0, 1]), np.array([0, 1, 2])), "same size"),
    ((np.array([1.0, 2]), np.array([0, 1]), np.array([0, 2])), "index pointer size"),
])
def test_bad_compressed_input_raises(lane, bad, match):
    dev = trnscipy.resolve_device(lane)
    t = tuple(torch.from_numpy(a).to(dev) for a in bad)
    with pytest.raises(ValueError, match=match):
        ts.csr_matrix(t, shape=(2, 3))


def test_bad_coo_bsr_dia_input_raises(lane):
    dev = trnscipy.resolve_device(lane)
    d = torch.ones(2, dtype=torch.float64, device=dev)
    with pytest.raises(ValueError, match="row index exceeds"):
        ts.coo_array((d, (torch.tensor([0, 3], device=dev), torch.tensor([0, 0],
                                                                         device=dev))),
                     shape=(3, 3))
    with pytest.raises(ValueError, match="negative column"):
        ts.coo_array((d, (torch.tensor([0, 1], device=dev), torch.tensor([0, -1],
                                                                         device=dev))),
                     shape=(3, 3))
    with pytest.raises(ValueError, match="same length"):
        ts.coo_array((d, (torch.tensor([0], device=dev), torch.tensor([0, 1], device=dev))),
                     shape=(3, 3))
    with pytest.raises(ValueError):
        ts.bsr_array((torch.ones(1, 2, 2, device=dev), torch.tensor([2], device=dev),
                      torch.tensor([0, 1, 1], device=dev)), shape=(4, 4))
    with pytest.raises(ValueError, match="duplicate"):
        ts.dia_array((torch.ones(2, 3, device=dev), torch.tensor([1, 1], device=dev)),
                     shape=(3, 3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unsupported_dtypes_raise_value_error(dtype):
    with pytest.raises(ValueError):
        ts.csr_array(torch.ones(2, 2, dtype=dtype))
    with pytest.raises(ValueError):
        sp.csr_array(np.ones((2, 2), dtype=np.float16))
    with pytest.raises(ValueError):
        ts.csr_array(torch.ones(2, 2), dtype=np.float16)


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_index_dtype_rules(kind):
    data, indices, indptr = np.array([1.0, 2]), np.array([0, 1]), np.array([0, 1, 2])
    for idx in (np.int32, np.int64):
        theirs = getattr(sp, f"csr_{kind}")((data, indices.astype(idx), indptr.astype(idx)),
                                            shape=(2, 2))
        ours = getattr(ts, f"csr_{kind}")(tuple(torch.from_numpy(a) for a in (
            data, indices.astype(idx), indptr.astype(idx))), shape=(2, 2))
        assert ours.to_scipy().indices.dtype == theirs.indices.dtype
        assert ours.to_scipy().indptr.dtype == theirs.indptr.dtype
        ours = getattr(ts, f"coo_{kind}")((torch.from_numpy(data),
                                           (torch.from_numpy(indices.astype(idx)),) * 2))
        theirs = getattr(sp, f"coo_{kind}")((data, (indices.astype(idx),) * 2))
        assert ours.to_scipy().row.dtype == theirs.row.dtype
    big = ts.csr_array((3, 2**31 + 5), device="cpu")
    assert big.indptr.dtype == torch.int64
    assert sp.csr_array((3, 2**31 + 5)).indptr.dtype == np.int64


def test_int_and_bool_data():
    for dtype in (torch.int32, torch.int64, torch.bool, torch.int8):
        dense = torch.tensor([[1, 0], [0, 1]]).to(dtype)
        ours = ts.csr_array(dense)
        theirs = sp.csr_array(dense.numpy())
        assert_same(ours, theirs)
