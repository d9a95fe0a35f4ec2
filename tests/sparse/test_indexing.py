"""Row/column slicing and integer/fancy indexing, paired with SciPy."""

import numpy as np
import pytest
import scipy.sparse as sp

from tests.sparse.sparse_cases import assert_same, device_case, scipy_case

torch = pytest.importorskip("torch")

KEYS = [
    (slice(1, 4), slice(None)),
    (slice(None), slice(2, 7, 2)),
    (slice(None, None, -1), slice(1, 3)),
    ([0, 3, 3, 5], slice(None)),
    (slice(None), [7, 0, 2]),
    (np.array([5, 0]), np.s_[1:]),
    (2, slice(None)),
    (slice(None), -1),
    (np.array([True, False, True, False, True, False]), slice(None)),
]


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("which", range(len(KEYS)))
def test_matrix_indexing(lane, fmt, which):
    if lane == "xla" and (fmt != "csr" or which > 1):
        pytest.skip("XLA lane: representative subset")
    key = KEYS[which]
    host = scipy_case(fmt, "matrix", "float64")
    dev = device_case(host, lane)
    assert_same(dev[key], host[key])


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_array_slicing_and_scalars(lane, fmt):
    if lane == "xla" and fmt != "csr":
        pytest.skip("XLA lane: representative subset")
    host = scipy_case(fmt, "array", "float64")
    dev = device_case(host, lane)
    for key in KEYS[:6]:
        assert_same(dev[key], host[key])
    host.sum_duplicates()
    for i, j in ((0, 7), (3, 5), (2, 2), (-1, -1)):
        assert_same(dev[i, j], np.asarray(host[i, j]))


def test_index_errors():
    host = scipy_case("csr", "matrix", "float64")
    dev = device_case(host, "cpu")
    for key in ((6, 0), (0, -9), ([0, 6], slice(None))):
        with pytest.raises(IndexError):
            host[key]
        with pytest.raises(IndexError):
            dev[key]
    for cls, exc in ((sp.bsr_array, NotImplementedError), (sp.dia_array, TypeError),
                     (sp.coo_matrix, TypeError)):
        with pytest.raises(exc):
            cls(host)[0, 0]
        with pytest.raises(exc):
            device_case(cls(host), "cpu")[0, 0]


def test_getrow_getcol():
    host = scipy_case("csr", "matrix", "float64")
    dev = device_case(host, "cpu")
    assert_same(dev.getrow(3), host.getrow(3))
    assert_same(dev.getcol(-2), host.getcol(-2))
