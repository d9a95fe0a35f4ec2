"""ordqz: the device QZ, then the selected blocks moved up by adjacent swaps
(trnscipy/linalg/_qz.py ``reorder``): paired with SciPy on the dense lanes.

The ``generic`` lane runs the device kernel on CPU tensors (the pencils and sorts are
there); the XLA lane runs it where it counts, with no aten CPU fallback and a repeat call
compiling nothing.  The reordered form is unique only up to the order inside each group
and signs: compared by residuals, structure, the selection leading, and the selected
eigenvalues SciPy's as a set.
"""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, generic_kernels, tensor, to_np
from tests.linalg.test_qz import _match
from tests.linalg.test_xla_dense import _on_device

torch = pytest.importorskip("torch")

SORTS = ("lhp", "rhp", "iuc", "ouc")


def _far(x, y):
    """A callable sort: |x / y| > 2 (infinite eigenvalues included)."""
    return np.abs(x) > 2 * np.abs(y)


def _ordqz(dlane):
    if generic_kernels(dlane):
        from trnscipy.linalg._decomp_qz import _ordqz_generic

        return lambda a, b, sort, output="real": _ordqz_generic(
            a, b, sl._decomp_qz._select_function(sort), output)
    return lambda a, b, sort, output="real": tl.ordqz(a, b, sort=sort, output=output)


def _check(a, b, sort, out, ref, dtype):
    """SciPy's dtypes; Q AA Z^H = A, Q BB Z^H = B, Q and Z orthonormal, the form's
    structure; the leading eigenvalues, as many as the sort selects, SciPy's as a set;
    alpha / beta the form's eigenvalues."""
    aa, bb, alpha, beta, q, z = out
    assert [x.dtype for x in out] == [x.dtype for x in ref]
    n, tol = a.shape[0], 100 * a.shape[0] * eps(dtype)
    a, b = a.astype(np.float64), b.astype(np.float64)
    assert np.linalg.norm(q @ aa @ z.conj().T - a) <= tol * np.linalg.norm(a)
    assert np.linalg.norm(q @ bb @ z.conj().T - b) <= tol * max(np.linalg.norm(b), 1e-300)
    assert np.linalg.norm(q.conj().T @ q - np.eye(n)) <= tol
    assert np.linalg.norm(z.conj().T @ z - np.eye(n)) <= tol
    assert not np.any(np.tril(aa, -2)) and not np.any(np.tril(bb, -1))
    if np.iscomplexobj(aa):
        assert not np.any(np.tril(aa, -1))
    # k: how many the sort selects among the pencil's eigenvalues (float64, homogeneous)
    w64, _ = sl.eig(a, b, homogeneous_eigvals=True)
    with np.errstate(all="ignore"):
        k = int(np.sum(sl._decomp_qz._select_function(sort)(w64[0], w64[1])))
        # the leading k: SciPy's as a set (an infinite eigenvalue: beta of rounding's size)
        tiny = tol * np.linalg.norm(b)
        w, w_ref = (x / np.where(np.abs(y) <= tiny, 0 * y, y) for x, y in (
            (alpha, beta), (ref[2], ref[3])))
        fin, fin_ref = np.isfinite(w[:k]), np.isfinite(w_ref[:k])
        assert fin.sum() == fin_ref.sum()
        assert _match(w[:k][fin], w_ref[:k][fin_ref]) <= 1e3 * eps(dtype) ** 0.75
        for i in range(n):  # alpha / beta: the form's diagonal (1x1 blocks)
            lone = (i == 0 or aa[i, i - 1] == 0) and (i == n - 1 or aa[i + 1, i] == 0)
            if lone and beta[i] != 0:
                x = alpha[i] / beta[i]
                assert abs(aa[i, i] / bb[i, i] - x) <= tol * (1 + abs(x))


def _pencils(n, rng):
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    sing = b.copy()
    sing[:, 1] = 0  # an infinite eigenvalue
    return {"random": (a, b), "singular": (a, sing), "scaled": (1e6 * a, 1e-6 * b)}


def test_random(dlane):
    """One pencil: a named sort and a callable, real and complex output."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_ordqz_xla_device (compile budget)")
    ordqz = _ordqz(dlane)
    a, b = _pencils(5, np.random.default_rng(23))["random"]
    for sort, output in (("lhp", "real"), (_far, "real"), ("iuc", "complex")):
        ref = sl.ordqz(a, b, sort=sort, output=output)
        out = ordqz(tensor(a, dlane), tensor(b, dlane), sort, output)
        _check(a, b, sort, [to_np(x) for x in out], ref, np.float64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pencils(dlane, dtype):
    """Each named sort and a callable, real and complex output, three pencils."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_ordqz_xla_device (compile budget)")
    ordqz = _ordqz(dlane)
    rng = np.random.default_rng(21)
    for name, (a, b) in _pencils(5, rng).items():
        if name == "scaled" and dtype == np.float32:
            continue  # (B at 1e-12 of A: float32 LAPACK finds infinite eigenvalues)
        a, b = a.astype(dtype), b.astype(dtype)
        for sort in (*SORTS, _far):
            for output in ("real", "complex"):
                if name != "random" and output == "complex":
                    continue
                try:
                    ref = sl.ordqz(a, b, sort=sort, output=output)
                except ValueError:  # (LAPACK's swap test refused: ill-conditioned)
                    continue
                out = ordqz(tensor(a, dlane), tensor(b, dlane), sort, output)
                _check(a, b, sort, [to_np(x) for x in out], ref, dtype)


def test_explicit(dlane):
    """SciPy's explicit cases: alpha / beta exactly SciPy's order (inf, nan included)."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_ordqz_xla_device (compile budget)")
    ordqz = _ordqz(dlane)
    cases = [(np.eye(2), np.diag([-2, 0.5])), (np.eye(2), np.diag([2.0, 0])),
             (np.diag([0.0, 1]), np.diag([0, 0.5])), (np.eye(3), np.diag([3.0, -1, 0.25]))]
    for a, b in cases:
        for sort in ("lhp", "ouc"):  # (every sort: SciPy's test_sort_explicit, conformance)
            ref = sl.ordqz(a, b, sort=sort)
            out = [to_np(x) for x in ordqz(tensor(a, dlane), tensor(b, dlane), sort)]
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(out[2] / out[3], ref[2] / ref[3], rtol=1e-14)


def test_pair_split_runs_on_host(dlane):
    """output='complex' with a sort taking one eigenvalue of a complex pair: the real form
    cannot order it; SciPy on the host, announced."""
    if not generic_kernels(dlane):
        pytest.skip("the device kernel's limit")
    a = np.array([[1.0, 2.0, 0.5], [-3.0, 1.0, 0.2], [0.1, 0.3, -2.0]])
    b = np.eye(3)

    def upper(x, y):
        return x.imag > 0

    with pytest.warns(trnscipy.DeviceFallbackWarning):
        out = _ordqz(dlane)(tensor(a, dlane), tensor(b, dlane), upper, "complex")
    ref = sl.ordqz(a, b, sort=upper, output="complex")
    for x, y in zip(out, ref, strict=True):
        np.testing.assert_allclose(to_np(x), y, atol=1e-13)


def test_errors(dlane):
    a = np.eye(3)
    for kw in (dict(sort="x"), dict(output="x")):
        with pytest.raises(ValueError) as want:
            sl.ordqz(a, a, **kw)
        with pytest.raises(ValueError) as got:
            tl.ordqz(tensor(a, dlane), tensor(a, dlane), **kw)
        assert str(got.value) == str(want.value)


@pytest.mark.slow  # (about 9 s: the QZ's graphs compile)
def test_ordqz_xla_device(dlane):
    """On XLA: no aten fallback, a repeat call with new data (another swap count)
    compiles nothing."""
    if dlane.type != "xla":
        pytest.skip("XLA lane")
    from tests.linalg.test_qz import N_XLA

    rng = np.random.default_rng(22)
    for repeat, sort in ((False, "iuc"), (True, "iuc")):  # (both swap blocks)
        a, b = rng.standard_normal((N_XLA, N_XLA)), rng.standard_normal((N_XLA, N_XLA))
        with _on_device(dlane, compilations=0 if repeat else None) as counts:
            out = tl.ordqz(tensor(a, dlane), tensor(b, dlane), sort=sort)
        _check(a, b, sort, [to_np(x) for x in out], sl.ordqz(a, b, sort=sort), np.float64)
    assert counts.executions < 100, counts
