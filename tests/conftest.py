"""Lanes: every device test runs on CPU torch tensors and on the XLA device.

The XLA lane is torch-xla on PJRT_DEVICE=CPU here (a NeuronCore under
torch-neuronx on Trainium); it is skipped only where torch-xla is absent.
``xla_neuron`` is the XLA lane with TRNSCIPY_EMULATE=neuron (Neuron's limits).
"""

import importlib.util
import os

import pytest

# the process environment (PJRT_DEVICE, XLA flags, no persistent cache): ../conftest.py

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_XLA = HAVE_TORCH and importlib.util.find_spec("torch_xla") is not None


def _have_cuda():
    if not HAVE_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


LANES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")),
    pytest.param("xla", marks=[pytest.mark.xla,
                               pytest.mark.skipif(not HAVE_XLA, reason="torch-xla not installed")]),
    pytest.param("cuda", marks=[pytest.mark.cuda,
                                pytest.mark.skipif(not _have_cuda(), reason="no CUDA device")]),
]


@pytest.fixture(params=LANES)
def lane(request):
    """The lane's device name: 'cpu', 'xla' or 'cuda'."""
    return request.param


@pytest.fixture
def device(lane):
    """The lane's torch.device."""
    import trnscipy

    return trnscipy.resolve_device(lane)


@pytest.fixture
def xla_device():
    if not HAVE_XLA:
        pytest.skip("torch-xla not installed")
    import trnscipy

    return trnscipy.resolve_device("xla")


@pytest.fixture
def emulate_neuron(monkeypatch):
    """Make the XLA lane obey Neuron's limits (no float64, no complex) and hold float64
    values as float32 as a NeuronCore does (for everything the test runs on XLA)."""
    monkeypatch.setenv("TRNSCIPY_EMULATE", "neuron")
    if HAVE_XLA:
        import trnscipy
        from trnscipy._transfer import device_storage

        with device_storage(trnscipy.resolve_device("xla")):
            yield
    else:
        yield


def pytest_report_header(config):
    lanes = [name for name, present in [
        ("cpu", HAVE_TORCH),
        (f"xla (PJRT_DEVICE={os.environ['PJRT_DEVICE']})", HAVE_XLA),
        ("cuda", _have_cuda()),
    ] if present]
    return "trnscipy lanes: " + (", ".join(lanes) or "none (torch not installed)")


_LANE_OUTCOMES = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        lane = "xla" if "xla" in report.keywords else "cuda" if "cuda" in report.keywords \
            else "other"
        counts = _LANE_OUTCOMES.setdefault(lane, {})
        counts[report.outcome] = counts.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter):
    """Say plainly how many tests ran on the XLA (and CUDA) lane."""
    for lane in ("xla", "cuda"):
        counts = _LANE_OUTCOMES.get(lane, {})
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "none"
        terminalreporter.write_line(f"trnscipy {lane} lane: {summary}")
