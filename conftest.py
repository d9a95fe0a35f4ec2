"""The process environment of the whole suite (tests/ and conformance/), set before torch-xla
starts its PJRT client; tests/conftest.py has the lanes and fixtures."""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")
# Every compiled XLA CPU executable holds ~50 memory maps (its JIT code) until torch-xla's
# compilation cache (default 2048 graphs) evicts it; past vm.max_map_count (65530) LLVM's
# JIT fails ("Cannot allocate memory") and the process segfaults.  256 keeps a process far
# below that; tests only rely on a graph being cached within one test.
os.environ.setdefault("XLA_COMPILATION_CACHE_SIZE", "256")
# The suite's XLA time is mostly compilation of small graphs: LLVM at -O1 cuts it (eigsh
# LA float64 test 145 s -> 50 s; -O0 62 s, but its slow code took lobpcg's generalized
# float64 test from 76 s to 422 s, -O1 62 s).  Code generation does not change IEEE results
# (XLA CPU contracts no FMAs and reassociates nothing without fast-math); bench/ keeps -O2.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=1")
# No persistent compilation cache in the suite (trnscipy/_cache.py): a test must not depend
# on graphs an earlier run left in ~/.cache, and torch-xla writes its cache files in place
# (no temporary file and rename), so pytest-xdist workers sharing one directory could read
# each other's half-written files.  tests/test_compile_cache.py turns it on in child
# processes, each with its own directory.
os.environ["TRNSCIPY_CACHE"] = "0"
os.environ.pop("XLA_PERSISTENT_CACHE_PATH", None)
