"""The conformance suite on the torch-xla lane: no regression from the baseline.  A file of its
own so that pytest-xdist (``--dist loadfile``) runs it beside the other XLA lane."""

from conformance.test_conformance import baseline, check_lane  # noqa: F401 (the fixture)


def test_no_regression_from_baseline(baseline):  # noqa: F811
    check_lane("xla", baseline)
