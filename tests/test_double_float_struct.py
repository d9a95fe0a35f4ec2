"""float64 structure, comparison and product functions on an emulated Neuron device (issue
27): sparse tril, triu, find; is_sptriangular, spbandwidth, bandwidth; companion,
fiedler_companion, leslie, fiedler.  Paired with SciPy on float64 NumPy inputs; no
float64 op runs on the device (the recorder) and no host fallback (TRNSCIPY_STRICT=1).
Data movement gives SciPy's values bitwise; arithmetic (triple-float quotients and
differences) within a unit of float64 rounding.  Small shapes, shared between tests:
XLA compiles few graphs."""

import re

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from tests.linalg.test_double_float_lu import _on_neuron
from tests.test_double_float_constructors import _same_sparse

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps
RNG = np.random.default_rng(27)
# full 53-bit mantissas over a wide range of magnitudes (the low parts matter)
VALUES = RNG.standard_normal(12) * np.exp(RNG.uniform(-8, 8, 12))


def _strict_neuron(monkeypatch, fn):
    """fn() under TRNSCIPY_STRICT=1 on the emulated Neuron device, its results on the host
    (Python scalars kept); no float64 op and no aten fallback ran on the device."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    from trnscipy._transfer import _to_host

    out, ops, aten, _ = _on_neuron(lambda: _to_host(fn(), strict=False))
    assert ops == [] and aten == 0, (ops, aten)
    return out


def _sparse(fmt, shape=(6, 5), density=0.5, seed=1):
    a = sp.random_array(shape, density=density, rng=seed, format="csr")
    a.data = VALUES[np.arange(a.nnz) % VALUES.size]
    return a.asformat(fmt)


def _close(got, want, ulps=1):
    """float64 results within ``ulps`` units of float64 rounding of SciPy's."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert (np.abs(got - want) <= ulps * EPS * np.abs(want)).all(), np.max(
        np.abs(got - want) / np.maximum(np.abs(want), 1e-300))


# ---- group 1: structure and data movement ---------------------------------------------


@pytest.mark.xla
def test_tril_triu_find(emulate_neuron, xla_device, monkeypatch):
    import trnscipy
    import trnscipy.sparse as tsp

    dup = sp.coo_array((np.array([VALUES[0], VALUES[1], VALUES[2], -VALUES[2], VALUES[3]]),
                        (np.array([0, 0, 3, 3, 1]), np.array([1, 1, 2, 2, 1]))), shape=(6, 5))
    for a in (_sparse("csr"), _sparse("coo"), sp.csc_matrix(_sparse("csr"))):
        for k in (-1, 2):
            for ours, theirs in ((tsp.tril, sp.tril), (tsp.triu, sp.triu)):
                got = _strict_neuron(monkeypatch, lambda a=a, k=k, ours=ours: ours(
                    trnscipy.to_device(a, xla_device), k=k, format="csr"))
                _same_sparse(got, theirs(a, k=k, format="csr"))
    got = _strict_neuron(monkeypatch, lambda: tsp.tril(trnscipy.to_device(dup, xla_device)))
    want = sp.tril(dup)
    assert got.format == want.format == "coo" and got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    for a in (_sparse("csr"), dup):  # find sums duplicates (triple-float: SciPy's sum)
        got = _strict_neuron(monkeypatch, lambda a=a: tsp.find(trnscipy.to_device(a, xla_device)))
        for g, w in zip(got, sp.find(a), strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    dense = _sparse("csr").toarray()  # a dense tensor: taken as COO
    got = _strict_neuron(monkeypatch, lambda: tsp.triu(trnscipy.to_device(dense, xla_device)))
    _same_sparse(got, sp.triu(dense))


@pytest.mark.xla
def test_triangularity_and_bandwidths(emulate_neuron, xla_device, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl
    import trnscipy.sparse.linalg as tspla

    lower = sp.tril(_sparse("csr"), -1)
    for a in (_sparse("csr"), lower.tocsr(), lower.tocoo(), sp.triu(_sparse("csc")).tocsc(),
              sp.dia_array(lower)):
        for ours, theirs in ((tspla.is_sptriangular, spla.is_sptriangular),
                             (tspla.spbandwidth, spla.spbandwidth)):
            got = _strict_neuron(monkeypatch, lambda a=a, ours=ours: ours(
                trnscipy.to_device(a, xla_device)))
            assert tuple(got) == tuple(theirs(a))
    for a in (_sparse("csr").toarray(), lower.toarray(), np.zeros((3, 4))):
        got = _strict_neuron(monkeypatch, lambda a=a: tl.bandwidth(
            trnscipy.to_device(a, xla_device)))
        assert tuple(got) == tuple(sl.bandwidth(a))
    empty = trnscipy.to_device(sp.csr_array((3, 3)), xla_device)
    with pytest.raises(ValueError, match="zero-size array"):
        tspla.spbandwidth(empty)
    with pytest.raises(ValueError, match="2D"):
        tl.bandwidth(trnscipy.to_device(VALUES, xla_device))


@pytest.mark.xla
def test_special_matrices(emulate_neuron, xla_device, monkeypatch):
    """leslie places its values (bitwise SciPy's); companion and fiedler_companion divide
    by the leading coefficient and negate, fiedler subtracts: triple-float, within a unit
    of float64 rounding."""
    import trnscipy
    import trnscipy.linalg as tl

    v = VALUES[:6]
    batch = VALUES[:12].reshape(2, 6)
    cases = [("leslie", (v, VALUES[6:11]), 0),
             ("leslie", (batch, VALUES[:5]), 0),
             ("companion", (batch,), 1),
             ("companion", (np.array([3, -7, 2, 11, 5, 1 << 40]),), 1),  # integers: float64
             ("fiedler_companion", (v,), 1), ("fiedler_companion", (v[:2],), 1),
             ("fiedler_companion", (batch,), 1), ("fiedler", (batch,), 1)]
    for name, args, ulps in cases:
        want = getattr(sl, name)(*args)
        got = _strict_neuron(monkeypatch, lambda name=name, args=args: getattr(tl, name)(
            *(trnscipy.to_device(a, xla_device) for a in args)))
        if ulps:
            _close(got, want, ulps)
        else:
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    dev = lambda a: trnscipy.to_device(np.asarray(a, dtype=np.float64), xla_device)  # noqa: E731
    for fn, args in ((tl.companion, ([0.0, 1.0, 2.0],)), (tl.companion, ([1.0],)),
                     (tl.fiedler_companion, ([0.0, 1.0, 2.0],)),
                     (tl.leslie, (v, v)), (tl.leslie, ([1.0], []))):
        scipy_fn = getattr(sl, fn.__name__)
        with pytest.raises(ValueError) as expected:
            scipy_fn(*(np.asarray(a, dtype=np.float64) for a in args))
        with pytest.raises(ValueError, match=re.escape(str(expected.value)[:40])):
            fn(*(dev(a) for a in args))


# ---- group 2: comparisons ---------------------------------------------------------------


@pytest.mark.xla
def test_issymmetric_ishermitian(emulate_neuron, xla_device, monkeypatch):
    """Equality reads every exact part (a difference in the low bits, invisible to
    float32, counts); tolerances are tested in triple-float, SciPy's answers."""
    import trnscipy
    import trnscipy.linalg as tl

    a = VALUES[:9].reshape(3, 3)
    sym = a + a.T
    low = sym.copy()
    low[0, 2] = np.nextafter(low[0, 2], np.inf)  # same float32 high part
    assert np.float32(low[0, 2]) == np.float32(sym[2, 0])
    near = sym.copy()
    near[1, 0] += 3e-13 * abs(near[1, 0])
    nan = sym.copy()
    nan[0, 0] = np.nan  # (not compared without tolerances, as SciPy)
    inf = sym.copy()
    inf[1, 2] = inf[2, 1] = np.inf
    cases = [(sym, {}), (low, {}), (a, {}), (nan, {}), (np.zeros((0, 0)), {}),
             (near, dict(atol=1e-16)), (near, dict(rtol=1e-12)), (near, dict(rtol=1e-13)),
             (near, dict(atol=1e-20, rtol=4e-13)), (low, dict(atol=0.0, rtol=0.0)),
             (nan, dict(atol=1e300)), (nan, dict(rtol=0.0)), (inf, {}), (inf, dict(rtol=1.0))]
    gap = abs(near[1, 0] - near[0, 1])
    cases += [(near, dict(atol=gap)), (near, dict(atol=np.nextafter(gap, 0)))]  # the edge
    for m, kw in cases:
        for ours, theirs in ((tl.issymmetric, sl.issymmetric), (tl.ishermitian, sl.ishermitian)):
            got = _strict_neuron(monkeypatch, lambda m=m, kw=kw, ours=ours: ours(
                trnscipy.to_device(m, xla_device), **kw))
            assert got == theirs(m, **kw), (m, kw)
    assert not sl.issymmetric(low) and sl.issymmetric(near, rtol=1e-12)  # the cases bite
    monkeypatch.delenv("TRNSCIPY_STRICT")
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="tolerance"):  # announced
        assert tl.issymmetric(trnscipy.to_device(near, xla_device), atol=1e-300) is False
    for bad in (VALUES[:4], VALUES[:6].reshape(2, 3)):
        with pytest.raises(ValueError, match="2D|square"):
            tl.issymmetric(trnscipy.to_device(bad, xla_device))


# ---- group 3: products and sums ---------------------------------------------------------


@pytest.mark.xla
def test_khatri_rao_matrix_power(emulate_neuron, xla_device, monkeypatch):
    """khatri_rao: triple-float products (within a unit of float64 rounding); sparse
    matrix_power: the double-float SpGEMM (triple-float products and sums), within a unit
    of rounding of |A|^p (SciPy's own error bound)."""
    import trnscipy
    import trnscipy.linalg as tl
    import trnscipy.sparse.linalg as tspla

    a, b = VALUES[:6].reshape(2, 3), VALUES[3:12].reshape(3, 3)
    ints = np.array([[3, -1, 1 << 30], [2, 5, 7]])
    for x, y in ((a, b), (ints, b)):
        got = _strict_neuron(monkeypatch, lambda x=x, y=y: tl.khatri_rao(
            trnscipy.to_device(x, xla_device), trnscipy.to_device(y, xla_device)))
        _close(got, sl.khatri_rao(x, y))
    with pytest.raises(ValueError, match="columns"):
        tl.khatri_rao(trnscipy.to_device(a, xla_device), trnscipy.to_device(b[:, :2], xla_device))
    A = _sparse("csr", (6, 6), density=0.4)
    for p in (0, 2):
        got = _strict_neuron(monkeypatch, lambda p=p: tspla.matrix_power(
            trnscipy.to_device(A, xla_device), p))
        want = spla.matrix_power(A, p)
        assert type(got) is type(want) and got.format == want.format and got.dtype == want.dtype
        assert got.nnz == want.nnz  # (p = 0: the identity, DIA as SciPy's)
        bound = spla.matrix_power(abs(A), p).toarray()
        assert (np.abs(got.toarray() - want.toarray()) <= 4 * EPS * bound).all()
    with pytest.raises(TypeError, match="not square"):
        tspla.matrix_power(trnscipy.to_device(_sparse("csr"), xla_device), 2)
    with pytest.raises(ValueError, match="exponent"):
        tspla.matrix_power(trnscipy.to_device(A, xla_device), -1)


@pytest.mark.xla
def test_norm(emulate_neuron, xla_device, monkeypatch):
    """linalg.norm: sums, maxima and 2-norms in triple-float (within a unit of float64
    rounding of SciPy's); other vector orders on the host, announced; SciPy's errors."""
    import trnscipy
    import trnscipy.linalg as tl

    a = VALUES[:12].reshape(4, 3)
    t3 = VALUES[:12].reshape(2, 3, 2)
    cases = [(a, {}), (a, dict(ord=1)), (a, dict(ord=-np.inf)), (a, dict(axis=0)),
             (a, dict(axis=1, ord=1)), (a, dict(axis=1, ord=0)),
             (a, dict(axis=(1, 0), ord=np.inf, keepdims=True)), (VALUES, dict(ord=np.inf)),
             (t3, dict(axis=(0, 2), ord=-1)), (t3, dict(axis=-1, keepdims=True))]
    for m, kw in cases:
        got = _strict_neuron(monkeypatch, lambda m=m, kw=kw: tl.norm(
            trnscipy.to_device(m, xla_device), **kw))
        _close(got, np.asarray(sl.norm(m, **kw)), ulps=2)
    monkeypatch.delenv("TRNSCIPY_STRICT")
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="order 3"):  # announced
        got = tl.norm(trnscipy.to_device(VALUES, xla_device), 3)
    assert trnscipy.to_host(got) == sl.norm(VALUES, 3)
    dev = trnscipy.to_device(t3, xla_device)
    for kw in (dict(ord=1), dict(ord="bad", axis=(0, 1)), dict(axis=(0, 0)), dict(axis=5)):
        with pytest.raises(ValueError) as expected:
            sl.norm(t3, **kw)
        with pytest.raises(type(expected.value)):
            tl.norm(dev, **kw)
    with pytest.raises(ValueError, match="infs or NaNs"):
        tl.norm(trnscipy.to_device(np.array([1.0, np.nan]), xla_device))


@pytest.mark.slow  # (the refined SVD's graphs: about a minute of XLA compiles on 2 cores)
@pytest.mark.xla
def test_norm_singular_values(emulate_neuron, xla_device, monkeypatch):
    """ord 2, -2, 'nuc' from the refined singular values: double-float, 2**-44 of the
    largest."""
    import trnscipy
    import trnscipy.linalg as tl

    a = VALUES[:12].reshape(4, 3)
    smax = sl.norm(a, 2)
    for ord in (2, -2, "nuc"):
        got = _strict_neuron(monkeypatch, lambda ord=ord: tl.norm(
            trnscipy.to_device(a, xla_device), ord))
        assert abs(got - sl.norm(a, ord)) <= 2.0 ** -44 * smax


@pytest.mark.xla
def test_funm_multiply_krylov_bad_input(emulate_neuron, xla_device):
    """SciPy's errors before any double-float work."""
    import trnscipy
    import trnscipy.sparse.linalg as tspla

    A = trnscipy.to_device(_sparse("csr", (6, 6), density=0.5), xla_device)
    b = trnscipy.to_device(VALUES[:6], xla_device)
    for kw in (dict(assume_a="bad"), dict(restart_every_m=0), dict(max_restarts=0)):
        with pytest.raises(ValueError):
            spla.funm_multiply_krylov(sl.expm, _sparse("csr", (6, 6), density=0.5),
                                      VALUES[:6], **kw)
        with pytest.raises(ValueError):
            tspla.funm_multiply_krylov(sl.expm, A, b, **kw)
    with pytest.raises(ValueError, match="1D"):
        tspla.funm_multiply_krylov(sl.expm, A, trnscipy.to_device(VALUES[:6, None], xla_device))


@pytest.mark.slow  # (one graph per Arnoldi step: about a minute of XLA compiles on 2 cores)
@pytest.mark.xla
def test_funm_multiply_krylov(emulate_neuron, xla_device, monkeypatch):
    """Arnoldi and Lanczos with restarts, every vector operation in double-float: within
    1e-13 of SciPy's f(tA) b (both accurate to float64 rounding times the growth of the
    Krylov recurrence)."""
    import trnscipy
    import trnscipy.sparse.linalg as tspla

    a = _sparse("csr", (8, 8), density=0.5).toarray()
    a = a / np.abs(a).sum(1).max()
    sym = sp.csr_array(a + a.T)
    gen = sp.csr_array(a)
    b = VALUES[:8]
    for A, kw in ((gen, dict(restart_every_m=4)), (sym, dict(assume_a="hermitian", t=0.5))):
        want = spla.funm_multiply_krylov(sl.expm, A, b, **kw)
        got = _strict_neuron(monkeypatch, lambda A=A, kw=kw: tspla.funm_multiply_krylov(
            sl.expm, trnscipy.to_device(A, xla_device), trnscipy.to_device(b, xla_device), **kw))
        assert got.dtype == np.float64
        assert np.linalg.norm(got - want) <= 1e-13 * np.linalg.norm(want)
