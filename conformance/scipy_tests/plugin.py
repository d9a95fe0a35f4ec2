"""pytest plugin of the runner (``-p conformance.scipy_tests.plugin``): installs the
``scipy_trn`` proxies, records each test's outcome and DeviceFallbackWarnings as JSON lines
in ``$SCIPY_TESTS_RECORD`` (written as the run goes, so a crashed run keeps what it did),
and deselects the node ids listed in ``$SCIPY_TESTS_DESELECT`` (a resumed run)."""

import json
import os

from conformance.scipy_tests.shim import install

install()


def _share_capabilities():
    """SciPy's array-API test decorators (``make_xp_test_case(block_diag)``) look functions
    up by object in ``xp_capabilities_table``: give trnscipy's functions their SciPy twin's
    entry."""
    import importlib

    try:
        from scipy._lib._array_api import xp_capabilities_table as table
    except ImportError:
        return
    from conformance.scipy_tests.shim import PROXIED

    for scipy_name, trn_name in PROXIED.items():
        scipy_mod, trn = importlib.import_module(scipy_name), importlib.import_module(trn_name)
        for name in getattr(scipy_mod, "__all__", ()):
            ours, theirs = getattr(trn, name, None), getattr(scipy_mod, name, None)
            if ours is not theirs and theirs in table and ours not in table:
                table[ours] = table[theirs]


_share_capabilities()

_RECORD = os.environ.get("SCIPY_TESTS_RECORD")
_fh = open(_RECORD, "a", encoding="utf-8") if _RECORD else None  # noqa: SIM115


def _write(**entry):
    if _fh is not None:
        _fh.write(json.dumps(entry) + "\n")
        _fh.flush()


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("SCIPY_TESTS_DESELECT")
    if not path:
        return
    with open(path, encoding="utf-8") as fh:
        drop = set(fh.read().split("\n"))
    kept = [item for item in items if item.nodeid not in drop]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid in drop])
    items[:] = kept


def pytest_collectreport(report):
    if report.failed:
        _write(collect=report.nodeid, message=_message(report))


def pytest_runtest_logstart(nodeid, location):
    _write(start=nodeid)


def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            outcome = "xpassed" if xfail else "passed"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        entry = {"test": report.nodeid, "outcome": outcome,
                 "seconds": round(report.duration, 3)}
        if outcome in ("failed", "error"):
            entry["message"] = _message(report)[:400]
        _write(**entry)
    elif report.when == "teardown" and report.failed:
        _write(test=report.nodeid, outcome="error", teardown=True,
               message=_message(report)[:400])


def pytest_warning_recorded(warning_message, when, nodeid, location):
    if warning_message.category.__name__ == "DeviceFallbackWarning":
        _write(fallback=nodeid, message=str(warning_message.message)[:200])
