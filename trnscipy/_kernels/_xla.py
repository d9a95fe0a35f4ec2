"""XLA kernels (torch-xla; Trainium through torch-neuronx).

The products are the generic gather/multiply/index_add lowerings: static shapes,
no torch sparse layouts.  What is XLA-specific is when graphs are cut: the
expanded row index of a compressed matrix is computed once and materialised on
the device, so every later product with the same shapes reuses one compiled graph.
"""

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
