"""float64 matrix_balance on a Neuron device (see ``_refine``): float32
arithmetic only.

- ``matrix_balance``: LAPACK's gebal as ``_kernels_struct.gebal`` runs it (the
  permutation from the zero pattern, one host read of four numbers per row and sweep),
  with gebal's norms in triple-float (``_df.norm3``, the largest magnitudes exactly: within
  a unit of float64 rounding of the float64 norms, so its decisions are float64's) and
  the scaling by powers of two applied to every part (exact).
"""

from trnscipy import _transfer
from trnscipy._kernels import _df, backend, kind_kernel, register
from trnscipy._torch import torch
from trnscipy.linalg import _refine as _r
from trnscipy.linalg._kernels_struct import gebal
from trnscipy.linalg._refine_funcs import _extreme, _magnitudes

# ---- matrix_balance ----------------------------------------------------------------------


def _masked(t, mask):
    return [torch.where(mask, p, 0) for p in t]


def _gebal_norms(a, hot, inner, upto_l, from_k):
    """gebal's (c, r, ca, ra) of row/column ``hot`` as a (4, 3) tensor of triple-float
    parts (see ``_kernels_struct._gebal_norms``).  The column and row are picked by sums
    with zeros (exact)."""
    t = _transfer.df_triple(a)
    col = [torch.where(hot[None, :], p, 0).sum(1) for p in t]
    row = [torch.where(hot[:, None], p, 0).sum(0) for p in t]
    # the column and the row as one (2, n) triple: one norm and one maximum to compile
    both = [torch.stack([x, y]) for x, y in zip(col, row, strict=True)]
    norms = _df.norm3(_masked(both, inner))
    tops = _extreme(_magnitudes(_masked(both, torch.stack([upto_l, from_k]))), True, -1)
    return torch.stack([torch.stack(list(norms)), torch.stack(list(tops))]).mT.reshape(4, 3)


def _gebal_rescale(a, hot, f):
    """Row ``hot`` divided by ``f``, its column multiplied, in every part (a power of
    two: exact)."""
    t = _transfer.df_triple(a)
    fs = torch.where(hot, torch.tensor(f, dtype=t[0].dtype).to(a.device),  # (data)
                     torch.ones((), dtype=t[0].dtype, device=a.device))
    t = [p / fs[:, None] * fs[None, :] for p in t]
    backend(a.device).materialize(t)  # (the norms' graph then starts from data)
    return _transfer.df_tensor(*t)


@register("linalg.matrix_balance", "neuron")
def matrix_balance(a, permute=True, scale=True, separate=False):
    if not _r._df64(a) or a.is_complex():
        return kind_kernel("linalg.matrix_balance", "xla")(a, permute, scale, separate)
    return gebal(a, permute, scale, separate, _gebal_norms, _gebal_rescale,
                 lambda x: _transfer.df_parts(x)[0] != 0)  # (the high part: zero iff x is)
