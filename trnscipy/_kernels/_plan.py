"""Prepared objects of a sparse container: its plan.

What a backend or a solver derives from a container once and reuses (the entry -> row
index, the row-padded product layout, a torch CSR handle, SciPy views of the tensors, a
pattern's LU/ILU analysis, the double-float operator) lives in the container's one
plan, ``A.__dict__["_plan"]``, and nowhere else: this module alone reads and writes it.

An entry is named ``(kind, name)``: ``kind`` the device kind it was prepared for
(``None`` for kind-independent data).  One invalidation rule: an entry is valid while
the container has the shape it had and holds the tensors the entry was built from,
unmodified.  ``scope`` says which tensors: ``STRUCTURE`` (the index arrays) or
``VALUES`` (all arrays, ``data`` included); "unmodified" is the same tensor objects
at the same ``_version`` (in-place writes bump it), except for ``shared=True``
entries, which view the tensors' memory (in-place writes show in them), where the
same objects suffice.  ``clear(A)`` drops every entry; nothing else needs clearing.
"""

import operator

import numpy as np

from trnscipy._torch import torch
from trnscipy._transfer import to_host

__all__ = ["STRUCTURE", "VALUES", "get", "put", "prepared", "pattern_analysis", "carry",
           "clear"]

STRUCTURE = "structure"
VALUES = "values"

# (format, ndim) -> the index tensors of a container, by name
_NAMES = {
    ("csr", 2): ("indptr", "indices"), ("csc", 2): ("indptr", "indices"),
    ("bsr", 2): ("indptr", "indices"), ("coo", 2): ("row", "col"),
    ("dia", 2): ("offsets",), ("csr", 1): ("indptr", "indices"), ("coo", 1): ("col",),
}


def _getter(names):
    """A function of a container's ``__dict__``: the tuple of its tensors ``names``."""
    if len(names) == 1:
        (name,) = names
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


_GETTERS = {}
for (_fmt, _ndim), _names in _NAMES.items():
    _GETTERS[_fmt, _ndim, STRUCTURE] = _getter(_names)
    _GETTERS[_fmt, _ndim, VALUES] = _getter((*_names, "data"))


def _versions(tensors):
    # (a DoubleFloatTensor would route ``_version`` through its __torch_function__)
    with torch._C.DisableTorchFunctionSubclass():
        return tuple(t._version for t in tensors)


def get(A, kind, name):
    """``A``'s prepared ``(kind, name)``, or None where absent or no longer valid."""
    d = A.__dict__
    plan = d.get("_plan")
    entry = plan.get((kind, name)) if plan is not None else None
    if entry is None:
        return None
    shape, tensors_of, held, versions, value = entry
    # (identity by map and is_: 0.2 us, on the CPU product's path)
    if shape != d["_shape"] or not all(map(operator.is_, tensors_of(d), held)):
        return None
    if versions is not None and versions != _versions(held):
        return None
    return value


def put(A, kind, name, value, scope=VALUES, shared=False):
    """Keep ``value`` as ``A``'s ``(kind, name)``, built from ``A``'s tensors of ``scope``
    (``shared``: viewing their memory); returns ``value``."""
    d = A.__dict__
    tensors_of = _GETTERS[A.format, len(d["_shape"]), scope]
    held = tensors_of(d)
    entry = (d["_shape"], tensors_of, held, None if shared else _versions(held), value)
    d.setdefault("_plan", {})[kind, name] = entry
    return value


def prepared(A, kind, name, build, scope=VALUES, shared=False):
    """``A``'s ``(kind, name)``, made by ``build()`` where absent or no longer valid."""
    value = get(A, kind, name)
    if value is None:
        value = put(A, kind, name, build(), scope, shared)
    return value


def pattern_analysis(A, name, key, analyse):
    """``analyse(n, row, col)`` of the pattern of ``A`` (a device CSR/CSC container), read
    to the host once and kept as (``name``, ``key``) while A holds the same index tensors
    (the LU, ILU and triangular analyses)."""

    def build():
        indptr = to_host(A.indptr).astype(np.int64)
        major = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
        minor = to_host(A.indices).astype(np.int64)
        row, col = A._swap((major, minor))  # (the container knows its orientation)
        return analyse(A.shape[0], row, col)

    return prepared(A, None, (name, key), build, STRUCTURE)


def carry(src, dst, *names):
    """Give ``dst`` (a container of another shape holding ``src``'s index tensors: a 1-D
    view of a 2-D container) ``src``'s kind-independent entries ``names``, which depend
    on those tensors only."""
    plan = src.__dict__.get("_plan")
    for name in names:
        entry = plan.get((None, name)) if plan else None
        if entry is not None:
            dst.__dict__.setdefault("_plan", {})[None, name] = (dst._shape, *entry[1:])


def clear(A):
    """Drop every prepared object of ``A`` (its arrays were replaced)."""
    A.__dict__.pop("_plan", None)


def without_plan(items):
    """The ``(key, value)`` pairs of a container's ``__dict__`` other than its plan (for
    a copy that holds other tensors)."""
    return ((k, v) for k, v in items if k != "_plan")
