"""Dense LU and SVD built from ops that lower to XLA (trnscipy/linalg/_xla_dense.py).

Paired execution against SciPy on the cpu and xla lanes.  On the XLA lane every case
also asserts that torch-xla ran no aten op on the host (its aten:: counters, scalar
reads to Python aside) and the graph counts: a repeat call compiles nothing.
"""

import contextlib

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, random, tensor, to_np

torch = pytest.importorskip("torch")

_SCALAR_READ = "aten::_local_scalar_dense"


def _aten_fallbacks():
    import torch_xla.debug.metrics as met

    return sum(met.counter_value(n) or 0 for n in met.counter_names()
               if n.startswith("aten::") and n != _SCALAR_READ)


@contextlib.contextmanager
def _on_device(device, compilations=None):
    """Assert no aten CPU fallback inside (XLA lane) and, if given, the compilations."""
    if device.type != "xla":
        yield None
        return
    from trnscipy._metrics import xla_counts

    before = _aten_fallbacks()
    with xla_counts() as counts:
        yield counts
    assert _aten_fallbacks() == before, "torch-xla ran aten ops on the host"
    if compilations is not None:
        assert counts.compilations == compilations, counts


def _backward(a, x, b, dtype, c=10):
    r = np.linalg.norm(b.astype(np.complex128) - a.astype(np.complex128) @ x)
    scale = np.linalg.norm(a, 2) * np.linalg.norm(x) + np.linalg.norm(b)
    assert r <= c * a.shape[0] * eps(dtype) * scale


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_lu_factor_solve(device, dtype):
    if device.type == "xla" and dtype != np.complex128:
        pytest.skip("XLA compile budget: float64 in the shapes test, float32 at n = 256")
    n = 7
    rng = np.random.default_rng(20)
    a, b = random(n, dtype, rng), random(2, dtype, rng, m=n)
    lu_ref, piv_ref = sl.lu_factor(a)
    with _on_device(device):
        lu, piv = tl.lu_factor(tensor(a, device))
        xs = [tl.lu_solve((lu, piv), tensor(b, device), trans=t) for t in (0, 1, 2)]
    assert to_np(piv).dtype == np.int32 and np.array_equal(to_np(piv), piv_ref)
    assert np.linalg.norm(to_np(lu) - lu_ref) <= 100 * n * eps(dtype) * np.linalg.norm(lu_ref)
    for t, x in zip((0, 1, 2), xs, strict=True):
        ref = sl.lu_solve((lu_ref, piv_ref), b, trans=t)
        assert to_np(x).dtype == ref.dtype and x.shape == ref.shape
        _backward({0: a, 1: a.T, 2: a.conj().T}[t], to_np(x), b, dtype)
    # SciPy's own (lu, piv) solve on the device too
    with _on_device(device):
        x = tl.lu_solve((tensor(lu_ref, device), tensor(piv_ref, device)), tensor(b[:, 0], device))
    _backward(a, to_np(x), b[:, 0], dtype)


@pytest.mark.parametrize("shape", [(7, 7), (9, 4), (4, 9)])
def test_lu_shapes_and_modes(device, shape):
    if device.type == "xla" and shape != (9, 4):
        pytest.skip("XLA compile budget: one tall shape there (square in the other tests)")
    rng = np.random.default_rng(21)
    a = random(shape[1], np.float64, rng, m=shape[0])
    t = tensor(a.copy(), device)
    for kw in ({}, {"permute_l": True}, {"p_indices": True}, {"overwrite_a": False}):
        ref = sl.lu(a, **kw)
        with _on_device(device):
            out = tl.lu(t, **kw)
        assert len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert to_np(o).dtype == r.dtype and o.shape == r.shape
            assert np.allclose(to_np(o), r, atol=1e-12)
    lu_ref, piv_ref = sl.lu_factor(a)
    with _on_device(device):
        lu, piv = tl.lu_factor(t)
    assert np.array_equal(to_np(piv), piv_ref) and np.allclose(to_np(lu), lu_ref, atol=1e-12)


def test_lu_singular(device):
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    a[:, 1] = 0.0
    with pytest.warns(sl.LinAlgWarning) as ref_w:
        lu_ref, piv_ref = sl.lu_factor(a)
    with _on_device(device), pytest.warns(sl.LinAlgWarning) as w:
        lu, piv = tl.lu_factor(tensor(a, device))
    assert str(w[0].message) == str(ref_w[0].message)
    assert np.array_equal(to_np(piv), piv_ref) and np.allclose(to_np(lu), lu_ref)
    with _on_device(device):
        out = tl.lu(tensor(a, device))  # SciPy's lu does not warn
    assert all(np.allclose(to_np(o), r) for o, r in zip(out, sl.lu(a), strict=True))



@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_det_is_lapacks_lu_product(device, dtype):
    """det as SciPy's: U's diagonal product signed by the row swaps, so an exactly
    singular matrix gives exactly 0 (SciPy's TestDet::test_overwrite_a); complex too."""
    rng = np.random.default_rng(22)
    singular = np.arange(9).reshape(3, 3).astype(dtype)
    stack = random(5, dtype, rng, m=5)[None].repeat(2, 0) * np.array([1, -2])[:, None, None]
    with _on_device(device):
        d0 = tl.det(tensor(singular, device))
        d1 = tl.det(tensor(stack, device))
    assert sl.det(singular) == 0 and to_np(d0) == 0
    ref = sl.det(stack)
    assert np.allclose(to_np(d1), ref, rtol=100 * eps(dtype), atol=0)

def test_lu_bad_input(device):
    with pytest.raises(ValueError):
        tl.lu_factor(tensor(np.array([1.0, np.inf, 2.0, 3.0]).reshape(2, 2), device))
    with pytest.raises(ValueError):
        tl.lu_solve((tensor(np.eye(3), device), tensor(np.arange(3, dtype=np.int32), device)),
                    tensor(np.ones(4), device))
    with pytest.raises(ValueError):
        tl.lu_solve((tensor(np.eye(3), device), tensor(np.arange(3, dtype=np.int32), device)),
                    tensor(np.ones(3), device), trans=3)


def test_lu_n256_float32_on_device(device):
    """Must-show: lu_factor + lu_solve at n = 256 on the device, SciPy's accuracy, no aten
    CPU fallback; a repeat compiles nothing."""
    n = 256
    rng = np.random.default_rng(22)
    a, b = random(n, np.float32, rng), random(1, np.float32, rng, m=n)
    ta, tb = tensor(a, device), tensor(b, device)
    with _on_device(device):
        lu, piv = tl.lu_factor(ta)
        x = tl.lu_solve((lu, piv), tb)
    lu_ref, piv_ref = sl.lu_factor(a)
    assert np.array_equal(to_np(piv), piv_ref)
    _backward(a, to_np(x), b, np.float32)
    with _on_device(device, compilations=0) as counts:
        lu, piv = tl.lu_factor(ta)
        x = tl.lu_solve((lu, piv), tb)
    if counts is not None:
        assert counts.executions <= 64, counts
    _backward(a, to_np(x), b, np.float32)


@pytest.mark.xla
def test_lu_float32_on_neuron(xla_device, emulate_neuron):
    """Trainium's kind runs the float32 LU on the device, unannounced (complex: host;
    float64: double-float, tests/linalg/test_double_float_lu.py)."""
    import warnings

    from trnscipy import DeviceFallbackWarning

    a = random(256, np.float32, np.random.default_rng(23))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        lu, piv = tl.lu_factor(tensor(a, xla_device))
    assert np.array_equal(to_np(piv), sl.lu_factor(a)[1])
    with pytest.warns(DeviceFallbackWarning, match="neuron devices have no complex"):
        tl.lu_factor(tensor(a[:4, :4].astype(np.complex64), xla_device))


def _flat(out):
    return [y for z in out for y in (z if isinstance(z, tuple) else (z,))]


@pytest.mark.parametrize("shape", [(9, 4), (4, 9)])
def test_qr_modes(device, shape):
    """LAPACK's conventions: R, Q and raw (h, tau) equal SciPy's to rounding."""
    if device.type == "xla" and shape != (9, 4):
        pytest.skip("XLA compile budget: one tall shape there (square at n = 256)")
    rng = np.random.default_rng(24)
    a = random(shape[1], np.float64, rng, m=shape[0])
    t = tensor(a, device)
    for mode in ("full", "economic", "r", "raw"):
        ref = sl.qr(a, mode=mode)
        with _on_device(device):
            out = tl.qr(t, mode=mode, overwrite_a=False)
        for o, r in zip(_flat(out), _flat(ref), strict=True):
            assert to_np(o).dtype == r.dtype and o.shape == r.shape, mode
            assert np.allclose(to_np(o), r, atol=1e-12), mode


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_qr_complex(device, dtype):
    """Complex Householder QR on the device, every mode: complex128 equals SciPy's factors
    to rounding, complex64 by backward error and orthonormality (R's moduli as SciPy's)."""
    rng = np.random.default_rng(25)
    a = random(4, dtype, rng, m=6)
    t = tensor(a, device)
    tol = 60 * a.shape[0] * eps(dtype)
    for mode in ("full", "economic", "r", "raw"):
        ref = sl.qr(a, mode=mode)
        with _on_device(device):
            out = tl.qr(t, mode=mode)
        for o, r in zip(_flat(out), _flat(ref), strict=True):
            assert to_np(o).dtype == r.dtype and o.shape == r.shape, mode
            if dtype == np.complex128:
                assert np.allclose(to_np(o), r, atol=1e-13), mode
        if dtype == np.complex64 and mode in ("full", "economic"):
            q, r = (to_np(o) for o in out)
            assert np.linalg.norm(q @ r - a) <= tol * np.linalg.norm(a), mode
            assert np.linalg.norm(q.conj().T @ q - np.eye(q.shape[1])) <= tol, mode
            assert np.allclose(np.abs(r), np.abs(ref[1]), atol=tol * np.linalg.norm(a)), mode


def test_qr_n256_float32_on_device(device):
    """Must-show: qr economic and full at n = 256 on the device, SciPy's accuracy, no aten
    CPU fallback; a repeat compiles nothing."""
    n = 256
    a = random(n, np.float32, np.random.default_rng(26))
    t = tensor(a, device)
    for mode in ("economic", "full"):
        with _on_device(device):
            q, r = tl.qr(t, mode=mode)
        q, r = to_np(q), to_np(r)
        assert np.linalg.norm(q @ r - a) <= 60 * n * eps(np.float32) * np.linalg.norm(a)
        assert np.linalg.norm(q.T @ q - np.eye(n)) <= 60 * n * eps(np.float32)
        assert np.all(np.tril(r, -1) == 0)
        assert np.allclose(np.abs(np.diag(r)), np.abs(np.diag(sl.qr(a)[1])), rtol=1e-3)
    with _on_device(device, compilations=0) as counts:
        tl.qr(t, mode="economic")
    if counts is not None:
        assert counts.executions <= 64, counts


@pytest.mark.parametrize("scale", [0.2, 20.0])
def test_expm_on_device(device, scale):
    """expm: Pade degree and scaling from one norm read, the solve through the device LU."""
    n = 6
    a = np.random.default_rng(27).standard_normal((n, n)) * scale
    t = tensor(a, device)
    with _on_device(device):
        e = tl.expm(t)
    ref = sl.expm(a)
    assert to_np(e).dtype == ref.dtype
    assert np.linalg.norm(to_np(e) - ref) <= 1e3 * n * eps(np.float64) * np.linalg.norm(ref) \
        * max(1.0, np.linalg.norm(a, 1))
    with _on_device(device, compilations=0):
        tl.expm(t)


# Moler's badly scaled matrix (SciPy's test_burkardt_14): scaling by the 1-norm (2e10)
# squares the error up to 1e-1; SciPy's rule reads the norms of A^k and scales far less
_MOLER = np.array([[0, 1e-8, 0], [-(2e10 + 4e8 / 6.0), -3, 2e10], [200.0 / 3.0, 0, -200.0 / 3.0]])
# logm of a non-normal triangular matrix (SciPy's test_triangularity_perturbation): 46
# squarings lose the diagonal unless it is recomputed after each (Code Fragment 2.1)
_TRI_LOG = np.array([[-1.12867982029050462, 9.61418377142025565e4, -4.52485573953179264e9,
                      2.92496941103871812e14],
                     [0, -1.20101052953082288, 9.63469687211303099e4, -4.68104828911105442e9],
                     [0, 0, -1.13289322264498393, 9.53249183094775653e4],
                     [0, 0, 0, -1.17947533272554850]])
_TRI_EXP = np.array([[3.2346e-1, 3e4, 3e4, 3e4], [0, 3.0089e-1, 3e4, 3e4],
                     [0, 0, 3.221e-1, 3e4], [0, 0, 0, 3.0744e-1]])


_SLOW = pytest.mark.slow  # XLA compiles of the norm, Pade and squaring graphs: 4-8 s each


@pytest.mark.parametrize("case", ["upper", pytest.param("moler", marks=_SLOW),
                                  pytest.param("lower", marks=_SLOW),
                                  pytest.param("batch", marks=_SLOW)])
def test_expm_scaling_and_triangular(device, case):
    """expm of badly scaled and of triangular matrices: SciPy's degree and scaling rule
    and its exact triangular diagonals; as SciPy, to its test tolerances."""
    if case == "moler":
        a, want, rtol = _MOLER, sl.expm(_MOLER), 1e-7
    elif case == "batch":  # triangular, full and Moler's matrices: a scaling each
        rng = np.random.default_rng(5)
        full = rng.standard_normal((4, 4))
        a = np.stack([_TRI_LOG, full, np.pad(_MOLER, ((0, 1), (0, 1)))])
        want, rtol = np.stack([_TRI_EXP, sl.expm(full), sl.expm(a[2])]), 1e-4
    else:  # (the lower corner entry is ill-conditioned: SciPy's is off by 1e-5 there)
        a, want, rtol = (_TRI_LOG, _TRI_EXP, 1e-4) if case == "upper" else \
            (_TRI_LOG.T, _TRI_EXP.T, 1e-3)
        assert np.allclose(sl.expm(a), want, rtol=rtol, atol=1e-12)  # the reference meets it
    with _on_device(device):
        e = to_np(tl.expm(tensor(a, device)))
    assert e.dtype == np.float64 and e.shape == a.shape
    np.testing.assert_allclose(e, want, rtol=rtol, atol=1e-12)
    if case in ("upper", "lower"):  # the diagonal exact, as SciPy's
        np.testing.assert_allclose(np.diag(e), np.exp(np.diag(a)), rtol=1e-14)


def _svd_check(a, u, s, vh, c=10):
    k = len(s)
    scale = c * max(a.shape) * eps(a.dtype)
    assert np.max(np.abs(s - sl.svdvals(a))) <= scale * s[0]
    assert np.linalg.norm((u[:, :k] * s) @ vh[:k] - a, 2) <= scale * s[0]
    assert np.linalg.norm(u.T @ u - np.eye(u.shape[1]), 2) <= scale
    assert np.linalg.norm(vh @ vh.T - np.eye(vh.shape[0]), 2) <= scale


@pytest.mark.slow  # XLA compiles of the QDWH and eigh graphs at n = 300: ~1-3 min on 2 cores
def test_svd_n300_float32_on_device(device):
    """Must-show: svd of a 300 x 300 float32 matrix (singular values from 1 to 1e-6) on the
    device with SciPy's accuracy (backward error, orthogonality), no aten CPU fallback;
    a repeat compiles nothing, runs 17 graphs (one spectral split: n > LEAF; its bases and
    blocks' results are graphs of their own) and (quiet machine) takes under 2 s."""
    import time

    n = 300
    rng = np.random.default_rng(24)
    q1, q2 = (np.linalg.qr(rng.standard_normal((n, n)))[0] for _ in range(2))
    a = ((q1 * np.logspace(0, -6, n)) @ q2.T).astype(np.float32)
    t = tensor(a, device)
    with _on_device(device):
        u, s, vh = tl.svd(t)
    _svd_check(a, to_np(u), to_np(s), to_np(vh))
    with _on_device(device, compilations=0) as counts:
        start = time.perf_counter()
        u, s, vh = tl.svd(t)
        u, s, vh = to_np(u), to_np(s), to_np(vh)
        seconds = time.perf_counter() - start
    _svd_check(a, u, s, vh)
    if counts is not None:
        assert counts.executions <= 17, counts
        print(f"svd 300x300 float32 warm on XLA: {seconds:.2f} s, {counts}")


@pytest.mark.slow  # XLA compiles the split's QDWH, basis and eigh graphs: ~1-3 min
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_svd_spectral_split(device, monkeypatch, dtype):
    """svd through QDWH-eig's spectral split (blocks above LEAF split at the median of
    diag(H)): SciPy's accuracy on a graded and a random matrix, no aten CPU fallback."""
    from trnscipy.linalg import _xla_svd

    monkeypatch.setattr(_xla_svd, "LEAF", 24)
    n = 80
    rng = np.random.default_rng(28)
    q1, q2 = (np.linalg.qr(rng.standard_normal((n, n)))[0] for _ in range(2))
    for a in ((q1 * np.logspace(0, -6, n)) @ q2.T, rng.standard_normal((n, n))):
        a = a.astype(dtype)
        with _on_device(device):
            u, s, vh = _xla_svd.svd_qdwh(tensor(a, device))
            s_only = _xla_svd.svd_qdwh(tensor(a, device), compute_uv=False)
        _svd_check(a, to_np(u), to_np(s), to_np(vh))
        assert np.allclose(to_np(s_only), to_np(s), atol=10 * n * eps(dtype) * to_np(s)[0])


def _eigh_check(a, w, v, dtype, bmat=None, c=10):
    """SciPy's eigenvalues, residual ||A V - B V W|| and B-orthonormality, in n eps."""
    n = a.shape[0]
    bmat = np.eye(n) if bmat is None else bmat.astype(np.float64)
    a64, v64 = a.astype(np.float64), v.astype(np.float64)
    ref = sl.eigh(a64, bmat, eigvals_only=True)
    scale = np.abs(ref).max()
    assert np.abs(w - ref).max() <= c * n * eps(dtype) * scale
    assert np.linalg.norm(a64 @ v64 - bmat @ v64 * w) <= c * n * eps(dtype) * scale * np.sqrt(n)
    assert np.linalg.norm(v64.T @ bmat @ v64 - np.eye(len(w))) <= c * n * eps(dtype) * np.sqrt(n)


@pytest.mark.slow  # XLA compiles the split's QDWH, basis and eigh graphs: ~1-3 min
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_spectral_split(device, monkeypatch, dtype):
    """eigh of real matrices above LEAF through the spectral split on XLA (and the plain
    eigh on the CPU lane): eigenvalues, eigenvalues only, a subset, a generalized problem
    and a spectrum with a 10-fold eigenvalue, against SciPy; no aten CPU fallback."""
    from trnscipy.linalg import _xla_svd

    monkeypatch.setattr(_xla_svd, "LEAF", 24)
    n = 80
    rng = np.random.default_rng(31)
    q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    g = rng.standard_normal((n, n))
    repeated = (q * np.r_[np.full(10, 2.0), np.linspace(-3, 5, n - 10)]) @ q.T
    spd = g @ g.T / n + np.eye(n)
    for a in (g + g.T, repeated):
        a = ((a + a.T) / 2).astype(dtype)
        with _on_device(device):
            w, v = tl.eigh(tensor(a, device))
            w_only = tl.eigh(tensor(a, device), eigvals_only=True)
            w_sub, v_sub = tl.eigh(tensor(a, device), subset_by_index=[5, 14])
        _eigh_check(a, to_np(w), to_np(v), dtype)
        np.testing.assert_allclose(to_np(w_only), to_np(w), atol=10 * n * eps(dtype) * 8)
        ref = sl.eigh(a.astype(np.float64), eigvals_only=True)
        assert np.abs(to_np(w_sub) - ref[5:15]).max() <= 10 * n * eps(dtype) * np.abs(ref).max()
        r = a.astype(np.float64) @ to_np(v_sub) - to_np(v_sub) * to_np(w_sub)
        assert np.linalg.norm(r) <= 10 * n * eps(dtype) * np.abs(ref).max() * np.sqrt(n)
    a = (g + g.T).astype(dtype)
    with _on_device(device):
        w, v = tl.eigh(tensor(a, device), tensor(spd.astype(dtype), device))
    _eigh_check(a, to_np(w), to_np(v), dtype, bmat=spd.astype(dtype), c=100)


@pytest.mark.slow  # XLA compiles the split's QDWH, basis and eigh graphs: ~1 min
def test_eigh_spectral_split_fixed_shapes(device, monkeypatch):
    """The split pads its blocks to a few sizes (_xla_svd._bucket): a second matrix of
    the same n whose split ranks differ (38 / 42 against 42 / 38 eigenvalues above the
    diagonal's median) compiles no new graph; both agree with SciPy's eigh."""
    from trnscipy.linalg import _xla_svd

    monkeypatch.setattr(_xla_svd, "LEAF", 48)  # one split of n = 80, blocks padded to 42
    ranks = []
    split = _xla_svd._split

    def spy(b, s):
        parts = split(b, s)
        ranks.append(None if parts is None else [k for _, k in parts])
        return parts

    monkeypatch.setattr(_xla_svd, "_split", spy)
    n = 80
    rng = np.random.default_rng(33)
    for above, compilations in ((38, None), (42, 0)):
        q = np.linalg.qr(rng.standard_normal((n, n)))[0]
        lam = np.r_[-np.linspace(1, 2, n - above), np.linspace(1, 2, above)]
        a = ((q * lam) @ q.T).astype(np.float32)
        a = (a + a.T) / 2
        with _on_device(device, compilations=compilations):
            w, v = tl.eigh(tensor(a, device))
            w, v = to_np(w), to_np(v)
        _eigh_check(a, w, v, np.float32)
    if device.type == "xla":
        assert ranks == [[38, 42], [42, 38]], ranks


@pytest.mark.slow  # the device QR's graphs compile for ~2 min on 2 cores (load 16)
@pytest.mark.parametrize("shape", [(9, 6), (6, 9)])
def test_svd_rank_deficient_full(device, shape):
    """Rank-deficient input and full_matrices: U completed by the device QR, orthonormal."""
    if device.type == "xla" and shape == (6, 9):
        pytest.skip("XLA compile budget: the wide case is the tall one transposed")
    rng = np.random.default_rng(25)
    a = (rng.standard_normal((shape[0], 3)) @ rng.standard_normal((3, shape[1])))
    with _on_device(device):
        u, s, vh = tl.svd(tensor(a, device))
        s_only = tl.svd(tensor(a, device), compute_uv=False)
    assert u.shape == (shape[0],) * 2 and vh.shape == (shape[1],) * 2
    _svd_check(a, to_np(u), to_np(s), to_np(vh), c=1e6 if device.type == "xla" else 10)
    assert np.allclose(to_np(s_only), sl.svdvals(a), atol=1e-6 if device.type == "xla" else 1e-13)


def test_divide_keeps_complex128(device):
    """trnscipy._dtypes.divide: complex128 by a complex tensor, a real tensor and Python
    numbers keeps torch's result dtype on every lane (torch-xla 2.9 labels the quotient
    float32; `torch.where` and reads to the host then drop the imaginary part), exact to
    NumPy's rounding."""
    from trnscipy._dtypes import absolute, divide

    rng = np.random.default_rng(31)
    x, y = (rng.standard_normal(5) + 1j * rng.standard_normal(5) for _ in range(2))
    r = rng.uniform(1, 2, 5)
    tx, ty, tr = tensor(x, device), tensor(y, device), tensor(r, device)
    cases = [(divide(tx, ty), x / y), (divide(tx, tr), x / r), (divide(tx, 3.0), x / 3.0),
             (divide(tx, 1 - 2j), x / (1 - 2j)), (divide(1, ty), 1 / y)]
    with _on_device(device):
        for got, ref in cases:
            assert got.dtype == torch.complex128
            kept = torch.where(tr > 0, got, torch.zeros_like(got))  # no promotion to hide it
            assert np.abs(to_np(kept) - ref).max() <= 4 * eps(np.float64) * np.abs(ref).max()
        mag = absolute(tx)  # (torch-xla labels complex128 abs complex128: max fails to lower)
        assert mag.dtype == torch.float64
        assert abs(float(mag.max()) - np.abs(x).max()) <= eps(np.float64) * np.abs(x).max()


@pytest.mark.parametrize("values", [[1.0, np.nan, -2.0], [np.nan] * 3, [1.0, np.inf, 2.0],
                                    [-3.0, 1.0]])
def test_abs_max_sees_nan(values, device):
    """trnscipy._dtypes.abs_max, the convergence reads' size: NumPy's max |x| on every lane
    (torch-xla 2.9's max skips NaN, and reads -3.4e38 for an all-NaN tensor: a finite,
    'converged' size)."""
    from trnscipy._dtypes import abs_max

    x = np.array(values)
    for dtype in (torch.float32, torch.float64):
        t = tensor(x, device).to(dtype)
        with _on_device(device):
            got = float(abs_max(t))
        ref = np.abs(x).max()
        assert got == ref or (np.isnan(got) and np.isnan(ref))
