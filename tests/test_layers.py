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
