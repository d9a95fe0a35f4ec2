"""float64 schur on an emulated Neuron device (issue 27): the float32 Francis QR refined
by double-float Newton steps (trnscipy/linalg/_refine_schur.py), paired against SciPy
under TRNSCIPY_STRICT=1 with no float64 op and no aten fallback on the device.  Schur
forms are unique only up to the order of the eigenvalues and signs: compared by
residuals, structure and eigenvalues (the diagonal blocks')."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

from tests.linalg.test_double_float_lu import _on_neuron
from tests.linalg.test_schur import _zoo

torch = pytest.importorskip("torch")


def _schur(monkeypatch, a, **kw):
    """trnscipy.linalg.schur offloaded to the emulated Neuron device, strict: (T, Z, XLA
    counts), no float64 op, no aten fallback and no host fallback there."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    (t, z), ops, aten, counts = _on_neuron(lambda: _schur_plain(a, **kw))
    assert ops == [] and aten == 0, (ops, aten)
    return t, z, counts


def _schur_plain(a, **kw):
    import trnscipy
    import trnscipy.linalg as tl

    with trnscipy.offload("xla"):
        return tl.schur(a, **kw)


def _eigenvalues(t):
    """The eigenvalues of a quasi-triangular T from its diagonal blocks."""
    w, i, n = [], 0, t.shape[0]
    while i < n:
        if i + 1 < n and t[i + 1, i] != 0:
            w.extend(np.linalg.eigvals(t[i:i + 2, i:i + 2]))
            i += 2
        else:
            w.append(t[i, i])
            i += 1
    return np.sort_complex(np.array(w, dtype=complex))


def _check(a, t, z, rtol=1e-12):
    """Backward error and orthogonality near 1e-15, SciPy's block structure (standardized
    2x2 blocks, as many as SciPy's), SciPy's eigenvalues to ``rtol`` relative (None: not
    compared)."""
    n = a.shape[0]
    t0, _ = sl.schur(a)
    assert t.dtype == z.dtype == np.float64
    assert np.linalg.norm(a - z @ t @ z.T) <= 1e-14 * np.linalg.norm(a)
    assert np.linalg.norm(z.T @ z - np.eye(n)) <= 1e-14
    assert np.all(np.tril(t, -2) == 0)
    sub = np.diagonal(t, -1)
    assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))
    for i in np.flatnonzero(sub):
        assert t[i, i] == t[i + 1, i + 1] and t[i, i + 1] * t[i + 1, i] < 0
    assert np.count_nonzero(sub) == np.count_nonzero(np.diagonal(t0, -1))
    if rtol is not None:
        w, w0 = _eigenvalues(t), _eigenvalues(t0)
        np.testing.assert_allclose(w, w0, rtol=rtol, atol=rtol * 1e-2 * np.abs(w0).max())


@pytest.mark.xla
@pytest.mark.slow  # about 25 s of XLA compiles (the Newton step's graph, two orders)
def test_schur_float64(emulate_neuron, monkeypatch):
    rng = np.random.default_rng(27)
    five = rng.standard_normal((5, 5))
    sixteen = rng.standard_normal((16, 16))
    q, _ = np.linalg.qr(rng.standard_normal((16, 16)))
    real = q @ (np.diag(np.arange(1.0, 17.0)) + np.triu(rng.standard_normal((16, 16)), 1)) \
        @ q.T  # real eigenvalues only, not normal
    assert np.count_nonzero(np.diagonal(sl.schur(five)[0], -1)) >= 1  # complex pairs
    assert np.count_nonzero(np.diagonal(sl.schur(sixteen)[0], -1)) >= 4
    assert np.count_nonzero(np.diagonal(sl.schur(real)[0], -1)) == 0
    for a in (five, sixteen, real):
        t, z, _ = _schur(monkeypatch, a)
        _check(a, t, z)
    # two eigenvalues 1e-5 apart: linear convergence (rate near cond * 2**-24), more
    # steps, the same backward error; the eigenvalues SciPy's to 1e-14 ||A|| times their
    # condition numbers (8e4 for the close pair: SciPy's own differ from the exact ones by
    # 1e-10, a float32 form's by 1e-2)
    d = np.arange(1.0, 17.0)
    d[1] = d[0] + 1e-5
    close = q @ (np.diag(d) + np.triu(rng.standard_normal((16, 16)), 1)) @ q.T
    t, z, _ = _schur(monkeypatch, close)
    _check(close, t, z, rtol=None)
    w0, vl, vr = sl.eig(close, left=True, right=True)
    cond = 1 / np.abs(np.sum(vl.conj() * vr, 0))
    order = np.argsort(w0.real)
    assert np.all(w0.imag == 0) and np.all(np.diagonal(t, -1) == 0)
    bound = 1e-14 * np.linalg.norm(close, 2) * cond[order]
    assert np.all(np.abs(np.sort(np.diagonal(t)) - w0.real[order]) <= bound)
    # test_schur's matrices (the graphs of order 5 again): symmetric, rotation blocks,
    # a triangular Jordan block, a repeated eigenvalue, triangular, zero, companion;
    # scaled far from 1
    zoo = _zoo(5, rng)
    zoo.update(huge=five * 1e20, tiny=five * 1e-20)
    for a in zoo.values():
        _check(a, *_schur(monkeypatch, a)[:2])
    # a repeat of an order compiles nothing
    _, _, counts = _schur(monkeypatch, sixteen * 3)
    assert counts.compilations == 0, counts


@pytest.mark.xla
@pytest.mark.slow  # about 10 s of XLA compiles (the Newton step's graph)
def test_schur_float64_defective_on_host(emulate_neuron, monkeypatch):
    """A defective eigenvalue (a Jordan block in a random basis): the float32 form splits
    it, the Newton steps stall, and SciPy runs on the exact values, announced; strict
    mode raises instead."""
    import trnscipy

    rng = np.random.default_rng(28)
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    a = q @ (2 * np.eye(5) + np.eye(5, k=1)) @ q.T
    with pytest.warns(trnscipy.DeviceFallbackWarning, match="did not converge"):
        t, z = _schur_plain(a)
    want = sl.schur(a)
    np.testing.assert_array_equal(t, want[0])
    np.testing.assert_array_equal(z, want[1])
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    with pytest.raises(trnscipy.DeviceUnsupportedError, match="did not converge"):
        _schur_plain(a)


@pytest.mark.xla
def test_schur_float64_sort_on_host(emulate_neuron, monkeypatch):
    """sort has no double-float method: SciPy on the exact values, announced (no device
    arithmetic)."""
    import trnscipy

    a = np.random.default_rng(29).standard_normal((4, 4))
    for kw in ({"sort": "lhp"}, {"sort": "lhp", "output": "complex"}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", trnscipy.DeviceFallbackWarning)
            with pytest.warns(trnscipy.DeviceFallbackWarning, match="no double-float"):
                got = _schur_plain(a, **kw)
        want = sl.schur(a, **kw)
        for x, y in zip(got, want, strict=True):
            np.testing.assert_array_equal(x, y)


