"""overwrite_qr / overwrite_qru / overwrite_qruv under offload as SciPy's: where SciPy
computes in a caller's array, offload's result is in that host array too (where SciPy's
result is a view of it); what SciPy leaves alone stays as it was; the u, v SciPy
conjugates in place are conjugated.  Paired with SciPy on the cpu and xla lanes, and for
float64 on the emulated Neuron device (double-float, TRNSCIPY_STRICT=1: no host fallback);
complex on Neuron is SciPy's call on the caller's own arrays."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy
import trnscipy.linalg as tl

pytest.importorskip("torch")


def _operands(name, dtype):
    """Fresh (Q, R, *vectors), the arguments after them, the keywords."""
    rng = np.random.default_rng(3)

    def rand(*shape):
        x = rng.standard_normal(shape)
        return (x + 1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else x
                ).astype(dtype)

    a = rand(6, 4)
    q, r = sl.qr(a)
    qe, re = sl.qr(a, mode="economic")
    if name == "delete_rows_economic":  # (the deleted rows go last: Q's first rows stay)
        return (qe.copy("C"), re), (1, 2), {}
    if name == "delete_rows_full":
        return (q.copy("F"), r.copy("F")), (1, 2), {}
    if name == "delete_cols_c":  # (a block of columns: column-major only)
        return (q.copy("C"), r.copy("C")), (1, 2, "col"), {}
    if name == "delete_row_negative_strides":
        return (q[::-1, ::-1].copy()[::-1, ::-1], r), (2,), {}
    if name == "insert_row_economic":  # (computed in R)
        return (qe, re, rand(4)), (2,), {}
    if name == "insert_col_c":  # (in Q; complex: u conjugated)
        return (q.copy("C"), r, rand(6)), (1, "col"), {}
    if name == "update_rank1_c":  # (in Q and R; complex: u and v conjugated)
        return (q.copy("C"), r.copy("C"), rand(6), rand(4)), (), {}
    if name == "update_rank2_c":  # (a rank-p update: column-major Q and R only)
        return (q.copy("C"), r.copy("C"), rand(6, 2), rand(4, 2)), (), {}
    if name == "update_rank2_f":
        return (q.copy("F"), r.copy("F"), rand(6, 2), rand(4, 2).copy("C")), (), {}
    raise KeyError(name)


def _run(lib, name, dtype, lane=None):
    """(the caller's arrays before, after, the results) of one overwriting call."""
    given, args, kwargs = _operands(name, dtype)
    before = tuple(x.copy() for x in given)
    kind = name.split("_")[0]
    func = getattr(lib, "qr_" + kind)
    kwargs[{"update": "overwrite_qruv", "insert": "overwrite_qru",
            "delete": "overwrite_qr"}[kind]] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if lane is None:
            out = func(*given, *args, **kwargs)
        else:
            with trnscipy.offload(lane):
                out = func(*given, *args, **kwargs)
    return before, given, out


def _where(view, base, other):
    """The elements of ``other`` (laid out as ``base``, contiguous) at the places of
    ``base`` that its view ``view`` shows, in ``view``'s shape."""
    memory = other.ravel(order="K")
    assert np.shares_memory(memory, other) and other.strides == base.strides
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return np.lib.stride_tricks.as_strided(memory[offset // base.itemsize:], view.shape,
                                           view.strides)


def _check(name, dtype, lane, atol):
    before, s_after, s_out = _run(sl, name, dtype)
    _, t_after, t_out = _run(tl, name, dtype, lane)
    for s, t in zip(s_out, t_out, strict=True):
        assert t.shape == s.shape and t.dtype == s.dtype
        np.testing.assert_allclose(t, s, rtol=0, atol=atol)
    for i, (b, s, t) in enumerate(zip(before, s_after, t_after, strict=True)):
        if np.array_equal(s, b):  # (SciPy copied: the caller's array stays as it was)
            assert np.array_equal(t, b), (name, i, "written, SciPy did not")
            continue
        for s_res, t_res in zip(s_out, t_out, strict=True):
            if np.shares_memory(s_res, s):  # (SciPy's result is in the caller's array)
                assert np.array_equal(_where(s_res, s, t), t_res), (name, i)
        if b.dtype.kind == "c" and np.array_equal(s, b.conj()):
            assert np.array_equal(t, b.conj()), (name, i, "not conjugated as by SciPy")


NAMES = ["delete_rows_economic", "delete_rows_full", "delete_cols_c",
         "delete_row_negative_strides", "insert_row_economic", "insert_col_c",
         "update_rank1_c", "update_rank2_c", "update_rank2_f"]


@pytest.mark.parametrize("name, dtype", [(n, np.float64) for n in NAMES] + [
    (n, np.complex128) for n in ("insert_col_c", "update_rank1_c")])  # (conjugated u, v)
def test_overwrite_as_scipy(lane, name, dtype):
    _check(name, dtype, lane, atol=1e-12)


@pytest.mark.xla
@pytest.mark.parametrize("name", ["delete_rows_economic", "insert_col_c",
                                  pytest.param("update_rank2_f", marks=pytest.mark.slow)])
def test_overwrite_float64_on_neuron(name, emulate_neuron, monkeypatch):
    """float64 on the emulated Neuron device: the double-float method's exact parts are
    written into the host arrays where SciPy writes (no host fallback: strict)."""
    monkeypatch.setenv("TRNSCIPY_STRICT", "1")
    # (a full Q's free trailing columns are float32-close to SciPy's: docs/architecture.md)
    _check(name, np.float64, "xla", atol=1e-6)


@pytest.mark.xla
def test_overwrite_complex_on_neuron(emulate_neuron):
    """complex on Neuron runs SciPy on the host: on the caller's own arrays, which it
    overwrites (and conjugates) as SciPy does."""
    _check("insert_col_c", np.complex128, "xla", atol=0)
