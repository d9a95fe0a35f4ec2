"""float64 lstsq and pinv on an emulated Neuron device (issue 27, dense): the float32
device QR plus double-float refinement of the augmented system, s from the double-float
eigh (trnscipy/linalg/_refine_lsq.py), paired against SciPy's float64.

The double-float graphs (Ozaki products, the eigh's device loops) compile for minutes on
XLA CPU per shape: the device cases are slow tests."""

import time

import numpy as np
import pytest
import scipy.linalg as sl

from tests.test_double_float import COUNTS, _recorded

torch = pytest.importorskip("torch")


def _rel(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


def _check_lstsq(a, b, got, driver=None):
    """SciPy's 4-tuple: x to 1e-12 of SciPy's (cond(A) below 10 here), residues, rank, s
    (to 1e-13 of s_max, as LAPACK's own error), gelsy's s None."""
    want = sl.lstsq(a, b, lapack_driver=driver)
    x, res, rank, s = got
    assert x.dtype == np.float64 and x.shape == want[0].shape
    assert _rel(x, want[0]) <= 1e-12, _rel(x, want[0])
    assert rank == want[2]
    assert np.shape(res) == np.shape(want[1])
    if np.size(want[1]):
        np.testing.assert_allclose(res, want[1], rtol=1e-12)
    if driver == "gelsy":
        assert s is None and want[3] is None
    else:
        assert s.shape == want[3].shape
        assert np.abs(s - want[3]).max() <= 1e-13 * want[3][0]
    return _rel(x, want[0])


def _run(fn):
    t0 = time.perf_counter()
    out, ops = _recorded(fn)
    return out, ops, time.perf_counter() - t0, COUNTS[0]


@pytest.mark.xla
@pytest.mark.slow  # each shape's QR, eigh and refinement graphs: minutes of XLA compile
@pytest.mark.parametrize("shape", [(60, 20), (20, 60), (40, 40),
                                   pytest.param((200, 50), id="200x50")])
def test_lstsq_float64(shape, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    b = rng.standard_normal((shape[0], 3))
    cases = [(b, None), (b[:, 0], None), (b, "gelsy")]

    def run():
        with trnscipy.offload("xla"):
            return [tl.lstsq(a, rhs, lapack_driver=driver) for rhs, driver in cases]

    out, ops, wall, counts = _run(run)
    assert ops == []
    errors = [_check_lstsq(a, rhs, got, driver)
              for (rhs, driver), got in zip(cases, out, strict=True)]
    print(f"\nlstsq {shape}: error vs SciPy " + ", ".join(f"{e:.1e}" for e in errors)
          + f"; {counts.compilations} compilations, {counts.executions} executions, "
          f"{wall:.0f} s")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(60, 20), (20, 60)])
def test_pinv_float64(shape, emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    a = np.random.default_rng(1).standard_normal(shape)

    def run():
        with trnscipy.offload("xla"):
            return tl.pinv(a, return_rank=True)

    (p, rank), ops, wall, counts = _run(run)
    assert ops == []
    want, want_rank = sl.pinv(a, return_rank=True)
    assert rank == want_rank == min(shape)
    assert p.shape == want.shape and _rel(p, want) <= 1e-12, _rel(p, want)
    print(f"\npinv {shape}: error vs SciPy {_rel(p, want):.1e}; {counts.compilations} "
          f"compilations, {counts.executions} executions, {wall:.0f} s")


@pytest.mark.xla
@pytest.mark.slow
def test_lstsq_float64_rank_deficient_runs_on_host(emulate_neuron):
    """Short of full rank (or beyond the refinable condition number): SciPy's lstsq/pinv
    on the exact values, announced, never float32-level or faked results."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(3)
    a = rng.standard_normal((30, 10))
    a[:, 5] = a[:, 2]
    b = rng.standard_normal(30)
    ill = a.copy()
    ill[:, 5] += 1e-7 * rng.standard_normal(30)  # cond ~ 1e7
    with trnscipy.offload("xla"):
        for m in (a, ill):
            with pytest.warns(trnscipy.DeviceFallbackWarning, match="rank-deficient"):
                got = tl.lstsq(m, b)
            want = sl.lstsq(m, b)
            assert got[2] == want[2]
            for g, w in zip(got, want, strict=True):
                assert np.array_equal(g, w)
        with pytest.warns(trnscipy.DeviceFallbackWarning, match="rank-deficient"):
            p, rank = tl.pinv(a, return_rank=True)
        want, want_rank = sl.pinv(a, return_rank=True)
        assert rank == want_rank == 9 and np.array_equal(p, want)


@pytest.mark.xla
def test_small_lstsq_pinv_run_on_host(emulate_neuron):
    """max(m, n) > 10 and (max(m, n) < 40 or min(m, n) < 20): XLA's CPU compiler took
    past 8 GB on the double-float graphs of a 30 x 10 matrix (killed), past 3 GB on
    20 x 20; such shapes go to SciPy after the device QR, announced, in seconds (whatever
    the right-hand sides or the cutoff)."""
    import trnscipy
    import trnscipy.linalg as tl

    rng = np.random.default_rng(4)
    a = rng.standard_normal((30, 10))
    b = rng.standard_normal((30, 30))
    with trnscipy.offload("xla"):
        with pytest.warns(trnscipy.DeviceFallbackWarning, match="or min\\(m, n\\) < 20"):
            got = tl.lstsq(a, b)
        for g, w in zip(got, sl.lstsq(a, b), strict=True):
            assert np.array_equal(g, w)
        for kw in ({}, {"rtol": 0.5}):
            with pytest.warns(trnscipy.DeviceFallbackWarning, match="or min\\(m, n\\) < 20"):
                p = tl.pinv(a, **kw)
            assert np.array_equal(p, sl.pinv(a, **kw))
        sq = rng.standard_normal((20, 20))
        with pytest.warns(trnscipy.DeviceFallbackWarning, match="\\(max\\(m, n\\) < 40"):
            p = tl.pinv(sq)
        assert np.array_equal(p, sl.pinv(sq))


@pytest.mark.xla
def test_pinv_negative_tolerance(emulate_neuron):
    import trnscipy
    import trnscipy.linalg as tl

    a = np.eye(3)
    for kw in ({"atol": -1.0}, {"rtol": -1e-3}):
        with pytest.raises(ValueError, match="positive"):
            sl.pinv(a, **kw)
        with trnscipy.offload("xla"), pytest.raises(ValueError, match="positive"):
            tl.pinv(a, **kw)
