"""clarkson_woodruff_transform on device data: SciPy draws the sparse sketch matrix S
(random indices and signs from ``rng``, exactly as SciPy draws them; no user data), S
moves to the device as a trnscipy sparse matrix, and the product runs there."""

import scipy.linalg as _sl
from scipy._lib._util import _transition_to_rng
from scipy.linalg._sketches import cwt_matrix

from trnscipy._dispatch import call_device, dispatch
from trnscipy._torch import torch
from trnscipy._transfer import to_device

__all__ = ["clarkson_woodruff_transform"]


@dispatch(_sl.clarkson_woodruff_transform)
@_transition_to_rng("seed", position_num=2)  # SciPy's own rule: seed= and rng= as SciPy
def clarkson_woodruff_transform(input_matrix, sketch_size, rng=None):
    if getattr(input_matrix, "_trnscipy_device_object", False) and input_matrix.ndim > 2:
        raise NotImplementedError("Batch support for sparse arrays is not available.")
    s = to_device(cwt_matrix(sketch_size, input_matrix.shape[-2], rng=rng),
                  call_device((input_matrix,)))
    if input_matrix.ndim <= 2:
        return s @ input_matrix
    flat = input_matrix.reshape(-1, *input_matrix.shape[-2:])
    return torch.stack([s @ m for m in flat]).reshape(*input_matrix.shape[:-2], sketch_size,
                                                     input_matrix.shape[-1])
