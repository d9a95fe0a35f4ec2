"""float64 constructors on an emulated Neuron device (issue 27 item 6): sparse eye,
eye_array, identity, rand, random, random_array; linalg hilbert, invhilbert, helmert;
clarkson_woodruff_transform.  Paired with SciPy; no float64 op runs on the device."""

import re

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp

from tests.linalg.test_double_float_lu import _on_neuron

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps


def _strict_neuron(monkeypatch, fn):
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    import trnscipy

    out, ops, aten, _ = _on_neuron(lambda: trnscipy.to_host(fn()))
    assert ops == [] and aten == 0
    return out


def _same_sparse(got, want):
    assert type(got) is type(want) and got.format == want.format and got.dtype == want.dtype
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    if want.format in ("csr", "csc"):
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        assert got.indices.dtype == want.indices.dtype
    if want.format == "coo":
        for g, w in zip(got.coords, want.coords, strict=True):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype


@pytest.mark.xla
def test_eye_identity(emulate_neuron, xla_device, monkeypatch):
    import trnscipy.sparse as tsp

    for fmt in (None, "csr", "csc", "coo"):
        for m, n in ((4, 4), (4, 6), (6, 4), (0, 3)):
            for k in (-2, 0, 1, 5):
                for ours, theirs in ((tsp.eye, sp.eye), (tsp.eye_array, sp.eye_array)):
                    try:
                        want = theirs(m, n, k=k, format=fmt)
                    except ValueError as e:  # SciPy's out-of-bounds offset
                        with pytest.raises(ValueError, match=re.escape(str(e))):
                            ours(m, n, k=k, format=fmt, device=xla_device)
                        continue
                    got = _strict_neuron(monkeypatch, lambda ours=ours, m=m, n=n, k=k, fmt=fmt:
                                         ours(m, n, k=k, format=fmt, device=xla_device))
                    _same_sparse(got, want)
        got = _strict_neuron(monkeypatch, lambda fmt=fmt: tsp.identity(5, format=fmt,
                                                                       device=xla_device))
        _same_sparse(got, sp.identity(5, format=fmt))


@pytest.mark.xla
def test_random_with_numpy_rng_is_scipys(emulate_neuron, xla_device, monkeypatch):
    """A NumPy rng draws on the host as SciPy does; the draws move exactly."""
    import functools

    import trnscipy.sparse as tsp

    cases = [("rand", (30, 20), dict(density=0.2, format="csr"), lambda: 1),
             ("random", (20, 30), dict(density=0.3), lambda: np.random.default_rng(2)),
             ("random_array", ((25, 25),), dict(density=0.1, format="csc"), lambda: 3)]
    for name, args, kw, rng in cases:
        ours = functools.partial(getattr(tsp, name), *args, rng=rng(), device=xla_device, **kw)
        got = _strict_neuron(monkeypatch, ours)
        _same_sparse(got, getattr(sp, name)(*args, rng=rng(), **kw))


@pytest.mark.xla
def test_random_drawn_by_torch(emulate_neuron, xla_device, monkeypatch):
    """torch's draws on a device without float64: float32 uniforms held exactly."""
    import trnscipy.sparse as tsp
    from trnscipy._double_float import is_exact

    torch.manual_seed(0)
    A = tsp.random_array((40, 30), density=0.25, format="csr", device=xla_device)
    assert is_exact(A.data)
    got = _strict_neuron(monkeypatch, lambda: A)
    assert got.dtype == np.float64 and got.nnz == 300
    assert ((got.data >= 0) & (got.data < 1)).all() and np.unique(got.data).size > 250
    np.testing.assert_array_equal(got.data, got.data.astype(np.float32))


@pytest.mark.xla
def test_hilbert_helmert_invhilbert(emulate_neuron, xla_device, monkeypatch):
    import functools

    import trnscipy.linalg as tl

    for n in (1, 2, 7):  # (helmert(0): SciPy raises IndexError)
        for name, kw in (("hilbert", {}), ("invhilbert", {}), ("helmert", {}),
                         ("helmert", dict(full=True))):
            want = getattr(sl, name)(n, **kw)
            got = functools.partial(getattr(tl, name), n, device=xla_device, **kw)
            got = _strict_neuron(monkeypatch, got)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)  # bitwise SciPy's values


@pytest.mark.xla
def test_clarkson_woodruff_transform(emulate_neuron, xla_device, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(5)
    wide = rng.standard_normal((60, 5)) * np.exp(rng.uniform(-20, 20, (60, 5)))
    for a, size in ((wide, 9), (rng.standard_normal((2, 30, 4)), 6),
                    (rng.standard_normal((50, 3)).astype(np.float32), 5)):  # float64 result
        A = trnscipy.to_device(a, xla_device)
        got = _strict_neuron(monkeypatch, lambda A=A, size=size:
                             tl.clarkson_woodruff_transform(A, size, rng=7))
        want = sl.clarkson_woodruff_transform(a, size, rng=7)
        bound = _abs_product(a, size)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert (np.abs(got - want) <= 64 * EPS * bound).all()
        assert not np.array_equal(want, 0 * want)


@pytest.mark.xla
def test_clarkson_woodruff_transform_seeds_share_graphs(emulate_neuron, xla_device):
    """A new seed draws a new sketch S, data of the same graphs: the double-float
    product's row padding follows S's longest row, which varies with the seed (each
    seed compiled its graphs again, 4 s here), so it is bucketed."""
    from scipy.linalg._sketches import cwt_matrix

    import trnscipy
    import trnscipy.linalg as tl
    from trnscipy._metrics import xla_counts

    a = np.random.default_rng(5).standard_normal((120, 3))
    seeds = range(4)
    longest = {int(np.diff(cwt_matrix(8, 120, rng=s).tocsr().indptr).max()) for s in seeds}
    assert len(longest) > 1  # (the seeds' S differ in their longest row)
    A = trnscipy.to_device(a, xla_device)
    for seed in seeds:
        with xla_counts() as counts:
            got = trnscipy.to_host(tl.clarkson_woodruff_transform(A, 8, rng=seed))
        want = sl.clarkson_woodruff_transform(a, 8, rng=seed)
        s = abs(cwt_matrix(8, 120, rng=seed))
        assert (np.abs(got - want) <= 64 * EPS * (s @ np.abs(a))).all()
        if seed > 0:
            assert counts.compilations == 0, (seed, counts)


def _abs_product(a, size):
    """|S| |a| for the sketch S that rng=7 draws (S's entries are +-1)."""
    from scipy.linalg._sketches import cwt_matrix

    s = abs(cwt_matrix(size, a.shape[-2], rng=np.random.default_rng(7)))  # what rng=7 gives
    return np.stack([s @ np.abs(m) for m in a.reshape(-1, *a.shape[-2:])]).reshape(
        *a.shape[:-2], size, a.shape[-1])


@pytest.mark.xla
def test_diags_and_dia_conversions(emulate_neuron, xla_device, monkeypatch):
    """Given diagonals move exactly; DIA's conversion drops stored zeros by testing the
    float32 high parts (zero iff the float64 value is), so csr/csc/coo/bsr stay on the
    device."""
    import functools

    import trnscipy.sparse as tsp

    d = [np.array([1 / 3, 2.0, -1e-20]), np.array([np.pi, 1.0, 0.0, 3.0]),
         np.array([0.1, 0.0, 7.0])]
    spd = np.array([[1 / 3, 2, 3, 4], [0.1, 0.2, 0.3, 0.0]])
    cases = [("diags_array", (d,), dict(offsets=[-1, 0, 1])),
             ("diags_array", (d,), dict(offsets=[-1, 0, 1], format="csr")),
             ("diags", (d,), dict(offsets=[-1, 0, 1], format="csc")),
             ("diags", ([1.0, -2.0, 1.0],), dict(offsets=[-1, 0, 1], shape=(5, 5),
                                                  format="coo")),
             ("spdiags", (spd, [0, -1], 4, 4), dict(format="csr")),
             ("eye_array", (4, 5), dict(k=1, format="bsr"))]
    for name, args, kw in cases:
        ours = functools.partial(getattr(tsp, name), *args, device=xla_device, **kw)
        got = _strict_neuron(monkeypatch, ours)
        want = getattr(sp, name)(*args, **kw)
        _same_sparse(got, want)
        assert got.nnz == want.nnz


def _poisson_parts(tsp, n, device):
    T = tsp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), device=device)
    return T, tsp.eye(n, device=device)


@pytest.mark.xla
def test_kron_poisson(emulate_neuron, xla_device, monkeypatch):
    """The 2-D Poisson matrix's Kronecker products (BSR route for small n, COO for
    larger): integer values, exactly SciPy's, and no float64 op on the device."""
    import trnscipy.sparse as tsp

    for n, fmts in ((3, (None, "csr")), (9, (None, "coo"))):
        T_sp = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
        for fmt in fmts:
            for ours, want in (((1, 0), sp.kron(sp.eye(n), T_sp, format=fmt)),
                               ((0, 1), sp.kron(T_sp, sp.eye(n), format=fmt))):
                got = _strict_neuron(monkeypatch, lambda n=n, fmt=fmt, ours=ours: tsp.kron(
                    *[_poisson_parts(tsp, n, xla_device)[i] for i in ours], format=fmt))
                _same_sparse(got, want)
                if want.format == "bsr":
                    assert got.blocksize == want.blocksize


@pytest.mark.xla
def test_kron_random_values(emulate_neuron, xla_device, monkeypatch):
    """Non-integer float64 values: each product a_i * b_j within double-float rounding
    (1e-15 relative) of SciPy's; mixed dtypes (int64 with float64) too."""
    import trnscipy
    import trnscipy.sparse as tsp

    rng = np.random.default_rng(27)
    a = sp.random_array((5, 4), density=0.5, rng=rng, format="csr")
    b = sp.random_array((3, 6), density=0.4, rng=rng, format="coo") * 1e3
    dense_b = sp.csr_array(rng.standard_normal((2, 3)))
    ints = sp.csr_array(np.array([[3, 0], [0, -7]], dtype=np.int64))
    for x, y, fmt in ((a, b, None), (b, a, "csr"), (a, dense_b, None), (ints, a, "csc"),
                      (a, ints, None)):
        got = _strict_neuron(monkeypatch, lambda x=x, y=y, fmt=fmt: tsp.kron(
            trnscipy.to_device(x, xla_device), trnscipy.to_device(y, xla_device),
            format=fmt))
        want = sp.kron(x, y, format=fmt)
        assert type(got) is type(want) and got.format == want.format
        assert got.dtype == want.dtype and got.nnz == want.nnz
        g, w = got.toarray(), want.toarray()
        assert (np.abs(g - w) <= 1e-15 * np.abs(w)).all()
        assert np.count_nonzero(w) > 0


@pytest.mark.xla
@pytest.mark.slow  # 33-41 s; conformance runs kron, kronsum float64 on xla-neuron in CI
def test_poisson_2d(emulate_neuron, xla_device, monkeypatch):
    """kron(I, T) + kron(T, I) and kronsum(T, T): the 2-D Poisson matrix, exactly
    SciPy's, on the device (kron, the sparse sum, kronsum)."""
    import trnscipy.sparse as tsp

    for n, fmt in ((4, None),):
        T_sp = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
        I_sp = sp.eye(n)
        T, eye = _poisson_parts(tsp, n, xla_device)
        got = _strict_neuron(monkeypatch, lambda T=T, eye=eye: tsp.kron(eye, T) + tsp.kron(T, eye))
        _same_sparse(got, sp.kron(I_sp, T_sp) + sp.kron(T_sp, I_sp))
        got = _strict_neuron(monkeypatch, lambda T=T, fmt=fmt: tsp.kronsum(T, T, format=fmt))
        _same_sparse(got, sp.kronsum(T_sp, T_sp, format=fmt))


@pytest.mark.xla
def test_sparse_sum_random_values(emulate_neuron, xla_device, monkeypatch):
    """The sparse + and - of float64 containers: overlapping positions added in
    triple-float (1e-15 relative of SciPy's), cancellations dropped as SciPy drops them,
    SciPy's formats and index dtypes."""
    import trnscipy

    rng = np.random.default_rng(6)
    a = sp.random_array((7, 6), density=0.5, rng=rng).toarray()
    b = sp.random_array((7, 6), density=0.5, rng=rng).toarray() * 1e-3
    a[0, 0], b[0, 0] = -0.25, 0.25  # a cancellation
    a, b = sp.csr_array(a), sp.csr_array(b)
    ints = sp.csr_array(rng.integers(-3, 4, (7, 6)) * (rng.random((7, 6)) < 0.4))
    empty = sp.csr_array((7, 6))
    cases = [(a, b, "+"), (a, b, "-"), (b.tocsc(), a.tocsc(), "+"), (a.tocoo(), ints, "+"),
             (empty, empty, "+")]
    for x, y, op in cases:
        def run(x=x, y=y, op=op):
            x, y = trnscipy.to_device(x, xla_device), trnscipy.to_device(y, xla_device)
            return x + y if op == "+" else x - y

        got = _strict_neuron(monkeypatch, run)
        want = x + y if op == "+" else x - y
        assert type(got) is type(want) and got.format == want.format
        assert got.dtype == want.dtype and got.nnz == want.nnz
        if want.format in ("csr", "csc"):
            np.testing.assert_array_equal(got.indptr, want.indptr)
            np.testing.assert_array_equal(got.indices, want.indices)
            assert got.indices.dtype == want.indices.dtype
        g, w = got.toarray(), want.toarray()
        assert (np.abs(g - w) <= 1e-15 * np.abs(w)).all()
