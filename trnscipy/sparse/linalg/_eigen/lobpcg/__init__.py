"""LOBPCG on device data (SciPy 1.17's iteration as block GEMM)."""

from trnscipy.sparse.linalg._eigen.lobpcg.lobpcg import lobpcg

__all__ = ["lobpcg"]
