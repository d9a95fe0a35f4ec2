"""The installed SciPy's version, in one place: trnscipy answers as the SciPy installed
beside it, and SciPy 1.17 and 1.18 differ in a few results (dtypes, shapes, removed
arguments)."""

import re

import scipy

__all__ = ["SCIPY_VERSION", "scipy_at_least"]


def _parse(version):
    """(major, minor) of a version string ('1.18.1', '1.19.0.dev0+...')."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


SCIPY_VERSION = _parse(scipy.__version__)


def scipy_at_least(major, minor):
    """True where the installed SciPy is ``major.minor`` or later."""
    return SCIPY_VERSION >= (major, minor)
