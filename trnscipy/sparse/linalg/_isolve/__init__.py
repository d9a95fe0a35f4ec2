"""Device implementations of scipy.sparse.linalg's iterative solvers."""

from trnscipy.sparse.linalg._isolve._gcrotmk import gcrotmk
from trnscipy.sparse.linalg._isolve.iterative import bicg, bicgstab, cg, cgs, gmres, qmr
from trnscipy.sparse.linalg._isolve.lgmres import lgmres
from trnscipy.sparse.linalg._isolve.lsmr import lsmr
from trnscipy.sparse.linalg._isolve.lsqr import lsqr
from trnscipy.sparse.linalg._isolve.minres import minres
from trnscipy.sparse.linalg._isolve.tfqmr import tfqmr

__all__ = ["bicg", "bicgstab", "cg", "cgs", "gcrotmk", "gmres", "lgmres", "lsmr", "lsqr", "minres",
           "qmr", "tfqmr"]
