"""Scale-out on torch.distributed: the same SciPy calls on matrices split over processes.

Launch a script with ``torchrun --nproc_per_node=N script.py``; in it::

    A = trnscipy.distributed.distribute(A_scipy)       # rows split, halo planned once
    x, info = trnscipy.sparse.linalg.cg(A, b)           # b: NumPy (whole) or distributed
    x = trnscipy.distributed.gather(x)                  # NumPy on every rank

The routing rule sends any call with a distributed operand to the implementation
registered here; see docs/design.md, "Scale-out".
"""

from trnscipy.distributed import _isolve, _lobpcg  # noqa: F401  (register the solvers)
from trnscipy.distributed._array import DistributedArray
from trnscipy.distributed._comm import comm_counts, reset_comm_counts
from trnscipy.distributed._matrix import DistributedMatrix, distribute, gather
from trnscipy.distributed._precond import block_jacobi

__all__ = ["DistributedArray", "DistributedMatrix", "block_jacobi", "comm_counts",
           "distribute", "gather", "reset_comm_counts"]
