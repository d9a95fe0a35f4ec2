"""LinearOperator and aslinearoperator that also act on device data.

``trnscipy.sparse.linalg.LinearOperator`` is a subclass of SciPy's: NumPy
operands take SciPy's own code paths, torch tensors stay on their device.
Operators built from torch tensors or trnscipy sparse objects carry that
``device`` (the routing rule then moves host right-hand sides there).
What differs from SciPy: with ``dtype=None`` and a matvec that rejects a
NumPy vector, the dtype is inferred from a torch zero vector on the CPU
instead (and stays None if that fails too: the solvers then use A @ b); the
declared dtype of a scaled operator is SciPy's, the computed one is torch's
promotion (a float32 tensor times a Python float stays float32).
"""

import numpy as np
from array_api_compat import is_torch_array
from scipy.sparse import issparse
from scipy.sparse.linalg import _interface as _si

from trnscipy._capabilities import runs_on_device
from trnscipy._device import device_kind
from trnscipy._dispatch import offloading
from trnscipy._errors import fallback
from trnscipy._kernels import backend
from trnscipy._torch import torch
from trnscipy._transfer import _to_device, held, to_device, to_host

__all__ = ["LinearOperator", "aslinearoperator"]


def _is_device_object(x):
    return getattr(x, "_trnscipy_device_object", False) and not isinstance(x, _si.LinearOperator)


def _on_device(x):
    return is_torch_array(x) or _is_device_object(x)


def _conj(x):
    if is_torch_array(x):
        # resolve_conj, not conj_physical: torch-xla 2.9's conj_physical drops imaginary parts
        return x.conj().resolve_conj() if x.is_complex() else x
    return np.conj(x)


def _scalar(alpha):
    """A NumPy scalar as a Python number (NumPy scalars do not multiply tensors cleanly)."""
    return alpha.item() if isinstance(alpha, np.generic) else alpha


def _dense(x):
    """A device sparse result as a dense tensor (operators on tensors return tensors)."""
    return x.toarray() if _is_device_object(x) else x


class LinearOperator(_si.LinearOperator):
    """SciPy's LinearOperator, device-aware: tensors in, tensors out on their device."""

    _trnscipy_device_object = True

    def __new__(cls, *args, **kwargs):
        if cls is LinearOperator:
            return object.__new__(_CustomLinearOperator)
        return _si.LinearOperator.__new__(cls)

    @property
    def device(self):
        """The torch.device of the wrapped data, or None (host or device-agnostic callables)."""
        found = self.__dict__.get("_device")
        if found is not None:
            return found
        for arg in getattr(self, "args", ()):
            if isinstance(arg, LinearOperator):
                found = arg.device
            elif _on_device(arg):
                found = arg.device
            if found is not None:
                return found
        return None

    def to(self, device):
        """This operator with its wrapped device data moved to ``device``."""
        return _OperatorOnDevice(self, device)

    def to_scipy(self):
        """A SciPy LinearOperator computing on the host through this one's device."""
        device = self.device
        if device is None:
            return self
        return _si.LinearOperator(self.shape, dtype=self.dtype,
                                  matvec=_host_bridge(self.matvec, device),
                                  rmatvec=_host_bridge(self.rmatvec, device),
                                  matmat=_host_bridge(self.matmat, device),
                                  rmatmat=_host_bridge(self.rmatmat, device))

    def _init_dtype(self):
        if self.dtype is not None:
            return
        try:
            super()._init_dtype()
            return
        except Exception:  # a torch-only matvec: probe with torch zeros below
            pass
        device = self.device or torch.device("cpu")
        for dt in (torch.float32, torch.float64, torch.complex64, torch.complex128):
            try:
                y = self.matvec(torch.zeros(self.shape[-1], dtype=dt, device=device))
            except (RuntimeError, TypeError):
                continue
            from trnscipy._dtypes import to_numpy_dtype

            self.dtype = to_numpy_dtype(y.dtype)
            return
        # a matvec bound to data on another device: dtype stays None (solvers use A @ b)

    # -- products ---------------------------------------------------------------------------

    def _apply(self, x, n_in, n_out, one):
        if x.shape != (n_in,) and x.shape != (n_in, 1):
            raise ValueError("dimension mismatch")
        y = _dense(one(x))
        if not is_torch_array(y):
            y = torch.as_tensor(np.asarray(y), device=x.device)
        if x.ndim == 1:
            return y.reshape(n_out)
        return y.reshape(n_out, 1)

    def matvec(self, x):
        if not _on_device(x):
            return super().matvec(x)
        M, N = self.shape
        return self._apply(x, N, M, self._matvec)

    def rmatvec(self, x):
        if not _on_device(x):
            return super().rmatvec(x)
        M, N = self.shape
        return self._apply(x, M, N, self._rmatvec)

    def _check_2d(self, X, n):
        if X.ndim != 2:
            raise ValueError(f"expected 2-d ndarray or matrix, not {X.ndim}-d")
        if X.shape[0] != n:
            raise ValueError(f"dimension mismatch: {self.shape}, {X.shape}")

    def matmat(self, X):
        if not _on_device(X):
            return super().matmat(X)
        self._check_2d(X, self.shape[1])
        if type(self)._matmat is _si.LinearOperator._matmat:
            return torch.cat([self.matvec(X[:, j:j + 1]) for j in range(X.shape[1])], dim=1)
        return _dense(self._matmat(X))

    def rmatmat(self, X):
        if not _on_device(X):
            return super().rmatmat(X)
        self._check_2d(X, self.shape[0])
        if type(self)._rmatmat is _si.LinearOperator._rmatmat:
            if type(self)._adjoint is _si.LinearOperator._adjoint:
                return torch.cat([self.rmatvec(X[:, j:j + 1]) for j in range(X.shape[1])],
                                 dim=1)
            return self.H.matmat(X)
        return _dense(self._rmatmat(X))

    # -- algebra: composites are trnscipy's ---------------------------------------------------

    def dot(self, x):
        if isinstance(x, _si.LinearOperator):
            return _ProductLinearOperator(self, aslinearoperator(x))
        if np.isscalar(x):
            return _ScaledLinearOperator(self, x)
        if not _on_device(x):
            return super().dot(x)
        if x.ndim == 1 or x.ndim == 2 and x.shape[1] == 1:
            return self.matvec(x)
        if x.ndim == 2:
            return self.matmat(x)
        raise ValueError(f"expected 1-d or 2-d array or matrix, got {x!r}")

    def __rmul__(self, x):
        if np.isscalar(x):
            return _ScaledLinearOperator(self, x)
        return self._rdot(x)

    def _rdot(self, x):
        if isinstance(x, _si.LinearOperator):
            return _ProductLinearOperator(aslinearoperator(x), self)
        if np.isscalar(x):
            return _ScaledLinearOperator(self, x)
        if not _on_device(x):
            return super()._rdot(x)
        if x.ndim == 1 or x.ndim == 2 and x.shape[0] == 1:
            return self.T.matvec(x.T).T
        if x.ndim == 2:
            return self.T.matmat(x.T).T
        raise ValueError(f"expected 1-d or 2-d array or matrix, got {x!r}")

    def __truediv__(self, other):
        if not np.isscalar(other):
            raise ValueError("Can only divide a linear operator by a scalar.")
        return _ScaledLinearOperator(self, 1.0 / other)

    def __pow__(self, p):
        if np.isscalar(p):
            return _PowerLinearOperator(self, p)
        return NotImplemented

    def __add__(self, x):
        if isinstance(x, _si.LinearOperator):
            return _SumLinearOperator(self, aslinearoperator(x))
        return NotImplemented

    def __neg__(self):
        return _ScaledLinearOperator(self, -1)

    def adjoint(self):
        if type(self)._adjoint is _si.LinearOperator._adjoint:
            return _AdjointLinearOperator(self)
        return self._adjoint()

    H = property(adjoint)

    def transpose(self):
        if type(self)._transpose is _si.LinearOperator._transpose:
            return _TransposedLinearOperator(self)
        return self._transpose()

    T = property(transpose)


def _host_bridge(fn, device):
    def on_host(x):
        return to_host(fn(to_device(np.asarray(x), device)))

    return on_host


_ROLES = ("matvec", "rmatvec", "matmat", "rmatmat")


class _CustomLinearOperator(LinearOperator):
    """An operator given by user functions (which see tensors when the operands are)."""

    def __init__(self, shape, matvec, rmatvec=None, matmat=None, dtype=None, rmatmat=None):
        super().__init__(dtype, shape)
        self.args = ()
        self._fns = (matvec, rmatvec, matmat, rmatmat)
        self._host_code = False  # set when a function turns out to take NumPy only
        # a bound method of a device object (e.g. SuperLU.solve) computes on its device
        owner = getattr(matvec, "__self__", None)
        if _is_device_object(owner):
            self._device = owner.device
        # functions marked as pure tensor code (a device ILU's solve): the solvers may
        # trace the operator into their device loops
        self.pure_tensor_code = all(getattr(f, "pure_tensor_code", False)
                                    for f in self._fns if f is not None)
        self._init_dtype()

    def _user(self, i, x):
        """The user's function ``i`` at x.  On a device without float64 its float64
        torch arithmetic ran in float32 there: a float64 result it returns is announced
        (Float32StorageWarning; DeviceUnsupportedError under TRNSCIPY_STRICT=1).

        A function that cannot take a device tensor (NumPy code such as ``v / d`` with
        ``d`` a NumPy array: NumPy refuses to read an XLA or CUDA tensor) is host code: it
        is called with NumPy from then on and its result moved back, announced once
        (DeviceFallbackWarning).  The solvers run such an operator between graphs."""
        on_device = is_torch_array(x) and x.device.type != "cpu"
        try:
            y = _bridge(self._fns[i], x) if on_device and self._host_code else self._fns[i](x)
        except TypeError as exc:
            if not on_device or self._host_code or "numpy" not in str(exc).lower():
                raise
            self._host_code = True
            fallback("scipy.sparse.linalg.LinearOperator", "its function does not take "
                     f"{x.device.type} tensors (NumPy code: {exc}); each product copies "
                     "the vector to the host and back", stacklevel=6)
            y = _bridge(self._fns[i], x)
        if not is_torch_array(y):
            return y
        return held(y, f"the {y.dtype} result of a LinearOperator's user function "
                    f"({_ROLES[i]}, computed on {y.device})",
                    advice="Its torch arithmetic ran in float32 there: use float32 data, "
                    "or a matrix (tensor or sparse container) as the operator for "
                    "float64-accurate products")

    def _matvec(self, x):
        return self._user(0, x)

    def _rmatvec(self, x):
        if self._fns[1] is None:
            raise NotImplementedError("rmatvec is not defined")
        return self._user(1, x)

    def _matmat(self, X):
        if self._fns[2] is not None:
            return self._user(2, X)
        if is_torch_array(X):
            return torch.cat([self.matvec(X[:, j:j + 1]) for j in range(X.shape[1])], dim=1)
        return super()._matmat(X)

    def _rmatmat(self, X):
        if self._fns[3] is not None:
            return self._user(3, X)
        if is_torch_array(X):
            return torch.cat([self.rmatvec(X[:, j:j + 1]) for j in range(X.shape[1])], dim=1)
        return super()._rmatmat(X)

    def _adjoint(self):
        matvec, rmatvec, matmat, rmatmat = self._fns
        return _CustomLinearOperator((self.shape[1], self.shape[0]), matvec=rmatvec,
                                     rmatvec=matvec, matmat=rmatmat, rmatmat=matmat,
                                     dtype=self.dtype)


class _AdjointLinearOperator(LinearOperator, _si._AdjointLinearOperator):
    def _adjoint(self):
        return self.A


class _TransposedLinearOperator(LinearOperator, _si._TransposedLinearOperator):
    def _matvec(self, x):
        return _conj(self.A._rmatvec(_conj(x)))

    def _rmatvec(self, x):
        return _conj(self.A._matvec(_conj(x)))

    def _matmat(self, x):
        return _conj(self.A.rmatmat(_conj(x)))

    def _rmatmat(self, x):
        return _conj(self.A.matmat(_conj(x)))

    def _transpose(self):
        return self.A


class _SumLinearOperator(LinearOperator, _si._SumLinearOperator):
    pass


class _ProductLinearOperator(LinearOperator, _si._ProductLinearOperator):
    pass


class _ScaledLinearOperator(LinearOperator, _si._ScaledLinearOperator):
    def _matvec(self, x):
        return _scalar(self.args[1]) * self.args[0].matvec(x)

    def _rmatvec(self, x):
        return _scalar(np.conj(self.args[1])) * self.args[0].rmatvec(x)

    def _matmat(self, x):
        return _scalar(self.args[1]) * self.args[0].matmat(x)

    def _rmatmat(self, x):
        return _scalar(np.conj(self.args[1])) * self.args[0].rmatmat(x)


class _PowerLinearOperator(LinearOperator, _si._PowerLinearOperator):
    def _power(self, fun, x):
        res = x.clone() if is_torch_array(x) else np.array(x, copy=True)
        for _ in range(self.args[1]):
            res = fun(res)
        return res


class MatrixLinearOperator(LinearOperator):
    """A tensor, a trnscipy sparse object or a host matrix as an operator."""

    def __init__(self, A):
        super().__init__(_numpy_dtype(A.dtype), A.shape)
        self.A = A
        self.args = (A,)
        self._adj = None
        self._promoted = None

    def _matmat(self, X):
        if not _on_device(self.A):
            return self.A.dot(X)
        if not is_torch_array(X):  # SciPy's call with host data: computed on A's device
            return to_host(_dense(self._matmat(to_device(np.asarray(X), self.A.device))))
        if is_torch_array(self.A) and not runs_on_device(
                "trnscipy.sparse.linalg.MatrixLinearOperator.matmat", device_kind(X.device),
                _numpy_dtype(torch.promote_types(self.A.dtype, X.dtype))):
            return _to_device(to_host(self.A) @ to_host(X), X.device, strict=True)
        if is_torch_array(self.A) and self.A.dtype != X.dtype:
            # NumPy promotes mixed dtypes in A @ x; torch refuses them
            dt = torch.promote_types(self.A.dtype, X.dtype)
            if self._promoted is None or self._promoted.dtype != dt:
                self._promoted = self.A.to(dt)
            return self._promoted @ X.to(dt)
        return self.A @ X

    def _matvec(self, x):
        return self._matmat(x)

    def _adjoint(self):
        if self._adj is None:
            self._adj = MatrixLinearOperator(_conj(self.A.T) if not _is_device_object(self.A)
                                             else self.A.T.conj())
            self._adj._adj = self
        return self._adj


class IdentityOperator(LinearOperator, _si.IdentityOperator):
    pass


class _OperatorOnDevice(LinearOperator):
    """``op.to(device)``: inputs moved to ``device`` before ``op`` (a copy of the wrapped data
    is made for matrix operators)."""

    def __init__(self, op, device):
        if isinstance(op, MatrixLinearOperator) and _on_device(op.A):
            op = MatrixLinearOperator(op.A.to(device))
        super().__init__(op.dtype, op.shape)
        self.args = (op,)
        self._device = device

    def _matvec(self, x):
        return self.args[0].matvec(x.to(self.args[0].device or x.device)).to(x.device)

    def _rmatvec(self, x):
        return self.args[0].rmatvec(x.to(self.args[0].device or x.device)).to(x.device)

    def _adjoint(self):
        return _OperatorOnDevice(self.args[0].H, self._device)


class _HostOperator(LinearOperator):
    """A SciPy (host) LinearOperator applied to device vectors: each product runs on the host
    and comes back to the vector's device, as the user's operator asks (cast on the host to
    ``dtype`` where given: a float32 inner solve's preconditioner).  A solver given one
    announces it once per solve (``announce_host_operators``), unless ``announced`` (an
    inner solve's: the outer solve announced it)."""

    def __init__(self, op, dtype=None, announced=False):
        super().__init__(op.dtype if dtype is None else np.dtype(dtype), op.shape)
        self.args = ()
        self.host = op
        self._cast = dtype
        self.announced = announced

    def _matvec(self, x):
        return _bridge(self.host.matvec, x, self._cast)

    def _rmatvec(self, x):
        return _bridge(self.host.rmatvec, x, self._cast)

    def _matmat(self, X):
        return _bridge(self.host.matmat, X, self._cast)

    def _rmatmat(self, X):
        return _bridge(self.host.rmatmat, X, self._cast)

    def _adjoint(self):
        return _HostOperator(self.host.H, self._cast, self.announced)


def announce_host_operators(name, *ops, outer=False):
    """One DeviceFallbackWarning (an error under TRNSCIPY_STRICT=1) for a solve whose
    operators include host operators: their products run on the host every iteration.
    ``outer``: the solve around inner solves announces their (``announced``) operators."""
    if any(isinstance(op, _HostOperator) and (outer or not op.announced) for op in ops):
        fallback(name, "a host (SciPy) operator is applied to device vectors: each product "
                 "copies the vector to the host and back", stacklevel=4)


def _bridge(fn, x, dtype=None):
    # all pending device work runs first, in one graph: reading ``x`` alone would leave the
    # solver's other tensors pending, their graphs growing (and compiling anew) each product
    backend(x.device).sync()
    return to_device(np.asarray(fn(to_host(x)), dtype=dtype), x.device)


def _numpy_dtype(dtype):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(dtype)


def aslinearoperator(A):
    """SciPy's aslinearoperator; torch tensors and trnscipy sparse objects become
    device operators, other inputs get exactly SciPy's result."""
    if isinstance(A, LinearOperator):
        return A
    if is_torch_array(A):
        if A.ndim > 2:
            raise ValueError("array must have ndim <= 2")
        return MatrixLinearOperator(torch.atleast_2d(A))
    if _is_device_object(A):
        return MatrixLinearOperator(A)
    return _si.aslinearoperator(A)


aslinearoperator._trnscipy_route = "device"  # it serves device data itself (route_of)


def _device_operator(A, device):
    """``A`` as an operator for vectors on ``device``: a SciPy host operator or host matrix
    (offload mode) is bridged through the host, everything else is aslinearoperator(A).
    In offload mode a LinearOperator of callables without a device is the user's host
    code (it was written for the NumPy data): it is bridged through the host too; not one
    marked ``pure_tensor_code`` (trnscipy's own: svds' X^H X, an offloaded ``spilu``'s
    solve; they take tensors)."""
    if isinstance(A, _HostOperator):
        return A
    if isinstance(A, LinearOperator):
        user_host_code = (offloading() and A.device is None
                          and not getattr(A, "pure_tensor_code", False))
        return _HostOperator(A) if user_host_code else A
    if type(A) is _si.MatrixLinearOperator and device is not None \
            and (type(A.A) is np.ndarray or issparse(A.A)):
        return _device_operator(A.A, device)  # (SciPy's operator of a matrix: data, not code)
    if isinstance(A, _si.LinearOperator):
        return _HostOperator(A)
    if isinstance(A, np.ndarray) or issparse(A):
        from trnscipy._transfer import to_device

        return aslinearoperator(to_device(A, device))
    op = aslinearoperator(A)
    return op if isinstance(op, LinearOperator) else _HostOperator(op)
