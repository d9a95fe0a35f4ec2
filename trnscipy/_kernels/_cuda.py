"""CUDA kernels: torch's cuSPARSE-backed CSR and BSR layouts for CSR/CSC/BSR products.

Used when no gradient is needed; with autograd (or other formats) the generic
kernels run, whose gradients torch derives itself.
"""

import gc

import torch

from trnscipy._kernels import _generic
from trnscipy._kernels._generic import torch_csr

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _usable(A, x):
    """cuSPARSE takes it: a dtype it has, no gradient needed, and no more stored entries
    than the shape holds (it refuses duplicates beyond that)."""
    return (A.data.dtype in _DTYPES and A.nnz <= A.shape[0] * A.shape[1]
            and not (A.data.requires_grad or x.requires_grad))


def csr_product(A, x):
    if not _usable(A, x):
        return _generic.csr_product(A, x)
    return torch_csr(A.indptr, A.indices, A.data, A.shape) @ x


def csc_product(A, x):
    if not _usable(A, x):
        return _generic.csc_product(A, x)
    return csr_product(A.tocsr(), x)


def bsr_product(A, x):
    # cuSPARSE's BSR products take square blocks of side 2 or more (side 1 is CSR)
    r, c = A.blocksize
    if not (_usable(A, x) and r == c > 1 and x.dtype == A.data.dtype):
        return _generic.bsr_product(A, x)
    return torch_csr(A.indptr, A.indices, A.data, A.shape, layout=torch.sparse_bsr) @ x


def graph_function(fn):
    """``fn`` (tensors -> tuple of tensors, no host reads, no writes to its arguments) as
    a CUDA graph: see ``_CudaGraph``."""
    return _CudaGraph(fn)


class _CudaGraph:
    """A function of CUDA tensors captured as a CUDA graph on its second call and
    replayed from then on: a Krylov block is dozens of small kernels per iteration, whose
    launches cost more than their work at 10^4 unknowns.

    The first call with given shapes runs eagerly (it creates the cuBLAS/cuSPARSE
    handles and workspaces a capture must not create).  A replay copies the arguments
    into the graph's input buffers and returns copies of its outputs, so results never
    alias buffers a later replay overwrites.  Tensors ``fn`` reads without taking them as
    arguments are bound at capture: a ``_CudaGraph`` lives for one solve (or one cached
    operator), as the XLA kernel's ``_Replay`` does.  A function that cannot be captured
    (it reads a value on the host) keeps running eagerly."""

    def __init__(self, fn):
        self.fn = fn
        self.plans = {}  # signature -> None (ran once), False (eager), (inputs, outputs, graph)
        self.failure = None  # why a capture failed

    def __call__(self, *args):
        signature = tuple((a.dtype, tuple(a.shape), a.device) for a in args)
        if signature not in self.plans:
            self.plans[signature] = None
            return tuple(self.fn(*args))
        if self.plans[signature] is None:
            self.plans[signature] = self._capture(args)
        plan = self.plans[signature]
        if plan is False:
            return tuple(self.fn(*args))
        inputs, outputs, graph = plan
        torch._foreach_copy_(inputs, list(args))
        graph.replay()
        return tuple(t.clone() for t in outputs)

    def _capture(self, args):
        inputs = [a.clone() for a in args]
        graph = torch.cuda.CUDAGraph()
        # a pool of its own, so that a failed capture's pool can be closed (_recover)
        pool = torch.cuda.graph_pool_handle()
        # torch.cuda.graph collects garbage before capturing; a collection during the
        # capture could destroy an earlier solve's graph, which a capture forbids
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outputs = tuple(self.fn(*inputs))
        except RuntimeError as err:  # a host read or sync inside: not capturable
            first = err.__context__ or err  # ending a broken capture raises again
            self.failure = f"{type(first).__name__}: {first}"
            _recover(pool, args[0].device if args else torch.device("cuda"))
            return False
        finally:
            if collecting:
                gc.enable()
        return inputs, outputs, graph


def _recover(pool, device):
    """Undo what a failed capture leaves behind.  torch's ``capture_end`` raises on an
    invalidated capture before its bookkeeping (ATen's CUDAGraph.cpp): the caching
    allocator keeps routing to the capture's pool (and defers its event processing
    while a capture seems underway), and the default CUDA generator stays in capture
    mode, so every later random op outside a capture raises "Offset increment outside
    graph capture encountered unexpectedly" (torch 2.9-2.11).  The pool is closed as
    ``torch.cuda.use_mem_pool`` closes one, and a trivial capture that succeeds ends the
    generator's capture mode (its capture_epilogue)."""
    torch.cuda.synchronize(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    for close in (torch.cuda.memory._cuda_endAllocateToPool,
                  torch.cuda.memory._cuda_releasePool):
        try:
            close(index, pool)
        except RuntimeError:  # (a torch whose capture_end closed it already)
            pass
    with torch.cuda.device(device):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            torch.zeros(1, device=device)  # (an empty capture warns)
        del graph


def memory_available(device):
    """Free bytes on the GPU, plus what torch's caching allocator holds but does not use."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


class Cuda(_generic.Generic):
    """CUDA tensors: cuSPARSE's CSR and BSR products, CUDA graphs."""

    kind = "cuda"
    csr_matvec = csr_matvecs = staticmethod(csr_product)
    csc_matvec = csc_matvecs = staticmethod(csc_product)
    bsr_matvec = bsr_matvecs = staticmethod(bsr_product)
    graph_function = staticmethod(graph_function)
    memory_available = staticmethod(memory_available)
