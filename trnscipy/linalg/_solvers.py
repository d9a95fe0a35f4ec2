"""solve_sylvester on device tensors: Bartels-Stewart on complex Schur forms from
trnscipy.linalg.schur (the host's SciPy, announced, where the device has no schur of its
own), the triangular Sylvester equation solved on the device column by column."""

import scipy.linalg as _sl

from trnscipy._dispatch import dispatch
from trnscipy._kernels import kernel
from trnscipy._torch import torch
from trnscipy.linalg import _kernels_struct  # noqa: F401  (registers kernels)
from trnscipy.linalg._validate import as_square, as_tensor, common_dtype, device_of

__all__ = ["solve_sylvester", "solve_continuous_lyapunov", "solve_lyapunov",
           "solve_discrete_lyapunov"]


@dispatch(_sl.solve_sylvester)
def solve_sylvester(a, b, q):
    device = device_of(a, b, q)
    a, b = as_square(a, device, True), as_square(b, device, True, name="b")
    q = as_tensor(q, device, True)
    if q.ndim != 2 or q.shape != (a.shape[0], b.shape[0]):
        raise ValueError(f"q must have shape ({a.shape[0]}, {b.shape[0]}), got "
                         f"{tuple(q.shape)}")
    dtype = common_dtype(a, b, q)
    return kernel("linalg.solve_sylvester", device)(a.to(dtype), b.to(dtype), q.to(dtype))


@dispatch(_sl.solve_continuous_lyapunov)
def solve_continuous_lyapunov(a, q):
    """A X + X A^H = Q through trnscipy's solve_sylvester."""
    device = device_of(a, q)
    a = as_square(a, device, True)
    return solve_sylvester(a, a.mH, as_tensor(q, device, True))


solve_lyapunov = solve_continuous_lyapunov


@dispatch(_sl.solve_discrete_lyapunov)
def solve_discrete_lyapunov(a, q, method=None):
    """SciPy's two methods: 'direct' (the Kronecker system, n < 10 by default) through
    trnscipy's solve, 'bilinear' through the continuous equation."""
    from trnscipy.linalg._basic import inv, solve

    device = device_of(a, q)
    a, q = as_square(a, device, True), as_tensor(q, device, True)
    dtype = torch.promote_types(common_dtype(a, q), torch.float64)  # SciPy's np.eye
    method = method or ("direct" if a.shape[0] < 10 else "bilinear")
    if method == "direct":  # (the Kronecker product in a's precision, as SciPy)
        lhs = torch.eye(a.shape[0] ** 2, dtype=dtype, device=device) - torch.kron(a, a.conj())
        return solve(lhs, q.to(dtype).flatten()).reshape(q.shape)
    a, q = a.to(dtype), q.to(dtype)
    if method == "bilinear":
        eye = torch.eye(a.shape[0], dtype=dtype, device=device)
        ah_inv = inv(a.mH + eye)
        b = (a.mH - eye) @ ah_inv
        c = 2 * (inv(a + eye) @ q) @ ah_inv
        return solve_continuous_lyapunov(b.mH, -c)
    raise ValueError(f"Unknown solver {method}")
