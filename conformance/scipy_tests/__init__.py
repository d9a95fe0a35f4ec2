"""SciPy's own test files run against trnscipy: the public names they import from
``scipy.linalg``, ``scipy.sparse`` and ``scipy.sparse.linalg`` are taken from trnscipy
(SciPy's private helpers and test utilities stay SciPy's), in defer mode and in offload
mode on each device.  ``python -m conformance.scipy_tests --help``."""
