"""Block-Jacobi preconditioning: each rank factors its diagonal block, no communication."""

import numpy as np
import scipy.sparse.linalg as _spla

from trnscipy._torch import torch

__all__ = ["block_jacobi"]


class BlockJacobi:
    """M ~ inv(A) by the inverse of each rank's diagonal block (an LU or ILU
    factorization made once with SciPy's SuperLU on the host).  ``M.matvec_local`` is
    local: applying it sends nothing.  On devices other than the CPU each application
    copies the rank's rows to the host and back."""

    def __init__(self, A, kind, options):
        self.placement, self.offsets, self.shape = A.placement, A.offsets, A.shape
        self.dtype = A.dtype
        block = A._diag.tocsc()
        if block.shape[0] == 0:
            self._solve = None
        elif kind == "lu":
            self._solve = _spla.splu(block, **options).solve
        elif kind == "ilu":
            self._solve = _spla.spilu(block, **options).solve
        else:
            raise ValueError(f"kind must be 'lu' or 'ilu', not {kind!r}")

    @property
    def _trnscipy_placement(self):
        return self.placement

    def matvec_local(self, r):
        if self._solve is None:
            return r.clone()
        host = r.detach().cpu().numpy() if r.device.type != "cpu" else r.numpy()
        out = self._solve(np.ascontiguousarray(host))
        return torch.as_tensor(out, device=r.device).to(r.dtype)

    def __matmul__(self, x):
        from trnscipy.distributed._array import DistributedArray, check_same

        check_same(self, x)
        return DistributedArray(self.matvec_local(x.local), x.offsets, x.placement, x.shape)

    matvec = __matmul__


def block_jacobi(A, kind="lu", **options):
    """A block-Jacobi preconditioner for the DistributedMatrix ``A`` (pass as ``M=``):
    ``kind='lu'`` (SciPy's ``splu`` of each rank's diagonal block) or ``'ilu'``
    (``spilu``; ``options`` go to the factorization).  With one process it is the exact
    inverse; with more it ignores the couplings between ranks, so iteration counts grow
    with the number of ranks."""
    return BlockJacobi(A, kind, options)
