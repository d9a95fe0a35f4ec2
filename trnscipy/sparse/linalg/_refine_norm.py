"""float64 sparse ``norm`` on a Neuron device: double-float sums of the stored values (the
'neuron' registration of the ``sparse.linalg.norm`` kernel).

The device has no float64 arithmetic; a float64 container there holds its values exactly
as double-float pairs (``trnscipy._transfer.df_parts``).  The stored values of each row
(column) are laid out padded to the longest (``_df.RowPadded``, built once per matrix from
the index structure) and summed by double-float trees: ``|a|`` sums for ord 1 / inf (and
-1 / -inf; the axis form ord=1), squares for the Frobenius norm and the axis form ord=2
(``_df.norm``, scaled), the largest ``|a|`` for the axis form ord=inf; maxima and minima
compare the pairs.  Covered: CSR/CSC containers in canonical format (no duplicate
entries: |a + b| is not |a| + |b|); other formats, duplicates and the remaining orders run
on the host, announced.
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _transfer
from trnscipy._kernels import _df, register
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import _on_host
from trnscipy.sparse.linalg._isolve._refine import _layout, _parts

__all__ = ["norm"]


@register("sparse.linalg.norm", "neuron")
def norm(x, ord=None, axis=None):
    """float64 CSR/CSC: double-float sums; everything else as on XLA."""
    from trnscipy.sparse.linalg._norm import _norm as generic

    if x.dtype != np.float64:
        return generic(x, ord, axis)
    plan = _plan(x, ord, axis)
    if plan is None:
        return _on_host(_scipy.norm, {"x": x, "ord": ord, "axis": axis},
                        f"norm(ord={ord!r}, axis={axis!r}) of a {x.format} container "
                        "(canonical CSR/CSC: ord None, 'fro', 1, -1, inf, -inf; with an "
                        "axis 1, 2, inf) has no double-float method", device=x.device)
    if plan == "generic":  # SciPy's errors (bad axis, ord) before any arithmetic
        return generic(x, ord, axis)
    what, dim = plan
    data = [t.reshape(-1) for t in _parts(x.data)]
    if what == "fro":
        return _transfer.df_tensor(*_df.norm((data[0], data[1])))
    rows = x if dim == 1 else x.T  # the rows of this container are the summed lines
    layout = _layout(rows)
    vals = (layout.values(data[0]), layout.values(data[1]))
    sign = torch.where(vals[0] < 0, -1.0, 1.0)
    mags = (vals[0] * sign, vals[1] * sign)  # |a| (exact: a sign change)
    if what in ("sum_max", "sum_min", "sum"):
        sums = _df.tree_sum(*mags, dim=1)
        if what == "sum":
            return _transfer.df_tensor(*sums)
        return _transfer.df_tensor(*_extreme(sums, largest=what == "sum_max"))
    if what == "two":
        return _transfer.df_tensor(*_df.norm(vals, dim=1))
    # "max": the largest |a| of each line (padding zeros: SciPy's implicit zeros count)
    return _transfer.df_tensor(*_extreme(mags, largest=True, dim=1))


def _plan(x, ord, axis):
    """What to compute: ('fro' | 'sum_max' | 'sum_min' | 'sum' | 'two' | 'max', dim of the
    summed lines: 1 rows, 0 columns), 'generic' for SciPy's errors, None for the host."""
    if getattr(x, "format", None) not in ("csr", "csc") or not x.has_canonical_format:
        return None
    if axis is None and ord in (None, "fro", "f"):
        return "fro", None
    if axis is None:
        axis = (0, 1)
    elif not isinstance(axis, tuple):
        try:
            if int(axis) != axis:
                return "generic"
        except TypeError:
            return "generic"
        axis = (int(axis),)
    if any(not -2 <= a < 2 for a in axis) or len(axis) not in (1, 2):
        return "generic"
    if len(axis) == 2:
        if axis[0] % 2 == axis[1] % 2:
            return "generic"
        if ord in (None, "fro", "f"):
            return "fro", None
        row_axis, col_axis = (a % 2 for a in axis)
        if ord in (1, -1):  # |x| summed along row_axis: lines across it
            return ("sum_max" if ord == 1 else "sum_min"), 0 if row_axis == 0 else 1
        if ord in (np.inf, -np.inf):
            return ("sum_max" if ord == np.inf else "sum_min"), 0 if col_axis == 0 else 1
        return None if ord in (2, -2) else "generic"
    dim = 0 if axis[0] % 2 == 0 else 1
    if ord == 1:
        return "sum", dim
    if ord in (None, 2):
        return "two", dim
    if ord == np.inf:
        return "max", dim
    return None


def _extreme(pair, largest, dim=0):
    """The largest (smallest) double-float value along ``dim``: by the high part, ties by
    the low part (a pair's order is its high part's, then its low part's)."""
    hi, lo = pair
    pick = hi.amax(dim=dim, keepdim=True) if largest else hi.amin(dim=dim, keepdim=True)
    on = hi == pick
    fill = torch.full_like(lo, -np.inf if largest else np.inf)
    low = torch.where(on, lo, fill)
    low = low.amax(dim=dim) if largest else low.amin(dim=dim)
    return pick.squeeze(dim), low
