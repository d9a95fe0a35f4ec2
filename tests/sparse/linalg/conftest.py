"""CPU tensors have two solver routes: SciPy's loop on zero-copy views (the CPU
"krylov" kernel, the default) and the torch loop that XLA and CUDA run.  Every
CPU test of test_isolve.py runs through both, so the torch loop keeps its
paired checks against SciPy on the CPU too."""

import pytest


def pytest_generate_tests(metafunc):
    if "cpu_loop" in metafunc.fixturenames:
        xla = "xla_device" in metafunc.fixturenames
        metafunc.parametrize("cpu_loop", ["scipy"] if xla else ["scipy", "torch"],
                             indirect=True)


@pytest.fixture
def cpu_loop(request, monkeypatch):
    if request.param == "torch":
        torch = pytest.importorskip("torch")
        from trnscipy._kernels import _IMPLS, kernel

        monkeypatch.setitem(_IMPLS, ("krylov", "cpu"), kernel("krylov", torch.device("meta")))
    return request.param


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.slow_on_xla(unless={param: values})``: the test's XLA-lane cases are
    slow (``-m slow`` runs them, CI's ``not slow`` leaves them out), except those whose
    parameters take one of ``values``."""
    for item in items:
        mark = item.get_closest_marker("slow_on_xla")
        params = getattr(item, "callspec", None)
        if mark is None or params is None or params.params.get("lane") != "xla":
            continue
        unless = mark.kwargs.get("unless", {})
        if not any(params.params.get(name) in values for name, values in unless.items()):
            item.add_marker(pytest.mark.slow)
