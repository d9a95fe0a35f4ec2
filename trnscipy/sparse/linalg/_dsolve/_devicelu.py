"""The factorization object of ``splu``/``spilu`` on devices other than the CPU.

What differs from SciPy's SuperLU: the factors are those of ``_multifrontal`` (a
multifrontal LU over a nested dissection, static pivoting by a structural row matching,
pivot block inverses without pivoting where they pass a check, else with partial
pivoting inside each block): ``L``, ``U``, ``perm_r`` and ``perm_c``
satisfy ``Pr A Pc = L U`` as SciPy's do, with this factorization's permutations (not
SuperLU's), and ``L``/``U`` hold the dense blocks' explicit zeros; they are assembled on
the host on first access (warned off the CPU kind).  ``solve`` runs on the device and
adds a step of iterative refinement with the matrix.  ``spilu``'s ``DeviceILU`` has the
same interface over the incomplete factors of ``_ilu``.
"""

import math

import numpy as np
from array_api_compat import is_torch_array

from trnscipy import _autograd
from trnscipy._capabilities import declare, runs_on_device
from trnscipy._device import device_kind
from trnscipy._dispatch import find_device
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._kernels import backend
from trnscipy._transfer import _to_device, to_host
from trnscipy.sparse.linalg._dsolve import _ilu, _multifrontal

__all__ = ["DeviceILU", "DeviceLU", "device_factor", "device_ilu"]

FACTORS = "scipy.sparse.linalg.SuperLU.L"  # the capability table's name for the export
declare(FACTORS, host=("cuda", "xla", "neuron"),
        why="L, U, perm_r and perm_c are assembled from the blocks on the host")


def device_factor(A, natural=False):
    """Factorize the device CSR/CSC container ``A`` (square, floating dtype) on its device
    (``natural``: in the columns' own order, SciPy's ``permc_spec="NATURAL"``).
    RuntimeError("Factor is exactly singular") as SciPy's."""
    sym = _multifrontal.symbolic(A, natural)
    if sym.singular:
        raise RuntimeError("Factor is exactly singular")
    data = A.data
    _check_memory(sym, data)
    # without pivoting inside the blocks where the device has a cheaper inverse for that
    # (checked; once more with pivoting where the check fails)
    levels, flags = _multifrontal.factor(sym, data, pivoting=False)  # computed group by group
    singular, unstable = to_host(flags).tolist()  # one read
    if unstable:
        levels, flags = _multifrontal.factor(sym, data, pivoting=True)
        singular = to_host(flags)[0]
    if singular:
        raise RuntimeError("Factor is exactly singular")
    return DeviceLU(sym, levels, data)


def _check_memory(sym, data):
    """MemoryError, with the estimate, before a factorization that cannot fit in the
    device's free memory (never an out-of-memory kill halfway through)."""
    need = sym.factor_bytes(data.element_size())
    have = backend(data.device).memory_available(data.device)
    if need > have:
        gib = 2.0 ** 30
        raise MemoryError(
            f"the sparse LU of this {sym.n}x{sym.n} matrix on {data.device} needs about "
            f"{need / gib:.1f} GiB (the dense fronts of its elimination order) and "
            f"{have / gib:.1f} GiB is free there; SciPy's splu on "
            "the host (NumPy/SciPy inputs) or an iterative solver needs less")


def device_ilu(A, drop_tol, fill_factor):
    """Incomplete LU of the device CSR/CSC container ``A`` (``_ilu``) on its device;
    RuntimeError("Factor is exactly singular") as SciPy's."""
    sym = _ilu.symbolic(A, fill_factor)
    if sym.singular:
        raise RuntimeError("Factor is exactly singular")
    values, scale, singular = _ilu.factor(sym, A.data, drop_tol)
    tables = {which: _ilu.prepare(sym, values, which) for which in ("L", "U")}
    # the factors, the solves' tables and the flag in one graph: reading the flag alone
    # would compute the factorization for it and leave the factors pending, to be traced
    # again into the solve
    backend(values.device).materialize(
        [singular, values, scale] + [t for pair in tables.values() for t in pair if t is not None])
    if int(to_host(singular)):  # one read: the singularity test
        if sym.exact:
            raise RuntimeError("Factor is exactly singular")
        raise RuntimeError("spilu: the parallel ILU sweeps diverged (a non-finite or zero "
                           "pivot; the matrix is far from diagonal dominance); use splu")
    return DeviceILU(sym, values, scale, tables)


class DeviceLU:
    """LU factors on a device with SciPy SuperLU's interface."""

    _trnscipy_device_object = True

    def __init__(self, sym, levels, data):
        self._sym, self._levels, self._data = sym, levels, data
        self.device = data.device
        self.dtype = to_numpy_dtype(data.dtype)
        self.shape = (sym.n, sym.n)
        self._factors = None

    def __repr__(self):
        return f"<DeviceLU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def solve(self, rhs, trans="N"):
        """x with op(A) x = rhs (op per ``trans``: 'N', 'T', 'H') on the factors' device;
        SciPy's errors for a wrong shape, dtype or ``trans``."""
        find_device((self, rhs))  # ValueError for a right-hand side on another device
        if _autograd.wants_grad(rhs):  # implicit differentiation (trnscipy._autograd)
            return _autograd.factorization_solve(self, None, rhs, trans)
        if isinstance(rhs, np.ndarray):
            rhs = _to_device(rhs, self.device, strict=True)
        if not is_torch_array(rhs):
            raise TypeError(f"argument 1 must be numpy.ndarray, not {type(rhs).__name__}")
        if trans not in ("N", "T", "H"):
            raise ValueError("trans must be N, T, or H")
        if rhs.ndim > 2:
            raise ValueError("object too deep for desired array")
        rdtype = to_numpy_dtype(rhs.dtype)
        if not np.can_cast(rdtype, self.dtype, "safe"):  # before the size, as SciPy
            raise TypeError(f"Cannot cast array data from dtype('{rdtype}') to "
                            f"dtype('{self.dtype}') according to the rule 'safe'")
        if rhs.ndim == 0 or rhs.shape[0] != self.shape[0]:
            raise ValueError("b is of incompatible size")
        b = self._cast(rhs)
        if self._vectors:  # (a reshape here would be one more graph execution)
            return self._solve(b, trans)
        return self._solve(b.reshape(b.shape[0], math.prod(b.shape[1:])), trans).reshape(rhs.shape)

    _vectors = True  # ``_solve`` takes 1-D and 2-D right-hand sides

    def _cast(self, rhs):
        """``rhs`` as ``_solve`` takes it: in the factors' dtype (SciPy's cast)."""
        return rhs.to(to_torch_dtype(self.dtype))

    def _solve(self, b, trans):
        return _multifrontal.solve(self._sym, self._levels, self._data, b, trans)

    def traced_solve(self, b):
        """A^-1 b for a vector ``b`` of the factors' dtype and device as pure tensor code
        (no checks, no graph cuts, no host reads): a step of a caller's graph."""
        return self._traced(b.reshape(-1, 1)).reshape(-1)

    def _traced(self, b):
        return _multifrontal.solve(self._sym, self._levels, self._data, b, "N", cut=False)

    def traced_operator(self):
        """(tensors, apply, cache): ``traced_solve`` as ``apply(tensors, b)``, pure in the
        factors ``tensors``; a caller's graph taking them as arguments serves every
        factorization of this pattern, kept in ``cache`` (the analysis')."""
        return (*_multifrontal.solve_operator(self._sym, self._levels, self._data),
                self._sym.device_cache)

    def to(self, device):
        return DeviceLU(self._sym, [tuple(t.to(device) for t in lvl) for lvl in self._levels],
                        self._data.to(device))

    def to_scipy(self):
        """A SciPy-like host object: solve takes and returns NumPy arrays."""
        return _HostLU(self)

    # -- SciPy SuperLU's attributes ------------------------------------------------------------

    def _lu(self):
        """L, U, perm_r, perm_c: the LU of each pivot block and the products with the
        couplings are computed on the host (SciPy), warned where the capability table
        says so, and moved to the device."""
        if self._factors is None:
            runs_on_device(FACTORS, device_kind(self.device), self.dtype)
            L, U, perm_r, perm_c = self._export()
            self._factors = tuple(_to_device(x, self.device, strict=True)
                                  for x in (L.astype(self.dtype), U.astype(self.dtype),
                                            perm_r, perm_c))
        return self._factors

    def _export(self):
        return _multifrontal.export(self._sym, self._data)

    @property
    def perm_r(self):
        return self._lu()[2]

    @property
    def perm_c(self):
        return self._lu()[3]

    @property
    def L(self):
        return self._lu()[0]

    @property
    def U(self):
        return self._lu()[1]

    @property
    def nnz(self):
        return int(self.L.nnz + self.U.nnz)


class DeviceILU(DeviceLU):
    """Incomplete LU factors on a device (``spilu``) with SciPy SuperLU's interface.

    ``L``, ``U``, ``perm_r`` and ``perm_c`` satisfy ``Pr A Pc ~ L U`` (``perm_c`` the
    identity, ``perm_r`` the static row pivoting, L with a unit diagonal); assembled on
    the host on first access (warned off the CPU kind).  ``nnz`` is ``L.nnz + U.nnz``,
    counted on the device.  ``solve`` applies the factors (no refinement)."""

    _vectors = False  # ``_solve`` takes 2-D right-hand sides
    traced_operator = None  # (its solve reads tables kept on the object)

    def __init__(self, sym, values, scale, tables=None):
        self._sym, self._values, self._scale = sym, values, scale
        self._tables = dict(tables or {})
        self.device = values.device
        self.dtype = to_numpy_dtype(values.dtype)
        self.shape = (sym.n, sym.n)
        self._factors = None

    def __repr__(self):
        return f"<DeviceILU {self.shape[0]}x{self.shape[1]} on {self.device}>"

    def _table(self, which):
        """The padded coefficient tables of one triangular solve, computed on first use
        (the transposed solves') as device data: a caller's device loop then reads them
        as inputs instead of recomputing them in every step."""
        if which not in self._tables:
            tables = _ilu.prepare(self._sym, self._values, which)
            backend(self.device).materialize([t for t in tables if t is not None])
            self._tables[which] = tables
        return self._tables[which]

    def solve(self, rhs, trans="N"):
        """x with op(A) x = rhs for the incomplete factors (``DeviceLU.solve``)."""
        return super().solve(rhs, trans)

    # SciPy's checks read shapes and dtypes only, the substitutions are device loops: a
    # LinearOperator of this solve traces into a Krylov solver's device loop
    solve.pure_tensor_code = True

    def _solve(self, b, trans):
        for which in (("L", "U") if trans == "N" else ("UT", "LT")):
            self._table(which)  # outside the solve's graph
        return _ilu.solve(self._sym, self._values, self._scale, b, trans, self._table)

    def _traced(self, b):
        return self._solve(b, "N")  # no graph cuts

    def to(self, device):
        return DeviceILU(self._sym, self._values.to(device), self._scale.to(device))

    def _export(self):
        return _ilu.export(self._sym, self._values, self._scale)

    @property
    def nnz(self):
        return int(to_host((self._values != 0).sum())) + self.shape[0]


class _HostLU:
    """``DeviceLU.to_scipy()``: NumPy in, NumPy out (offload mode), device arithmetic.
    Device tensors in give device tensors out: a LinearOperator of ``solve`` (a pure
    tensor function) is given the device solver's vectors in an offloaded call."""

    _ATTRIBUTES = ("L", "U", "perm_r", "perm_c", "nnz")  # SciPy SuperLU's, read back

    def __init__(self, lu):
        self._lu = lu
        self.shape = lu.shape
        # a double-float factorization's float32 solve (a float32 Krylov solve's M)
        self.float32_solve = getattr(lu, "float32_solve", None)

    def solve(self, rhs, trans="N"):
        """SciPy's ``SuperLU.solve``: NumPy results for host right-hand sides."""
        x = self._lu.solve(rhs, trans)
        return x if is_torch_array(rhs) else to_host(x)

    solve.pure_tensor_code = True  # on tensors: the device object's solve

    def __getattr__(self, name):
        if name not in _HostLU._ATTRIBUTES:
            raise AttributeError(f"'SuperLU' object has no attribute {name!r}")
        return to_host(getattr(self._lu, name))
