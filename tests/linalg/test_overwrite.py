"""overwrite_a / overwrite_b as SciPy's: where LAPACK works in the caller's array (its
dtype the one computed in, its layout LAPACK's), the result is that array or the array
holds the factorization; elsewhere the caller's arrays are left as they were.  Paired with
SciPy under offload (host arrays: their layout is what decides) on the cpu lane, and on
XLA, whose tensors have no strides (the host array's layout is read there)."""

import warnings

import numpy as np
import pytest
import scipy.linalg

import trnscipy
import trnscipy.linalg


def _matrix(dtype, order, spd=False):
    a = np.arange(9.0).reshape(3, 3) % 7 + 3 * np.eye(3)
    if spd:
        a = a + a.T + 10 * np.eye(3)
    return a.astype(dtype, order=order)


def _call(lib, name, a, b):
    if name == "solve_a":
        return lib.solve(a, np.ones(3), overwrite_a=True)
    if name == "solve_b":
        return lib.solve(_matrix("d", "C"), b, overwrite_b=True)
    if name == "solve_triangular":
        return lib.solve_triangular(_matrix("d", "C"), b, overwrite_b=True)
    if name == "lu_solve":
        return lib.lu_solve(scipy.linalg.lu_factor(_matrix("d", "C")), b, overwrite_b=True)
    if name == "cho_solve":
        return lib.cho_solve(scipy.linalg.cho_factor(_matrix("d", "C", True)), b,
                             overwrite_b=True)
    return getattr(lib, name)(a, overwrite_a=True)


def _outcome(lib, lane, name, dtype, order, b_ndim):
    """(written, result shares the caller's array, result) of one call."""
    a = _matrix(dtype, order, spd=name in ("cholesky", "cho_factor"))
    b = np.ones((3, 2)[:b_ndim], dtype=dtype, order=order)
    target = b if name in ("solve_b", "solve_triangular", "lu_solve", "cho_solve") else a
    before = target.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if lib is scipy.linalg:
            r = _call(lib, name, a, b)
        else:
            with trnscipy.offload(lane):
                r = _call(lib, name, a, b)
    r = r[0] if type(r) is tuple else r
    return (not np.array_equal(target, before), np.shares_memory(np.asarray(r), target),
            np.asarray(r))


NAMES = ["solve_a", "solve_b", "inv", "det", "lu_factor", "cho_factor", "cholesky",
         "solve_triangular", "lu_solve", "cho_solve"]


def _check(lane, name, dtype, order, b_ndim):
    expected = _outcome(scipy.linalg, lane, name, dtype, order, b_ndim)
    got = _outcome(trnscipy.linalg, lane, name, dtype, order, b_ndim)
    assert got[:2] == expected[:2], (name, dtype, order, b_ndim, got[:2], expected[:2])
    rtol = 1e-5 if dtype in ("f", "F") else 1e-12
    if name not in ("cho_factor", "lu_factor"):  # (the garbage triangle / pivots aside)
        np.testing.assert_allclose(got[2], expected[2], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["d", "f", "D", "i"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_overwrite_as_scipy_cpu(name, dtype, order):
    for b_ndim in (1, 2) if name in ("solve_b", "lu_solve") else (1,):
        _check("cpu", name, dtype, order, b_ndim)


@pytest.mark.xla
@pytest.mark.parametrize("name", ["solve_b", "inv", "det", "cho_factor"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_overwrite_as_scipy_xla(xla_device, name, order):
    """The host array's layout decides on XLA (a device tensor has none); a written copy
    is written back, and a result that is the copy is the host array itself."""
    _check("xla", name, "d", order, 2 if name == "solve_b" else 1)



@pytest.mark.xla
@pytest.mark.parametrize("name", ["solve_a", "lu_solve", "inv", "cholesky"])
def test_overwrite_float64_on_neuron(xla_device, emulate_neuron, monkeypatch, name):
    """float64 on the emulated Neuron device (double-float, strict: no host fallback): the
    exact parts are written back into the caller's array where SciPy's LAPACK writes."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    _check("xla", name, "d", "F", 1)

def test_overwrite_keeps_gradients():
    """A result autograd tracks is not written into the caller's b (its graph would be
    lost); b without a gradient of its own is left as it was."""
    import torch

    a = torch.tensor(_matrix("d", "F"), requires_grad=True)
    b = torch.ones(3, dtype=torch.float64)
    x = trnscipy.linalg.solve(a, b, overwrite_b=True)
    assert x.requires_grad and x is not b
    assert torch.equal(b, torch.ones(3, dtype=torch.float64))
    x.sum().backward()
    expected = -np.outer(np.linalg.solve(_matrix("d", "F").T, np.ones(3)),
                         np.linalg.solve(_matrix("d", "F"), np.ones(3)))
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-12, atol=1e-14)
