"""A container's plan (trnscipy/_kernels/_plan.py): its prepared objects and the one rule
that says when they are still valid."""

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
from trnscipy._kernels import _plan

torch = pytest.importorskip("torch")


def _csr():
    host = sp.random_array((30, 20), density=0.2, format="csr",
                           rng=np.random.default_rng(3))
    return host, trnscipy.to_device(host, "cpu")


def test_an_entry_lives_while_its_tensors_are_unchanged():
    _, A = _csr()
    built = []
    for _ in range(2):
        assert _plan.prepared(A, None, "probe", lambda: built.append(1) or "v") == "v"
    assert built == [1]
    assert _plan.get(A, "cpu", "probe") is None  # another kind: another entry
    A.data.mul_(2)  # an in-place write bumps data's version: values entries go
    assert _plan.get(A, None, "probe") is None
    _plan.put(A, None, "probe", "v")
    _plan.put(A, None, "pattern", "p", _plan.STRUCTURE)
    _plan.put(A, None, "view", "w", shared=True)
    A.data = A.data.clone()  # new values, same structure
    assert _plan.get(A, None, "probe") is None
    assert _plan.get(A, None, "view") is None
    assert _plan.get(A, None, "pattern") == "p"
    A.indices.add_(0)  # an in-place write to the structure
    assert _plan.get(A, None, "pattern") is None
    _plan.put(A, None, "pattern", "p", _plan.STRUCTURE)
    _plan.clear(A)
    assert _plan.get(A, None, "pattern") is None


def test_a_shared_entry_survives_in_place_writes():
    _, A = _csr()
    _plan.put(A, None, "view", "w", shared=True)
    A.data.mul_(3)
    assert _plan.get(A, None, "view") == "w"


def test_products_follow_changed_arrays():
    """Products (their prepared host product, torch CSR handle, row index) see in-place
    writes and replaced arrays, as SciPy's do."""
    host, A = _csr()
    x = np.random.default_rng(4).standard_normal(20)
    X = np.random.default_rng(5).standard_normal((20, 16))
    for _ in range(2):
        np.testing.assert_allclose((A @ torch.from_numpy(x)).numpy(), host @ x)
        np.testing.assert_allclose((A @ torch.from_numpy(X)).numpy(), host @ X)
    A.data.mul_(2)
    host = host * 2
    np.testing.assert_allclose((A @ torch.from_numpy(x)).numpy(), host @ x)
    A.data = A.data.clone() + 1
    host.data += 1
    np.testing.assert_allclose((A @ torch.from_numpy(x)).numpy(), host @ x)
    np.testing.assert_allclose((A @ torch.from_numpy(X)).numpy(), host @ X)
    row = A._major_index()
    assert row is A._major_index()  # prepared once
    A.sort_indices()
    np.testing.assert_array_equal(A._major_index().numpy(),
                                  np.repeat(np.arange(30), np.diff(host.indptr)))


@pytest.mark.xla
def test_the_plan_stays_behind_on_a_move(xla_device):
    """A container moved to another device holds other tensors: none of its entries."""
    host, A = _csr()
    A @ torch.ones(20, dtype=A.data.dtype)
    assert "_plan" in A.__dict__
    B = A.to(xla_device)
    assert B.__dict__.get("_plan") is not A.__dict__["_plan"]
    assert _plan.get(B, "cpu", "host_product") is None
    x = np.linspace(-1, 1, 20)
    np.testing.assert_allclose((B @ trnscipy.to_device(x, xla_device)).cpu().numpy(),
                               host @ x, rtol=1e-12)
