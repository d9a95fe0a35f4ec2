"""eig/eigvals, pinv, lstsq, norm, expm, sqrtm: paired with SciPy."""

import contextlib
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, generic_kernels, random, tensor, to_np
from trnscipy import DeviceFallbackWarning

torch = pytest.importorskip("torch")

N = 6


def _host_on_xla(dlane):
    if dlane.type == "xla":  # complex input: the device eig is real Schur based
        return pytest.warns(DeviceFallbackWarning, match="complex input are not on the device")
    return contextlib.nullcontext()


def _sorted(w):
    return w[np.lexsort((np.round(w.imag, 8), np.round(w.real, 8)))]


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_eig_eigvals(dlane, dtype):
    if dlane.type == "xla" and dtype == np.float64:
        pytest.skip("XLA: the device eig in tests/linalg/test_schur.py (compile budget)")
    rng = np.random.default_rng(30)
    a = random(N, dtype, rng)
    wref, vref = sl.eig(a)
    with _host_on_xla(dlane):
        w, v = tl.eig(tensor(a, dlane))
    assert to_np(w).dtype == wref.dtype and to_np(v).dtype == vref.dtype
    w, v = to_np(w), to_np(v)
    tol = 100 * N * eps(dtype) * np.linalg.norm(a)
    assert np.allclose(_sorted(w), _sorted(wref), atol=tol)
    assert np.linalg.norm(a @ v - v * w) <= tol
    with _host_on_xla(dlane):
        w2 = tl.eigvals(tensor(a, dlane))
    assert np.allclose(_sorted(to_np(w2)), _sorted(wref), atol=tol)
    if dlane.type == "xla":
        return  # real input: the device eig in tests/linalg/test_schur.py
    sym = (a + a.conj().T) / 2  # real eigenvalues: SciPy returns real eigenvectors then
    _, vref = sl.eig(sym.real)
    with _host_on_xla(dlane):
        _, v = tl.eig(tensor(sym.real.copy(), dlane))
    assert to_np(v).dtype == vref.dtype


def test_eig_generalized_and_left_run_on_host(dlane):
    if dlane.type == "xla":
        pytest.skip("eig is a host op on XLA (covered above)")
    a = random(4, np.float64, np.random.default_rng(31))
    b = np.eye(4) * 2
    ctx = pytest.warns(DeviceFallbackWarning, match="generalized") if \
        generic_kernels(dlane) else contextlib.nullcontext()
    with ctx:
        w, vl, vr = tl.eig(tensor(a, dlane), tensor(b, dlane), left=True)
    wref, vlref, vrref = sl.eig(a, b, left=True)
    assert np.allclose(to_np(w), wref) and np.allclose(to_np(vr), vrref)


@pytest.mark.parametrize("shape", [(N, 4), (4, N)])
def test_pinv_lstsq(dlane, shape):
    if dlane.type == "xla" and shape == (4, N):
        pytest.skip("XLA lane compile budget (an SVD graph compiles ~10 s)")
    rng = np.random.default_rng(32)
    dtype = np.float32 if dlane.type == "xla" else np.float64
    a = random(shape[1], dtype, rng, m=shape[0])
    b = rng.standard_normal(shape[0]).astype(dtype)
    tol = 100 * N * eps(dtype)
    p, rank = tl.pinv(tensor(a, dlane), return_rank=True)
    pref, rref = sl.pinv(a, return_rank=True)
    assert to_np(p).dtype == pref.dtype and int(rank) == rref
    assert np.allclose(to_np(p), pref, atol=tol * np.abs(pref).max())
    x, res, rk, s = tl.lstsq(tensor(a, dlane), tensor(b, dlane))
    xref, resref, rkref, sref = sl.lstsq(a, b)
    assert rk == rkref and tuple(res.shape) == np.shape(resref)
    assert np.allclose(to_np(x), xref, atol=tol * np.abs(xref).max())
    assert np.allclose(to_np(s), sref, atol=tol * sref[0])
    if np.size(resref):
        assert np.allclose(to_np(res), resref, rtol=tol * 10)


def test_pinv_device_cutoff_as_scipy():
    """The device pinv (CUDA, XLA) run on CPU tensors: SciPy's cut-off atol + rtol s_max
    (rtol by default max(m, n) eps even where atol is given), so the rank and the result
    are SciPy's for every pair of tolerances."""
    from trnscipy.linalg import _kernels

    rng = np.random.default_rng(35)
    u = np.linalg.qr(rng.standard_normal((8, 5)))[0]
    v = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    a = (u * np.array([10, 1, 1e-3, 1e-6, 1e-14])) @ v.T
    # (atol 6e-4, rtol 5e-5: the sum 1.1e-3 cuts s = 1e-3, the larger alone would not; a
    # cut-off equal to a singular value would leave the rank to the SVD's last bit)
    for kw in ({}, {"atol": 1e-4}, {"atol": 6e-4, "rtol": 5e-5}, {"atol": 1e-4, "rtol": 1e-2},
               {"rtol": 0.2}, {"atol": 1e-6 - 1e-9}):
        p, rank = _kernels.pinv(torch.from_numpy(a), return_rank=True, **kw)
        pref, rref = sl.pinv(a, return_rank=True, **kw)
        assert int(rank) == rref, kw
        assert np.allclose(p.numpy(), pref, rtol=0, atol=1e-7 * np.abs(pref).max()), kw


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_lstsq_device_residues_as_scipy(dtype):
    """The device lstsq (CUDA, XLA) run on CPU tensors: residues as the installed SciPy's
    (1.17: real, empty below full rank; 1.18: x's dtype, NaN below full rank, empty
    for gelsy), for full and short rank, vector and matrix right-hand sides."""
    from trnscipy.linalg import _kernels

    rng = np.random.default_rng(34)
    full = random(3, dtype, rng, m=6)
    short = np.concatenate([full[:, :2], full[:, :1]], axis=1)
    for a in (full, short, full.T[:, :2]):
        for b in (random(1, dtype, rng, m=a.shape[0])[:, 0], random(2, dtype, rng, m=a.shape[0])):
            for driver in (None, "gelsy"):
                ref = sl.lstsq(a, b, lapack_driver=driver)[1]
                got = _kernels.lstsq(torch.from_numpy(a), torch.from_numpy(b),
                                     lapack_driver=driver)[1].numpy()
                assert got.dtype == np.asarray(ref).dtype and got.shape == np.shape(ref)
                np.testing.assert_allclose(got, ref, rtol=1e-4 if dtype == np.float32 else 1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_norm(dlane, dtype):
    rng = np.random.default_rng(33)
    a = random(4, dtype, rng, m=5)
    t = tensor(a, dlane)
    ords = [None, "fro", 1, -1, np.inf, -np.inf]
    if dlane.type != "xla":
        ords += [2, -2, "nuc"]  # XLA: one SVD compile is already paid in test_pinv_lstsq
    for ord_ in ords:
        ref = sl.norm(a, ord_)
        ours = tl.norm(t, ord_)
        assert isinstance(ours, torch.Tensor) and ours.ndim == 0
        if isinstance(ref, np.generic):  # SciPy returns a Python float for some ords
            assert to_np(ours).dtype == ref.dtype, ord_
        assert np.isclose(to_np(ours), ref, rtol=100 * eps(dtype)), ord_
    for kw in ({"axis": 0}, {"axis": 1, "ord": 1}, {"axis": 0, "keepdims": True}):
        ref = sl.norm(a, **kw)
        ours = to_np(tl.norm(t, **kw))
        assert ours.shape == ref.shape and np.allclose(ours, ref, rtol=100 * eps(dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_expm_sqrtm(dlane, dtype):
    rng = np.random.default_rng(34)
    a = random(N, dtype, rng) / 3
    e = tl.expm(tensor(a, dlane))  # on XLA too: trnscipy/linalg/_xla_dense.py
    ref = sl.expm(a)
    assert to_np(e).dtype == ref.dtype
    assert np.allclose(to_np(e), ref, rtol=1000 * eps(dtype), atol=1000 * eps(dtype))
    spd = a @ a.conj().T + np.eye(N, dtype=dtype)
    with warnings.catch_warnings():  # sqrtm's Schur form: host schur where no device one
        warnings.filterwarnings("ignore", "trnscipy: scipy.linalg.*schur runs on the host",
                                DeviceFallbackWarning)
        r = tl.sqrtm(tensor(spd, dlane))
    rref = sl.sqrtm(spd)
    assert to_np(r).dtype == rref.dtype
    assert np.allclose(to_np(r), rref, rtol=1e3 * eps(dtype), atol=1e3 * eps(dtype))
