"""The persistent compilation cache (trnscipy/_cache.py): where it lives, how it is turned
off, that the emulated-Neuron and plain XLA modes never share a directory, and that a
second process with the cache warm compiles nothing.

The suite itself runs with the cache off (tests/conftest.py): a test must not depend on
what an earlier run left in ~/.cache.  The tests here run their XLA work in child
processes with their own ``TRNSCIPY_CACHE_DIR`` under tmp_path.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.conftest import HAVE_XLA

ROOT = Path(__file__).resolve().parent.parent

# One small cg solve on the XLA device, then torch-xla's counters as JSON.
_CHILD = r"""
import json, os
import numpy as np
import scipy.sparse as sp
import torch
import trnscipy
import trnscipy.sparse as tsp
import trnscipy.sparse.linalg as tspla
import torch_xla
import torch_xla.debug.metrics as met

device = trnscipy.resolve_device("xla")
k = 8
T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k, k))
A = sp.csr_array(sp.kron(sp.eye(k), T) + sp.kron(T, sp.eye(k)), dtype=np.float32)
At = tsp.csr_array((torch.from_numpy(A.data).to(device),
                    torch.from_numpy(A.indices.astype(np.int64)).to(device),
                    torch.from_numpy(A.indptr.astype(np.int64)).to(device)), shape=A.shape)
b = torch.ones(k * k, dtype=torch.float32, device=device)
x, info = tspla.cg(At, b, rtol=1e-5)
res = float(np.linalg.norm(A @ x.cpu().numpy() - 1) / np.sqrt(k * k))
counters = {n: met.counter_value(n) for n in met.counter_names()
            if n in ("UncachedCompile", "CachedCompile") or n.startswith("PersistentCache")}
compile_time = met.metric_data("CompileTime")
print(json.dumps({"info": info, "relres": res,
                  "path": os.environ.get("XLA_PERSISTENT_CACHE_PATH"),
                  "compilations": compile_time[0] if compile_time else 0,
                  "counters": counters}))
"""


def _run_child(cache_dir, **env):
    full = dict(os.environ, PJRT_DEVICE="CPU", TRNSCIPY_CACHE_DIR=str(cache_dir), **env)
    for name in ("XLA_PERSISTENT_CACHE_PATH", "XLA_PERSISTENT_CACHE_READ_ONLY"):
        full.pop(name, None)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["info"] == 0 and out["relres"] < 1e-4, out
    return out, proc.stderr


def _loads_executables():
    from trnscipy._cache import _torch_xla_loads_executables

    return _torch_xla_loads_executables()


# ------------------------------------------------------------------ where the cache lives


def test_cache_dir_environment(monkeypatch, tmp_path):
    from trnscipy._cache import cache_root, xla_cache_dir

    monkeypatch.delenv("TRNSCIPY_CACHE", raising=False)
    monkeypatch.delenv("TRNSCIPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "trnscipy"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "trnscipy"
    monkeypatch.setenv("TRNSCIPY_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    # the two modes never share a directory
    assert xla_cache_dir(neuron=False) == tmp_path / "mine" / "xla"
    assert xla_cache_dir(neuron=True) == tmp_path / "mine" / "xla-neuron"
    for off in ("0", "off", "false"):
        monkeypatch.setenv("TRNSCIPY_CACHE", off)
        assert cache_root() is None and xla_cache_dir(neuron=False) is None


@pytest.mark.xla
@pytest.mark.skipif(not HAVE_XLA, reason="torch-xla not installed")
def test_after_xla_work_it_warns_and_stays_off(monkeypatch, tmp_path, xla_device):
    """A process that already compiled on XLA cannot start torch-xla's persistent cache:
    one RuntimeWarning, nothing set, no crash."""
    import torch

    from trnscipy import _cache
    from trnscipy._metrics import _flush

    (torch.ones(3, device=xla_device) * 2).sum().item()  # a compilation (or a cache hit)
    _flush()
    monkeypatch.setitem(_cache._state, "mode", None)
    monkeypatch.setenv("TRNSCIPY_CACHE", "1")
    monkeypatch.setenv("TRNSCIPY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("XLA_PERSISTENT_CACHE_PATH", raising=False)
    with pytest.warns(RuntimeWarning, match="persistent compilation cache stays off"):
        _cache.setup_xla_cache(neuron=False)
    assert "XLA_PERSISTENT_CACHE_PATH" not in os.environ
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _cache.setup_xla_cache(neuron=False)  # once per process: no second warning


def test_default_follows_what_torch_xla_can_load(monkeypatch, tmp_path):
    """Off by default where torch-xla cannot read its cache back (2.9: pytorch/xla#9094),
    since there it would only write files and log a warning per graph."""
    if HAVE_XLA and _loads_executables():
        pytest.skip("this torch-xla loads its persistent cache: on by default")
    from trnscipy import _cache

    monkeypatch.setitem(_cache._state, "mode", None)
    monkeypatch.setenv("TRNSCIPY_CACHE", "")  # neither on nor off: the default
    monkeypatch.setenv("TRNSCIPY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("XLA_PERSISTENT_CACHE_PATH", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _cache.setup_xla_cache(neuron=False)
    assert "XLA_PERSISTENT_CACHE_PATH" not in os.environ
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------ across processes
# (one set of child processes for the module: each pays torch and torch-xla's import)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not HAVE_XLA:
        pytest.skip("torch-xla not installed")
    shared, off = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("cache-off")
    out = {"dir": shared, "off_dir": off}
    out["first"] = _run_child(shared, TRNSCIPY_CACHE="1")
    out["second"] = _run_child(shared, TRNSCIPY_CACHE="1")
    out["emulated"] = _run_child(shared, TRNSCIPY_CACHE="1", TRNSCIPY_EMULATE="neuron")
    out["off"] = _run_child(off, TRNSCIPY_CACHE="0")
    return out


@pytest.mark.xla
def test_cache_off_writes_nothing(runs):
    out, _ = runs["off"]
    assert out["path"] is None
    assert out["compilations"] > 0
    assert not any(runs["off_dir"].iterdir())


@pytest.mark.xla
def test_modes_write_separate_directories(runs):
    root = runs["dir"]
    (plain, _), (emulated, _) = runs["first"], runs["emulated"]
    assert plain["path"] == str(root / "xla")
    assert emulated["path"] == str(root / "xla-neuron")
    plain_files = set(os.listdir(root / "xla"))
    emulated_files = set(os.listdir(root / "xla-neuron"))
    assert plain_files and emulated_files
    assert len(plain_files) >= plain["counters"].get("UncachedCompile", 0) > 0


@pytest.mark.xla
def test_second_process_compiles_nothing(runs, request):
    if not _loads_executables():
        request.applymarker(pytest.mark.xfail(
            strict=True, reason="torch-xla 2.9 writes its persistent cache but cannot load "
            "it back on PJRT CPU/TPU/plugins (DeserializeExecutable UNIMPLEMENTED, "
            "pytorch/xla#9094); when this passes, _torch_xla_loads_executables is out "
            "of date"))
    first, _ = runs["first"]
    second, stderr = runs["second"]
    assert first["counters"].get("UncachedCompile", 0) > 0
    assert second["counters"].get("PersistentCacheHit", 0) > 0, (second, stderr[-2000:])
    assert second["counters"].get("UncachedCompile", 0) == 0, second
    assert second["compilations"] == 0, second
