"""Matrix trigonometric functions, Lyapunov and Toeplitz solvers, array predicates,
procrustes, subspace angles, rq, diagsvd, expm_cond, clarkson_woodruff_transform: paired
with SciPy on the cpu (SciPy on views), generic (torch kernels on CPU tensors) and xla
lanes (one representative case there: each new graph compiles)."""

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import tensor, to_np
from tests.linalg.test_matfuncs import on_device  # schur (delegated) may run on the host

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(70)
A = RNG.standard_normal((4, 4))
Q = A @ A.T + np.eye(4)
V = np.array([2.0, -1.0, 0.5, 0.25])
R53 = RNG.standard_normal((5, 3))


def _t(x, dev):
    return tuple(_t(y, dev) for y in x) if isinstance(x, tuple) else tensor(np.asarray(x), dev)


def _same(got, want, rtol):
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _same(g, w, rtol)
        return
    want = np.asarray(want)
    got = to_np(got) if torch.is_tensor(got) else np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-300))


CASES = {
    "cosm": ((A,), {}), "sinm": ((A,), {}), "tanm": ((A / 4,), {}),
    "coshm": ((A,), {}), "sinhm": ((A,), {}), "tanhm": ((A,), {}),
    "cosm-complex": ((A + 0.5j * A.T,), {}),
    "solve_continuous_lyapunov": ((A, Q), {}),
    "solve_lyapunov": ((A, Q), {}),
    "solve_discrete_lyapunov": ((A / 5, Q), {}),
    "solve_discrete_lyapunov-bilinear": ((A / 5, Q), {"method": "bilinear"}),
    "solve_toeplitz": (((V, V[::-1].copy()), V), {}),
    "matmul_toeplitz": (((V, V[::-1].copy()), np.ones((4, 2))), {}),
    "bandwidth": ((np.triu(A, -1),), {}),
    "issymmetric": ((Q,), {}), "ishermitian": ((A + 1j * A.T,), {}),
    "orthogonal_procrustes": ((A, A.T.copy()), {}),
    "subspace_angles": ((R53, RNG.standard_normal((5, 2))), {}),
    "rq": ((R53,), {}), "rq-economic": ((R53.T.copy(),), {"mode": "economic"}),
    "diagsvd": ((V[:3], 5, 3), {}),
    "expm_cond": ((A / 2,), {}),
    "clarkson_woodruff_transform": ((R53, 2), {"rng": 3}),
}
XLA = {"solve_toeplitz", "issymmetric", "bandwidth", "rq", "diagsvd"}  # (complex expm: minutes)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_paired(dlane, case, dtype):
    if dlane.type == "xla" and (case not in XLA or dtype != np.float32):
        pytest.skip("XLA lane: a few representative cases (compile budget)")
    name = case.split("-")[0]
    args, kwargs = CASES[case]
    args = tuple(tuple(y.astype(np.result_type(y, dtype)) for y in a) if isinstance(a, tuple)
                 else a.astype(np.result_type(a, dtype)) if isinstance(a, np.ndarray) else a
                 for a in args)
    if dtype == np.float32:
        args = tuple(a.astype(np.complex64 if a.dtype.kind == "c" else np.float32)
                     if isinstance(a, np.ndarray) else a for a in args)
    want = getattr(sl, name)(*args, **kwargs)
    with on_device(dlane):
        got = getattr(tl, name)(*(_t(a, dlane) if isinstance(a, np.ndarray | tuple) else a
                                  for a in args), **kwargs)
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    if name in ("bandwidth", "issymmetric", "ishermitian"):
        assert got == want
    else:
        _same(got, want, rtol)


def test_errors(dlane):
    for name in ("cosm", "sinhm", "expm_cond"):
        with pytest.raises(ValueError):
            getattr(tl, name)(tensor(np.ones((2, 3)), dlane))
    with pytest.raises(ValueError, match="square"):
        tl.issymmetric(tensor(np.ones((2, 3)), dlane))
    with pytest.raises(ValueError, match="2D"):
        tl.bandwidth(tensor(np.ones(3), dlane))
    with pytest.raises(ValueError, match="Incompatible"):
        tl.solve_toeplitz(tensor(V, dlane), tensor(np.ones(3), dlane))
    with pytest.raises(ValueError, match="M or N"):
        tl.diagsvd(tensor(V, dlane), 5, 3)
    with pytest.raises(ValueError, match="Mode"):
        tl.rq(tensor(A, dlane), mode="raw")
    with pytest.raises(ValueError, match="shapes"):
        tl.orthogonal_procrustes(tensor(A, dlane), tensor(R53, dlane))
