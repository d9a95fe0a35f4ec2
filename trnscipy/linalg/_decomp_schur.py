"""schur, rsf2csf and hessenberg on device tensors.

Off the CPU, real matrices take the Francis double-shift QR of trnscipy/linalg/_francis.py
(plain torch ops: on XLA they lower, no aten CPU fallback).  What differs from SciPy there:
complex input and ``sort`` run SciPy's LAPACK on the host (announced; reordering a real
Schur form is not on the device yet); no balancing, as SciPy's hessenberg.
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy._batch import PerMatrix
from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on
from trnscipy.linalg import _francis, _qz
from trnscipy.linalg._decomp_qz import real_qz
from trnscipy.linalg._kernels import _XLA_BATCH_SWITCH, _on_host, _on_views, as_stack
from trnscipy.linalg._validate import LinAlgError, as_tensor, device_of, floating

__all__ = ["schur", "rsf2csf", "hessenberg"]


def _complex_dtype(dtype):
    return {torch.float32: torch.complex64, torch.float64: torch.complex128}[dtype]


def _square(a, name=None):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Input '{name}' must be square." if name else
                         "expected square matrix")


@dispatch(_sl.hessenberg, stacks=True, double_float=("neuron",))
def hessenberg(a, calc_q=False, overwrite_a=False, check_finite=True):
    """A stack (the dispatcher's broadcast batch) is one reduction on XLA."""
    a = floating(as_tensor(a, device_of(a), check_finite))
    _square(a)
    if a.numel() == 0:
        return (a.clone(), a.clone()) if calc_q else a.clone()
    if a.shape[-1] <= 2:
        # (built on the host: float64 exact where the device holds it as float32 parts)
        eye = tensor_on(np.broadcast_to(np.eye(a.shape[-1]), a.shape).copy(), a.device)
        return (a.clone(), eye) if calc_q else a.clone()
    return kernel("linalg.hessenberg", a.device)(a, calc_q=calc_q)


@dispatch(_sl.schur, stacks=True, double_float=("neuron",))
def schur(a, output="real", lwork=None, overwrite_a=False, sort=None, check_finite=True):
    if output not in ("real", "complex", "r", "c"):
        raise ValueError("argument must be 'real', or 'complex'")
    a = floating(as_tensor(a, device_of(a), check_finite))
    _square(a)
    if a.ndim != 2 and (sort is not None or a.numel() == 0):
        raise PerMatrix  # (SciPy's loop: its checks and shapes per matrix)
    if sort is not None and not callable(sort) and sort not in ("lhp", "rhp", "iuc", "ouc"):
        raise ValueError("'sort' parameter must either be 'None', or a callable, or one of "
                         "('lhp','rhp','iuc','ouc')")
    if a.numel() == 0:
        if output in ("complex", "c") and not a.is_complex():
            a = a.to(_complex_dtype(a.dtype))
        return (a.clone(), a.clone()) if sort is None else (a.clone(), a.clone(), 0)
    # real input stays real for output='complex': the kernel builds the complex form (a cast
    # here would be complex arithmetic on a device without it)
    return kernel("linalg.schur", a.device)(a, output=output, sort=sort)


@dispatch(_sl.rsf2csf, stacks=True, double_float=("neuron",))
def rsf2csf(T, Z, check_finite=True):
    device = device_of(T, Z)
    z, t = as_tensor(Z, device, check_finite), as_tensor(T, device, check_finite)
    for name, x in (("Z", z), ("T", t)):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Input '{name}' must be square.")
    if t.ndim > 2 and t.numel() == 0:
        raise PerMatrix  # (SciPy's loop's shape)
    if t.shape[-1] != z.shape[-1]:
        raise ValueError(f"Input array shapes must match: Z: {tuple(z.shape)} vs. T: "
                         f"{tuple(t.shape)}")
    dtype = torch.promote_types(torch.promote_types(t.dtype, z.dtype), torch.complex64)
    return kernel("linalg.rsf2csf", device)(t, z, dtype)


# ----------------------------------------------------------------------------------------
# kernels: SciPy on zero-copy views on the CPU, the Francis QR elsewhere

register("linalg.hessenberg", "cpu")(_on_views(_sl.hessenberg))
register("linalg.schur", "cpu")(_on_views(_sl.schur))


@register("linalg.rsf2csf", "cpu")
def _rsf2csf_cpu(t, z, dtype):
    from trnscipy.linalg._kernels import _tensor, _view

    return _tensor(_sl.rsf2csf(_view(t), _view(z), check_finite=False))


@register("linalg.hessenberg", "generic")
def _hessenberg(a, calc_q=False):
    if a.is_complex():
        return _on_host("scipy.linalg.hessenberg", "complex Hessenberg reduction is not on "
                        "the device", lambda t: _sl.hessenberg(t.numpy(), calc_q=calc_q,
                                                               check_finite=False), a)
    h, q = _francis.gehrd(a, calc_q)
    h = h.triu(-1)
    return (h, q) if calc_q else h


def real_schur(a):
    """(T, Z) real Schur form of real ``a`` on its device; LinAlgError as SciPy."""
    h, q = _francis.gehrd(a)
    t, z, done = _francis.hseqr(h, q)
    if not done:
        raise LinAlgError("Schur form not found. Possibly ill-conditioned.")
    return t, z


def _complex(re, im, dtype):
    # torch.complex has no XLA lowering (aten::complex runs on the host there), and a
    # view_as_complex result failed to transfer to the host in a later graph (torch-xla 2.9:
    # "Executable expected parameter 0 of size 128 but got buffer with incompatible size 64")
    return re.to(dtype) + 1j * im.to(dtype)


@register("linalg.schur", "generic")
def _schur(a, output="real", sort=None):
    if a.ndim > 2 and a.is_complex():
        raise PerMatrix  # (each matrix decides alone, as its single call)
    if a.is_complex() and not (output in ("complex", "c") and _real_valued(a)) \
            or sort is not None:
        reason = ("sorting the Schur form is not on the device" if sort is not None else
                  "the complex Schur form of a complex matrix is not on the device")
        return _on_host("scipy.linalg.schur", reason, lambda t: tuple(
            torch.from_numpy(np.asarray(x)) for x in _sl.schur(
                t.numpy(), output=output, sort=sort, check_finite=False)), a)
    if output in ("complex", "c"):  # a real matrix (or one promoted to complex)
        t, z = real_schur(a.real.contiguous() if a.is_complex() else a)
        tr, ti, zr, zi = _francis.rsf2csf(t, z)
        dtype = a.dtype if a.is_complex() else _complex_dtype(a.dtype)
        return _complex(tr, ti, dtype), _complex(zr, zi, dtype)
    return real_schur(a)


def _real_valued(a):
    """True when complex ``a`` was a real matrix promoted for output='complex'."""
    from trnscipy.linalg._kernels import _k

    zero = (a.imag == 0).all()
    return bool(_k("linalg._fetch", zero)(zero))


@register("linalg.rsf2csf", "generic")
def _rsf2csf(t, z, dtype):
    if t.ndim > 2 and (t.is_complex() or z.is_complex()):
        raise PerMatrix  # (each matrix to the host as its single call)
    if t.is_complex() or z.is_complex():
        return _on_host("scipy.linalg.rsf2csf", "complex input is not on the device",
                        lambda x, y: tuple(torch.from_numpy(r) for r in _sl.rsf2csf(
                            x.numpy(), y.numpy(), check_finite=False)), t, z)
    tr, ti, zr, zi = _francis.rsf2csf(t.to(dtype.to_real()), z.to(dtype.to_real()))
    return _complex(tr, ti, dtype), _complex(zr, zi, dtype)


# ----------------------------------------------------------------------------------------
# eig / eigvals on XLA: real Schur form, eigenvalues from its blocks, eigenvectors by back
# substitution on the complex triangular form (trnscipy/linalg/_francis.py)


@register("linalg.eig", "xla")
def _eig_xla(a, b=None, left=False, right=True, homogeneous_eigvals=False):
    if b is not None and not (left or a.is_complex() or b.is_complex()):
        return _gen_eig(a, b, right, homogeneous_eigvals)
    if a.ndim > 2 and (b is not None or homogeneous_eigvals or a.is_complex()):
        raise PerMatrix  # (each matrix to the host as its single call)
    if b is not None or homogeneous_eigvals or a.is_complex():
        generic = kernel("linalg.eig", torch.device("cpu"))
        reason = ("generalized and homogeneous eigenproblems and complex input are not on "
                  "the device")
        return _on_host("scipy.linalg.eig", reason, lambda *t: generic(
            t[0], t[1] if b is not None else None, left=left, right=right,
            homogeneous_eigvals=homogeneous_eigvals), *((a, b) if b is not None else (a,)))
    cdtype = _complex_dtype(a.dtype)
    t, z = real_schur(a)
    wr, wi, vl, vr = _francis.eig_from_schur(t, z, left=left, right=right)
    w = _complex(wr, wi, cdtype)
    if not (left or right):
        return w
    real = not bool(kernel("linalg._fetch", a.device)((wi != 0).any().reshape(1))[0])
    out = [w]
    for v in (vl, vr) if left and right else ((vl,) if left else (vr,)):
        re, im = v
        # real eigenvalues: real vectors (their imaginary parts are rounding)
        im = torch.where(wi.unsqueeze(-2) == 0, torch.zeros_like(im), im)
        out.append(re.contiguous() if real else _complex(re, im, cdtype))
    return tuple(out)



def _gen_eig(a, b, right, homogeneous=False):
    """The generalized eigenvalues alpha / beta of a real pencil from its QZ form (SciPy's
    values where beta = 0: inf, or nan where alpha = 0 too; order: the form's diagonal;
    ``homogeneous``: (alpha, beta) stacked, beta the form's diagonal of B), and the right
    eigenvectors (unit 2-norm) where asked."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.device.type == "xla":  # (a batch rounds as its single calls: as_stack)
        return as_stack(lambda x, y: _gen_eig_stack(x, y, right, homogeneous), a, b,
                        at_least=_XLA_BATCH_SWITCH)
    return _gen_eig_stack(a, b, right, homogeneous)


def _gen_eig_stack(a, b, right, homogeneous):
    dtype = a.dtype
    stack, n = a.shape[:-2], a.shape[-1]
    # always a stack: a matrix alone computes as in a stack, to the bit (SciPy's loop)
    s, p, q, z = real_qz(a.reshape(-1, n, n), b.reshape(-1, n, n))
    ar, ai, beta = _qz.eigvals_from_qz(s, p)
    inf = beta == 0
    safe = torch.where(inf, torch.ones_like(beta), beta)
    rec = 1 / safe  # (times the reciprocal: NumPy's complex / real, to the bit)
    zero = inf & (ar == 0) & (ai == 0)
    nan = torch.full_like(ar, float("nan"))
    wr = torch.where(zero, nan, torch.where(inf, torch.full_like(ar, float("inf")), ar * rec))
    # SciPy: complex(nan, nan) where some eigenvalue is complex, else nan + 0j
    cplx = (ai != 0).any(-1, keepdim=True)
    wi = torch.where(zero & cplx, nan, torch.where(inf, torch.zeros_like(ai), ai * rec))
    w = _complex(wr, wi, _complex_dtype(dtype))
    if homogeneous:
        w = _complex(torch.stack([ar, beta], -2), torch.stack([ai, torch.zeros_like(ai)], -2),
                     _complex_dtype(dtype))
    w = w.reshape(*stack, *w.shape[1:])
    if not right:
        return w
    vr, vi = _qz.eigvecs(s, p, q, z)
    # SciPy: real vectors where every eigenvalue is real (their imaginary parts: rounding)
    real = not bool(kernel("linalg._fetch", a.device)((wi != 0).any().reshape(1))[0])
    v = vr.contiguous() if real else _complex(vr, torch.where(
        ai.unsqueeze(-2) == 0, torch.zeros_like(vi), vi), _complex_dtype(dtype))
    return w, v.reshape(*stack, n, n)


@register("linalg._eig_pairs", "generic")
def _eig_pairs(a):
    """(wr, wi, vr_re, vr_im) of a small square matrix (the eigs restart's eigenproblem)."""
    w, v = torch.linalg.eig(a)
    return w.real, w.imag, v.real, v.imag


@register("linalg._eig_pairs", "xla")
def _eig_pairs_xla(a):
    """As the generic kernel, by the Francis QR, in real arithmetic throughout (complex
    ``a``: the generic kernel on the host, announced)."""
    if a.is_complex():
        return _on_host("scipy.sparse.linalg.eigs", "the complex eigenproblem is not on the "
                        "device", _eig_pairs, a)
    t, z = real_schur(a)
    wr, wi, _, (vr, vi) = _francis.eig_from_schur(t, z)
    return wr, wi, vr, vi


# ----------------------------------------------------------------------------------------
# cdf2rdf: complex eigenpairs to the real block-diagonal form


def cdf2rdf_pairs(mask):
    """SciPy's pairing of the complex eigenvalues (``mask``: which are, read from the
    device): consecutive ones, not interleaved, as NumPy (stack, j, k) indices; a ValueError
    as SciPy's for an odd count."""
    mask = np.asarray(mask, dtype=bool)
    if not (mask.sum(axis=-1) % 2 == 0).all():
        raise ValueError("expected complex-conjugate pairs of eigenvalues")
    *stack, elem = np.nonzero(mask)
    return tuple(i[0::2] for i in stack), elem[0::2], elem[1::2]


@register("linalg.cdf2rdf", "generic")
def _cdf2rdf(w, v):
    """The blocks by scatters; ``vr`` = Re(v u) in complex128, u = SciPy's change of basis."""
    device = w.device
    imag = w.imag if w.is_complex() else torch.zeros_like(w)
    at, j, k = cdf2rdf_pairs(kernel("linalg._fetch", device)(imag != 0))
    at = tuple(torch.as_tensor(i, device=device) for i in at)
    j, k = torch.as_tensor(j, device=device), torch.as_tensor(k, device=device)
    real = w.real if w.is_complex() else w
    n = w.shape[-1]
    eye = torch.eye(n, dtype=real.dtype, device=device)
    wr = torch.diag_embed(real).clone()
    wr[at + (j, k)] = imag[at + (j,)]
    wr[at + (k, j)] = imag[at + (k,)]
    u = (eye.to(torch.complex128) * torch.ones(w.shape[:-1] + (1, 1), dtype=torch.complex128,
                                                device=device))
    u[at + (j, j)] = 0.5j
    u[at + (j, k)] = 0.5
    u[at + (k, j)] = -0.5j
    u[at + (k, k)] = 0.5
    return wr, (v.to(torch.complex128) @ u).real
