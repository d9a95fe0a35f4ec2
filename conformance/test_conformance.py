"""The conformance suite under pytest: the fast profile on the lanes present here must not
regress from the committed conformance/baseline.json; plus checks that the harness itself
catches what it is meant to catch."""

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("XLA_COMPILATION_CACHE_SIZE", "256")  # see tests/conftest.py

from conformance.harness import run_case  # noqa: E402
from conformance.lanes import LANES  # noqa: E402
from conformance.registry import PROFILES, Case, all_cases, public_names  # noqa: E402
from conformance.report import compare_to_baseline, load_baseline, run  # noqa: E402

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def baseline():
    data = load_baseline()
    if data is None:
        pytest.fail("conformance/baseline.json is missing: run `python -m conformance --write`")
    return data


def check_lane(lane, baseline):
    """The CI profile (the fast one, less the longest double-float cases on xla-neuron) on
    ``lane`` regresses nothing from the fast profile's baseline (a change that is not a
    regression is a warning: regenerate the table)."""
    if lane not in baseline["lanes"] or not LANES[lane].available():
        pytest.skip(f"lane {lane}: not available here or not in the baseline")
    regressions, changes = compare_to_baseline(run("ci", [lane]), baseline)
    if changes:
        warnings.warn("conformance statuses changed without regressing; regenerate the table "
                      "with `python -m conformance --write`:\n" + "\n".join(changes),
                      stacklevel=2)
    assert not regressions, "conformance regressions:\n" + "\n".join(regressions)


# the two XLA lanes (about a quarter hour each on 2 cores) have files of their own,
# test_conformance_xla.py and test_conformance_neuron.py: pytest-xdist's loadfile mode
# keeps a file on one worker, and one file held both lanes end to end
@pytest.mark.parametrize("lane", [name for name in LANES if not name.startswith("xla")])
def test_no_regression_from_baseline(lane, baseline):
    check_lane(lane, baseline)


def test_baseline_lists_every_public_name(baseline):
    assert sorted(baseline["status"]) == sorted(public_names())


def test_case_ids_unique_and_names_public():
    names = public_names()
    cases = all_cases(PROFILES["fast"])
    assert len({c.id for c in cases}) == len(cases)
    assert {c.name for c in cases} <= set(names)


# --- the harness catches what it must -------------------------------------------------

A = np.array([[4.0, 1.0], [1.0, 3.0]])
B = np.array([1.0, 2.0])


def _device_impl(fn):
    fn._trnscipy_route = "device"
    return fn


@pytest.fixture
def fake_solve(monkeypatch):
    """Replace trnscipy.linalg.solve by the given device-route function."""
    import trnscipy.linalg

    def install(fn):
        monkeypatch.setattr(trnscipy.linalg, "solve", _device_impl(fn))

    return install


def _solve_case(**kw):
    from conformance import judges

    return Case("linalg", "solve", "harness", (A, B), judge=judges.solve, **kw)


def test_harness_conforming_device_result(fake_solve):
    import torch

    fake_solve(lambda a, b: torch.linalg.solve(a, b))
    assert run_case(_solve_case(), LANES["cpu"]).status == "conforms"


@pytest.mark.parametrize("wrong, reason", [
    (lambda a, b: (torch_solve(a, b) * (1 + 1e-6)), "backward error"),
    (lambda a, b: torch_solve(a, b).float(), "dtype float32"),
    (lambda a, b: torch_solve(a, b).numpy(), "expected a torch.Tensor"),
    (lambda a, b: torch_solve(a, b)[None], "shape"),
    (lambda a, b: (torch_solve(a, b),), "builtins.tuple"),
])
def test_harness_catches_wrong_results(fake_solve, wrong, reason):
    fake_solve(wrong)
    out = run_case(_solve_case(), LANES["cpu"])
    assert out.status == "differs" and reason in out.reason, out


def torch_solve(a, b):
    import torch

    return torch.linalg.solve(a, b)


def test_harness_exceptions(fake_solve):
    singular = Case("linalg", "solve", "harness-singular", (np.ones((2, 2)), B))

    def raises(exc):
        def f(a, b):
            raise exc("no")
        return f

    fake_solve(raises(np.linalg.LinAlgError))
    assert run_case(singular, LANES["cpu"]).status == "conforms"
    fake_solve(raises(RuntimeError))
    out = run_case(singular, LANES["cpu"])
    assert out.status == "differs" and "RuntimeError" in out.reason
    fake_solve(raises(RuntimeError))
    assert run_case(_solve_case(), LANES["cpu"]).status == "differs"


def test_harness_host_fallback_is_host_not_conforms(fake_solve):
    from trnscipy._errors import fallback

    def warned(a, b):
        fallback("solve", "test")
        return torch_solve(a, b)

    fake_solve(warned)
    assert run_case(_solve_case(), LANES["cpu"]).status == "host"


def test_harness_float64_on_neuron_must_warn(fake_solve):
    if not LANES["xla-neuron"].available():
        pytest.skip("torch-xla not installed")
    fake_solve(torch_solve)
    out = run_case(_solve_case(), LANES["xla-neuron"])
    assert out.status == "differs" and "without a DeviceFallbackWarning" in out.reason


def test_harness_names_the_float64_arithmetic_on_neuron(fake_solve):
    """The judge sees what ran on the device: a host solve followed by one float64
    product on the device differs, and the reason names the product."""
    if not LANES["xla-neuron"].available():
        pytest.skip("torch-xla not installed")
    fake_solve(lambda a, b: torch_solve(a.cpu(), b.cpu()).to(a.device) * 1.0)
    out = run_case(_solve_case(), LANES["xla-neuron"])
    assert out.status == "differs" and "mul(torch.float64)" in out.reason, out


def test_harness_data_movement_and_user_code_on_neuron_conform(fake_solve):
    """Moving float64 values on the device (copies, gathers, concatenation) needs no
    warning, nor does the user's own computation (conformance.device_ops.user_code)."""
    if not LANES["xla-neuron"].available():
        pytest.skip("torch-xla not installed")
    import trnscipy
    from conformance.device_ops import user_code

    def moves(a, b):
        x = trnscipy.to_device(torch_solve(a.cpu(), b.cpu()), a.device)  # a host solve ...
        return torch.cat([x[:1], x.clone()[1:]])  # ... and device data movement

    import torch

    fake_solve(moves)
    assert run_case(_solve_case(), LANES["xla-neuron"]).status == "conforms"
    fake_solve(user_code(torch_solve))  # not trnscipy's arithmetic, but float32 there
    out = run_case(_solve_case(), LANES["xla-neuron"])
    assert out.status == "differs" and "without a DeviceFallbackWarning" not in out.reason


def test_device_arithmetic_recorder():
    if not LANES["xla-neuron"].available():
        pytest.skip("torch-xla not installed")
    import torch

    from conformance.device_ops import DeviceArithmetic

    dev = LANES["xla"].device
    a = torch.arange(6, dtype=torch.float64).to(dev)
    idx = torch.tensor([2, 0], device=dev)
    with DeviceArithmetic("xla", [torch.float64]) as rec:
        a[idx], a.index_select(0, idx), torch.cat([a, a]), a.reshape(2, 3).T.clone()
        b = torch.zeros_like(a)
        b.index_put_((idx,), a[idx])
        a.to("cpu"), a.real, a.shape
    assert rec.ops == []
    with DeviceArithmetic("xla", [torch.float64]) as rec:
        a != 0, a.sum(), b.index_put_((idx,), a[idx], accumulate=True), a.float()
    assert rec.ops == ["float(torch.float64)", "index_put_(torch.float64)",
                       "ne(torch.float64)", "sum(torch.float64)"], rec.ops
    with DeviceArithmetic("xla", [torch.float32]) as rec:
        a * 2
    assert rec.ops == []


def test_harness_krylov_iterates_compared():
    from scipy.sparse.linalg import cg

    from conformance import judges

    case = Case("sparse.linalg", "cg", "harness", (A, B), {"maxiter": 1}, judge=judges.krylov)
    x, info = cg(A, B, maxiter=1)
    assert judges.krylov(case, (x, info), (x.copy(), info)) is None
    assert "iterate" in judges.krylov(case, (x, info), (x * (1 + 1e-6), info))
    assert "info" in judges.krylov(case, (x, info), (x, 0))
