"""solve_sylvester, the Lyapunov and Riccati solvers on device tensors.

solve_sylvester is Bartels-Stewart (linalg/_kernels_struct.py): real Schur forms and real
arithmetic for real input (on a Neuron device too: float32, and float64 by double-float
refinement, linalg/_refine_funcs.py), complex Schur forms for complex input (the host's
SciPy, announced, on a device without complex arithmetic).  The Lyapunov solvers compose
it (and solve/inv); the Riccati solvers are iterations on inv/solve and Newton steps on
it (float64 on a Neuron device: Newton steps on a double-float residual).
"""

import numpy as np
import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._dtypes import abs_max, absolute
from trnscipy._kernels import kernel, register
from trnscipy._torch import torch
from trnscipy.linalg._kernels import _on_views
from trnscipy.linalg._kernels_struct import _cabs
from trnscipy.linalg._validate import (
    LinAlgError,
    as_square,
    as_tensor,
    check_finite,
    common_dtype,
    device_of,
)

__all__ = ["solve_sylvester", "solve_continuous_lyapunov", "solve_lyapunov",
           "solve_discrete_lyapunov", "solve_continuous_are", "solve_discrete_are"]



@dispatch(_sl.solve_sylvester, stacks=True, double_float=("neuron",))
def solve_sylvester(a, b, q):
    """Stacks (SciPy's broadcast batch) in one batched Bartels-Stewart (real input; complex
    and Neuron's double-float method: PerMatrix, from their kernels)."""
    device = device_of(a, b, q)
    a, b = as_square(a, device, True), as_square(b, device, True, name="b")
    q = as_tensor(q, device, True)
    n, m = a.shape[-1], b.shape[-1]
    if q.ndim < 2 or q.shape[-2:] != (n, m):
        raise ValueError(f"q must have shape ({n}, {m}), got {tuple(q.shape[-2:])}")
    dtype = common_dtype(a, b, q)
    if a.numel() == 0 or b.numel() == 0:  # SciPy's empty result
        return torch.empty(q.shape, dtype=dtype, device=device)
    return kernel("linalg.solve_sylvester", device)(a.to(dtype), b.to(dtype), q.to(dtype))


@dispatch(_sl.solve_continuous_lyapunov, stacks=True, double_float=("neuron",))
def solve_continuous_lyapunov(a, q):
    """A X + X A^H = Q through trnscipy's solve_sylvester (stacks too)."""
    device = device_of(a, q)
    a = as_square(a, device, True)
    return solve_sylvester(a, a.mH, as_tensor(q, device, True))


solve_lyapunov = solve_continuous_lyapunov


@dispatch(_sl.solve_discrete_lyapunov, double=True, stacks=True, double_float=("neuron",))
def solve_discrete_lyapunov(a, q, method=None):
    """Stacks (the dispatcher's broadcast batch): 'direct' as one batched Kronecker solve,
    'bilinear' through the batched solve_continuous_lyapunov."""
    device = device_of(a, q)
    a, q = as_square(a, device, True), as_tensor(q, device, True)
    dtype = torch.promote_types(common_dtype(a, q), torch.float64)  # SciPy's np.eye
    method = method or ("direct" if a.shape[-1] < 10 else "bilinear")
    if method not in ("direct", "bilinear"):
        raise ValueError(f"Unknown solver {method}")
    return kernel("linalg.solve_discrete_lyapunov", device)(a, q, dtype, method)


def kron_stack(a, b):
    """kron(a, b) of each pair of matrices of two stacks (..., m, n), (..., p, q): the
    products data movement places (torch.kron does not batch)."""
    (m, n), (p, r) = a.shape[-2:], b.shape[-2:]
    return (a[..., :, None, :, None] * b[..., None, :, None, :]).reshape(
        *a.shape[:-2], m * p, n * r)


@register("linalg.solve_discrete_lyapunov", "generic")
def _discrete_lyapunov(a, q, dtype, method):
    """SciPy's two methods: 'direct' (the Kronecker system, n < 10 by default) through
    trnscipy's solve, 'bilinear' through the continuous equation."""
    from trnscipy.linalg._basic import inv, solve

    device = a.device
    if method == "direct":  # (the Kronecker product in a's precision, as SciPy)
        lhs = torch.eye(a.shape[-1] ** 2, dtype=dtype, device=device) - kron_stack(a, a.conj())
        return solve(lhs, q.to(dtype).flatten(-2)[..., None])[..., 0].reshape(q.shape)
    a, q = a.to(dtype), q.to(dtype)
    eye = torch.eye(a.shape[-1], dtype=dtype, device=device)
    ah_inv = inv(a.mH + eye)
    b = (a.mH - eye) @ ah_inv
    c = 2 * (inv(a + eye) @ q) @ ah_inv
    return solve_continuous_lyapunov(b.mH, -c)


def _at_least_2d(x, device):
    t = as_tensor(x, device, False)  # (the caller checks all operands in one host read)
    return t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t


# SciPy batches the Riccati solvers' six matrices (its inner function's declaration)
_ARE = tuple((name, 2) for name in ("a", "b", "q", "r", "e", "s"))


def _norm1(x):
    """The 1-norm of x, or of each matrix of a stack (..., m, n)."""
    from trnscipy.linalg import norm

    return norm(x, 1, axis=(-2, -1), check_finite=False)


def _are_args(a, b, q, r, e, s, eq_type):
    """SciPy's _are_validate_args on device tensors (its checks, types and messages; the
    symmetry and singularity tests read a few norms on the host at once).  Stacks (the
    dispatcher's broadcast batch): SciPy's error for any matrix that fails."""
    from trnscipy.linalg import svdvals

    device = device_of(a, b, q, r, e, s)
    a, b, q, r = (_at_least_2d(x, device) for x in (a, b, q, r))
    check_finite(a, b, q, r)
    for name, mat in zip("aqr", (a, q, r), strict=True):
        if mat.shape[-2] != mat.shape[-1]:
            raise ValueError(f"Matrix {name} should be square.")
    m, n = b.shape[-2:]
    if m != a.shape[-2]:
        raise ValueError("Matrix a and b should have the same number of rows.")
    if m != q.shape[-2]:
        raise ValueError("Matrix a and q should have the same shape.")
    if n != r.shape[-2]:
        raise ValueError("Matrix b and r should have the same number of cols.")
    asym = kernel("linalg._are_asymmetry", device)
    checks = [asym(q), _norm1(q), asym(r), _norm1(r)]
    if eq_type == "care":
        checks.append(kernel("linalg._are_min_sv", device)(r))
    if e is not None:
        e = _at_least_2d(e, device)
        if e.shape[-2] != e.shape[-1]:
            raise ValueError("Matrix e should be square.")
        if m != e.shape[-2]:
            raise ValueError("Matrix a and e should have the same shape.")
        checks += [svdvals(e, check_finite=False)[..., -1], _norm1(e)]
    if s is not None:
        s = _at_least_2d(s, device)
        if s.shape[-2:] != b.shape[-2:]:
            raise ValueError("Matrix b and s should have the same shape.")
    check_finite(e, s)
    batch = torch.broadcast_shapes(*(c.shape for c in checks))  # (e may have none)
    values = np.asarray(_fetch(torch.stack([c.to(torch.float64).expand(batch).reshape(-1)
                                            for c in checks])), dtype=np.float64)
    for name, (asym, size) in zip("qr", (values[0:2], values[2:4]), strict=True):
        if (asym > np.spacing(size) * 100).any():
            raise ValueError(f"Matrix {name} should be symmetric/hermitian.")
    rest = values[4:]
    if eq_type == "care":
        min_sv, rest = rest[0], rest[1:]
        if ((min_sv == 0.0) | (min_sv < np.spacing(1.0) * values[3])).any():
            raise ValueError("Matrix r is numerically singular.")
    if e is not None and ((rest[0] == 0.0) | (rest[0] < np.spacing(1.0) * rest[1])).any():
        raise ValueError("Matrix e is numerically singular.")
    ops = [x for x in (a, b, q, r, e, s) if x is not None]
    dtype = torch.complex128 if any(x.is_complex() for x in ops) else torch.float64
    return tuple(None if x is None else x.to(dtype) for x in (a, b, q, r, e, s))


@register("linalg._are_asymmetry", "generic")
def _asymmetry(x):
    """||X - X^H||_1 (SciPy's symmetry test), of each matrix of a stack."""
    return _norm1(x - x.mH)


@register("linalg._are_min_sv", "generic")
def _min_sv(r):
    """The smallest singular value of R (SciPy's singularity test of R)."""
    from trnscipy.linalg import svdvals

    return svdvals(r, check_finite=False)[..., -1]


def _standard_form(a, b, q, r, e, s):
    """The equivalent equation without e and s: A E^-1, E^-H S, E^-H Q E^-1, then the
    cross term folded in: A - B R^-1 S^H, Q - S R^-1 S^H; and G = B R^-1 B^H."""
    from trnscipy.linalg import solve

    if e is not None:
        a = solve(e.mT, a.mT, check_finite=False).mT  # A E^-1
        q = solve(e.mH, solve(e.mH, q, check_finite=False).mH, check_finite=False).mH
        s = None if s is None else solve(e.mH, s, check_finite=False)
    rinv_bh = solve(r, b.mH, check_finite=False)
    g = b @ rinv_bh
    if s is not None:
        rinv_sh = solve(r, s.mH, check_finite=False)
        a = a - b @ rinv_sh
        q = q - s @ rinv_sh
    return a, 0.5 * (g + g.mH), 0.5 * (q + q.mH)


def _fetch(t):
    from trnscipy._kernels import kernel

    return kernel("linalg._fetch", t.device)(t)


def _failed():
    return LinAlgError("Failed to find a finite solution.")


@dispatch(_sl.solve_continuous_are, batch=_ARE, stacks=True, double_float=("neuron",))
def solve_continuous_are(a, b, q, r, e=None, s=None, balanced=True):
    """Stacks: the sign iteration (Neuron's float64: the Newton steps) for the whole
    stack, each matrix its own stop."""
    args = _are_args(a, b, q, r, e, s, "care")
    return kernel("linalg.solve_continuous_are", args[0].device)(*args, balanced=balanced)


@dispatch(_sl.solve_discrete_are, batch=_ARE, stacks=True, double_float=("neuron",))
def solve_discrete_are(a, b, q, r, e=None, s=None, balanced=True):
    """Stacks: the doubling (Neuron's float64: then the Newton steps) for the whole stack,
    each matrix its own stop (a converged one doubles on unchanged)."""
    args = _are_args(a, b, q, r, e, s, "dare")
    return kernel("linalg.solve_discrete_are", args[0].device)(*args, balanced=balanced)


for _name in ("solve_continuous_are", "solve_discrete_are"):
    register(f"linalg.{_name}", "cpu")(_on_views(getattr(_sl, _name), finite_kw=False))


@register("linalg.solve_continuous_are", "generic")
def _care(a, b, q, r, e=None, s=None, balanced=True):
    """The matrix sign function of the Hamiltonian [[A, -G], [-Q, -A^H]] by the Newton
    iteration with determinant scaling (trnscipy's inv and slogdet; one host read per
    iteration), X from its stable invariant subspace (normal equations), then two
    Newton-Kleinman steps (trnscipy's solve_continuous_lyapunov) to SciPy's accuracy.
    SciPy's ordered QZ is not used; ``balanced`` is accepted and has no effect."""
    return care_standard(*_standard_form(a, b, q, r, e, s))


@register("linalg._care_standard", "generic")
def care_standard(a, g, q, kleinman=2):
    """X of A^H X + X A - X G X + Q = 0 (``_care``'s method, ``kleinman`` Newton-Kleinman
    steps); stacks: the Newton iteration for the whole stack until each matrix meets its
    stop (a converged sign iterates on unchanged), SciPy's error if any matrix fails."""
    from trnscipy.linalg import solve

    n = a.shape[-1]
    batch = torch.broadcast_shapes(a.shape, g.shape, q.shape)  # (a core-only operand too)
    a, g, q = (m.expand(batch) for m in (a, g, q))
    ham = torch.cat([torch.cat([a, -g], -1), torch.cat([-q, -a.mH], -1)], -2)
    z = ham
    real = z.real.dtype if z.is_complex() else z.dtype
    tol = 100 * n * torch.finfo(real).eps
    invert = kernel("linalg._inv", z.device)  # (its singular flag joins the step's host read)
    for _ in range(100):
        _, logdet = torch.linalg.slogdet(z)
        c = torch.exp(logdet / (2 * n))[..., None, None]
        zinv, info = invert(z)
        z_new = 0.5 * (z / c + c * zinv)
        change = torch.stack([abs_max(absolute(z_new - z).sum(-2), -1),
                              abs_max(absolute(z_new).sum(-2), -1), (info != 0).to(real)])
        z = z_new
        if _converged(change, tol):
            break
    else:
        raise _failed()
    eye = torch.eye(n, dtype=z.dtype, device=z.device)
    lhs = torch.cat([z[..., :n, n:], z[..., n:, n:] + eye], -2)
    rhs = -torch.cat([z[..., :n, :n] + eye, z[..., n:, :n]], -2)
    # least squares by the normal equations (consistent system; the Newton-Kleinman steps
    # below restore full accuracy)
    x = solve(lhs.mH @ lhs, lhs.mH @ rhs, check_finite=False)
    # SciPy's test that the stable subspace is Lagrangian: X = U21 U11^-1 then symmetric
    # (an infeasible equation, R indefinite, has no symmetric X: SciPy's LinAlgError)
    asym, size = (abs_max(_cabs(m).sum(-2), -1) for m in (x - x.mH, x))
    x = 0.5 * (x + x.mH)
    for _ in range(kleinman):  # Newton-Kleinman: (A - G X)^H X+ + X+ (A - G X) = -(Q + X G X)
        closed = a - g @ x
        x = solve_continuous_lyapunov(closed.mH, -(q + x @ g @ x))
        x = 0.5 * (x + x.mH)
    finite = torch.isfinite(torch.view_as_real(x) if x.is_complex() else x).all()
    flags = torch.cat([finite.to(real).reshape(1), asym.reshape(-1), size.reshape(-1)])
    flags = np.asarray(_fetch(flags), dtype=np.float64)
    asym, size = flags[1:].reshape(2, -1)
    if not flags[0]:
        raise _failed()
    if not (asym <= np.maximum(np.spacing(1000.0), 0.1 * size)).all():
        raise LinAlgError("The associated Hamiltonian pencil has eigenvalues too close to "
                          "the imaginary axis")
    return x


def _converged(change, tol):
    """One host read of [step size, iterate size] (1-norms; per matrix of a stack), and a
    singular flag where given: True below ``tol`` relative (every matrix); a singular
    iterate or a non-finite step is SciPy's LinAlgError (an eigenvalue on the imaginary
    axis)."""
    delta, size, *singular = np.asarray(_fetch(change), dtype=np.float64)
    if not np.isfinite(delta).all() or any(np.any(f != 0) for f in singular):
        raise _failed()
    return bool((delta <= tol * size).all())


@register("linalg.solve_discrete_are", "generic")
def _dare(a, b, q, r, e=None, s=None, balanced=True):
    """The structure-preserving doubling algorithm (SDA: X = A^H X (I + G X)^-1 A + Q
    by A <- A W^-1 A, G <- G + A W^-1 G A^H, Q <- Q + A^H Q W^-1 A, W = I + G Q; one
    trnscipy solve and one host read per doubling), then one Newton (Hewer) step
    through trnscipy's solve_discrete_lyapunov.  Needs R invertible (SciPy's QZ route
    does not).  ``balanced`` is accepted and has no effect."""
    return dare_standard(*_standard_form(a, b, q, r, e, s), b, r)


def dare_standard(a0, g0, q0, b, r):
    """X of the standard-form DARE (``_dare``'s method; b and r for the Hewer step)."""
    from trnscipy.linalg import solve

    x = dare_doubling(a0, g0, q0)
    # one Newton (Hewer) step on the standard form: K = (R + B^H X B)^-1 B^H X A0,
    # X+ = A_K^H X+ A_K + Q0 + K^H R K with A_K = A0 - B K (cross term folded into A0, Q0)
    k = solve(r + b.mH @ x @ b, b.mH @ x @ a0, check_finite=False)
    closed = a0 - b @ k
    x = solve_discrete_lyapunov(closed.mH, q0 + k.mH @ r @ k)
    x = 0.5 * (x + x.mH)
    if not bool(_fetch(torch.isfinite(torch.view_as_real(x) if x.is_complex() else x).all())):
        raise _failed()
    return x


@register("linalg._dare_doubling", "generic")
def dare_doubling(a0, g0, q0):
    """The SDA's X of the standard-form DARE (in the operands' precision)."""
    from trnscipy.linalg import solve

    n = a0.shape[-1]
    eye = torch.eye(n, dtype=a0.dtype, device=a0.device)
    ak, gk, hk = a0, g0, q0
    real = a0.real.dtype if a0.is_complex() else a0.dtype
    tol = 10 * n * torch.finfo(real).eps
    for _ in range(60):
        w = solve(eye + gk @ hk, torch.cat([ak, gk], -1), check_finite=False)
        wa, wg = w[..., :n], w[..., n:]
        h_new = hk + ak.mH @ hk @ wa
        gk = gk + ak @ wg @ ak.mH
        ak = ak @ wa
        change = torch.stack([abs_max(absolute(h_new - hk).sum(-2), -1),
                              abs_max(absolute(h_new).sum(-2), -1)])
        hk = 0.5 * (h_new + h_new.mH)
        gk = 0.5 * (gk + gk.mH)
        if _converged(change, tol):
            break
    else:
        raise _failed()
    return hk
