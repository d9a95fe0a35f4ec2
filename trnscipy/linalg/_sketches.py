"""clarkson_woodruff_transform on device data: SciPy draws the sparse sketch matrix S
(random indices and signs from ``rng``, exactly as SciPy draws them; no user data), S
moves to the device as a trnscipy sparse matrix, and the product runs there.  On a
device without float64, float32/64 dense data is multiplied in double-float arithmetic
(float32 operations only; S's entries are +-1, exact in float32)."""

import numpy as np
import scipy.linalg as _sl
from array_api_compat import is_torch_array
from scipy._lib._util import _transition_to_rng
from scipy.linalg._sketches import cwt_matrix

from trnscipy import _transfer
from trnscipy._dispatch import call_device, dispatch
from trnscipy._kernels import _df
from trnscipy._torch import torch
from trnscipy._transfer import to_device

__all__ = ["clarkson_woodruff_transform"]


def _double_float_product(s, device):
    """``m -> S @ m`` for float32/64 dense ``m`` on a device without float64: a double-float
    sparse product through S's row-padded layout (built from S's host index arrays)."""
    s = s.tocsr()
    # (S's longest row varies with the seed: bucketed, lest each seed compile its graphs)
    layout = _df.row_padded(s.shape, "csr", (s.indptr, s.indices), device, bucket=True)
    signs = torch.from_numpy(s.data.astype(np.float32)).to(device)
    data = (signs, torch.zeros_like(signs))

    def product(m):
        m = _transfer.tensor_on(m, device, torch.float64)  # float32 data: exactly
        return _transfer.df_tensor(*_df.spmv(layout, data, _transfer.df_parts(m)))

    return product


@dispatch(_sl.clarkson_woodruff_transform, double_float=("neuron",))
@_transition_to_rng("seed", position_num=2)  # SciPy's own rule: seed= and rng= as SciPy
def clarkson_woodruff_transform(input_matrix, sketch_size, rng=None):
    if getattr(input_matrix, "_trnscipy_device_object", False) and input_matrix.ndim > 2:
        raise NotImplementedError("Batch support for sparse arrays is not available.")
    s = cwt_matrix(sketch_size, input_matrix.shape[-2], rng=rng)
    device = call_device((input_matrix,))
    if (is_torch_array(input_matrix) and input_matrix.dtype in (torch.float32, torch.float64)
            and _transfer.stores_float32(device)):  # S is float64: so is S @ A (SciPy's)
        product = _double_float_product(s, device)
    else:
        s = to_device(s, device)

        def product(m):
            return s @ m
    if input_matrix.ndim <= 2:
        return product(input_matrix)
    flat = input_matrix.reshape(-1, *input_matrix.shape[-2:])
    return torch.stack([product(m) for m in flat]).reshape(
        *input_matrix.shape[:-2], sketch_size, input_matrix.shape[-1])
