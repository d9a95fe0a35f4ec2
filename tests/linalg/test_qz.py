"""qz and the generalized eigenvalues by the device QZ iteration (trnscipy/linalg/_qz.py):
paired with SciPy on the dense lanes.

The ``generic`` lane runs the device QZ on CPU tensors (cheap: the pencil zoo is there);
the XLA lane runs it where it counts, with no aten CPU fallback and the graph counts
asserted (a repeat call compiles nothing).  A generalized Schur form is unique only up to
the order of the eigenvalues and signs: compared by residuals, structure and eigenvalues.
"""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, generic_kernels, tensor, to_np
from tests.linalg.test_xla_dense import _on_device

torch = pytest.importorskip("torch")

N_XLA = 6  # one size on XLA (compile budget)


def _zoo(n, rng):
    """Pencils: random, singular B (infinite eigenvalues, a zero inside B's triangle after
    the reduction), B = 0, A = 0, A = B, B = I, triangular, badly scaled."""
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    sing = b.copy()
    sing[:, 1] = 0
    sing[:, 3] = sing[:, 0]
    return {"random": (a, b), "singular": (a, sing), "b0": (a, np.zeros((n, n))),
            "a0": (np.zeros((n, n)), b), "same": (a, a), "eye": (a, np.eye(n)),
            "diag0": (a, np.diag(np.arange(n) % 3.0)),
            "triangular": (np.triu(a), np.triu(b)), "scaled": (1e8 * a, 1e-8 * b)}


def _match(w, ref):
    """Greedy nearest matching of two spectra (conjugate pairs sort unstably)."""
    ref, err = list(ref), 0.0
    for x in w:
        i = int(np.argmin(np.abs(np.array(ref) - x)))
        err = max(err, abs(ref.pop(i) - x) / max(1.0, abs(x)))
    return err


def _check_qz(a, b, aa, bb, q, z, dtype):
    n = a.shape[0]
    tol = 50 * n * eps(dtype)
    assert np.linalg.norm(q @ aa @ z.T - a) <= tol * max(np.linalg.norm(a), 1e-300)
    assert np.linalg.norm(q @ bb @ z.T - b) <= tol * max(np.linalg.norm(b), 1e-300)
    assert np.linalg.norm(q.T @ q - np.eye(n)) <= tol
    assert np.linalg.norm(z.T @ z - np.eye(n)) <= tol
    # LAPACK's form: AA quasi triangular with no two 2x2 blocks in a row, BB triangular
    # with each 2x2 block's part diagonal, BB's diagonal non-negative
    assert np.all(np.tril(aa, -2) == 0) and np.all(np.tril(bb, -1) == 0)
    sub = np.diagonal(aa, -1)
    assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))
    for i in np.flatnonzero(sub):
        assert bb[i, i + 1] == 0
    assert np.all(np.diagonal(bb) >= 0)


def _spectrum(aa, bb):
    """alpha / beta from the blocks (NumPy, independent of the kernel's formula)."""
    w, i = [], 0
    n = aa.shape[0]
    while i < n:
        if i + 1 < n and aa[i + 1, i] != 0:
            w.extend(sl.eigvals(aa[i:i + 2, i:i + 2], bb[i:i + 2, i:i + 2]))
            i += 2
        else:
            w.append(aa[i, i] / bb[i, i] if bb[i, i] != 0 else np.inf)
            i += 1
    return np.array(w)


def _same_eigs(w, ref, dtype):
    fin, fin_ref = np.isfinite(w), np.isfinite(ref)
    assert fin.sum() == fin_ref.sum(), (w, ref)
    assert _match(w[fin], ref[fin_ref]) <= 1000 * eps(dtype) ** (0.5 if dtype ==
                                                                  np.float32 else 0.75)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zoo(dlane, dtype):
    """The device kernel on CPU tensors (generic lane) and SciPy's (cpu lane)."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_qz_xla_device (compile budget)")
    n = 5
    zoo = _zoo(n, np.random.default_rng(5))
    if dtype == np.float32:
        zoo = {k: zoo[k] for k in ("random", "singular", "scaled")}
    for name, (a, b) in zoo.items():
        a, b = a.astype(dtype), b.astype(dtype)
        out = tl.qz(tensor(a, dlane), tensor(b, dlane))
        ref = sl.qz(a, b)
        aa, bb, q, z = (to_np(x) for x in out)
        assert all(x.dtype == y.dtype for x, y in zip((aa, bb, q, z), ref, strict=True))
        _check_qz(a.astype(np.float64), b.astype(np.float64), aa, bb, q, z, dtype)
        with np.errstate(all="ignore"):
            want = sl.eigvals(a.astype(np.float64), b.astype(np.float64))
            got = _spectrum(aa.astype(np.float64), bb.astype(np.float64))
        if name not in ("same", "a0", "b0", "singular"):  # (ill-posed or only infinite)
            _same_eigs(got, want, dtype)
        assert np.sum(np.diagonal(bb) == 0) >= (name == "b0") * n, name


def _check_complex(a, b, aa, bb, q, z, dtype):
    n = a.shape[0]
    tol = 50 * n * eps(dtype)
    assert np.linalg.norm(q @ aa @ z.conj().T - a) <= tol * np.linalg.norm(a)
    assert np.linalg.norm(q @ bb @ z.conj().T - b) <= tol * np.linalg.norm(b)
    assert np.linalg.norm(q.conj().T @ q - np.eye(n)) <= tol
    assert np.linalg.norm(z.conj().T @ z - np.eye(n)) <= tol
    # zgges's form: both triangular, BB's diagonal real and non-negative
    assert np.all(np.tril(aa, -1) == 0) and np.all(np.tril(bb, -1) == 0)
    assert np.all(np.diagonal(bb).imag == 0) and np.all(np.diagonal(bb).real >= 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_complex_output(dlane, dtype):
    """output='complex' of real pencils (the generic lane: the device kernel)."""
    if dlane.type == "xla":
        pytest.skip("XLA compile budget: test_xla_slow")
    _complex_output(dlane, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_xla_slow(dlane, dtype):
    """On XLA: output='complex' and float32 (about 10 s of compilation each)."""
    if dlane.type != "xla":
        pytest.skip("XLA lane")
    _complex_output(dlane, dtype)
    a, b = (x.astype(dtype) for x in _zoo(N_XLA, np.random.default_rng(11))["singular"])
    with _on_device(dlane):
        aa, bb, q, z = (to_np(x) for x in tl.qz(tensor(a, dlane), tensor(b, dlane)))
    _check_qz(a.astype(np.float64), b.astype(np.float64), aa, bb, q, z, dtype)


def _complex_output(dlane, dtype):
    from trnscipy.linalg._decomp_qz import _qz_generic

    rng = np.random.default_rng(9)
    qz = ((lambda a, b: _qz_generic(a, b, output="complex")) if generic_kernels(dlane)
          else (lambda a, b: tl.qz(a, b, output="complex")))
    zoo = _zoo(N_XLA if dlane.type == "xla" else 7, rng)
    for name in ("random", "singular") if dlane.type != "xla" else ("random",):
        a, b = (x.astype(dtype) for x in zoo[name])
        with _on_device(dlane):
            out = qz(tensor(a, dlane), tensor(b, dlane))
        ref = sl.qz(a, b, output="complex")
        aa, bb, q, z = (to_np(x) for x in out)
        assert all(x.dtype == y.dtype for x, y in zip((aa, bb, q, z), ref, strict=True))
        _check_complex(a.astype(np.float64), b.astype(np.float64), aa, bb, q, z, dtype)
        want = sl.eigvals(a.astype(np.float64), b.astype(np.float64))
        with np.errstate(all="ignore"):
            got = np.diagonal(aa) / np.diagonal(bb)
        _same_eigs(np.where(np.diagonal(bb) == 0, np.inf, got), want, dtype)


def test_eigvals(dlane):
    """eigvals(a, b) of real pencils: the generic lane runs the XLA kernel on CPU tensors."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_qz_xla_device (compile budget)")
    from trnscipy.linalg import _decomp_schur

    eigvals = ((lambda a, b: _decomp_schur._eig_xla(a, b, right=False))
               if generic_kernels(dlane) else tl.eigvals)
    rng = np.random.default_rng(6)
    zoo = _zoo(5, rng)
    for name in ("random", "singular", "b0", "a0", "diag0"):
        a, b = zoo[name]
        w = to_np(eigvals(tensor(a, dlane), tensor(b, dlane)))
        with np.errstate(all="ignore"):
            ref = sl.eigvals(a, b)
        assert w.dtype == ref.dtype, name
        # SciPy's values where beta = 0: inf (alpha != 0), nan (alpha = beta = 0)
        assert np.isinf(w).sum() == np.isinf(ref).sum(), name
        assert np.isnan(w).sum() == np.isnan(ref).sum(), name
        if name not in ("same", "a0", "singular"):
            _same_eigs(w, ref, np.float64)
    # a 2x2 with a complex pair and a block with an infinite eigenvalue
    for a, b in (([[1.0, 2.0], [-3.0, 1.0]], np.eye(2)), ([[1.0, 2.0], [-3.0, 1.0]],
                                                         np.diag([1.0, 0.0]))):
        a, b = np.array(a), np.array(b)
        w = to_np(eigvals(tensor(a, dlane), tensor(b, dlane)))
        _same_eigs(w, sl.eigvals(a, b), np.float64)


def _check_vectors(a, b, w, v, ref):
    """SciPy's dtypes, unit columns, A v = w B v for the finite eigenvalues."""
    assert w.dtype == ref[0].dtype and v.dtype == ref[1].dtype
    np.testing.assert_allclose(np.linalg.norm(v, axis=0), 1, rtol=1e-12)
    fin = np.isfinite(w)
    r = a @ v[:, fin] - b @ v[:, fin] * w[fin]
    assert np.abs(r).max() <= 1e3 * eps(np.float64) * (np.linalg.norm(a) + np.abs(w[fin]).max()
                                                       * np.linalg.norm(b))
    _same_eigs(w, ref[0], np.float64)


def test_eig_vectors(dlane):
    """eig(a, b): right eigenvectors (the generic lane runs the XLA kernel on CPU tensors)."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_qz_xla_device (compile budget)")
    from trnscipy.linalg import _decomp_schur

    eig = _decomp_schur._eig_xla if generic_kernels(dlane) else tl.eig
    zoo = _zoo(5, np.random.default_rng(10))
    for name in ("random", "singular", "eye", "diag0"):
        a, b = zoo[name]
        w, v = (to_np(x) for x in eig(tensor(a, dlane), tensor(b, dlane)))
        _check_vectors(a, b, w, v, sl.eig(a, b))
    # homogeneous: (alpha, beta) rows, beta A v = alpha B v, alpha / beta the eigenvalues
    a, b = zoo["singular"]
    (al, be), v = (to_np(x) for x in eig(tensor(a, dlane), tensor(b, dlane),
                                          homogeneous_eigvals=True))
    ref = sl.eig(a, b, homogeneous_eigvals=True)
    assert al.dtype == ref[0].dtype and v.dtype == ref[1].dtype
    r = a @ v * be - b @ v * al
    assert np.abs(r).max() <= 1e3 * eps(np.float64) * (np.linalg.norm(a) + np.linalg.norm(b))
    with np.errstate(all="ignore"):
        w = to_np(eig(tensor(a, dlane), tensor(b, dlane), right=False))
        np.testing.assert_array_equal(np.where(be == 0, np.inf, al / be), w)
    s = zoo["random"][0] + zoo["random"][0].T  # a real spectrum: real vectors, as SciPy
    w, v = (to_np(x) for x in eig(tensor(s, dlane), tensor(np.eye(5), dlane)))
    _check_vectors(s, np.eye(5), w, v, sl.eig(s, np.eye(5)))


def test_qz_xla_device(dlane):
    """qz and eigvals(a, b) on XLA: no aten fallback, a repeat call with new data compiles
    nothing."""
    if dlane.type != "xla":
        pytest.skip("XLA lane")
    rng = np.random.default_rng(7)
    for repeat in (False, True):
        a, b = rng.standard_normal((N_XLA, N_XLA)), rng.standard_normal((N_XLA, N_XLA))
        b[:, 2] = 0  # an infinite eigenvalue
        with _on_device(dlane, compilations=0 if repeat else None) as counts:
            out = tl.qz(tensor(a, dlane), tensor(b, dlane))
            w = tl.eigvals(tensor(a, dlane), tensor(b, dlane))
            w2, v = tl.eig(tensor(a, dlane), tensor(b, dlane))
        _check_vectors(a, b, to_np(w2), to_np(v), sl.eig(a, b))
        aa, bb, q, z = (to_np(x) for x in out)
        _check_qz(a, b, aa, bb, q, z, np.float64)
        ref = sl.eigvals(a, b)
        _same_eigs(to_np(w), ref, np.float64)
        _same_eigs(_spectrum(aa, bb), ref, np.float64)
    assert counts.executions < 100, counts


def test_errors(dlane):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    cases = [dict(sort="lhp"), dict(output="x")]
    for kw in cases:
        with pytest.raises(ValueError) as want:
            sl.qz(a, b, **kw)
        with pytest.raises(ValueError) as got:
            tl.qz(tensor(a, dlane), tensor(b, dlane), **kw)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="square and agree"):
        tl.qz(tensor(a, dlane), tensor(b[:2, :2], dlane))
    bad = a.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="infs or NaNs"):
        tl.qz(tensor(bad, dlane), tensor(b, dlane))
