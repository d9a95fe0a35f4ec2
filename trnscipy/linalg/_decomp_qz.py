"""qz on device tensors.

Off the CPU, real pencils take the QZ iteration of trnscipy/linalg/_qz.py (plain torch ops:
on XLA they lower, no aten CPU fallback).  What differs from SciPy there: complex input runs
SciPy's LAPACK on the host (announced); output='complex' of real input is the real form
made complex (each 2x2 block's unitary pair), zgges's form up to the order and phases; no
balancing by permutation (dgges's dggbal 'P'): other Q and Z, the same form.

ordqz: the device QZ, one host read of the eigenvalues for ``sort`` (user Python, called
as SciPy calls it), then the selected blocks moved up by adjacent swaps in one device loop
(trnscipy/linalg/_qz.py ``reorder``), a batch one matrix at a time.  output='complex' of
real input reorders the real form when ``sort`` selects both eigenvalues of each complex
pair (it always does for the named sorts), else runs on the host (announced), as complex
input does.
"""

import warnings

import numpy as np
import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._double_float import complex_of
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _qz
from trnscipy.linalg._kernels import _XLA_BATCH_SWITCH, _on_host, _on_views, as_stack
from trnscipy.linalg._validate import as_tensor, device_of, floating
from trnscipy.linalg._validate import check_finite as check_finite_

__all__ = ["qz", "ordqz"]


@dispatch(_sl.qz, stacks=True, double_float=("neuron",))
def qz(A, B, output="real", lwork=None, sort=None, overwrite_a=False, overwrite_b=False,
       check_finite=True):
    if sort is not None:
        raise ValueError("The 'sort' input of qz() has to be None and will be removed in a "
                         "future release. Use ordqz instead.")
    a, b = _pencil(A, B, output, check_finite)
    return kernel("linalg.qz", a.device)(a, b, output=output)


def _pencil(A, B, output, check_finite):
    """(a, b) on their device in one floating dtype, SciPy's checks."""
    if output not in ("real", "complex", "r", "c"):
        raise ValueError("argument must be 'real', or 'complex'")
    device = device_of(A, B)
    a = floating(as_tensor(A, device, False))
    b = floating(as_tensor(B, device, False))
    if check_finite:
        check_finite_(a, b)  # (one host read for both)
    if a.ndim < 2 or b.ndim < 2 or not (a.shape[-1] == a.shape[-2] == b.shape[-2]
                                        == b.shape[-1]):
        raise ValueError("Array dimensions must be square and agree")
    dtype = torch.promote_types(a.dtype, b.dtype)
    return a.to(dtype), b.to(dtype)


register("linalg.qz", "cpu")(_on_views(_sl.qz))


@dispatch(_sl.ordqz, double_float=("neuron",))
def ordqz(A, B, sort="lhp", output="real", overwrite_a=False, overwrite_b=False,
          check_finite=True):
    """A batch runs one matrix at a time (SciPy's loop: ``sort`` sees one matrix's)."""
    a, b = _pencil(A, B, output, check_finite)
    select = _sl._decomp_qz._select_function(sort)  # (SciPy's: its errors, its predicates)
    return kernel("linalg.ordqz", a.device)(a, b, select=select, output=output)


register("linalg.ordqz", "cpu")(_on_views(lambda a, b, select, output, check_finite: _sl.ordqz(
    a, b, sort=select, output=output, check_finite=check_finite)))


def _host_ordqz(a, b, select, output, reason):
    return _on_host("scipy.linalg.ordqz", reason, lambda x, y: tuple(
        torch.from_numpy(np.asarray(r)) for r in _sl.ordqz(
            x.numpy(), y.numpy(), sort=select, output=output, check_finite=False)), a, b)


@register("linalg.ordqz", "generic")
def _ordqz_generic(a, b, select, output="real"):
    if a.is_complex() or b.is_complex():
        return _host_ordqz(a, b, select, output, "the QZ form of complex input is not on "
                           "the device")
    n = a.shape[-1]
    if n == 0:
        return _host_ordqz(a, b, select, output, "an empty pencil (LAPACK's error)")
    cplx = output in ("complex", "c")
    s, p, q, z = (x[0] for x in real_qz(a[None], b[None]))
    out = _qz.ordered(s, p, q, z, select, cplx, np.float32 if a.dtype == torch.float32
                      else np.float64)
    if isinstance(out, str):
        return _host_ordqz(a, b, select, output, out)
    s, p, q, z = out
    # complex results by data movement (complex_of): no complex arithmetic on Neuron
    if cplx:
        sr, si, pr, pi, qr, qi, zr, zi = _qz.to_complex(s, p, q, z)
        ss, pp = complex_of(sr, si), complex_of(pr, pi)
        return (ss, pp, complex_of(_qz._diag(sr), _qz._diag(si)),
                complex_of(_qz._diag(pr), _qz._diag(pi)), complex_of(qr, qi),
                complex_of(zr, zi))
    ar, ai, bt = _qz.eigvals_from_qz(s, p)
    return s, p, complex_of(ar, ai), bt, q, z


def _host_qz(a, b, output, reason):
    return _on_host("scipy.linalg.qz", reason, lambda x, y: tuple(
        torch.from_numpy(np.asarray(r)) for r in _sl.qz(
            x.numpy(), y.numpy(), output=output, check_finite=False)), a, b)


def real_qz(a, b):
    """(AA, BB, Q, Z) of real (a, b) on their device; SciPy's LinAlgWarning where the
    iteration does not converge (the form is then not reached, as LAPACK's info > 0)."""
    s, p, q, z, done = _qz.qz(a, b)
    if not done:
        warnings.warn("The QZ iteration failed. (a,b) are not in Schur form, but "
                      "ALPHAR(j), ALPHAI(j), and BETA(j) should be correct for J=0,...,N",
                      _sl.LinAlgWarning, stacklevel=5)
    return s, p, q, z


@register("linalg.qz", "generic")
def _qz_generic(a, b, output="real"):
    if a.is_complex() or b.is_complex():
        return _host_qz(a, b, output, "the QZ form of complex input is not on the device")
    cplx = output in ("complex", "c")
    if a.shape[-1] == 0:
        out = a.clone(), b.clone(), a.clone(), a.clone()
        return tuple(x.to(_cdtype(x.dtype)) for x in out) if cplx else out
    if a.device.type == "xla":  # (a batch rounds as its single calls: as_stack)
        return as_stack(lambda x, y: _qz_stack(x, y, cplx), a, b, at_least=_XLA_BATCH_SWITCH)
    return _qz_stack(a, b, cplx)


def _qz_stack(a, b, cplx):
    stack, n = a.shape[:-2], a.shape[-1]
    # always a stack: a matrix alone computes as in a stack, to the bit (SciPy's loop)
    out = real_qz(a.reshape(-1, n, n), b.reshape(-1, n, n))
    if cplx:  # SciPy casts real input to complex: the complex form from the real one here
        parts = _qz.to_complex(*out)  # (by data movement: no complex arithmetic on Neuron)
        out = tuple(complex_of(parts[i], parts[i + 1]) for i in range(0, 8, 2))
    return tuple(x.reshape(*stack, n, n) for x in out)


def _cdtype(dtype):
    return torch.promote_types(dtype, torch.complex64)  # float32 -> complex64, float64 -> 128

