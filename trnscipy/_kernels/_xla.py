"""XLA kernels (torch-xla; Trainium through torch-neuronx).

The products are the generic gather/multiply/index_add lowerings: static shapes,
no torch sparse layouts.  What is XLA-specific is when graphs are cut: the
expanded row index of a compressed matrix is computed once and materialised on
the device, so every later product with the same shapes reuses one compiled graph.
It is set up with the container (``product_index``), so the first product on a new
matrix is one compilation too.
"""

import numpy as np
import torch
import torch_xla

from trnscipy._kernels import register
from trnscipy._kernels._generic import expand_ptr as _generic_expand_ptr


@register("materialize", "xla")
def materialize(tensors):
    """Compute ``tensors`` in one graph, now.

    Reading a result's tensors one by one traces one graph per tensor, and
    torch-xla 2.9 can hand two such graphs the same compiled executable when they
    differ only in which same-shaped input feeds which op (pytorch/xla#8353, open):
    ``row[order]`` then ``col[order]`` read back ``row[order]`` twice.  One graph
    for all of a result's tensors avoids that, at one graph execution.
    """
    torch_xla._XLAC._xla_sync_multi(list(tensors), devices=[], wait=False)


@register("sync", "xla")
def sync():
    """Cut the lazy graph and run it (``torch_xla.sync()``)."""
    torch_xla.sync()


@register("expand_ptr", "xla")
def expand_ptr(indptr, nnz):
    out = _generic_expand_ptr(indptr, nnz)
    materialize([out])
    return out


@register("product_index", "xla")
def product_index(indptr, nnz, device):
    """The entry -> major index the products gather by, set up with a new container.

    A host ``indptr`` (a SciPy object being moved) is expanded with NumPy and sent with
    the other arrays: no graph.  A device one is traced lazily: the constructor runs it in
    the graph of its validation read.  Either way the first product compiles one graph.
    """
    if isinstance(indptr, np.ndarray):
        counts = np.diff(indptr)
        major = np.repeat(np.arange(counts.shape[0], dtype=indptr.dtype), counts)
        return torch.from_numpy(major).to(device)
    return _generic_expand_ptr(indptr, nnz)
