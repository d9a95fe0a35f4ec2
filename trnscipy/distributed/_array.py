"""Row-partitioned dense arrays (1-D or 2-D): each rank holds a contiguous block of rows."""

import numbers

import numpy as np

from trnscipy._torch import torch

__all__ = ["DistributedArray", "check_same"]


def check_same(a, b, what="operands"):
    """ValueError (on every rank: the metadata is the same everywhere) unless ``a`` and
    ``b`` share a placement and a row partition."""
    if a.placement != b.placement:
        raise ValueError(f"{what} live on different process groups or devices: "
                         f"{a.placement} and {b.placement}")
    if a.offsets != b.offsets:
        raise ValueError(f"{what} have different row partitions: {a.counts} and {b.counts}")


class DistributedArray:
    """A 1-D or 2-D array split by rows over a process group.

    ``local`` is this rank's block of rows (a torch tensor on ``placement.device``),
    ``offsets`` the first row of each rank (the same on every rank).  Arithmetic with a
    scalar or a DistributedArray of the same partition is local; ``gather`` assembles
    the whole array."""

    def __init__(self, local, offsets, placement, shape):
        self.local = local
        self.offsets = tuple(int(o) for o in offsets)
        self.placement = placement
        self.shape = tuple(shape)

    @property
    def _trnscipy_placement(self):
        return self.placement

    @property
    def counts(self):
        return tuple(np.diff(self.offsets).tolist())

    @property
    def dtype(self):
        from trnscipy._dtypes import to_numpy_dtype

        return to_numpy_dtype(self.local.dtype)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def T(self):
        if self.ndim == 1:
            return self
        raise ValueError("the transpose of a row-partitioned 2-D array is not row-partitioned")

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return (f"<DistributedArray shape={self.shape} dtype={self.dtype} rows {self.counts} "
                f"on {self.placement}>")

    def _like(self, local):
        return DistributedArray(local, self.offsets, self.placement,
                                (self.shape[0],) + tuple(local.shape[1:]))

    def copy(self):
        return self._like(self.local.clone())

    def _operand(self, other):
        if isinstance(other, DistributedArray):
            check_same(self, other)
            return other.local
        if isinstance(other, numbers.Number) or (np.ndim(other) == 0
                                                 and not hasattr(other, "_trnscipy_placement")):
            return other
        if isinstance(other, np.ndarray) and other.shape[:1] == self.shape[:1]:
            lo, hi = self.offsets[self.placement.rank], self.offsets[self.placement.rank + 1]
            return torch.as_tensor(other[lo:hi], device=self.local.device)
        raise ValueError(f"cannot combine a DistributedArray of shape {self.shape} with "
                         f"{type(other).__name__}")

    def __add__(self, other):
        return self._like(self.local + self._operand(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._like(self.local - self._operand(other))

    def __rsub__(self, other):
        return self._like(self._operand(other) - self.local)

    def __mul__(self, other):
        return self._like(self.local * self._operand(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._like(self.local / self._operand(other))

    def __neg__(self):
        return self._like(-self.local)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DistributedArray holds only its rank's rows: use "
                        "trnscipy.distributed.gather(x) for the whole array")
