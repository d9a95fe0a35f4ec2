"""CPU kernels: SciPy's compiled sparsetools routines on zero-copy NumPy views of
the CPU tensors (never slower than SciPy itself), wrapped in a
torch.autograd.Function so gradients reach the dense operand and ``data``; and
SciPy's Krylov loops on the same views."""

import contextvars
import functools
import inspect
import operator
import os
import time

import numpy as np
import torch
from scipy.sparse import _sparsetools as _st
from scipy.sparse.linalg._interface import IdentityOperator, MatrixLinearOperator

from trnscipy._device import offloading
from trnscipy._kernels import _generic, _plan, register
from trnscipy._kernels._generic import bsr_product, torch_csr

_SUPPORTED = {torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
              torch.float32, torch.float64, torch.complex64, torch.complex128}


def _view(t):
    """A NumPy view of a CPU tensor (copies only if it is not contiguous)."""
    t = t.detach().resolve_conj().resolve_neg()
    return t.contiguous().numpy()


def _operand_view(x):
    return x.numpy() if x.is_contiguous() and not x.is_neg() else _view(x)


def _product_views(fmt, av, bv, dv, x, m, n):
    """y = A @ x with SciPy's sparsetools on views (a=indptr, b=indices, or COO row, col)."""
    xv = _operand_view(x)
    y = np.zeros((m,) + xv.shape[1:], dtype=dv.dtype)
    if xv.ndim == 1:
        if fmt == "coo":
            _st.coo_matvec(dv.shape[0], av, bv, dv, xv, y)
        else:
            _MATVEC[fmt](m, n, av, bv, dv, xv, y)
    elif fmt == "coo":
        _st.coo_matmat_dense(dv.shape[0], xv.shape[1], av, bv, dv, xv.ravel(), y.ravel())
    else:
        _MATVECS[fmt](m, n, xv.shape[1], av, bv, dv, xv.ravel(), y.ravel())
    return torch.from_numpy(y)


_MATVEC = {"csr": _st.csr_matvec, "csc": _st.csc_matvec}
_MATVECS = {"csr": _st.csr_matvecs, "csc": _st.csc_matvecs}


def _product(fmt, a, b, data, x, shape):
    """A @ x for CSR/CSC parts (a=indptr, b=indices) or COO parts (a=row, b=col)."""
    av, bv, dv = _view(a), _view(b), _view(data)
    if bv.dtype != av.dtype:
        bv = bv.astype(av.dtype)
    return _product_views(fmt, av, bv, dv, x.detach().resolve_conj(), *shape)


def _coords(fmt, a, b, shape):
    """(row, col) index tensors of each stored entry."""
    if fmt == "coo":
        return a.to(torch.int64), b.to(torch.int64)
    major = torch.repeat_interleave(torch.arange(a.shape[0] - 1), torch.diff(a.to(torch.int64)))
    return (major, b.to(torch.int64)) if fmt == "csr" else (b.to(torch.int64), major)


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx, data, x, fmt, a, b, shape):
        ctx.save_for_backward(data, x)
        ctx.meta = (fmt, a, b, shape)
        return _product(fmt, a, b, data, x, shape)

    @staticmethod
    def backward(ctx, gy):
        data, x = ctx.saved_tensors
        fmt, a, b, shape = ctx.meta
        grad_data = grad_x = None
        if ctx.needs_input_grad[1]:  # A^H @ gy: same arrays, the other orientation
            if fmt == "coo":
                grad_x = _product("coo", b, a, data.conj(), gy, shape[::-1])
            else:
                other = "csc" if fmt == "csr" else "csr"
                grad_x = _product(other, a, b, data.conj(), gy, shape[::-1])
        if ctx.needs_input_grad[0]:
            row, col = _coords(fmt, a, b, shape)
            prod = gy[row] * x[col].conj()
            grad_data = prod.sum(dim=1) if prod.ndim == 2 else prod
        return grad_data, grad_x, None, None, None, None


_PARTS = {"csr": ("indptr", "indices", "data"), "csc": ("indptr", "indices", "data"),
          "coo": ("row", "col", "data"), "bsr": ("indptr", "indices", "data"),
          "dia": ("offsets", "data")}
_PART_GETTERS = {fmt: operator.attrgetter(*names) for fmt, names in _PARTS.items()}


def _product_of(fmt, generic, index):
    """The CPU ``<fmt>_matvec``/``<fmt>_matvecs``: y = A @ x with SciPy's compiled
    kernels (same dtype for A and x), or torch's / BLAS's where they are faster
    (``_HostProduct``).  With autograd: ``_Product`` on the index arrays ``index(A)``, or
    (``index`` None: BSR, DIA) the generic torch kernel, whose gradients torch derives;
    dtypes SciPy has no kernel for: the generic kernel."""

    def product(A, x):
        if A.data.dtype not in _SUPPORTED:
            return generic(A, x)
        if A.data.requires_grad or x.requires_grad:
            if index is None:
                return generic(A, x)
            return _Product.apply(A.data, x, fmt, *index(A), A.shape)
        return _host_product(A)(A, x)

    return product


_COMPRESSED = operator.attrgetter("indptr", "indices")
csr_host_product = _product_of("csr", _generic.csr_product, _COMPRESSED)
csc_host_product = _product_of("csc", _generic.csc_product, _COMPRESSED)
coo_host_product = _product_of("coo", _generic.coo_container_product,
                               operator.attrgetter("row", "col"))
bsr_host_product = _product_of("bsr", _generic.bsr_product, None)
dia_host_product = _product_of("dia", _generic.dia_product, None)


def _host_product(A):
    """``A``'s ``_HostProduct`` on NumPy views of its tensors (the two index arrays in one
    dtype).  Kept in ``A``'s plan (``shared``); copies (non-contiguous, conjugated or
    mixed index dtypes) are never kept, so a kept product's views always share memory
    with ``A``'s tensors (in-place changes show)."""
    product = _plan.get(A, "cpu", "host_product")
    if product is not None:
        return product
    tensors = _PART_GETTERS[A.format](A)
    views = tuple(_view(t) for t in tensors)
    shared = all(t.is_contiguous() and not (t.is_conj() or t.is_neg()) for t in tensors)
    if len(views) == 3 and views[0].dtype != views[1].dtype:
        views, shared = (views[0], views[1].astype(views[0].dtype), views[2]), False
    product = _HostProduct(A, views)
    if shared:
        _plan.put(A, "cpu", "host_product", product, shared=True)
    return product


# SpMM shapes where torch's kernels beat SciPy's single-threaded sparsetools (BSR with
# 128 x 128 blocks as bmm, CSR with >= 8 entries per row at 16 <= N <= 64: at N = 128
# SciPy's csr_matvecs took 0.45-1.1x torch's time).  They run on one intra-op thread, as
# SciPy's kernels do, unless ``_threads_free`` (CSR, any N >= 16: below): torch's OpenMP
# pool spinning beside OpenBLAS (or other processes) stalled 2-6x (docs/decisions/0001,
# thread-pool stall).  BSR with fewer columns (vectors
# included) is NumPy's batched matmul (BLAS, NumPy's own thread pool) and a block-row
# sum: 0.25-0.45x bsr_matvec's time with 128 x 128 blocks.
_TORCH_SPMM_MIN_COLUMNS = 16
_TORCH_CSR_MAX_COLUMNS = 64
_TORCH_CSR_MIN_ROW = 8
_TORCH_BSR_MIN_BLOCK = 16
_TORCH_DTYPES = (torch.float32, torch.float64)


class _HostProduct:
    """A @ x for one container on NumPy views of its tensors: the kernel chosen per
    format, operand shape and machine state, the static part of that choice made once."""

    def __init__(self, A, views):
        self.fmt = fmt = A.format
        self.shape = A.shape
        self.views = views
        self.dtype = views[-1].dtype
        real = A.data.dtype in _TORCH_DTYPES
        self.torch_csr = (fmt == "csr" and real and A.indices.dtype == torch.int32
                          and A.nnz >= _TORCH_CSR_MIN_ROW * A.shape[0])
        self.torch_spmv = (fmt == "csr" and real and A.data.shape[0] >= _TORCH_SPMV_MIN_NNZ
                           and A.indptr.dtype == A.indices.dtype)
        self.blocks = fmt == "bsr" and real and min(A.blocksize) >= _TORCH_BSR_MIN_BLOCK
        self.csr = None  # torch's CSR tensor of A, made at its first use
        self.twin = None  # A's SciPy twin for SciPy's solver loops (``_solver_operand``)
        if self.blocks:
            counts = np.diff(views[0])
            same = len(counts) > 0 and counts[0] > 0 and bool((counts == counts[0]).all())
            self.per_row = int(counts[0]) if same else None
            self.nonempty = counts > 0
            self.starts = views[0][:-1][self.nonempty]

    def __call__(self, A, x):
        if x.dim() == 1:
            if self.torch_spmv and _threads_free():
                return self._csr(A) @ x
        elif x.shape[1] >= _TORCH_SPMM_MIN_COLUMNS:
            if self.blocks:
                return _torch_spmm(A, x)
            if self.torch_csr and _threads_free():  # torch's CSR kernel, its threads
                return self._csr(A) @ x
            if self.torch_csr and x.shape[1] <= _TORCH_CSR_MAX_COLUMNS:
                return _torch_spmm(A, x)
        xv = x.numpy() if x.is_contiguous() and not x.is_neg() else _view(x)
        return torch.from_numpy(self.on_views(xv))

    def on_views(self, xv):
        """A @ xv for a NumPy array of A's dtype: SciPy's sparsetools kernel (BSR with
        large blocks: ``_blocks``)."""
        if self.blocks:
            return self._blocks(xv)
        m, n = self.shape
        cols = xv.shape[1] if xv.ndim == 2 else 0
        y = np.zeros((m, cols) if cols else m, dtype=self.dtype)
        fmt, views = self.fmt, self.views
        if fmt == "csr" or fmt == "csc":
            if cols:
                _MATVECS[fmt](m, n, cols, *views, xv.ravel(), y.ravel())
            else:
                _MATVEC[fmt](m, n, *views, xv, y)
        elif fmt == "coo":
            a, b, dv = views
            if cols:
                _st.coo_matmat_dense(dv.shape[0], cols, a, b, dv, xv.ravel(), y.ravel())
            else:
                _st.coo_matvec(dv.shape[0], a, b, dv, xv, y)
        elif fmt == "bsr":
            ip, ix, dv = views
            r, c = dv.shape[1:]
            if cols:
                _st.bsr_matvecs(m // r, n // c, cols, r, c, ip, ix, dv.ravel(), xv.ravel(),
                                y.ravel())
            else:
                _st.bsr_matvec(m // r, n // c, r, c, ip, ix, dv.ravel(), xv, y)
        else:
            offsets, dv = views
            if cols:
                _st.dia_matvecs(m, n, dv.shape[0], dv.shape[1], offsets, dv, cols, xv, y)
            else:
                _st.dia_matvec(m, n, dv.shape[0], dv.shape[1], offsets, dv, xv, y)
        return y

    def transposed_on_views(self, xv):
        """A^T @ xv for a vector of A's (real) dtype, CSR, CSC or COO: the kernel of the
        other orientation on the same arrays, as SciPy's ``A.T @ x``."""
        m, n = self.shape
        y = np.zeros(n, dtype=self.dtype)
        if self.fmt == "coo":
            a, b, dv = self.views
            _st.coo_matvec(dv.shape[0], b, a, dv, xv, y)
        else:
            _MATVEC["csc" if self.fmt == "csr" else "csr"](n, m, *self.views, xv, y)
        return y

    def _csr(self, A):
        if self.csr is None:
            self.csr = _torch_csr(A)
        return self.csr

    def _blocks(self, xv):
        """BSR @ x as NumPy's batched block products (BLAS) summed per block row, in
        SciPy's order of the blocks."""
        ip, ix, dv = self.views
        m = self.shape[0]
        r, c = dv.shape[1:]
        k = 1 if xv.ndim == 1 else xv.shape[1]
        prod = np.matmul(dv, xv.reshape(-1, c, k)[ix])
        if self.per_row is not None:
            y = prod.reshape(m // r, self.per_row, r, k).sum(1)
        else:
            y = np.zeros((m // r, r, k), dtype=self.dtype)
            if len(self.starts):
                y[self.nonempty] = np.add.reduceat(prod, self.starts, axis=0)
        return y.reshape((m,) + xv.shape[1:])


# SpMV (vectors), and CSR SpMM with >= 8 entries per row at N >= 16, through torch's CSR
# kernel on torch's threads (SpMM, full bench on 2 cores, load 1.2-1.4, random 5*10^4
# rows x 50 per row: N = 16 5.5 ms against SciPy's 16.1 ms and torch's kernel on one
# thread 12.3 ms; N = 128 201 ms against 400 ms).  SpMV: on 2 cores at load 1-2,
# 0.52-0.61x SciPy's time from 2.5*10^6 to 5*10^6 stored entries, 0.75-0.84x at 5*10^4;
# at load 3-4 the threads wait for each other (the other processes hold the cores) and
# the same calls took 1.4-1.6x SciPy's time (50x at 5*10^4).  Hence only while a core is
# left idle by the other processes (``_idle_core``), and not inside SciPy's loops on
# views (``krylov``, ``eigen``: a trnscipy LinearOperator's products), where NumPy /
# OpenBLAS work interleaves: there torch's OpenMP threads, spinning after each call, and
# OpenBLAS's stalled each other (18x slower at 9*10^4 rows; docs/decisions/0001).
_TORCH_SPMV_MIN_NNZ = 2**15
_HOST_LOOP = contextvars.ContextVar("trnscipy_cpu_host_loop", default=False)
# (when read, the machine's busy CPU seconds then, this process's then, whether a core was
# idle): read at most once a second (os.cpu_count reads /sys each call: 5-17 us, as much as
# a 10^4-row SpMV's kernel; /proc/stat and os.times about 10 us)
_IDLE = [-1.0, None, None, False]


def _threads_free():
    """torch's kernels may use their thread pool: more than one thread, not inside SciPy's
    loops on views, and a core idle."""
    return torch.get_num_threads() > 1 and not _HOST_LOOP.get() and _idle_core()


def _idle_core():
    """True while the other processes leave this one a core besides its own thread: they
    used at most ``cores - 1.5`` cores since the last reading (CPU seconds from /proc/stat
    less this process's own, which the 1-minute load average would count: a benchmark's
    two threads made a 2-core machine look busy to itself).  The first reading, and
    machines without /proc/stat, use the load average."""
    now = time.monotonic()
    last, machine_then, own_then = _IDLE[:3]
    if now - last <= 1.0:
        return _IDLE[3]
    cores = os.cpu_count() or 1
    machine, own = _busy_seconds(), sum(os.times()[:2])
    if machine is not None and machine_then is not None:
        others = (machine - machine_then - (own - own_then)) / (now - last)
        idle = others <= cores - 1.5
    else:
        try:
            idle = os.getloadavg()[0] <= cores - 0.5
        except (AttributeError, OSError):  # no load average here: take the machine as busy
            idle = False
    _IDLE[:] = now, machine, own, idle
    return idle


def _busy_seconds():
    """CPU seconds all processes have run (/proc/stat's first line, idle and iowait left
    out), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    ticks = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))
    return ticks / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _torch_csr(A):
    """``A`` (CSR) as a torch sparse CSR tensor sharing its tensors; kept in ``A``'s plan
    where they are contiguous (shared, so in-place changes show)."""
    mat = _plan.get(A, "cpu", "torch_csr")
    if mat is None:
        parts = (A.indptr, A.indices, A.data)
        mat = torch_csr(*parts, A.shape)
        if all(t.is_contiguous() for t in parts):
            _plan.put(A, "cpu", "torch_csr", mat, shared=True)
    return mat


def _in_host_loop(fn, kwargs):
    """``fn(**kwargs)`` (SciPy's loop on views) with the torch SpMV route off."""
    token = _HOST_LOOP.set(True)
    try:
        return fn(**kwargs)
    finally:
        _HOST_LOOP.reset(token)


def _torch_spmm(A, x):
    """A @ x through torch's CPU kernels on one thread (``A``'s ``_HostProduct`` chose
    them): BSR as batched dense block products (bmm) summed per block row, CSR through
    torch's sparse CSR kernel."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # about 0.3 us each way
    try:
        if _host_product(A).blocks:
            return bsr_product(A, x.contiguous())
        return _torch_csr(A) @ x
    finally:
        torch.set_num_threads(threads)


def spgemm(A, B):
    """CSR @ CSR with SciPy's compiled csr_matmat on zero-copy views."""
    import scipy.sparse as sp

    a = sp.csr_array((_view(A.data), _view(A.indices), _view(A.indptr)), shape=A.shape,
                     copy=False)
    b = sp.csr_array((_view(B.data), _view(B.indices), _view(B.indptr)), shape=B.shape,
                     copy=False)
    c = a @ b
    c.sum_duplicates()
    return {"data": torch.from_numpy(c.data), "indices": torch.from_numpy(c.indices),
            "indptr": torch.from_numpy(c.indptr), "_sorted": True, "_canonical": True}


_signature = functools.cache(inspect.signature)  # (about 40 us a call, per solve)


class _ViewOperator(MatrixLinearOperator):
    """A sparse container as SciPy's solver loops call it: SciPy's operator of its SciPy
    twin, except that ``matvec`` (and, real CSR/CSC/COO, ``rmatvec``) of a contiguous
    vector of its dtype calls the product kernel on the views directly (the same
    sparsetools routine as SciPy's ``A @ x`` and ``A.T @ x``, minus the LinearOperator
    and sparse-array layers: 5-8 us of a 40 us cg iteration at 10^4 unknowns, the same
    iterates bit for bit)."""

    def __init__(self, twin, product):
        super().__init__(twin)
        self._product = product
        self._shapes = ((twin.shape[1],), (twin.shape[0],))
        self._transposed = product.fmt in ("csr", "csc", "coo") and twin.dtype.kind == "f"

    def _lean(self, x, side):
        return (type(x) is np.ndarray and x.shape == self._shapes[side]
                and x.dtype == self.dtype and x.flags.c_contiguous)

    def matvec(self, x):
        if self._lean(x, 0):
            return self._product.on_views(x)
        return super().matvec(x)

    def rmatvec(self, x):
        if self._transposed and self._lean(x, 1):
            return self._product.transposed_on_views(x)
        return super().rmatvec(x)


class _Identity(IdentityOperator):
    """SciPy's default preconditioner (what ``make_system`` builds for ``M=None``) with
    ``matvec`` returning its operand as it is, without the checks around it."""

    def matvec(self, x):
        return x

    rmatvec = matvec


def _solver_operand(value, host_operand, operators):
    """A solver argument as SciPy's loop takes it: tensors as NumPy views, a sparse
    container as a ``_ViewOperator`` where ``operators`` (its SciPy twin kept with the
    container's cached product), the rest as ``host_operand`` (the solver layer's) makes
    it."""
    if isinstance(value, torch.Tensor):
        return _view(value)
    if (operators and getattr(value, "format", None) in _PARTS
            and getattr(value, "_trnscipy_device_object", False)
            and (value.data.dtype.is_floating_point or value.data.dtype.is_complex)
            and value.data.dtype in _SUPPORTED):
        # integer matrices go over as SciPy sparse: solvers convert them (A.astype)
        product = _host_product(value)
        if product.blocks:  # (its own block products: not SciPy's rounding)
            return host_operand(value)
        if product.twin is None:
            product.twin = host_operand(value)
        return _ViewOperator(product.twin, product)
    return host_operand(value)


# ---- Krylov solvers: SciPy's own loop on zero-copy views ---------------------------------

@register("krylov", "cpu")
def krylov(scipy_solver, device_solver, args, kwargs, host_operand, operators):
    """Solve with SciPy's own solver on NumPy views of the CPU tensors: SciPy's iterates,
    ``info``, errors and speed (a torch loop pays 3-5 us per vector op at 10^4 unknowns).

    Tensors are handed over as NumPy views; trnscipy objects as SciPy objects sharing
    their memory through ``host_operand`` (the solver layer's: trnscipy LinearOperators
    and callbacks see torch tensors as on any device); sparse containers as
    ``_ViewOperator`` where SciPy's function makes operators of its matrices anyway
    (``operators``), with SciPy's default preconditioner as ``_Identity``.  The torch loop
    (``device_solver``) runs instead when an operand needs autograd or the solver keeps
    caller-owned state between calls (lgmres ``outer_v``, gcrotmk ``CU``).
    """
    try:
        params = _signature(scipy_solver).bind(*args, **kwargs).arguments
    except TypeError:  # e.g. tol=: let SciPy raise its own TypeError
        return scipy_solver(*args, **kwargs)
    if (params.get("outer_v") is not None or params.get("CU") is not None
            or any(getattr(v, "requires_grad", False)
                   or getattr(getattr(v, "data", None), "requires_grad", False)
                   for v in params.values())):
        return device_solver(*args, **kwargs)
    host = {name: _solver_operand(value, host_operand, operators)
            for name, value in params.items()}
    A = host.get("A")
    if (isinstance(A, _ViewOperator) and "M" not in params
            and "M" in _signature(scipy_solver).parameters):
        host["M"] = _Identity(A.shape, A.dtype)
    callback = params.get("callback")
    if callback is not None and not offloading():
        host["callback"] = lambda xk: callback(
            torch.from_numpy(xk) if isinstance(xk, np.ndarray) else xk)
    result = _in_host_loop(scipy_solver, host)
    if not isinstance(result, tuple):
        return torch.from_numpy(result) if isinstance(result, np.ndarray) else result
    return tuple(torch.from_numpy(r) if isinstance(r, np.ndarray) else r for r in result)


# ---- Eigensolvers: SciPy's ARPACK / lobpcg on zero-copy views -----------------------------

@register("eigen", "cpu")
def eigen(scipy_func, device_func, args, kwargs, host_operand, operators):
    """SciPy's eigensolver on NumPy views of the CPU tensors (ARPACK's and lobpcg's own
    iterates and speed); results come back as CPU tensors.  ``ArpackNoConvergence``
    carries its partial results as tensors.  The torch implementation runs instead when an
    operand needs autograd.  ``host_operand``: as for ``krylov``; ``operators(arguments)``
    (or None): whether SciPy makes a LinearOperator of the matrices itself in this call,
    so sparse containers may go over as ``_ViewOperator``."""
    try:
        params = _signature(scipy_func).bind(*args, **kwargs).arguments
    except TypeError:
        return scipy_func(*args, **kwargs)
    if any(getattr(v, "requires_grad", False)
           or getattr(getattr(v, "data", None), "requires_grad", False)
           for v in params.values()):
        return device_func(*args, **kwargs)
    from scipy.sparse.linalg import ArpackNoConvergence

    as_operators = operators is not None and operators(params)
    host = {name: _solver_operand(value, host_operand, as_operators)
            for name, value in params.items()}
    try:
        return _to_tensors(_in_host_loop(scipy_func, host))
    except ArpackNoConvergence as err:
        err.eigenvalues = _to_tensors(err.eigenvalues)
        err.eigenvectors = _to_tensors(err.eigenvectors)
        raise


def _to_tensors(result):
    if isinstance(result, np.ndarray):
        return torch.from_numpy(result if all(st >= 0 for st in result.strides)
                                else result.copy())
    if isinstance(result, tuple | list):
        return type(result)(_to_tensors(x) for x in result)
    return result


class Cpu(_generic.Generic):
    """CPU tensors: SciPy's compiled kernels and solvers on zero-copy NumPy views."""

    kind = "cpu"
    csr_matvec = csr_matvecs = staticmethod(csr_host_product)
    csc_matvec = csc_matvecs = staticmethod(csc_host_product)
    coo_matvec = coo_matvecs = staticmethod(coo_host_product)
    bsr_matvec = bsr_matvecs = staticmethod(bsr_host_product)
    dia_matvec = dia_matvecs = staticmethod(dia_host_product)
    spgemm = staticmethod(spgemm)
