"""float64 solve_triangular, det and qr on an emulated Neuron device (issue 27): float32
device work plus double-float refinement (trnscipy/linalg/_refine_orth.py), paired
against SciPy's float64."""

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _on_neuron

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps
N = 32


@pytest.mark.xla
def test_solve_triangular_float64(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(0)
    a = np.triu(rng.standard_normal((N, N))) + 4 * np.eye(N)
    b = rng.standard_normal((N, 2))
    cases = [dict(), dict(lower=True), dict(trans=1), dict(trans="T", lower=True),
             dict(unit_diagonal=True)]

    def run():
        with trnscipy.offload("xla"):
            return [tl.solve_triangular(a if not kw.get("lower") else a.T, b, **kw)
                    for kw in cases] + [tl.solve_triangular(a, b[:, 0])]

    out, ops, aten, counts = _on_neuron(run)
    assert ops == [] and aten == 0
    for kw, x in zip(cases + [dict()], out, strict=True):
        m = a if not kw.get("lower") else a.T
        op = np.tril(m) if kw.get("lower") else np.triu(m)
        if kw.get("unit_diagonal"):
            op = op - np.diag(np.diag(op)) + np.eye(N)
        op = op.T if kw.get("trans") else op
        rhs = b if x.ndim == 2 else b[:, 0]
        want = sl.solve_triangular(m, rhs, **kw)
        # backward error at float64's level (the triangular solve is backward stable)
        berr = np.abs(op @ x - rhs).max() / (np.abs(op).sum(1).max() * np.abs(x).max())
        assert berr <= 4 * N * EPS, (kw, berr)
        np.testing.assert_allclose(x, want, rtol=0, atol=1e-12 * np.abs(want).max())
    a0 = a.copy()
    a0[7, 7] = 0
    with trnscipy.offload("xla"), pytest.raises(sl.LinAlgError, match="diagonal 7"):
        tl.solve_triangular(a0, b)


@pytest.mark.xla
def test_det_float64(emulate_neuron, monkeypatch):
    import trnscipy
    import trnscipy.linalg as tl

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    rng = np.random.default_rng(1)
    mats = [rng.standard_normal((N, N)), rng.standard_normal((N, N)) * 2.0,
            rng.standard_normal((3, 3)), np.array([[2.5]])]
    singular = mats[0].copy()
    singular[:, 4] = 0

    def run():
        with trnscipy.offload("xla"):
            return [tl.det(m) for m in mats]

    out, ops, aten, _ = _on_neuron(run)
    assert ops == [] and aten == 0
    for m, d in zip(mats, out, strict=True):
        want = sl.det(m)
        # relative error of the refined LU's pivot product: cond(A) eps64-sized
        assert abs(d - want) <= 1e-13 * abs(want), (d, want)
    with trnscipy.offload("xla"):
        assert tl.det(singular) == 0.0 == sl.det(singular)
        # beyond float32's exponent range the device cannot hold the result: said
        with pytest.raises(ValueError, match="exponent range"):
            tl.det(mats[0] * 1e4)
