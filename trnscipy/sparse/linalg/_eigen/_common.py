"""Shared pieces of the device eigensolvers: the strategy entry, operators, small eigh."""

import functools

import numpy as np

from trnscipy._dispatch import call_device
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg._kernels import small_eigh
from trnscipy.sparse.linalg._isolve.utils import host_operand

__all__ = ["always", "eigen_kernel", "operator", "pseudo_random", "read_small", "real_dtype",
           "small_eigh", "standard_problem"]


def eigen_kernel(scipy_func, operators=None):
    """Decorator, under ``@dispatch``: the strategy of the call, the algorithm table's
    ``eigen`` entry for the operands' device kind: on the CPU SciPy's own solver (ARPACK,
    lobpcg) on zero-copy views, on Neuron the double-float Rayleigh-Ritz around the
    float32 solver (``_eigen/_refine.py``), elsewhere the decorated torch implementation.
    ``operators(arguments)``: True where SciPy's function makes a LinearOperator of its
    matrix itself (then the CPU kernel may hand a sparse container over as one)."""
    def decorate(torch_func):
        @functools.wraps(torch_func)
        def solve(*args, **kwargs):
            device = call_device(args, kwargs)
            return kernel("eigen", device)(scipy_func, torch_func, args, kwargs,
                                           host_operand, operators)

        solve.torch_impl = torch_func
        return solve

    return decorate


def standard_problem(arguments):
    """eigs/eigsh without sigma and M and with k < n - 1: SciPy then only calls
    ``aslinearoperator(A).matvec`` (shift-invert and its k >= n - 1 dense route treat a
    sparse matrix and an operator differently)."""
    try:
        return (arguments.get("sigma") is None and arguments.get("M") is None
                and int(arguments.get("k", 6)) < arguments["A"].shape[0] - 1)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return False


def always(arguments):
    """svds: SciPy makes a LinearOperator of A before anything else."""
    return True


def operator(A, device):
    """``A`` (sparse container, dense tensor, LinearOperator) as a device LinearOperator."""
    from trnscipy.sparse.linalg._interface import _device_operator

    return _device_operator(A, device)


def real_dtype(dtype):
    return torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype


def pseudo_random(n, j, dtype, device):
    """A fixed direction to continue a Krylov basis from after a breakdown at step ``j``
    (a device integer: no host randomness in graphs)."""
    rdtype = real_dtype(dtype)
    t = torch.arange(n, device=device, dtype=rdtype)
    j = j.to(rdtype)
    return torch.cos(t * (0.7548776662466927 * (j + 1)) + 0.5698402909980532 * j).to(dtype)


def read_small(t):
    """A small device tensor on the host as a float64/complex128 array, in one read (a
    complex one as its real and imaginary parts)."""
    from trnscipy._transfer import to_host

    if not t.is_complex():
        return np.asarray(to_host(t), dtype=np.float64)
    parts = np.asarray(to_host(torch.stack([t.real, t.imag])), dtype=np.float64)
    return parts[0] + 1j * parts[1]


