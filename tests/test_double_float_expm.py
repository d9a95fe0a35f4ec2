"""float64 expm (dense and sparse) and polar on an emulated Neuron device (issue 27, items
3 and 4): float32 arithmetic only, compared with SciPy in float64.  Every case compiles
its graphs (30-60 s on XLA CPU): the fast ones share shapes and Pade degree."""

import time

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from tests.test_double_float import COUNTS, _recorded

torch = pytest.importorskip("torch")


def _rel(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


def _offloaded(fn, monkeypatch):
    import trnscipy

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")

    def run():
        with trnscipy.offload("xla"):
            return fn()

    t0 = time.perf_counter()
    out, ops = _recorded(run)
    assert ops == []  # no float64 op executed on the device
    return out, time.perf_counter() - t0


def _matrix(n, norm, seed=0):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a * (norm / np.linalg.norm(a, 1))


@pytest.mark.xla
@pytest.mark.slow  # 35-50 s of compiles; conformance runs expm float64 on xla-neuron in CI
def test_expm_float64_stack(emulate_neuron, monkeypatch):
    """A stack of two 20 x 20 matrices with 1-norms 3 and 40: degree 13, scalings 0 and 4
    (the graphs do not depend on s); float64-accurate against SciPy."""
    import trnscipy.linalg as tl

    a = np.stack([_matrix(20, 3.0), _matrix(20, 40.0, seed=1)])
    got, wall = _offloaded(lambda: tl.expm(a), monkeypatch)
    want = sl.expm(a)
    assert got.dtype == np.float64 and got.shape == a.shape
    errors = [_rel(g, w) for g, w in zip(got, want, strict=True)]
    assert max(errors) <= 1e-13, errors
    c = COUNTS[0]
    print(f"\nexpm 2x20x20: error vs SciPy {max(errors):.1e} "
          f"compilations {c.compilations} executions {c.executions} wall {wall:.0f} s")


@pytest.mark.xla
@pytest.mark.parametrize("norm", [0.01, pytest.param(0.2, marks=pytest.mark.slow),
                                  pytest.param(0.9, marks=pytest.mark.slow),
                                  pytest.param(2.0, marks=pytest.mark.slow)])
def test_expm_float64_degrees(norm, emulate_neuron, monkeypatch):
    """Small norms take SciPy's lower degrees (3, 5, 7, 9): each its own Pade graph."""
    import trnscipy.linalg as tl

    a = _matrix(20, norm, seed=2)
    got, _ = _offloaded(lambda: tl.expm(a), monkeypatch)
    assert _rel(got, sl.expm(a)) <= 1e-14


@pytest.mark.xla
def test_sparse_expm_float64(emulate_neuron, monkeypatch):
    """Sparse float64 expm: through the dense double-float method (the densified matrix,
    n^2 memory), returned in SciPy's sparse format."""
    import trnscipy.sparse.linalg as tsl

    A = (sp.random_array((20, 20), density=0.2, rng=3, format="csc") * 5
         + sp.eye_array(20, format="csc"))
    got, _ = _offloaded(lambda: tsl.expm(A), monkeypatch)
    want = spl.expm(A)
    assert sp.issparse(got) and got.format == want.format and got.dtype == np.float64
    assert _rel(got.toarray(), want.toarray()) <= 1e-13


def _polar_case(m, n, side, monkeypatch, cond=10.0):
    import trnscipy.linalg as tl

    rng = np.random.default_rng(4)
    q1, _ = np.linalg.qr(rng.standard_normal((m, m)))
    q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
    k = min(m, n)
    s = np.geomspace(1.0, 1.0 / cond, k)
    a = q1[:, :k] @ np.diag(s) @ q2[:k]
    (u, p), wall = _offloaded(lambda: tl.polar(a, side), monkeypatch)
    ur, pr = sl.polar(a, side)
    assert u.dtype == p.dtype == np.float64
    assert u.shape == ur.shape and p.shape == pr.shape
    eye = np.eye(k)
    orth = np.abs((u.T @ u if m >= n else u @ u.T) - eye).max()
    rec = np.abs((u @ p if side == "right" else p @ u) - a).max()
    assert orth <= 1e-14, orth
    assert rec <= 1e-14, rec
    assert np.abs(p - p.T).max() == 0
    assert _rel(u, ur) <= 1e-14 * cond, _rel(u, ur)
    assert _rel(p, pr) <= 1e-14 * cond, _rel(p, pr)
    c = COUNTS[0]
    print(f"\npolar {m}x{n} {side}: u vs SciPy {_rel(u, ur):.1e} p {_rel(p, pr):.1e} "
          f"orthogonality {orth:.1e} reconstruction {rec:.1e} compilations "
          f"{c.compilations} executions {c.executions} wall {wall:.0f} s")


@pytest.mark.xla
def test_polar_float64_square(emulate_neuron, monkeypatch):
    _polar_case(20, 20, "right", monkeypatch, cond=1e3)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("shape,side", [((30, 20), "left"), ((30, 20), "right"),
                                        ((20, 30), "right"), ((20, 30), "left")])
def test_polar_float64_rectangular(shape, side, emulate_neuron, monkeypatch):
    _polar_case(*shape, side, monkeypatch)
