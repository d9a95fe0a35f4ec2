"""docs/architecture.md's "One call, file by file": the files a repeated call runs, traced.

The document lists them for cg and spsolve; these tests fail when the structure changes
under it (then update the document with the new list)."""

import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import trnscipy
import trnscipy.sparse.linalg as tsl

# core helpers and plans: not counted (the document's rule)
NOT_COUNTED = {"__init__.py", "_device.py", "_dtypes.py", "_torch.py", "_transfer.py",
               "_capabilities.py", "_double_float.py", "_kernels/_plan.py", "_kernels/_ell.py"}


def _files(call):
    """The trnscipy files (relative paths) whose functions run in ``call()``."""
    root = os.path.dirname(trnscipy.__file__)
    seen = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.add(os.path.relpath(frame.f_code.co_filename, root))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen - NOT_COUNTED


def _poisson(n):
    return sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr",
                    dtype=np.float32)


@pytest.mark.xla
def test_cg_on_xla_runs_through_six_files(xla_device):
    from trnscipy._torch import torch

    a = _poisson(64)
    A = trnscipy.to_device(a, xla_device)  # a regular pattern: the row-padded layout
    b = torch.ones(64, dtype=torch.float32).to(xla_device)
    x, info = tsl.cg(A, b)  # the first call builds plans and compiles
    np.testing.assert_allclose(trnscipy.to_host(x), sp.linalg.cg(a, np.ones(64))[0],
                               rtol=1e-4)
    assert _files(lambda: tsl.cg(A, b)) == {
        "_dispatch.py", "sparse/linalg/_isolve/utils.py", "sparse/linalg/_isolve/iterative.py",
        "sparse/_base.py", "_kernels/__init__.py", "_kernels/_xla.py"}


@pytest.mark.xla
def test_spsolve_on_xla_runs_through_seven_files(xla_device):
    """The generic device spsolve, as on CUDA (there ``_cuda.py`` for ``_xla.py``)."""
    from trnscipy._torch import torch

    a = _poisson(64)
    A = trnscipy.to_device(a, xla_device)
    b = torch.ones(64, dtype=torch.float32).to(xla_device)
    x = tsl.spsolve(A, b)
    np.testing.assert_allclose(trnscipy.to_host(x), sp.linalg.spsolve(a, np.ones(64)),
                               rtol=1e-4)
    assert _files(lambda: tsl.spsolve(A, b)) == {
        "_dispatch.py", "sparse/linalg/_dsolve/linsolve.py", "sparse/_base.py",
        "sparse/linalg/_dsolve/_multifrontal.py", "_kernels/__init__.py", "_kernels/_xla.py",
        "_kernels/_generic.py"}
