"""Cases and profiles.

A ``Case`` is one call of one public name on fixed host inputs (NumPy arrays, SciPy
sparse objects, scalars).  The harness runs it through SciPy and, with the inputs moved
to a lane, through trnscipy, and compares.  Case modules under ``conformance/cases``
expose ``cases(profile)`` generators; ``all_cases(profile)`` collects them.
"""

import copy
import dataclasses
import importlib
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["Case", "Profile", "PROFILES", "MODULES", "all_cases", "public_names", "draw"]

MODULES = ("sparse", "sparse.linalg", "linalg")


@dataclass(frozen=True)
class Profile:
    name: str
    examples: int  # hypothesis examples per strategy
    xla_examples: int  # of those, how many also run on the XLA lanes (each shape compiles)
    # on the XLA lanes, at most this many device-computed cases per public name (see
    # harness.xla_selection); None: every case marked xla
    xla_per_name: int | None = None
    derandomize: bool = True
    seed: int | None = None
    # lane name -> ids of cases this profile leaves out on that lane
    skip: dict = field(default_factory=dict)


# The CI profile (tests/ and conformance/ under pytest) is the fast profile less the
# float64 cases on the xla-neuron lane whose double-float methods compile longest: each
# took 25-120 s of XLA CPU compiles on 2 cores (python -m conformance, per-case times,
# 2026-11-27), together half the lane.  Every such name keeps its float32 device case in
# CI; `python -m conformance` (fast, which writes the baseline and docs) runs them all.
CI_SKIP_NEURON = frozenset({
    "linalg.subspace_angles[1-float64]", "sparse.linalg.eigsh[k2-float64]",
    "sparse.linalg.svds[k2-float64]", "sparse.linalg.lobpcg[k1-float64]",
    "sparse.linalg.funm_multiply_krylov[exp-float64]", "linalg.lstsq[1-float64]",
    "sparse.linalg.expm[csc-float64]",
    "linalg.expm_cond[1-float64]", "sparse.linalg.lsqr[converged-float64]",
    "sparse.linalg.onenormest[csr-float64]", "linalg.expm_frechet[1-float64]",
    "sparse.linalg.matrix_power[csr-float64]", "linalg.null_space[1-float64]",
    "linalg.eigh[1-float64]", "sparse.linalg.eigs[k2-float64]", "linalg.qz[1-float64]",
    "linalg.ordqz[1-float64]",
})

_FAST = Profile("fast", examples=4, xla_examples=1, xla_per_name=1)
PROFILES = {
    "fast": _FAST,
    "ci": dataclasses.replace(_FAST, name="ci", skip={"xla-neuron": CI_SKIP_NEURON}),
    "nightly": Profile("nightly", examples=40, xla_examples=6, derandomize=False, seed=20261121),
}


def _first_dtype(objs):
    for x in objs:
        if isinstance(x, np.ndarray) or sp.issparse(x):
            if x.dtype.kind in "fc":
                return x.dtype
            return np.dtype(np.float64)  # integer data computes in float64, as SciPy
        if type(x) in (tuple, list):
            found = _first_dtype(x)
            if found is not None:
                return found
    return None


@dataclass
class Case:
    """One paired call.

    module, attr: the public name (``"linalg"``, ``"solve"``).
    args, kwargs: host inputs; arrays and sparse objects are moved to the lane.
    call: ``call(fn, *args, **kwargs)`` for anything but ``fn(*args, **kwargs)``
          (methods of a class, a constructor followed by an operator ...).
    judge: ``judge(case, expected, actual_on_host)`` -> reason or None; the default
           compares values normwise with ``rtol`` (per-dtype default).
    xla: run on the XLA lanes too (keep these few and small: every shape compiles).
    xla_always: run on the XLA lanes whatever the per-name limit of the profile.
    device_kwarg: trnscipy's call gets ``device=<the lane's device>`` (constructors that
           take no array, e.g. ``eye``); SciPy's call does not.
    """

    module: str
    attr: str
    tag: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    call: object = None
    judge: object = None
    rtol: float | None = None
    xla: bool = True
    dtype: object = None
    device_kwarg: bool = False
    xla_always: bool = False

    def __post_init__(self):
        if self.dtype is None:
            self.dtype = _first_dtype((*self.args, *self.kwargs.values()))
        if self.dtype is None and self.kwargs.get("dtype") is not None:
            # a constructor's dtype keyword: the dtype it builds and computes in
            dtype = np.dtype(self.kwargs["dtype"])
            self.dtype = dtype if dtype.kind in "fc" else None

    @property
    def name(self):
        return f"scipy.{self.module}.{self.attr}"

    @property
    def id(self):
        return f"{self.module}.{self.attr}[{self.tag}]"

    def inputs(self):
        """Fresh copies of the host inputs (a call may overwrite its inputs)."""
        return copy.deepcopy(self.args), copy.deepcopy(self.kwargs)

    def function(self, package):
        """The public object ``package.module.attr`` (package: 'scipy' or 'trnscipy')."""
        return getattr(importlib.import_module(f"{package}.{self.module}"), self.attr)


def public_names():
    """{'scipy.linalg.solve': (module, attr), ...} for every public name of the three modules."""
    names = {}
    for module in MODULES:
        mod = importlib.import_module(f"scipy.{module}")
        for attr in mod.__all__:
            names[f"scipy.{module}.{attr}"] = (module, attr)
    return names


def all_cases(profile):
    """Every case of the profile, in a stable order; case ids are unique."""
    from conformance.cases import CASE_MODULES

    seen = set()
    out = []
    for modname in CASE_MODULES:
        mod = importlib.import_module(f"conformance.cases.{modname}")
        for case in mod.cases(profile):
            if case.id in seen:
                raise ValueError(f"duplicate conformance case id {case.id}")
            seen.add(case.id)
            out.append(case)
    return out


def draw(strategy, profile, scale=1):
    """A list of ``scale * profile.examples`` values drawn from a hypothesis strategy.

    ``fast`` is derandomized (the same examples on every run, for CI); ``nightly`` uses a
    fixed but different seed with ten times the examples.  Shrinking is off: a failing
    example is reported by its case id, which names its parameters.
    """
    from hypothesis import HealthCheck, Phase, given, seed, settings

    out = []
    count = scale * profile.examples

    @settings(max_examples=count, derandomize=profile.derandomize, database=None,
              phases=[Phase.generate], deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    if profile.seed is not None and not profile.derandomize:
        collect = seed(profile.seed)(collect)
    collect()
    return out[:count]
