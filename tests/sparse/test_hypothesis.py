"""Random matrices with unsorted and duplicate entries and empty rows, paired with SciPy."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnscipy
from tests.sparse.sparse_cases import assert_same

torch = pytest.importorskip("torch")


@st.composite
def coo_inputs(draw):
    m = draw(st.integers(0, 7))
    n = draw(st.integers(0, 7))
    nnz = draw(st.integers(0, 20)) if m * n else 0
    rows = draw(st.lists(st.integers(0, max(m - 1, 0)), min_size=nnz, max_size=nnz))
    cols = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=nnz, max_size=nnz))
    vals = draw(st.lists(st.sampled_from([0.0, 1.0, -2.5, 3.0, 0.5]), min_size=nnz,
                         max_size=nnz))
    fmt = draw(st.sampled_from(["csr", "csc", "coo"]))
    kind = draw(st.sampled_from(["array", "matrix"]))
    return (np.array(vals), (np.array(rows, dtype=np.int32), np.array(cols, dtype=np.int32)),
            (m, n), fmt, kind)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(coo_inputs())
def test_random_matrices_against_scipy(case):
    data, (rows, cols), shape, fmt, kind = case
    coo = getattr(sp, f"coo_{kind}")((data, (rows, cols)), shape=shape)
    if fmt == "coo":
        host = coo
    else:  # unsorted indices with duplicates, straight from the entries
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        order = np.argsort(major, kind="stable")
        n_major = shape[0] if fmt == "csr" else shape[1]
        indptr = np.searchsorted(major[order], np.arange(n_major + 1)).astype(np.int32)
        host = getattr(sp, f"{fmt}_{kind}")((data[order], minor[order], indptr), shape=shape)
    dev = trnscipy.to_device(host, "cpu")
    t = torch.from_numpy
    x = np.arange(shape[1], dtype=np.float64) - 1.5
    if shape[1]:  # SciPy's (m, 0) COO @ x gives a 0-d result
        assert_same(dev @ t(x), host @ x)
    assert_same(dev.toarray(), host.toarray())
    assert_same(dev.tocsr(), host.tocsr())
    assert_same(dev.tocsc(), host.tocsc())
    assert_same(dev.T, host.T)
    assert_same(dev.sum(axis=0), host.sum(axis=0))
    assert_same(dev.diagonal(), host.diagonal())
    assert_same(dev + dev.T.T, host + host.T.T)
    assert_same(dev.multiply(dev), host.multiply(host))
    assert dev.count_nonzero() == host.count_nonzero()
    if shape[0] * shape[1]:
        assert_same(dev.max(), host.max())
        assert_same(dev.min(), host.min())
        assert dev.argmax() == host.argmax()
        assert dev.argmin() == host.argmin()
    dev.sum_duplicates()
    host.sum_duplicates()
    assert dev.nnz == host.nnz
    assert_same(dev, host)
