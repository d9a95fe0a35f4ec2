"""The import layers hold (import-linter's contracts in pyproject.toml, docs/architecture.md)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _lint_imports():
    """The lint-imports beside this Python (a venv's bin), else on PATH, else None."""
    here = pathlib.Path(sys.executable).parent / "lint-imports"
    return str(here) if here.exists() else shutil.which("lint-imports")


def test_import_layers():
    pytest.importorskip("importlinter")
    exe = _lint_imports()
    if exe is None:
        pytest.skip("lint-imports is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout


def test_algorithm_table_names_every_registering_module():
    """Every ``@register`` comes from a module that ``PROVIDERS`` lists for the op's family,
    and every listed module exists: a lookup never depends on import order."""
    import importlib

    import trnscipy._kernels as k

    for modules in k.PROVIDERS.values():
        for module in modules:
            importlib.import_module(module)
    stray = sorted((op, kind, origin) for (op, kind), origin in k._ORIGIN.items()
                   if origin not in k.PROVIDERS.get(k.family(op), ()))
    assert not stray, f"registered outside PROVIDERS: {stray}"


def test_lookup_needs_no_prior_import():
    """A fresh interpreter that imports only the public linalg package finds kernels of
    modules nothing has imported: sparse.linalg's spsolve, linalg's neuron qr."""
    code = ("import sys, trnscipy.linalg\n"
            "from trnscipy import _kernels as k\n"
            "assert 'trnscipy.linalg._refine_orth' not in sys.modules\n"
            "assert 'trnscipy.sparse.linalg' not in sys.modules\n"
            "print(k.kind_kernel('sparse.linalg.spsolve', 'cpu').__module__)\n"
            "k.kind_kernel('linalg.qr', 'cpu')\n"
            "print(k._IMPLS[('linalg.qr', 'neuron')].__module__)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == ["trnscipy.sparse.linalg._dsolve.linsolve",
                                  "trnscipy.linalg._refine_orth"], run.stdout
