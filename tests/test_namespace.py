"""Every public name of SciPy's three modules resolves in trnscipy's twin."""

import importlib
import subprocess
import sys

import pytest

MODULES = ["sparse", "sparse.linalg", "linalg"]


@pytest.mark.parametrize("path", MODULES)
def test_all_scipy_names_resolve(path):
    scipy_mod = importlib.import_module(f"scipy.{path}")
    ours = importlib.import_module(f"trnscipy.{path}")
    missing = [n for n in scipy_mod.__all__ if not hasattr(ours, n)]
    assert not missing, f"trnscipy.{path} lacks {missing}"
    assert sorted(ours.__all__) == sorted(scipy_mod.__all__)
    assert set(scipy_mod.__all__) <= set(dir(ours))


@pytest.mark.parametrize("path", MODULES)
def test_star_import_gives_scipy_names(path):
    scipy_ns, ours_ns = {}, {}
    exec(f"from scipy.{path} import *", scipy_ns)
    exec(f"from trnscipy.{path} import *", ours_ns)
    assert set(scipy_ns) - {"__builtins__"} == set(ours_ns) - {"__builtins__"}


def test_submodules_are_trnscipy_ones():
    import trnscipy.sparse

    assert trnscipy.sparse.linalg.__name__ == "trnscipy.sparse.linalg"


def test_classes_and_exceptions_are_scipy_objects_where_not_overridden():
    import scipy.linalg

    import trnscipy.linalg

    assert trnscipy.linalg.LinAlgError is scipy.linalg.LinAlgError
    assert trnscipy.linalg.LinAlgWarning is scipy.linalg.LinAlgWarning


def test_import_does_not_import_torch():
    code = ("import sys, numpy as np, trnscipy, trnscipy.sparse, trnscipy.linalg, "
            "trnscipy.sparse.linalg as sl\n"
            "A = trnscipy.sparse.diags([-1, 2, -1], [-1, 0, 1], shape=(20, 20), format='csr')\n"
            "x, info = sl.cg(A, np.ones(20))\n"
            "trnscipy.linalg.cholesky(np.eye(3))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
