"""is_sptriangular and spbandwidth on device sparse containers (SciPy 1.17's rules, on
the stored index structure: stored zeros count, as in SciPy).

They read index arrays only, never values: on a device without float64 (Neuron) they run
on float64 containers as on any other (``double_float``).

Differs from SciPy: the answers are Python bools and ints (SciPy: NumPy scalars); each
call reads its answer from the device once.
"""

from warnings import warn

import scipy.sparse.linalg as _spla
from scipy.sparse import SparseEfficiencyWarning

from trnscipy._dispatch import dispatch
from trnscipy._torch import torch

__all__ = ["is_sptriangular", "spbandwidth"]


def _container(A, formats, message):
    """A device container in one of ``formats``; anything else converted to CSR with SciPy's
    warning."""
    if not (getattr(A, "_trnscipy_device_object", False) and getattr(A, "format", None)
            in formats):
        warn(message, SparseEfficiencyWarning, stacklevel=4)
        from trnscipy.sparse import csr_array

        A = csr_array(A)
    return A


def _gaps(A):
    """col - row of every stored entry (int64 tensor)."""
    if A.format == "coo":
        row, col = A.row, A.col
    else:
        major = A._major_index()
        row, col = (major, A.indices) if A.format == "csr" else (A.indices, major)
    return col.to(torch.int64) - row.to(torch.int64)


@dispatch(_spla.is_sptriangular, double_float=("neuron",))
def is_sptriangular(A):
    A = _container(A, ("csc", "csr", "coo", "dia"),
                   "is_sptriangular needs sparse and not BSR format. Converting to CSR.")
    if A.format == "dia":
        offsets = A.offsets
        lower, upper = torch.stack([offsets.max() <= 0, offsets.min() >= 0]).tolist()
        return lower, upper
    gap = _gaps(A)
    lower, upper = torch.stack([(gap <= 0).all(), (gap >= 0).all()]).tolist()
    return lower, upper


@dispatch(_spla.spbandwidth, double_float=("neuron",))
def spbandwidth(A):
    A = _container(A, ("csc", "csr", "coo", "dia"),
                   "spbandwidth needs sparse format not LIL and BSR. Converting to CSR.")
    gap = A.offsets.to(torch.int64) if A.format == "dia" else _gaps(A)
    if gap.numel() == 0:
        if A.format == "dia":
            raise ValueError("zero-size array to reduction operation min which has no "
                             "identity")
        raise ValueError("zero-size array to reduction operation minimum which has no "
                         "identity")
    low, high = torch.stack([-gap.min(), gap.max()]).tolist()
    return max(low, 0), max(high, 0)
