"""Shared machinery of the device Krylov solvers: make_system and the loop driver.

Each solver is written once as a ``step`` on fixed-shape state plus a driver:

* on the CPU (host reads are free) the driver reads the stop flag after every
  iteration and updates vectors in place: SciPy's own control flow;
* on graph devices (XLA/Neuron, CUDA) nothing is read on the host inside a
  block of ``CHECK_EVERY`` iterations: stop conditions are device flags, the
  returned iterate is masked with ``torch.where`` once the solve has stopped,
  and the host reads the flag (one graph execution) per block.  ``x`` and
  ``info`` equal those of a per-iteration check; at most ``CHECK_EVERY - 1``
  iterations are computed and thrown away.
* with a ``callback`` the host checks every iteration (SciPy's contract).
"""

import functools
import math
import warnings

import numpy as np
from array_api_compat import is_torch_array
from scipy.sparse.linalg import _interface as _si

from trnscipy._capabilities import capability
from trnscipy._device import device_kind
from trnscipy._dispatch import call_device, offloading
from trnscipy._kernels import backend, kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import to_host

__all__ = ["CHECK_EVERY", "solver_kernel", "make_system", "check_atol", "check_square",
           "check_vector", "gmres_callback_type", "run", "sync", "host_reads_free", "dot",
           "inner", "norm", "traceable", "Local", "HostStep", "HostScalars", "TorchScalars"]

# Iterations per host read of the convergence flag on graph devices.  On Trainium
# a graph execution costs 1-3 ms of dispatch, so 25 keeps dispatch well below the
# arithmetic of a 25-iteration block while wasting at most 24 iterations.
CHECK_EVERY = 25
# Iterations per replayed graph (``run``): a block of CHECK_EVERY iterations runs as
# CHECK_EVERY / UNROLL executions of one graph of UNROLL iterations, queued without a
# host read between them.  The graph's compile time and its one Python trace per solve
# grow with its length; measured on PJRT CPU (cg, Poisson 10^4 float32, interleaved):
# 10 was faster warm than 5 and 25, and compiled in 4 s, not 11.
UNROLL = 10

_COERCE = {"f": 0, "d": 1, "F": 2, "D": 3}


@register("krylov", "generic")
@register("eigen", "generic")
def torch_loop(scipy_func, torch_func, args, kwargs, host_operand, operators):
    """The strategy of every device without its own: the torch implementation itself."""
    return torch_func(*args, **kwargs)


def solver_kernel(scipy_solver, operators=True):
    """Decorator, under ``@dispatch``: the strategy of the solve, the algorithm table's
    ``krylov`` entry for the operands' device kind: on the CPU SciPy's own loop on
    zero-copy views (``trnscipy._kernels._cpu``), on Neuron double-float refinement around
    the float32 device loop (``_isolve/_refine.py``), elsewhere the decorated torch loop
    (``torch_loop``).
    ``operators``: SciPy's function makes its matrices LinearOperators itself, so the CPU
    kernel may hand sparse containers over as operators; False where SciPy treats an
    operator differently from a matrix (expm_multiply, funm_multiply_krylov)."""
    def decorate(torch_solver):
        @functools.wraps(torch_solver)
        def solve(*args, **kwargs):
            device = call_device(args, kwargs)
            check_x0(kwargs.get("x0", args[2] if len(args) > 2 else None))
            return kernel("krylov", device)(scipy_solver, torch_solver, args, kwargs,
                                            host_operand, operators)

        solve.torch_loop = torch_solver
        return solve

    return decorate


def host_operand(value):
    """A solver operand as SciPy takes it, sharing memory with CPU tensors: a trnscipy
    LinearOperator becomes a SciPy one calling it on tensor views, a sparse container
    its SciPy twin; anything else as it is."""
    from trnscipy.sparse.linalg._interface import LinearOperator, MatrixLinearOperator

    if type(value) is MatrixLinearOperator:  # SciPy's operator of the SciPy twin
        return _si.aslinearoperator(host_operand(value.A))
    if is_torch_array(value):
        return to_host(value)
    if isinstance(value, LinearOperator):
        if offloading() and value.device is None:
            return value  # the user's host callables, given NumPy as they were written for
        return _host_operator(value)
    if getattr(value, "_trnscipy_device_object", False):
        return value.to_scipy(copy=False)
    return value


def _host_operator(op):
    """A SciPy LinearOperator calling the trnscipy operator ``op`` on tensor views."""
    def on_tensors(method):
        def apply(v):
            out = method(torch.from_numpy(np.ascontiguousarray(v)))
            return to_host(out) if is_torch_array(out) else np.asarray(out)
        return apply

    return _si.LinearOperator(op.shape, matvec=on_tensors(op.matvec),
                              rmatvec=on_tensors(op.rmatvec), matmat=on_tensors(op.matmat),
                              rmatmat=on_tensors(op.rmatmat), dtype=op.dtype)


def host_reads_free(device):
    """True where reading a device scalar on the host costs no sync (the capability table)."""
    return capability(device_kind(device)).host_reads_free


def sync(device):
    """Run the pending lazy graph (XLA); a no-op on eager devices (the backend's ``sync``)."""
    backend(device).sync()


def _coerce(a, b):
    """SciPy's make_system dtype rule on dtype chars: f/d/F/D, anything else counts as d."""
    a = _COERCE.get(a, 1)
    b = _COERCE.get(b, 1)
    real = max(a % 2, b % 2)
    cplx = max(a // 2, b // 2)
    return "fdFD"[2 * cplx + real]


class System:
    """The device system: A and M (None: the identity), x, b; ``matvec`` applies A.  A is
    the matrix itself where it is a device matrix of the system's dtype (its products are
    ``A @ x``, no operator is made), else an operator.  ``traceable``: both are matrices
    (or marked ``pure_tensor_code``), so their products can be traced into a device loop
    (a user's operator may cut graphs or read on the host)."""

    def __init__(self, A, M, x, b, device):
        self.A, self.M, self.x, self.b, self.device = A, M, x, b, device
        self.traceable = traceable(A, M)
        self.dtype = b.dtype
        self.matvec = A.__matmul__ if _is_matrix(A, device) else _fast_matvec(A, b.dtype)
        self.np_dtype = np.dtype(_torch_to_char(b.dtype))
        self.eps = float(np.finfo(self.np_dtype).eps)
        self.n = b.shape[0]

    @property
    def operator(self):
        """A as a LinearOperator (bicg's rmatvec, qmr's shape and products)."""
        return as_operator(self.A, self.device)


def traceable(*ops):
    """True when every operator (None: the identity) is a matrix or marked
    ``pure_tensor_code``: its products can be traced into a device loop or a replayed
    graph.  A user's function may read on the host (a host operator under offload always
    does); a solver then runs its iterations as graphs cut around each product (``run``'s
    ``host_effects``)."""
    from trnscipy.sparse.linalg._interface import MatrixLinearOperator

    return all(op is None or _is_matrix(op) or type(op) is MatrixLinearOperator
               or getattr(op, "pure_tensor_code", False) for op in ops)


def _is_matrix(A, device=None):
    """A 2-D tensor or device sparse container (on ``device`` where given): a matrix the
    solvers apply as ``A @ x``."""
    matrix = (is_torch_array(A) or (getattr(A, "_trnscipy_device_object", False)
                                    and getattr(A, "format", None) is not None))
    return (matrix and getattr(A, "ndim", None) == 2
            and (device is None or A.device == device))


def _torch_to_char(dtype):
    from trnscipy._dtypes import to_numpy_dtype

    return to_numpy_dtype(dtype).char


def as_operator(A, device):
    from trnscipy.sparse.linalg._interface import _device_operator

    return _device_operator(A, device)


def make_system(A, M, x0, b):
    """SciPy's make_system on device data: validation, dtype promotion, x0 ('Mb' too).

    Returns a System whose x is a fresh tensor (updated in place by the solvers) and
    whose M is None for the identity.  Differs from SciPy: an x0 string other than 'Mb'
    is a ValueError (SciPy fails with UnboundLocalError).
    """
    from trnscipy._dtypes import to_torch_dtype

    A_ = A
    if is_torch_array(b):
        device = b.device
    else:
        device = getattr(A, "device", None) or torch.device("cpu")
        b = torch.as_tensor(np.asarray(b), device=device)
    matrix = _is_matrix(A, device)
    if not matrix:
        A = as_operator(A, device)
    check_square(A.shape)
    N = A.shape[0]
    check_vector(A.shape, "b", b.shape)
    bchar = _torch_to_char(b.dtype)
    if bchar not in "fdFD":
        b = b.to(torch.float64)
        bchar = "d"
    if matrix:
        achar = _torch_to_char(A.dtype) if is_torch_array(A) else A.dtype.char
    elif A.dtype is not None:
        achar = A.dtype.char
    else:
        achar = _torch_to_char(A.matvec(b).dtype)
    xchar = _coerce(achar, bchar)
    xtype = to_torch_dtype(np.dtype(xchar))
    b = b.to(xtype).reshape(-1)
    if matrix and achar != xchar:  # the operator promotes A's values for the products
        A = as_operator(A, device)

    if M is None:
        psolve = getattr(A_, "psolve", None)
        rpsolve = getattr(A_, "rpsolve", None)
        if psolve is not None or rpsolve is not None:
            from trnscipy.sparse.linalg._interface import LinearOperator

            M = LinearOperator(A.shape, matvec=psolve or _identity,
                               rmatvec=rpsolve or _identity, dtype=A.dtype)
    else:
        M = as_operator(M, device)
        if A.shape != M.shape:
            raise ValueError("matrix and preconditioner have different shapes")

    operators = [op for op in (A, M) if op is not None and not _is_matrix(op)]
    if operators and not host_reads_free(device):  # on the CPU a host operator copies nothing
        from trnscipy.sparse.linalg._interface import announce_host_operators

        announce_host_operators("scipy.sparse.linalg.LinearOperator", *operators)
    if x0 is None:
        x = torch.zeros(N, dtype=xtype, device=device)
    elif isinstance(x0, str):
        check_x0(x0)
        x = (M.matvec(b) if M is not None else b).to(xtype).clone()
    else:
        x = torch.as_tensor(x0, device=device).to(xtype).clone()
        check_vector(A.shape, "x0", x.shape)
        x = x.reshape(-1)
    return System(A, M, x, b, device)


def _identity(x):
    return x


def check_square(shape):
    """SciPy's make_system test of A's shape."""
    if shape[0] != shape[1]:
        raise ValueError(f"expected square matrix, but got shape={(tuple(shape),)}")


def check_vector(A_shape, name, shape):
    """SciPy's make_system test of b's or x0's shape: (N,) or (N, 1)."""
    N = A_shape[0]
    if tuple(shape) not in ((N,), (N, 1)):
        raise ValueError(f"shapes of A {tuple(A_shape)} and {name} {tuple(shape)} are "
                         "incompatible")


def check_x0(x0):
    """x0 strings other than 'Mb': ValueError (SciPy fails with UnboundLocalError)."""
    if isinstance(x0, str) and x0 != "Mb":
        raise ValueError(f"x0 must be an array, None or 'Mb', not {x0!r}")


def gmres_callback_type(callback, callback_type, stacklevel):
    """SciPy's gmres ``callback_type`` rule: its DeprecationWarning for a callback without
    one ('legacy' then), its ValueError for an unknown one; None without a callback."""
    if callback is not None and callback_type is None:
        warnings.warn("scipy.sparse.linalg.gmres called without specifying `callback_type`. "
                      "The default value will be changed in a future release. For "
                      "compatibility, specify a value for `callback_type` explicitly, e.g., "
                      "``gmres(..., callback_type='pr_norm')``, or to retain the old behavior "
                      "``gmres(..., callback_type='legacy')``", DeprecationWarning,
                      stacklevel=stacklevel + 1)
    if callback_type is None:
        callback_type = "legacy"
    if callback_type not in ("x", "pr_norm", "legacy"):
        raise ValueError(f"Unknown callback_type: {callback_type!r}")
    return None if callback is None else callback_type


def check_atol(name, atol):
    """SciPy's validation of ``atol`` (the rtol*||b|| part is computed on the device)."""
    if atol == "legacy" or atol is None or atol < 0:
        raise ValueError(f"'scipy.sparse.linalg.{name}' called with invalid `atol`={atol}; "
                         "if set, `atol` must be a real, non-negative number.")
    return float(atol)


def stop_tolerance(atol, rtol, bnrm2):
    """max(atol, rtol*||b||) as a 0-d device tensor (NaN ||b|| gives NaN: never converges,
    as SciPy's max(0, nan) == 0 with ||r|| NaN)."""
    return torch.clamp(bnrm2 * float(rtol), min=float(atol))


def norm(x):
    """2-norm as NumPy's np.linalg.norm computes it for vectors: sqrt(x.x) (complex: the
    real part of x^H x), the sum through the device's ``inner`` kernel."""
    return inner(x, x).real.sqrt() if x.is_complex() else inner(x, x).sqrt()


def dot(a, b):
    """np.vdot for complex, np.dot for real (the device's ``inner`` kernel)."""
    return inner(a, b)


def inner(a, b):
    """conj(a) . b along the last axis: the device's ``inner`` kernel (on XLA a sum of
    products, accurate where XLA's ``dot`` is not)."""
    return backend(a.device).inner(a, b)


def _fast_matvec(op, dtype):
    """``op.matvec`` without the per-call checks when ``op`` wraps a device matrix of the
    system's dtype (make_system has checked the shapes)."""
    from trnscipy.sparse.linalg._interface import MatrixLinearOperator, _on_device

    A = getattr(op, "A", None)
    if (type(op) is MatrixLinearOperator and _on_device(A)
            and _torch_to_char(A.dtype) == _torch_to_char(dtype)):
        return A.__matmul__
    return op.matvec


def host_value(x):
    """A callback argument: the tensor itself, or NumPy when serving an offloaded call."""
    return to_host(x) if offloading() else x


class EagerStep:
    """Stop flags as Python values; vector updates in place (CPU)."""

    lazy = False

    def __init__(self):
        self.live = True
        self.info = None

    def stop_if(self, cond, code):
        if self.live and bool(cond):
            self.live = False
            self.info = code

    def axpy(self, y, a, x):
        """y + a*x, kept only while live (the returned iterate)."""
        if self.live:
            y.addcmul_(x, a)
        return y

    def update(self, y, a, x):
        """y + a*x for working vectors (not masked), in place."""
        return y.addcmul_(x, a)

    def xpay(self, x, a, y):
        """x + a*y for working vectors, in place in y."""
        return y.mul_(a).add_(x)

    @property
    def stopped(self):
        return not self.live

    def keep(self, new, old):
        return new if self.live else old

    def carry(self, new, old):
        """A scalar of the carry (unmasked: the loop leaves at the stop)."""
        return new


class LazyStep:
    """Stop flags as device booleans; the returned iterate masked with torch.where."""

    lazy = True

    def __init__(self, live, info):
        self.live = live
        self.info = info

    def stop_if(self, cond, code):
        if isinstance(cond, bool):
            cond = torch.tensor(cond, device=self.live.device)
        hit = self.live & cond
        if not isinstance(code, torch.Tensor):
            code = torch.full_like(self.info, code)
        self.info = torch.where(hit, code, self.info)
        self.live = self.live & ~cond

    def axpy(self, y, a, x):
        return torch.where(self.live, y + a * x, y)

    def update(self, y, a, x):
        return y + a * x

    def xpay(self, x, a, y):
        return x + a * y

    stopped = False  # a graph step always runs to its end

    def keep(self, new, old):
        return torch.where(self.live, new, old)

    def carry(self, new, old):
        """A scalar of the carry (unmasked: only the iterate is kept at the stop)."""
        return new


# ---- the vector spaces the iterations run in ------------------------------------------------
#
# An iteration (``iterative.cg_iteration``, ``bicgstab_iteration``, ``gmres_cycle``,
# ``minres.minres_iteration``) touches its vectors only through ``V``, the space
# (``V.matvec``, ``V.psolve``, ``V.dot``, ``V.norm``, ``V.dots``: several inner products in
# one reduction; ``V.scalars``: arithmetic on what they return), and ``s``, the step (the
# updates and stop flags: ``EagerStep``, ``LazyStep``, ``HostStep``, ``_refine``'s).
# ``Local`` is one device's tensors (the double-float cg too, on its float32 parts); the
# distributed solvers' space is ``trnscipy.distributed._isolve.System``.

class TorchScalars:
    """Arithmetic on a space's scalars where they are 0-d tensors (no host read).  Methods,
    not torch's functions as attributes: importing trnscipy must not import torch."""

    @staticmethod
    def sqrt(a):
        return torch.sqrt(a)

    @staticmethod
    def where(cond, a, b):
        return torch.where(cond, a, b)

    @staticmethod
    def maximum(a, b):
        return torch.maximum(a, b)

    @staticmethod
    def minimum(a, b):
        return torch.minimum(a, b)

    @staticmethod
    def clamp_min(a, lo):
        return torch.clamp(a, min=lo)


class HostScalars:
    """The same on host numbers (a distributed solve's all-reduced sums)."""

    sqrt = staticmethod(math.sqrt)
    maximum = clamp_min = staticmethod(max)
    minimum = staticmethod(min)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b


class Local:
    """Tensors on one device: products given as functions, inner products through the
    device's ``inner`` kernel (0-d device tensors), or ``dot`` where given."""

    scalars = TorchScalars

    def __init__(self, matvec, psolve, device=None, dot=None):
        self.matvec, self.psolve, self.device = matvec, psolve, device
        if dot is not None:
            self.dot = dot

    dot = staticmethod(dot)
    norm = staticmethod(norm)

    def dots(self, *pairs):
        return [self.dot(a, b) for a, b in pairs]

    def sync(self):
        """Cut the pending graph before host reads (XLA with a callback)."""
        sync(self.device)

    @staticmethod
    def gram_schmidt(w, basis):
        """w orthogonalized against the rows of ``basis`` by classical Gram-Schmidt twice
        (SciPy: modified; equal in exact arithmetic): (||w|| before, the projections as
        host numbers, w after, ||w|| after)."""
        h0 = float(norm(w))
        h = basis.conj() @ w
        w = w - h @ basis
        h2 = basis.conj() @ w
        w = w - h2 @ basis
        return h0, (h + h2).tolist(), w, float(norm(w))


class HostStep(EagerStep):
    """An eager step whose scalars are host numbers (a distributed solve's all-reduced
    sums): in-place updates with ``alpha=``."""

    def axpy(self, y, a, x):
        if self.live:
            y.add_(x, alpha=a)
        return y

    def update(self, y, a, x):
        return y.add_(x, alpha=a)

    def xpay(self, x, a, y):
        return y.mul_(a).add_(x)



def run(step, state, maxiter, device, callback=None, value=None, block=None, peel=True,
        host_effects=False, unroll=None, loop=False):
    """Drive ``step(state, s, first) -> state`` for at most ``maxiter`` iterations.

    On graph devices the host reads the stop flag every ``block`` iterations
    (default: CHECK_EVERY, read at call time).  A graph of ``unroll`` iterations
    (default: UNROLL) is traced in Python once per solve and replayed with the new
    state (the ``graph_function`` kernel), ``ceil(block / unroll)`` times per block,
    unless ``step`` has host effects (``host_effects``: prints, callbacks, host reads),
    a ``callback`` is given or ``maxiter`` allows one block only: then each block is
    one traced graph.  The loop counters are device data from the start, so the graph
    does not depend on ``maxiter``.
    ``peel`` (for a ``step`` that uses ``first``) runs iteration 0 as a graph of its
    own; false (None too) says ``step`` ignores ``first``: every block is the same graph.

    ``s`` carries the stop flags (``s.stop_if(cond, code)``); ``first`` is True for
    iteration 0.  ``value(state)`` is what the callback receives after each completed
    iteration.  Returns (state, info) with info a Python int (maxiter if not stopped).
    ``loop``: a replayed block is the ``device_loop`` kernel over its iterations (on XLA
    one ``While``: one execution per block, the body compiled once) instead of ``unroll``
    iterations traced one after the other; where the loop leaves on the stop flag
    (``device_while``), one block runs all of ``maxiter``: one execution per solve.
    Elsewhere (CUDA, whose graphs unroll the loop) the replayed graph keeps ``unroll``
    iterations.
    """
    if host_reads_free(device):
        for it in range(maxiter):
            s = EagerStep()
            state = step(state, s, it == 0)
            if not s.live:
                return state, int(s.info)
            if callback is not None and value is not None:
                callback(host_value(value(state)))
        return state, int(maxiter)

    block = 1 if callback is not None else (block or CHECK_EVERY)
    # host values travel as data (torch.tensor), not as graph constants (torch.full), so
    # the first block's graph is the later blocks' graph and none depends on maxiter;
    # shape (1,): torch-xla turns a 0-d 0 or 1 into a graph constant even when uploaded
    done = torch.tensor(False, device=device)
    info = torch.tensor([maxiter], dtype=torch.int64, device=device)
    left = torch.tensor([maxiter], dtype=torch.int64, device=device)

    def iterate(state, done, info, left, first):
        live = ~done & (left[0] > 0)
        s = LazyStep(live, info)
        state = step(state, s, first)
        return tuple(state), done | (live & ~s.live), s.info, left - 1

    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten(state)
    # (a single block gains nothing from a replay, which copies its inputs first)
    replayable = (not host_effects and callback is None and maxiter - bool(peel) > block
                  and all(isinstance(leaf, torch.Tensor) for leaf in leaves))

    # complex state loops too: its divisions go through ``_dtypes.divide``, which keeps
    # torch-xla from labelling complex quotients float32 (the While's carry then matched)
    one_while = replayable and loop and capability(device_kind(device)).device_while
    if one_while:
        block = maxiter - bool(peel)  # one While to the stop flag: one execution
    # elsewhere (CUDA) a replayed graph unrolls its loop: UNROLL iterations, so that the
    # first call (eager) and the capture cost UNROLL iterations each, not a block each
    steps = min(block, unroll or UNROLL) if replayable and not one_while else block
    block = -(-block // steps) * steps
    device_loop = backend(device).device_loop

    def flat_iterate(flat, first):
        state, (done, info, left) = pytree.tree_unflatten(list(flat[:-3]), spec), flat[-3:]
        state, done, info, left = iterate(state, done, info, left, first)
        return tuple(pytree.tree_leaves(state)) + (done, info, left)

    def run_steps(*flat):  # ``steps`` iterations as a function of the state's leaves
        if replayable and loop:
            return device_loop(lambda carry, _: flat_iterate(carry, False), flat, 0, steps,
                               until=len(flat) - 3)
        for _ in range(steps):
            flat = flat_iterate(flat, False)
        return flat

    if replayable:
        graph = backend(device).graph_function(run_steps)
    else:
        def graph(*flat):
            out = run_steps(*flat)
            sync(device)
            return out

    def run_block(flat):
        for _ in range(block // steps):
            flat = graph(*flat)
        return flat

    it = 0
    while it < maxiter:
        if peel and it == 0:
            state, done, info, left = iterate(state, done, info, left, True)
            sync(device)
            it = 1
        else:
            *leaves, done, info, left = run_block((*pytree.tree_leaves(state), done, info,
                                                   left))
            state = pytree.tree_unflatten(leaves, spec)
            it += block
        if bool(done):
            break
        if callback is not None and value is not None:
            callback(host_value(value(state)))
    return state, int(info)
