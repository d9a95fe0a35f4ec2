"""eigs/eigsh's inner solves in offload mode against SciPy by paired execution.

SciPy inverts ``A - sigma M`` (and M in generalized mode 2) by an LU factorization of a
matrix and by ``gmres`` to ``max(tol or 2 eps, 1000 sqrt(n) eps)`` for an operator; SciPy's
own test_arpack.py checks the eigenvalues to 2000 eps against the dense solution, which
looser inner solves missed.  Small matrices (n = 8): SciPy's test problems' size.
"""

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import trnscipy
import trnscipy.sparse.linalg as tsl

torch = pytest.importorskip("torch")

N = 8
MATTYPES = {"asarray": np.asarray, "csr": sp.csr_array, "aslinearoperator": spla.aslinearoperator}


def _hermitian(complex_=False, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.random((N, N)) + (1j * rng.random((N, N)) if complex_ else 0)
    return A.conj() @ A.T  # positive definite


def _nonsymmetric_complex(seed=1):
    rng = np.random.default_rng(seed)
    return rng.random((N, N)) + 1j * rng.random((N, N))


def _rtol(dtype):
    """SciPy's test_arpack tolerance: 2000 eps (float32: 3000 eps, times 5 for operators)."""
    return 2000 * np.finfo(np.float64).eps if dtype in "dD" else 15000 * np.finfo(np.float32).eps


def _close(w, exact, dtype):
    rtol = _rtol(dtype)
    w = np.sort_complex(np.asarray(w, dtype=complex))
    exact = np.sort_complex(np.asarray(exact, dtype=complex))
    np.testing.assert_allclose(w, exact, rtol=rtol, atol=rtol)


def _wanted(exact, ref):
    """The exact eigenvalues nearest SciPy's (the same selection, exact values)."""
    return np.array([exact[np.argmin(np.abs(exact - r))] for r in np.asarray(ref)])


@pytest.mark.xla
@pytest.mark.parametrize("mattype", list(MATTYPES))
@pytest.mark.parametrize("sigma", [0.1, 0.1 + 0.1j])
def test_eigs_shift_invert_complex(xla_device, mattype, sigma):
    """eigs with sigma on complex A: an LU of A - sigma I for matrices, gmres on the shifted
    operator (on the device, not the user's host code) for an operator."""
    a = _nonsymmetric_complex()
    ref = spla.eigs(MATTYPES[mattype](a), 2, sigma=sigma, return_eigenvectors=False)
    with trnscipy.offload("xla"):
        w, X = tsl.eigs(MATTYPES[mattype](a), 2, sigma=sigma)
    assert isinstance(w, np.ndarray) and w.dtype == ref.dtype
    exact = sl.eigvals(a)
    _close(w, _wanted(exact, ref), "D")
    res = np.linalg.norm(a @ X - X * w, axis=0) / np.linalg.norm(a, 2)
    assert res.max() <= 1e-12, res


@pytest.mark.xla
@pytest.mark.parametrize("typ,mode", [("d", "cayley"), ("d", "buckling"), ("f", "buckling"),
                                      ("D", "normal")])
def test_eigsh_shift_invert_operator(xla_device, typ, mode):
    """eigsh with sigma on an operator: gmres to SciPy's tolerance (float64 within
    2000 eps), in A's precision (float32 stays float32), complex Hermitian A solved (a
    symmetric-only minres gave 'non-symmetric matrix')."""
    a = _hermitian(complex_=typ == "D").astype(typ)
    tol = 30 * np.finfo(np.float32).eps if typ == "f" else 0
    kw = dict(sigma=0.5, which="LA", tol=tol, mode=mode)
    ref = spla.eigsh(spla.aslinearoperator(a), 2, return_eigenvectors=False, **kw)
    with trnscipy.offload("xla"):
        w, X = tsl.eigsh(spla.aslinearoperator(a), 2, **kw)
    assert w.dtype == ref.dtype and X.dtype == a.dtype
    _close(w, _wanted(sl.eigvalsh(a.astype(typ.upper())), ref), typ)
    if mode == "normal":  # (SciPy's test checks the vectors too)
        np.testing.assert_allclose(a @ X, X * w, rtol=_rtol(typ), atol=_rtol(typ))


@pytest.mark.xla
@pytest.mark.parametrize("mattype", list(MATTYPES))
def test_eigsh_generalized_mode2(xla_device, mattype):
    """eigsh with M and no sigma: M^-1 by its LU (matrices) or gmres (operators)."""
    a, m = _hermitian(seed=2), _hermitian(seed=3) + N * np.eye(N)
    ref = spla.eigsh(MATTYPES[mattype](a), 2, MATTYPES[mattype](m), which="SA",
                     return_eigenvectors=False)
    with trnscipy.offload("xla"):
        w, X = tsl.eigsh(MATTYPES[mattype](a), 2, MATTYPES[mattype](m), which="SA")
    _close(w, _wanted(sl.eigvalsh(a, m), ref), "d")
    np.testing.assert_allclose(a @ X, (m @ X) * w, rtol=_rtol("d"), atol=_rtol("d"))


@pytest.mark.parametrize("lane", ["cpu", pytest.param("xla", marks=pytest.mark.xla)])
def test_matrix_operator_of_device_data_takes_numpy(lane):
    """A device-backed operator applied to NumPy (SciPy's code calling it) computes on the
    device and returns NumPy, as SciPy's operator of the host matrix does."""
    if lane == "xla":
        pytest.importorskip("torch_xla")
    a = _nonsymmetric_complex()
    x = np.arange(N, dtype=np.float64)
    device = trnscipy.resolve_device(lane)
    for data in (torch.from_numpy(a).to(device), trnscipy.to_device(sp.csr_array(a), device)):
        op = tsl.aslinearoperator(data)
        for got, want in ((op.matvec(x), a @ x), (op.matmat(x[:, None]), a @ x[:, None]),
                          (op @ x, a @ x)):
            assert isinstance(got, np.ndarray) and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.xla
def test_no_convergence_carries_host_pairs(xla_device):
    """An offloaded call's ArpackNoConvergence carries its converged pairs as NumPy, as the
    call's results would come (SciPy's test checks them with NumPy's dot)."""
    rng = np.random.default_rng(4)
    m = rng.random((30, 30))
    m = m @ m.T
    with pytest.raises(spla.ArpackNoConvergence):
        spla.eigsh(m, 4, v0=m[:, 0], maxiter=5, ncv=9)
    with trnscipy.offload("xla"), pytest.raises(spla.ArpackNoConvergence) as info:
        tsl.eigsh(m, 4, v0=m[:, 0], maxiter=5, ncv=9)
    w, v = info.value.eigenvalues, info.value.eigenvectors
    assert isinstance(w, np.ndarray) and isinstance(v, np.ndarray) and len(w) > 0
    np.testing.assert_allclose(m @ v, w * v, rtol=1e-10, atol=1e-10 * np.linalg.norm(m, 2))
