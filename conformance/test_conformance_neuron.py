"""The conformance suite on the xla-neuron lane (torch-xla under Neuron's limits,
TRNSCIPY_EMULATE=neuron): no regression from the baseline.  A file of its own so that
pytest-xdist (``--dist loadfile``) runs it beside the xla lane."""

from conformance.test_conformance import baseline, check_lane  # noqa: F401 (the fixture)


def test_no_regression_from_baseline(baseline):  # noqa: F811
    check_lane("xla-neuron", baseline)
