"""XLA kernels (torch-xla; Trainium through torch-neuronx).

The products are the generic gather/multiply/index_add lowerings: static shapes,
no torch sparse layouts.  What is XLA-specific is when graphs are cut: the
expanded row index of a compressed matrix is computed once and materialised on
the device, so every later product with the same shapes reuses one compiled graph.
"""

import torch_xla

from trnscipy._kernels import register
from trnscipy._kernels._generic import expand_ptr as _generic_expand_ptr


@register("expand_ptr", "xla")
def expand_ptr(indptr, nnz):
    out = _generic_expand_ptr(indptr, nnz)
    torch_xla._XLAC._xla_sync_multi([out], devices=[], wait=False)
    return out
