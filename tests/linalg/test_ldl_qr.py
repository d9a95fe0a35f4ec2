"""ldl (Bunch-Kaufman), pivoted qr, rq, qr_multiply: paired with SciPy on the cpu (SciPy on
views), generic (torch kernels on CPU tensors) and xla lanes."""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import tensor, to_np
from tests.linalg._fallbacks import aten_fallbacks

torch = pytest.importorskip("torch")


def _sym(n, dtype, rng, small_diag=False):
    a = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, n))
    if small_diag:  # forces 2x2 pivots
        a[np.diag_indices(n)] *= 1e-3
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("small_diag", [False, True])
def test_ldl(dlane, dtype, lower, small_diag):
    if dlane.type == "xla":
        pytest.skip("XLA lane: test_ldl_compiles_bounded (each pivot step compiles)")
    rng = np.random.default_rng(60)
    n = 5
    a = _sym(n, dtype, rng, small_diag)
    for hermitian in ((True, False) if np.dtype(dtype).kind == "c" else (True,)):
        b = a + a.conj().T if hermitian else a + a.T
        ref = sl.ldl(b, lower=lower, hermitian=hermitian)
        with aten_fallbacks(dlane) as host:
            out = tl.ldl(tensor(b, dlane), lower=lower, hermitian=hermitian)
        assert not host
        tol = 1e-10 if np.dtype(dtype).itemsize >= 8 else 1e-4
        for got, want in zip(out, ref, strict=True):
            got = to_np(got)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
        lu, d, perm = (to_np(x) for x in out)
        assert np.array_equal(lu[perm], np.tril(lu[perm]) if lower else np.triu(lu[perm]))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_ldl_stacks(dlane, dtype):
    """A stack steps in lock step, each matrix with its own pivots (1x1 and 2x2, with and
    without interchanges, a singular column): SciPy's batched lu, d, perm, and each
    matrix's single call (to rounding: torch's CPU complex kernels round by array size)."""
    if dlane.type == "xla":
        pytest.skip("XLA lane: test_batch_rule's ldl stacks (real; complex runs on the host)")
    rng = np.random.default_rng(62)
    a = np.stack([_sym(5, dtype, rng, small_diag=s) for s in (False, True, False)])
    a[1, 0, 0] = 1e-3  # an interchange at the first column
    a[2, :, 0] = a[2, 0, :] = 0  # a singular column
    for hermitian in ((True, False) if np.dtype(dtype).kind == "c" else (True,)):
        b = a + (a.conj() if hermitian else a).swapaxes(-1, -2)
        for lower in (True, False):
            ref = sl.ldl(b, lower=lower, hermitian=hermitian)
            out = [to_np(x) for x in tl.ldl(tensor(b, dlane), lower=lower,
                                             hermitian=hermitian)]
            for got, want in zip(out, ref, strict=True):
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
            for i in range(len(b)):
                single = tl.ldl(tensor(b[i], dlane), lower=lower, hermitian=hermitian)
                for got, one in zip(out, single, strict=True):
                    np.testing.assert_allclose(got[i], to_np(one), rtol=1e-14, atol=1e-15)


def test_ldl_errors(dlane):
    with pytest.raises(ValueError, match="square"):
        tl.ldl(tensor(np.ones((2, 3)), dlane))
    with pytest.raises(ValueError, match="infs or NaNs"):
        tl.ldl(tensor(np.full((2, 2), np.nan), dlane))
    lu, d, perm = tl.ldl(tensor(np.zeros((0, 0)), dlane))
    assert lu.shape == d.shape == (0, 0) and perm.shape == (0,)


@pytest.mark.xla
def test_ldl_compiles_bounded(xla_device):
    """One graph per kind of pivot step for every column, not one per column (at n = 24
    the per-column slices compiled 36 graphs)."""
    from trnscipy._metrics import xla_counts

    a = _sym(16, np.float32, np.random.default_rng(61), small_diag=True)
    a = a + a.T
    with xla_counts() as c, aten_fallbacks(xla_device) as host:
        out = tl.ldl(torch.tensor(a, device=xla_device))
        lu, d, perm = (x.cpu().numpy() for x in out)
    assert c.compilations <= 10, c
    assert not host
    want = sl.ldl(a)
    np.testing.assert_array_equal(perm, want[2])  # SciPy's pivots
    for got, ref in zip((lu, d), want[:2], strict=True):
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
