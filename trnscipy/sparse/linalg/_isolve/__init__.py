"""Device implementations of scipy.sparse.linalg's iterative solvers."""

from trnscipy.sparse.linalg._isolve.iterative import bicg, bicgstab, cg, cgs, gmres, qmr
from trnscipy.sparse.linalg._isolve.minres import minres
from trnscipy.sparse.linalg._isolve.tfqmr import tfqmr

__all__ = ["bicg", "bicgstab", "cg", "cgs", "gmres", "minres", "qmr", "tfqmr"]
