"""SciPy's own test files against trnscipy (conformance/scipy_tests/): the CI subset must not
regress from conformance/scipy_baseline.json (a test that passed there and fails now is
named); the rewriting of imports is checked on its own."""

import importlib

import pytest

from conformance.scipy_tests.rewrite import rewrite_source
from conformance.scipy_tests.shim import install


def _rw(src, package="scipy.sparse.tests"):
    return rewrite_source(src, package, {"scipy.sparse.tests": "scipy_sparse_tests"})


def test_public_imports_go_through_the_proxies():
    assert _rw("from scipy.sparse import csr_array\n") == (
        "from scipy_trn.sparse import csr_array\n")
    assert _rw("import scipy.sparse.linalg as spla\n") == (
        "import scipy_trn.sparse.linalg as spla\n")
    assert _rw("from scipy import linalg, stats\n") == "from scipy_trn import linalg, stats\n"
    # binding ``scipy``: import as before, then rebind the name to the proxy
    assert _rw("def f():\n    import scipy.linalg._expm_frechet  # x\n") == (
        "def f():\n    import scipy.linalg._expm_frechet, scipy_trn as scipy  # x\n")


def test_private_modules_keep_private_names_and_give_public_ones():
    out = _rw("from scipy.sparse.linalg._isolve import (cg,\n    gmres)\n"
              "from scipy.sparse.linalg._expm_multiply import _theta, expm_multiply\n"
              "from scipy.sparse._sputils import matrix\nfrom scipy._lib import _util\n")
    assert out == ("from scipy_trn.sparse.linalg import cg, gmres\n"
                   "from scipy.sparse.linalg._expm_multiply import _theta; "
                   "from scipy_trn.sparse.linalg import expm_multiply\n"
                   "from scipy.sparse._sputils import matrix\nfrom scipy._lib import _util\n")


def test_relative_imports():
    src = "from .test_base import x\nfrom .._coo import _block_diag\n"
    assert _rw(src) == "from .test_base import x\nfrom scipy.sparse._coo import _block_diag\n"
    assert _rw("from scipy.sparse.tests.test_base import y\n") == (
        "from scipy_sparse_tests.test_base import y\n")


def test_proxy_attributes():
    install()
    import scipy.sparse
    import scipy.sparse.linalg

    import trnscipy.sparse.linalg

    proxy = importlib.import_module("scipy_trn.sparse.linalg")
    assert proxy.cg is trnscipy.sparse.linalg.cg
    assert proxy._interface is scipy.sparse.linalg._interface  # private: SciPy's
    top = importlib.import_module("scipy_trn")
    assert top.sparse.linalg is proxy
    assert top.sparse._sputils is scipy.sparse._sputils
    assert top.sparse.csr_array is trnscipy.sparse.csr_array
    assert top.stats is importlib.import_module("scipy.stats")


def _check(profile):
    from conformance.scipy_tests import report, runner

    baseline = report.load_baseline()
    if baseline is None:
        pytest.fail("conformance/scipy_baseline.json is missing: run "
                    "`python -m conformance.scipy_tests --write`")
    modes = [m for m in runner.PROFILES[profile] if m in baseline["modes"]]
    # two pytest processes at a time: CI runs `pytest conformance` in one process
    results = runner.run(profile, modes, timeout=1800, progress=lambda s: None, jobs=2)
    regressions, _ = report.compare(results, baseline)
    assert not regressions, (f"{len(regressions)} SciPy tests regressed:\n"
                             + "\n".join(regressions[:200]))


def test_scipy_suite_ci_subset_no_regression():
    _check("ci")


@pytest.mark.slow
def test_scipy_suite_full_no_regression():
    _check("full")


def test_proxy_submodule_is_scipys():
    """A private submodule reached through a proxy is SciPy's module object, not a second
    copy loaded under the proxy's name (its warning classes would differ)."""
    install()
    import scipy.linalg._matfuncs_inv_ssq as theirs
    from scipy_trn.linalg import _matfuncs_inv_ssq as ours

    assert ours is theirs
    # the cause: with a __path__ the import system would load submodules from SciPy's folder
    assert not hasattr(importlib.import_module("scipy_trn.linalg"), "__path__")
