"""Row-padded (ELL) layouts: every row's stored entries in a fixed number of slots.

A product over such a layout is a gather, a multiply and a sum along the padded axis:
no scatter, which XLA's CPU backend and Trainium both serialise.  The layout is a
function of the index structure only: ``slots[i, k]`` is the position (in the stored
order) of row ``i``'s ``k``-th entry, or ``nnz`` for padding, so values are padded by
gathering from ``values`` with one zero appended (``pad``).  Plain torch ops, any device.
"""

import torch

__all__ = ["MAX_PADDING", "worth_padding", "slots", "row_slots", "pad"]

MAX_PADDING = 2.0  # the layout is used while rows * width <= MAX_PADDING * nnz


def worth_padding(n_rows, width, nnz):
    """Whether padding ``n_rows`` rows to ``width`` slots stays within MAX_PADDING."""
    return nnz > 0 and n_rows * width <= MAX_PADDING * nnz


def slots(indptr, width):
    """(rows, width) slot map of a row-compressed structure (``indptr`` a tensor):
    elementwise arithmetic only; padding slots hold ``indptr[-1]``."""
    ptr = indptr.to(torch.int64)
    pos = ptr[:-1, None] + torch.arange(width, device=ptr.device)[None, :]
    return torch.where(pos < ptr[1:, None], pos, ptr[-1])


def row_slots(row, n_rows):
    """(slots, width) for entries in any order, given each entry's row (a CPU tensor):
    rows are found by a stable sort, so each row keeps its entries' stored order."""
    row = row.to(torch.int64)
    order = torch.argsort(row, stable=True)
    counts = torch.bincount(row, minlength=n_rows)
    width = int(counts.max()) if row.numel() else 0
    ptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    return pad(order, slots(ptr, width), fill=row.numel()), width


def pad(values, slot_map, fill=0):
    """``values`` laid out by ``slot_map`` (leading axis), ``fill`` in the padding."""
    tail = torch.full((1,) + tuple(values.shape[1:]), fill, dtype=values.dtype,
                      device=values.device)
    return torch.cat([values, tail]).index_select(0, slot_map.reshape(-1)).reshape(
        tuple(slot_map.shape) + tuple(values.shape[1:]))
