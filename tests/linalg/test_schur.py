"""hessenberg, schur, rsf2csf, eig and eigvals by the device Francis QR
(trnscipy/linalg/_francis.py): paired with SciPy on the dense lanes.

The ``generic`` lane runs the Francis QR on CPU tensors (cheap: the matrix zoo is there);
the XLA lane runs it where it counts, with no aten CPU fallback and the graph counts
asserted (a repeat call compiles nothing).  Schur forms are unique only up to the order
of the eigenvalues and signs: compared by residuals, structure and eigenvalues.
"""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, generic_kernels, tensor, to_np
from tests.linalg.test_xla_dense import _on_device

torch = pytest.importorskip("torch")

N_XLA = 6  # one size on XLA (compile budget): every XLA case shares its graphs


def _zoo(n, rng):
    """Real spectra, complex pairs, symmetric, a rotation block matrix, a defective
    Jordan block, repeated eigenvalues, a triangular and a zero matrix."""
    a = rng.standard_normal((n, n))
    rot = np.kron(np.eye((n + 1) // 2), [[0.0, 2.0], [-1.0, 0.0]])[:n, :n]
    jordan = 2 * np.eye(n) + np.eye(n, k=1)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    repeated = q @ np.diag([1.0, 1.0, 1.0] + [3.0] * (n - 3)) @ q.T
    return {"random": a, "symmetric": a + a.T, "rotations": rot, "jordan": jordan,
            "repeated": repeated, "triangular": np.triu(a), "zero": np.zeros((n, n)),
            "companion": sl.companion(np.r_[1.0, rng.standard_normal(n)])}


def _check_schur(a, t, z, dtype, complex_=False):
    n = a.shape[0]
    tol = 50 * n * eps(dtype) * max(np.linalg.norm(a), 1)
    assert np.linalg.norm(z @ t @ z.conj().T - a) <= tol
    assert np.linalg.norm(z.conj().T @ z - np.eye(n)) <= 50 * n * eps(dtype)
    assert np.all(np.tril(t, -1 if complex_ else -2) == 0)
    if not complex_:  # standardized 2x2 blocks: no two in a row, equal diagonals, bc < 0
        sub = np.diagonal(t, -1)
        assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))
        for i in np.flatnonzero(sub):
            assert t[i, i] == t[i + 1, i + 1] and t[i, i + 1] * t[i + 1, i] < 0


def _same_spectrum(w, ref, a, dtype, defective=False):
    scale = max(np.linalg.norm(a, 2), 1)
    tol = (eps(dtype) ** (1 / a.shape[0]) * 10 if defective else 100 * a.shape[0] *
           eps(dtype)) * scale
    got, want = np.sort_complex(w), np.sort_complex(ref)
    assert np.abs(got - want).max() <= tol, (got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hessenberg(dlane, dtype):
    if dlane.type == "xla" and dtype == np.float32:
        pytest.skip("XLA compile budget: float64 there")
    n = N_XLA if dlane.type == "xla" else 9
    a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    with _on_device(dlane):
        h, q = tl.hessenberg(tensor(a, dlane), calc_q=True)
        h_only = tl.hessenberg(tensor(a, dlane))
    h_ref, q_ref = sl.hessenberg(a, calc_q=True)
    h, q = to_np(h), to_np(q)
    assert h.dtype == h_ref.dtype and q.dtype == q_ref.dtype
    assert np.all(np.tril(h, -2) == 0)
    tol = 50 * n * eps(dtype) * np.linalg.norm(a)
    assert np.linalg.norm(q @ h @ q.T - a) <= tol
    # LAPACK's reflectors: the same H and Q as SciPy's, to rounding
    assert np.linalg.norm(h - h_ref) <= tol and np.linalg.norm(q - q_ref) <= 50 * n * eps(dtype)
    np.testing.assert_array_equal(to_np(h_only), h)
    for small in (np.ones((1, 1)), np.arange(4.0).reshape(2, 2)):
        out, ref = tl.hessenberg(tensor(small, dlane), calc_q=True), sl.hessenberg(small,
                                                                                  calc_q=True)
        for x, y in zip(out, ref, strict=True):
            np.testing.assert_array_equal(to_np(x), y)
            assert to_np(x).dtype == y.dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zoo(dlane, dtype):
    """The device kernels on CPU tensors (generic lane) and SciPy's (cpu lane)."""
    if dlane.type == "xla":
        pytest.skip("XLA: test_eig_xla_device (compile budget)")
    from trnscipy.linalg import _decomp_schur

    n = 6
    zoo = _zoo(n, np.random.default_rng(2))
    if dtype == np.float32:
        zoo = {k: zoo[k] for k in ("random", "rotations", "jordan")}
    for name, a in zoo.items():
        a = a.astype(dtype)
        ref = sl.eig(a, left=True)
        # the XLA eig kernel (the generic lane's tl.eig is torch.linalg.eig's)
        eig = _decomp_schur._eig_xla if generic_kernels(dlane) else tl.eig
        w, vl, vr = (to_np(x) for x in eig(tensor(a, dlane), left=True))
        assert w.dtype == ref[0].dtype and vr.dtype == ref[2].dtype, name
        _same_spectrum(w, ref[0], a, dtype, name == "jordan")
        if name not in ("jordan", "zero"):  # defective / any basis: eigenvalues only
            tol = 1000 * n * eps(dtype) * max(np.linalg.norm(a), 1)
            assert np.linalg.norm(a @ vr - vr * w) <= tol, name
            assert np.linalg.norm(vl.conj().T @ a - w[:, None] * vl.conj().T) <= tol, name
            np.testing.assert_allclose(np.linalg.norm(vr, axis=0), 1, rtol=100 * eps(dtype))
            if np.iscomplexobj(vr):  # LAPACK's normalization: the largest component real
                big = np.abs(vr).argmax(0)
                assert np.abs(vr[big, range(n)].imag).max() <= 10 * eps(dtype), name
        # rsf2csf of SciPy's real Schur form: SciPy's complex form, to rounding
        tr, zr = sl.schur(a)
        ref = sl.rsf2csf(tr, zr)
        got = tl.rsf2csf(tensor(tr, dlane), tensor(zr, dlane))
        for x, y in zip(got, ref, strict=True):
            assert to_np(x).dtype == y.dtype
            assert np.linalg.norm(to_np(x) - y) <= 100 * n * eps(dtype) * max(
                np.linalg.norm(y), 1), name
        if name not in ("random", "rotations", "symmetric"):
            continue
        t, z = (to_np(x) for x in tl.schur(tensor(a, dlane)))
        assert t.dtype == z.dtype == np.dtype(dtype), name
        _check_schur(a, t, z, dtype)
        tc, zc = (to_np(x) for x in tl.schur(tensor(a, dlane), output="complex"))
        assert tc.dtype == sl.schur(a, output="complex")[0].dtype
        _check_schur(a, tc, zc, dtype, complex_=True)


def test_eig_xla_device(dlane):
    """eig/eigvals/schur on XLA at N_XLA: no aten fallback; a repeat call with new data
    compiles nothing."""
    if dlane.type != "xla":
        pytest.skip("XLA lane")
    rng = np.random.default_rng(3)

    def calls(a):
        s = a + a.T  # a real spectrum: real eigenvectors, as SciPy
        return (tl.eig(tensor(a, dlane), left=True), tl.eigvals(tensor(a, dlane)),
                tl.schur(tensor(a, dlane)), tl.eig(tensor(s, dlane)))

    for repeat in (False, True):
        a = rng.standard_normal((N_XLA, N_XLA))
        with _on_device(dlane, compilations=0 if repeat else None) as counts:
            (w, vl, vr), w2, (t, z), (w3, v3) = calls(a)
        ref = sl.eig(a, left=True)
        w, vl, vr = to_np(w), to_np(vl), to_np(vr)
        assert w.dtype == ref[0].dtype and vr.dtype == ref[2].dtype
        _same_spectrum(w, ref[0], a, np.float64)
        _same_spectrum(to_np(w2), ref[0], a, np.float64)
        tol = 1000 * N_XLA * eps(np.float64) * np.linalg.norm(a)
        assert np.linalg.norm(a @ vr - vr * w) <= tol
        assert np.linalg.norm(vl.conj().T @ a - w[:, None] * vl.conj().T) <= tol
        _check_schur(a, to_np(t), to_np(z), np.float64)
        s = a + a.T
        w3, v3 = to_np(w3), to_np(v3)
        assert v3.dtype == np.float64 and np.linalg.norm(s @ v3 - v3 * w3.real) <= 2 * tol
    assert counts.executions < 400, counts


def test_errors(dlane):
    bad = tensor(np.ones((3, 4)), dlane)
    for fn in (tl.schur, tl.hessenberg):
        with pytest.raises(ValueError, match="expected square matrix"):
            fn(bad)
    with pytest.raises(ValueError, match="argument must be"):
        tl.schur(tensor(np.eye(3), dlane), output="x")
    with pytest.raises(ValueError, match="'sort' parameter"):
        tl.schur(tensor(np.eye(3), dlane), sort="up")
    with pytest.raises(ValueError, match="Input 'T' must be square"):
        tl.rsf2csf(bad, tensor(np.eye(3), dlane))
    with pytest.raises(ValueError, match="shapes must match"):
        tl.rsf2csf(tensor(np.eye(3), dlane), tensor(np.eye(2), dlane))
    e = tl.schur(tensor(np.zeros((0, 0)), dlane))
    assert [tuple(x.shape) for x in e] == [(0, 0), (0, 0)]


def _same_multiset(w, ref, a, dtype):
    """Eigenvalues as multisets: the best one-to-one matching (sorting splits near-equal
    real parts of conjugate pairs)."""
    from scipy.optimize import linear_sum_assignment

    dist = np.abs(w[:, None] - ref[None, :])
    rows, cols = linear_sum_assignment(dist)
    assert dist[rows, cols].max() <= 100 * a.shape[0] * eps(dtype) * max(
        np.linalg.norm(a, 2), 1), (w, ref)


def _stack(dtype):
    n = N_XLA
    zoo = _zoo(n, np.random.default_rng(5))
    names = ("random", "triangular", "rotations", "symmetric", "companion", "repeated")
    return np.stack([zoo[k] for k in names]).reshape(2, 3, n, n).astype(dtype)


def _check_stack(a, dlane, dtype, schur=True, eig=None):
    """schur (, rsf2csf), eig(left=True) and eigvals of the stack ``a`` paired with
    SciPy per matrix."""
    ref = sl.eig(a, left=True)
    tol = 1000 * a.shape[-1] * eps(dtype)
    if schur:
        with _on_device(dlane):
            t, z = (to_np(x) for x in tl.schur(tensor(a, dlane)))
        assert t.shape == z.shape == a.shape and t.dtype == z.dtype == np.dtype(dtype)
        for i in np.ndindex(a.shape[:-2]):
            _check_schur(a[i], t[i], z[i], dtype)
    if eig is None:
        return
    with _on_device(dlane):
        w, vl, vr = (to_np(x) for x in eig(tensor(a, dlane), left=True))
        w2 = to_np(tl.eigvals(tensor(a, dlane)))
        tc, zc = (to_np(x) for x in tl.rsf2csf(tensor(t, dlane), tensor(z, dlane)))
    assert w.dtype == ref[0].dtype and vr.dtype == ref[2].dtype and w.shape == ref[0].shape
    assert w2.dtype == w.dtype and w2.shape == w.shape
    for i in np.ndindex(a.shape[:-2]):
        _check_schur(a[i], tc[i], zc[i], dtype, complex_=True)
        for got in (w[i], w2[i], np.diagonal(tc[i])):
            _same_multiset(got, ref[0][i], a[i], dtype)
        scale = tol * max(np.linalg.norm(a[i]), 1)
        if np.linalg.matrix_rank(ref[2][i], tol=1e-4) == a.shape[-1]:  # (a basis)
            assert np.linalg.norm(a[i] @ vr[i] - vr[i] * w[i]) <= scale
            assert np.linalg.norm(vl[i].conj().T @ a[i] - w[i][:, None] * vl[i].conj().T) \
                <= scale


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stacks(dlane, dtype):
    """A stack is one Francis QR for all its matrices (a state machine each, in lock step:
    a converged matrix's micro-steps change nothing); on XLA (schur: the compile budget)
    the stack costs the executions of its slowest matrix alone, not a loop over them."""
    if dlane.type == "xla" and dtype == np.float32:
        pytest.skip("XLA compile budget: float64 there")
    from trnscipy.linalg import _decomp_schur

    a = _stack(dtype)
    if dlane.type != "xla":
        _check_stack(a, dlane, dtype, eig=_decomp_schur._eig_xla if generic_kernels(dlane)
                     else tl.eig)
        return
    _check_stack(a, dlane, dtype)
    singles = []
    for i in np.ndindex(a.shape[:-2]):
        tl.schur(tensor(a[i], dlane))
        with _on_device(dlane) as one:
            to_np(tl.schur(tensor(a[i], dlane))[0])
        singles.append(one.executions)
    with _on_device(dlane, compilations=0) as stack:
        to_np(tl.schur(tensor(a, dlane))[0])
    assert stack.executions == max(singles), (stack, singles)


@pytest.mark.slow
def test_stacks_eig_xla(dlane):
    """eig, eigvals and rsf2csf of a stack on XLA (test_stacks: schur there)."""
    if dlane.type != "xla":
        pytest.skip("XLA lane")
    _check_stack(_stack(np.float64), dlane, np.float64, eig=tl.eig)


@pytest.mark.slow
@pytest.mark.xla
def test_stacks_float32_on_neuron(emulate_neuron, monkeypatch):
    """float32 stacks on an emulated Neuron device (strict: no float64 or complex op, no
    aten fallback) take the batched Francis QR too, paired with SciPy per matrix."""
    from tests.linalg.test_double_float_eig import _on_neuron

    a = _stack(np.float32)
    t, z = _on_neuron(monkeypatch, "schur", a)
    w = _on_neuron(monkeypatch, "eigvals", a)
    w2, v = _on_neuron(monkeypatch, "eig", a)
    ref = sl.eig(a)
    assert w.dtype == w2.dtype == ref[0].dtype and v.dtype == ref[1].dtype
    for i in np.ndindex(a.shape[:-2]):
        _check_schur(a[i], t[i], z[i], np.float32)
        for got in (w[i], w2[i]):
            _same_multiset(got, ref[0][i], a[i], np.float32)
