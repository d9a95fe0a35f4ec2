"""Stacks through the double-float methods of Neuron (decision 0006): one refinement for
the batch, each matrix stopping at its own rule, equal to SciPy's batched call and to the
single calls.

The methods' arithmetic is float32 torch code, so it runs on CPU tensors as well: the fast
cases call the 'neuron' kernels there on exact double-float pairs (seconds); the slow ones
run the public functions on emulated Neuron and count XLA executions (a batch costs one
single call's, where the dispatcher's loop cost one per matrix)."""

import numpy as np
import pytest
import scipy.linalg as sl

torch = pytest.importorskip("torch")

rng = np.random.default_rng(7)
SQ = rng.random((3, 4, 4)) + 4 * np.eye(4)
SYM = SQ + SQ.swapaxes(-1, -2)
TALL = rng.random((3, 6, 4))
RHS = rng.random((3, 6, 2))
HBAND = rng.random((3, 2, 5)) + np.array([[4], [0]])  # lower form: the diagonal first
RHS5 = rng.random((3, 5, 2))
DIAG, OFF = rng.random((3, 5)), rng.random((3, 4))
# expm: each matrix its own scaling (none, a few squarings, many) and Pade degree
EXPM = np.stack([SQ[0] / 100, SQ[1] * 3, 30 * (SQ[2] - SQ[2].T)])


def _pair(x):
    """x as a double-float tensor on the CPU (hi + lo exactly x to 48 bits)."""
    from trnscipy._double_float import df_tensor

    hi = x.astype(np.float32)
    return df_tensor(torch.from_numpy(hi), torch.from_numpy((x - hi).astype(np.float32)))


def _value(t):
    from trnscipy._double_float import df_parts, is_exact

    if isinstance(t, torch.Tensor) and is_exact(t):
        hi, lo = df_parts(t)
        return hi.double().numpy() + lo.double().numpy()
    return t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _parts(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _scipy_loop(fn, *stacks):
    """SciPy's single calls stacked (SciPy 1.17 batches none of these in its own code)."""
    outs = [_parts(fn(*(s[i] for s in stacks))) for i in range(stacks[0].shape[0])]
    return tuple(np.stack(o) for o in zip(*outs, strict=True))


def _kernels():
    from trnscipy.linalg import _refine_band as B
    from trnscipy.linalg import _refine_funcs as F
    from trnscipy.linalg import _refine_lsq as L
    from trnscipy.linalg import _refine_orth as O

    return {  # name -> (kernel call, SciPy call, stacks, rtol)
        "lstsq": (lambda a, b: L.lstsq(a, b)[:3], lambda a, b: sl.lstsq(a, b)[:3],
                  (TALL, RHS), 1e-12),
        "pinv": (L.pinv, sl.pinv, (TALL,), 1e-12),
        "pinvh": (lambda a: L.pinvh(a, return_rank=True),
                  lambda a: sl.pinvh(a, return_rank=True), (SYM,), 1e-12),
        "qr_economic": (lambda a: O.qr(a, mode="economic"),
                        lambda a: sl.qr(a, mode="economic"), (TALL,), 1e-12),
        "svd": (lambda a: O._svd(a, False, True), lambda a: sl.svd(a, full_matrices=False),
                (TALL,), 1e-12),
        "svdvals": (lambda a: O._svd(a, False, False), sl.svdvals, (SQ,), 1e-12),
        "expm": (F.expm, sl.expm, (EXPM,), 1e-12),
        "coshm": (lambda a: F._expm_half(a, 1), sl.coshm, (SQ / 4,), 1e-12),
        "polar": (F.polar, sl.polar, (SQ,), 1e-12),
        "solveh_banded": (lambda a, b: B.solveh_banded(a, b, lower=True),
                          lambda a, b: sl.solveh_banded(a, b, lower=True), (HBAND, RHS5),
                          1e-12),
        "cholesky_banded": (lambda a: B.cholesky_banded(a, lower=True),
                            lambda a: sl.cholesky_banded(a, lower=True), (HBAND,), 1e-12),
        "eig_banded": (lambda a: B.eig_banded(a, lower=True, eigvals_only=True, select=2,
                                              select_range=(1, 3)),
                       lambda a: sl.eig_banded(a, lower=True, eigvals_only=True,
                                               select="i", select_range=(1, 3)),
                       (HBAND,), 1e-12),
        "eigh_tridiagonal": (lambda d, e: B.eigh_tridiagonal(d, e, eigvals_only=True),
                             lambda d, e: sl.eigh_tridiagonal(d, e, eigvals_only=True),
                             (DIAG, OFF), 1e-12),
    }


def _signs(ref, parts, name):
    """SVD's and QR's vectors are unique up to sign: ours turned to SciPy's columns."""
    if name == "svd":
        u, s, vh = parts
        d = np.sign(np.sum(u * ref[0], axis=-2))
        return u * d[..., None, :], s, vh * d[..., :, None]
    if name == "qr_economic":
        q, r = parts
        d = np.sign(np.sum(q * ref[0], axis=-2))
        return q * d[..., None, :], r * d[..., :, None]
    return parts


@pytest.mark.parametrize("name", ["lstsq", "pinv", "pinvh", "qr_economic", "svd",
                                  "svdvals", "expm", "coshm", "solveh_banded",
                                  # (100 Newton-Schulz steps: the CPU's device loop
                                  # runs them all)
                                  pytest.param("polar", marks=pytest.mark.slow),
                                  "cholesky_banded", "eig_banded", "eigh_tridiagonal"])
def test_double_float_stack_is_its_single_calls(name):
    """The 'neuron' kernel given a stack (it raised PerMatrix, or looped, before): SciPy's
    batched values to double-float accuracy, and each matrix its single call's."""
    kern, ref_fn, stacks, rtol = _kernels()[name]
    ref = _scipy_loop(ref_fn, *stacks)
    out = _signs(ref, tuple(_value(o) for o in _parts(kern(*(_pair(s) for s in stacks)))),
                 name)
    assert len(out) == len(ref)
    for o, r in zip(out, ref, strict=True):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=rtol, atol=rtol * np.abs(r).max())
    for i in (0, 2):
        single = _signs(tuple(r[i] for r in ref), tuple(
            _value(o) for o in _parts(kern(*(_pair(np.ascontiguousarray(s[i]))
                                             for s in stacks)))), name)
        for o, s in zip(out, single, strict=True):
            np.testing.assert_allclose(o[i], s, rtol=rtol, atol=rtol * np.abs(s).max())


def test_double_float_stack_needing_the_host_runs_per_matrix():
    """A stack one of whose matrices the method cannot take (rank-deficient: SciPy on the
    host) is left to the dispatcher's loop, where that matrix alone goes to the host."""
    from trnscipy._batch import PerMatrix
    from trnscipy.linalg import _refine_lsq as L

    stack = TALL.copy()
    stack[1, :, 3] = stack[1, :, 0]  # rank 3
    with pytest.raises(PerMatrix):
        L.pinv(_pair(stack))


def test_double_float_stack_full_complement_runs_per_matrix():
    """A full Q (or U, V) of a rectangular stack has columns past the rank that are any
    orthonormal complement, the float32 start's, which XLA rounds otherwise in a batched
    graph than in a single one (SciPy's test_batch: 3e-7 apart in float64): per matrix."""
    from trnscipy._batch import PerMatrix
    from trnscipy.linalg import _refine_orth as O

    with pytest.raises(PerMatrix):
        O.qr(_pair(TALL), mode="full")
    with pytest.raises(PerMatrix):
        O._svd(_pair(TALL), True, True)
    assert O._svd(_pair(TALL), True, False).shape == (3, 4)  # (s alone: one refinement)


# ---- emulated Neuron: executions of a batch -----------------------------------------------

_DEVICE_CALLS = {
    "lstsq": (lambda m, a, b: m.lstsq(a, b)[0], (TALL, RHS)),
    "pinvh": (lambda m, a: m.pinvh(a), (SYM,)),
    "qr": (lambda m, a: m.qr(a)[1], (TALL,)),
    "svdvals": (lambda m, a: m.svdvals(a), (SQ,)),
    "expm": (lambda m, a: m.expm(a), (EXPM,)),
}


@pytest.mark.xla
@pytest.mark.slow  # the double-float graphs compile for a minute per function and shape
@pytest.mark.parametrize("name", sorted(_DEVICE_CALLS))
def test_neuron_stack_one_refinement(name, emulate_neuron, xla_device, monkeypatch):
    """float64 on emulated Neuron, no host fallback: a batch of 3 costs the XLA executions
    of its costliest single call (the stack steps until its slowest matrix converges; the
    dispatcher's loop cost the sum of them), with SciPy's values."""
    import trnscipy
    import trnscipy.linalg as tl
    from trnscipy._metrics import xla_counts

    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    call, stacks = _DEVICE_CALLS[name]
    counted, outs = {}, {}
    cases = [(i, tuple(np.ascontiguousarray(s[i]) for s in stacks)) for i in range(3)]
    for key, arrays in cases + [("batch", stacks)]:
        operands = tuple(trnscipy.to_device(x, xla_device) for x in arrays)
        with xla_counts():  # compiled outside the count
            warm = call(tl, *operands)
        with xla_counts() as counts:
            outs[key] = trnscipy.to_host(call(tl, *operands))
        del warm
        counted[key] = counts.executions
    singles = [counted[i] for i in range(3)]
    assert counted["batch"] <= max(singles) + 1 < sum(singles), counted
    ref = np.asarray(_scipy_loop(lambda *x: call(sl, *x), *stacks)[0])
    np.testing.assert_allclose(outs["batch"], ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    for i in range(3):
        np.testing.assert_allclose(outs["batch"][i], outs[i], rtol=1e-12,
                                   atol=1e-12 * np.abs(ref).max())


@pytest.mark.xla
@pytest.mark.slow  # the refined svd's graphs compile for minutes
def test_neuron_norm2_of_a_stack(emulate_neuron, xla_device):
    """norm(ord=2) over the last two axes of a float64 stack on emulated Neuron (the svd
    kernel's PerMatrix escaped there, for every stack): one refined svdvals, and matrix by
    matrix where one matrix (repeated singular values) needs the host."""
    import trnscipy
    import trnscipy.linalg as tl
    from trnscipy import DeviceFallbackWarning

    out = trnscipy.to_host(tl.norm(trnscipy.to_device(SQ, xla_device), 2, axis=(1, 2)))
    np.testing.assert_allclose(out, np.linalg.norm(SQ, 2, axis=(1, 2)), rtol=1e-13)
    x = np.stack([SQ[0], np.eye(4), SQ[2]])
    with pytest.warns(DeviceFallbackWarning, match="singular values closer"):
        out = trnscipy.to_host(tl.norm(trnscipy.to_device(x, xla_device), 2, axis=(1, 2)))
    np.testing.assert_allclose(out, np.linalg.norm(x, 2, axis=(1, 2)), rtol=1e-13)
