"""solve_circulant, signm, fractional_matrix_power, matrix_balance: paired with SciPy on
the cpu (SciPy on views), generic (the torch kernels on CPU tensors) and xla lanes, with
no aten CPU fallback and no DeviceFallbackWarning on XLA (their schur/svd/funm/inv
building blocks run there too)."""

import contextlib
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import trnscipy.linalg as tl
from tests.linalg._dense_helpers import eps, random, tensor, to_np
from tests.linalg._fallbacks import aten_fallbacks
from trnscipy import DeviceFallbackWarning
from trnscipy._scipy_version import scipy_at_least

torch = pytest.importorskip("torch")


_COMPLEX_SCHUR = "the complex Schur form of a complex matrix is not on the device"


@contextlib.contextmanager
def on_device(device, complex_input=False):
    """Zero aten fallbacks and no DeviceFallbackWarning inside the block, except the
    announced host schur of complex input (no device schur of complex matrices yet)."""
    with warnings.catch_warnings(record=True) as caught, aten_fallbacks(device) as host:
        warnings.simplefilter("always")
        yield
    others = [str(w.message) for w in caught if issubclass(w.category, DeviceFallbackWarning)
              and not (complex_input and _COMPLEX_SCHUR in str(w.message))]
    assert not others and not host, (others, host)


def _xla_only(dlane, dtype, allowed=(np.float32,)):
    if dlane.type == "xla" and dtype not in allowed:
        pytest.skip("XLA lane: fewer dtypes (compile budget; the generic lane runs the "
                    "same torch code in every dtype)")


DTYPES = [np.float32, np.float64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_circulant(dlane, dtype):
    _xla_only(dlane, dtype, (np.float32, np.complex128))
    rng = np.random.default_rng(60)
    n = 7
    c = random(n, dtype, rng, m=1)[0]
    c[0] += 4  # well conditioned
    cases = [((c, random(1, dtype, rng, m=n)[:, 0]), {}),
             ((c, random(3, dtype, rng, m=n)), {}),
             ((np.stack([c, 2 * c]), random(n, dtype, rng, m=2)), {"baxis": -1}),
             ((np.stack([c, 2 * c]), random(n, dtype, rng, m=2)),
              {"baxis": -1, "outaxis": -1}),
             ((np.array([1, 1, 1, 1], dtype), np.arange(4).astype(dtype)),
              {"singular": "lstsq"}),
             ((c, random(1, dtype, rng, m=n)[:, 0]), {"tol": 1e-3})]
    with on_device(dlane):
        for (cc, b), kwargs in cases:
            ref = sl.solve_circulant(cc, b, **kwargs)
            x = tl.solve_circulant(tensor(cc, dlane), tensor(b, dlane), **kwargs)
            xn = to_np(x)
            assert x.device.type == dlane.type
            assert xn.dtype == ref.dtype and xn.shape == ref.shape, kwargs
            tol = 50 * n * eps(dtype)
            assert np.linalg.norm(xn - ref) <= tol * np.linalg.norm(ref), kwargs
    if dtype != np.float32:  # backward error: C x = b
        x = to_np(tl.solve_circulant(tensor(c, dlane), tensor(cases[1][0][1], dlane)))
        resid = sl.circulant(c) @ x - cases[1][0][1]
        assert np.linalg.norm(resid) <= 10 * n * eps(dtype) * np.linalg.norm(
            sl.circulant(c)) * np.linalg.norm(x)


def test_solve_circulant_xla_counts(xla_device):
    """Repeats with new values of the same shapes: no compilation, three executions (the
    singularity read, the result, the final flush)."""
    from trnscipy._metrics import xla_counts

    rng = np.random.default_rng(61)
    c, b = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    c[0] += 5
    counts = []
    with on_device(xla_device):
        for k in range(2):
            c2, b2 = tensor(c * (k + 1), xla_device), tensor(b + k, xla_device)
            with xla_counts() as seen:
                xn = tl.solve_circulant(c2, b2).cpu().numpy()
            counts.append(seen)
    assert counts[0].compilations >= 1, counts
    assert counts[1].compilations == 0 and counts[1].executions <= 3, counts
    ref = sl.solve_circulant(c * 2, b + 1)
    assert np.linalg.norm(xn - ref) <= 1e-5 * np.linalg.norm(ref)


def _matrices(n, dtype, rng):
    a = random(n, dtype, rng)
    spd = (a @ a.conj().T + np.eye(n)).astype(dtype)
    return {"general": a, "spd": spd, "negative": (-spd).astype(dtype)}


def _wide(dtype):
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


@pytest.mark.parametrize("dtype", DTYPES)
def test_signm(dlane, dtype):
    _xla_only(dlane, dtype)
    rng = np.random.default_rng(62)
    n = 3 if dlane.type == "xla" else 6
    mats = _matrices(n, dtype, rng)
    if dlane.type != "xla":  # SciPy's Newton iteration (funm's error estimate too large)
        mats["defective"] = np.array([[2, 1], [0, 2]], dtype)
        mats["near"] = np.array([[0, 1], [1e-12, 0]], dtype)
    with on_device(dlane, complex_input=dtype == np.complex128):
        for name, m in mats.items():
            if dlane.type == "xla" and name != "general":
                continue
            ref = sl.signm(m)
            out = tl.signm(tensor(m, dlane))
            on = to_np(out)
            assert on.dtype == ref.dtype, (name, on.dtype, ref.dtype)
            # SciPy's own result in float32 is float32-accurate: compare with its float64
            # result where the input is float32
            exact = sl.signm(m.astype(_wide(dtype))) if dtype == np.float32 else ref
            tol = 1e-4 if dtype == np.float32 else 1e-10
            assert np.linalg.norm(on - exact) <= tol * np.linalg.norm(exact), name
    if dlane.type != "xla" and scipy_at_least(1, 18):  # disp removed: TypeError as SciPy's
        with pytest.raises(TypeError):
            sl.signm(mats["defective"], disp=False)
        with pytest.raises(TypeError):
            tl.signm(tensor(mats["defective"], dlane), disp=False)
    elif dlane.type != "xla":
        with pytest.warns(DeprecationWarning):
            s, err = tl.signm(tensor(mats["defective"], dlane), disp=False)
        assert err < 1e3 * eps(dtype if dtype != np.complex128 else np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_signm_device_code_on_cpu_tensors(dtype, monkeypatch):
    """The device signm (CUDA, XLA) run on CPU tensors: a defective matrix takes SciPy's
    Newton iteration, whose dtype changed in SciPy 1.18 (float32 input stays float32)."""
    from trnscipy import _kernels
    from trnscipy.linalg import _kernels_struct

    monkeypatch.setitem(_kernels._IMPLS, ("linalg.funm", "cpu"),
                        _kernels._IMPLS[("linalg.funm", "generic")])

    for m in (np.array([[2, 1], [0, 2]], dtype), np.array([[1, 2], [3, -4]], dtype)):
        ref = sl.signm(m)
        out = _kernels_struct.signm(torch.from_numpy(m)).numpy()
        assert out.dtype == ref.dtype
        tol = 1e-4 if dtype == np.float32 else 1e-10
        assert np.linalg.norm(out - ref) <= tol * np.linalg.norm(ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fractional_matrix_power(dlane, dtype):
    _xla_only(dlane, dtype)
    rng = np.random.default_rng(63)
    n = 3 if dlane.type == "xla" else 6
    mats = _matrices(n, dtype, rng)
    powers = (0.5, -1.3, 2, 2.7)
    if dlane.type == "xla":
        mats, powers = {"general": mats["general"]}, (0.5, 2)
    elif dtype != np.float32:  # (SciPy's float32 funm route is 4e-4 off here)
        mats["singular"] = np.array([[0, 1, 0], [0, 1, 1], [0, 0, 4]], dtype)
    with on_device(dlane, complex_input=dtype == np.complex128):
        for name, m in mats.items():
            for p in powers:
                if name == "singular" and p == 2.7:
                    continue  # SciPy's funm route prints its error estimate
                ref = sl.fractional_matrix_power(m, p)
                out = tl.fractional_matrix_power(tensor(m, dlane), p)
                on = to_np(out)
                assert on.dtype == ref.dtype, (name, p, on.dtype, ref.dtype)
                if np.isnan(ref).all():
                    assert np.isnan(on).all()
                    continue
                # the result is double precision whatever the input: compare float32 input
                # with SciPy's result from the same values in double precision
                exact = sl.fractional_matrix_power(m.astype(_wide(dtype)), p) \
                    if dtype == np.float32 and p != int(p) else ref
                # (the cpu lane runs SciPy itself: float32 Schur forms, float32 accuracy)
                tol = 1e-5 if dtype == np.float32 else 1e-10
                assert np.linalg.norm(on - exact) <= tol * np.linalg.norm(exact), (name, p)
    ints = np.array([[1, 2], [3, 4]])
    assert to_np(tl.fractional_matrix_power(torch.as_tensor(ints).to(dlane), 2)).dtype == \
        sl.fractional_matrix_power(ints, 2).dtype


def _balance_cases(dtype, rng, small):
    x = np.array([[1, 100, 0], [0.01, 1, 0], [0, 0, 3.]])
    a = rng.standard_normal((6, 6)) * np.exp2(rng.integers(-8, 8, (6, 1)))
    b = a.copy()
    b[2, [0, 1, 3, 4, 5]] = 0  # row 2 and column 4 isolate eigenvalues
    b[[0, 1, 3, 4, 5], 4] = 0
    graded = rng.standard_normal((5, 5)) * np.logspace(-6, 6, 5)[None, :]
    cases = [b, graded] if small else [x, a, b, np.triu(a), graded]
    out = []
    for m in cases:
        m = m.astype(dtype)
        if np.dtype(dtype).kind == "c":
            m = m + 1j * (m != 0) * rng.standard_normal(m.shape)
        out.append(m)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_balance(dlane, dtype):
    """Equal to SciPy's (LAPACK gebal's) balanced matrix, scaling and permutation."""
    _xla_only(dlane, dtype)
    rng = np.random.default_rng(64)
    small = dlane.type == "xla"
    kwargs_list = ({}, {"separate": True}) if small else \
        ({}, {"permute": False}, {"scale": False}, {"separate": True},
         {"permute": False, "scale": False})
    with on_device(dlane):
        for m in _balance_cases(dtype, rng, small):
            for kwargs in kwargs_list:
                ref = sl.matrix_balance(m, **kwargs)
                out = tl.matrix_balance(tensor(m, dlane), **kwargs)
                flat_ref = (ref[0],) + (ref[1] if kwargs.get("separate") else (ref[1],))
                flat = (out[0],) + (out[1] if kwargs.get("separate") else (out[1],))
                for o, r in zip(flat, flat_ref, strict=True):
                    assert to_np(o).dtype == r.dtype and o.device.type == dlane.type
                    np.testing.assert_array_equal(to_np(o), r, err_msg=str(kwargs))
    if not small:  # batches and empty input as SciPy
        batch = np.stack(_balance_cases(dtype, rng, False)[1:3])
        for o, r in zip(tl.matrix_balance(tensor(batch, dlane)), sl.matrix_balance(batch),
                        strict=True):
            np.testing.assert_array_equal(to_np(o), r)
        e = tl.matrix_balance(tensor(np.zeros((0, 0), dtype), dlane))
        r = sl.matrix_balance(np.zeros((0, 0), dtype))
        assert [tuple(x.shape) for x in e] == [x.shape for x in r]


def test_bad_input_as_scipy(dlane):
    sq, rect = np.eye(3), np.ones((3, 2))
    cases = [
        ("solve_circulant", (np.ones(3), np.ones(2)), {}),
        ("solve_circulant", (np.ones((2, 2)), np.ones(2)), {"caxis": 3}),
        ("solve_circulant", (np.ones(2), np.ones(2)), {"baxis": -3}),
        ("solve_circulant", (np.ones(2), np.ones(2)), {}),  # singular: LinAlgError
        ("solve_circulant", (np.ones((3, 4)) + np.eye(3, 4), np.ones((2, 4))),
         {"baxis": -1}),
        ("signm", (rect,), {}), ("signm", (np.ones(3),), {}),
        ("fractional_matrix_power", (rect, 0.5), {}),
        ("matrix_balance", (rect,), {}), ("matrix_balance", (sq * np.nan,), {}),
    ]
    for name, args, kwargs in cases:
        with pytest.raises(Exception) as expected:
            getattr(sl, name)(*args, **kwargs)
        with pytest.raises(expected.type):
            getattr(tl, name)(*(tensor(x, dlane) for x in args), **kwargs)


def _are_residual(fn, x, a, b, q, r, e=None, s=None):
    """||residual||_F / (scale) of SciPy's (generalized) Riccati equation."""
    e = np.eye(a.shape[0]) if e is None else e
    s = np.zeros_like(b) if s is None else s
    ah = a.conj().T
    if fn == "solve_continuous_are":
        f = ah @ x @ e + e.conj().T @ x @ a + q
        k = e.conj().T @ x @ b + s
        res = f - k @ np.linalg.solve(r, k.conj().T)
        scale = 2 * np.linalg.norm(a) * np.linalg.norm(x) * np.linalg.norm(e)
    else:
        k = ah @ x @ b + s
        res = ah @ x @ a - e.conj().T @ x @ e - k @ np.linalg.solve(
            r + b.conj().T @ x @ b, k.conj().T) + q
        scale = (np.linalg.norm(a) ** 2 + np.linalg.norm(e) ** 2) * np.linalg.norm(x)
    return np.linalg.norm(res) / (scale + np.linalg.norm(q))


def _are_cases(fn, dtype, rng, n, m, plain_only=False):
    a = random(n, dtype, rng)
    b = random(m, dtype, rng, m=n)
    c = random(n, dtype, rng)
    q = (c @ c.conj().T + np.eye(n)).astype(dtype)
    r = np.eye(m, dtype=dtype)
    e = (np.eye(n) + 0.1 * random(n, dtype, rng)).astype(dtype)
    s = (0.1 * random(m, dtype, rng, m=n)).astype(dtype)
    cases = [({}, np.eye(n)), ({"s": s}, np.eye(n)), ({"e": e}, e)]
    out = []
    for kwargs, ee in cases[:1] if plain_only else cases:
        aa = a
        if fn == "solve_discrete_are":  # a stable (A E^-1): a stabilizing solution exists
            rho = np.abs(np.linalg.eigvals(np.linalg.solve(ee, a))).max()
            aa = (a / (1.2 * rho)).astype(dtype)
        out.append(((aa, b, q, 2 * r if "s" in kwargs else r), kwargs))
    return out


@pytest.mark.parametrize("fn", ["solve_continuous_are", "solve_discrete_are"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_riccati(dlane, dtype, fn):
    """SciPy's result where SciPy's own residual is small (its QZ route fails or loses
    accuracy on some generalized problems that the device methods solve), and a small
    residual always; double precision results as SciPy."""
    _xla_only(dlane, dtype)
    rng = np.random.default_rng(65)
    xla = dlane.type == "xla"
    with on_device(dlane, complex_input=dtype == np.complex128):
        for args, kwargs in _are_cases(fn, dtype, rng, 3 if xla else 5, 2, plain_only=xla):
            try:
                ref = getattr(sl, fn)(*args, **kwargs)
            except np.linalg.LinAlgError:
                ref = None
            try:
                x = to_np(getattr(tl, fn)(*(tensor(v, dlane) for v in args),
                                          **{k: tensor(v, dlane) for k, v in kwargs.items()}))
            except np.linalg.LinAlgError:
                assert ref is None and dlane.type == "cpu"  # SciPy itself on the cpu lane
                continue
            wide = [v.astype(_wide(dtype)) for v in args]
            assert x.dtype == _wide(dtype) and x.shape == args[0].shape
            assert _are_residual(fn, x, *wide, **kwargs) <= 1e-13, (fn, list(kwargs))
            if ref is not None and _are_residual(fn, ref, *wide, **kwargs) <= 1e-12:
                assert np.linalg.norm(x - ref) <= 1e-10 * np.linalg.norm(ref), list(kwargs)


def test_riccati_bad_input_as_scipy(dlane):
    eye2, eye1 = np.eye(2), np.eye(1)
    b = np.ones((2, 1))
    cases = [
        ((np.ones((2, 3)), b, eye2, eye1), {}),
        ((eye2, np.ones((3, 1)), eye2, eye1), {}),
        ((eye2, b, np.eye(3), eye1), {}),
        ((eye2, b, eye2, eye2), {}),
        ((eye2, b, np.array([[1, 2], [0, 1.]]), eye1), {}),
        ((eye2, b, eye2, np.zeros((1, 1))), {}),
        ((eye2, b, eye2, eye1), {"e": np.zeros((2, 2))}),
        ((eye2, b, eye2, eye1), {"e": np.eye(3)}),
        ((eye2, b, eye2, eye1), {"s": np.ones((2, 2))}),
        ((eye2 * np.nan, b, eye2, eye1), {}),
    ]
    for fn in ("solve_continuous_are", "solve_discrete_are"):
        for args, kwargs in cases:
            try:
                getattr(sl, fn)(*args, **kwargs)
                continue  # (SciPy accepts it)
            except Exception as exc:  # noqa: BLE001
                expected = exc
            with pytest.raises(type(expected)) as got:
                getattr(tl, fn)(*(tensor(v, dlane) for v in args),
                                **{k: tensor(v, dlane) for k, v in kwargs.items()})
            if type(expected) is ValueError:
                assert str(got.value) == str(expected), fn


def test_continuous_are_infeasible_raises(dlane):
    """SciPy's infeasible CARE (R indefinite: the stable subspace is not Lagrangian, no
    symmetric X) is SciPy's LinAlgError on every lane (the device method returned a
    symmetrized X before)."""
    a = np.triu(np.ones((3, 3)))
    a[0, 1] = -1
    b = np.array([[1, 1, 0], [0, 0, 1]], dtype=float).T
    q = np.full_like(a, -2) + np.diag([8, -1, -1.9])
    r = np.diag([-10, 0.1])
    with pytest.raises(np.linalg.LinAlgError):
        sl.solve_continuous_are(a, b, q, r)
    with pytest.raises(np.linalg.LinAlgError):
        tl.solve_continuous_are(*(tensor(v, dlane) for v in (a, b, q, r)))


@pytest.mark.xla
@pytest.mark.parametrize("fn", ["solve_continuous_are", "solve_discrete_are"])
def test_riccati_complex_xla(xla_device, fn):
    """Complex Riccati on XLA (its complex inv/solve/svd run on the host, announced): the
    convergence test reads |change|, which torch-xla 2.9 labels complex for complex input
    (``_dtypes.absolute``); it raised TypeError before."""
    rng = np.random.default_rng(66)
    (args, kwargs), = _are_cases(fn, np.complex128, rng, 3, 2, plain_only=True)
    with pytest.warns(DeviceFallbackWarning):
        x = to_np(getattr(tl, fn)(*(tensor(v, xla_device) for v in args)))
    assert x.dtype == np.complex128 and x.shape == args[0].shape
    assert _are_residual(fn, x, *args) <= 1e-13
    ref = getattr(sl, fn)(*args)
    assert np.linalg.norm(x - ref) <= 1e-10 * np.linalg.norm(ref)
