"""float64 sparse ``norm`` and ``onenormest`` on a Neuron device: double-float sums of the
stored values, and the 1-norm estimator with double-float products (the 'neuron'
registrations of the ``sparse.linalg.norm`` and ``sparse.linalg.onenormest`` kernels).

The device has no float64 arithmetic; a float64 container there holds its values exactly
as double-float pairs (``trnscipy._transfer.df_parts``).  The stored values of each row
(column) are laid out padded to the longest (``_df.RowPadded``, built once per matrix from
the index structure) and summed by double-float trees: ``|a|`` sums for ord 1 / inf (and
-1 / -inf; the axis form ord=1), squares for the Frobenius norm and the axis form ord=2
(``_df.norm``, scaled), the largest ``|a|`` for the axis form ord=inf; maxima and minima
compare the pairs.  Covered: CSR/CSC containers in canonical format (no duplicate
entries: |a + b| is not |a| + |b|); other formats, duplicates and the remaining orders run
on the host, announced.  ``onenormest``: float64 matrices (sparse containers, dense
tensors); a float64 operator given by functions runs on the host, announced.
"""

import numpy as np
import scipy.sparse.linalg as _scipy

from trnscipy import _double_float, _transfer
from trnscipy._kernels import _df, backend, register
from trnscipy._torch import torch
from trnscipy.sparse.linalg._eigen._refine import _on_host
from trnscipy.sparse.linalg._isolve._refine import _df_operator, _layout, _parts

__all__ = ["norm"]


@register("sparse.linalg.norm", "neuron")
def norm(x, ord=None, axis=None):
    """float64 CSR/CSC: double-float sums; everything else as on XLA."""
    from trnscipy.sparse.linalg._norm import _norm as generic

    integers = np.dtype(x.dtype).kind in "biu" and _float_of_integers(ord)
    if x.dtype != np.float64 and not integers:
        return generic(x, ord, axis)
    plan = _plan(x, ord, axis)
    if integers and plan not in (None, "generic"):
        # SciPy's float64 result of integer data: from its exact double-float form (the
        # generic norm would compute it in float32 here)
        x = x._with_data(_double_float.cast(x.data, torch.float64), copy=False)
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


def _float_of_integers(ord):
    """Whether SciPy's norm of integer data is a float computed from its values (Frobenius,
    2-norms, other powers): ord 0, +-1 and +-inf give exact integer counts, sums and
    maxima, and negative integer powers SciPy's error (the generic norm raises both)."""
    if ord in (None, "fro", "f"):
        return True
    if isinstance(ord, str) or ord in (0, 1, -1, np.inf, -np.inf):
        return False
    try:
        return not (int(ord) == ord and ord < 0)
    except (TypeError, ValueError):  # not an order: SciPy's error, from the generic norm
        return False


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


# ---- onenormest: Higham-Tisseur's estimator with double-float products ------------------


@register("sparse.linalg.onenormest", "neuron")
def onenormest(A, t=2, itmax=5, compute_v=False, compute_w=False):
    """float64 matrices: the double-float estimator below; everything else as on XLA."""
    from trnscipy._dispatch import call_device
    from trnscipy._dtypes import to_numpy_dtype
    from trnscipy.sparse.linalg._onenormest import _onenormest

    dtype = A.data.dtype if getattr(A, "format", None) in ("csr", "csc", "coo", "bsr", "dia") \
        else getattr(A, "dtype", None)
    if dtype is None or to_numpy_dtype(dtype) != np.float64:
        return _onenormest(A, t, itmax, compute_v, compute_w)
    if type(A).__name__ == "MatrixLinearOperator":  # aslinearoperator of a matrix
        A = A.A
    if not (isinstance(A, torch.Tensor) or getattr(A, "format", None) is not None):
        return _on_host(_scipy.onenormest, {"A": A, "t": t, "itmax": itmax,
                                            "compute_v": compute_v, "compute_w": compute_w},
                        f"a {type(A).__name__} operator has no double-float product",
                        device=call_device((A,)))
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected the operator to act like a square matrix")
    return _df_onenormest(A, t, itmax, compute_v, compute_w)


def _df_onenormest(A, t, itmax, compute_v, compute_w):
    """float64 ``onenormest`` of a matrix on Neuron: SciPy's algorithm 2.4 (the control
    flow of ``_onenormest._core``), the products A X and A^T S in double-float, the column
    sums |A X| and row maxima |A^T S| read to the host as float64 (the decisions SciPy
    takes on them), the estimate and w as double-float results.  The probe vectors
    (+-1 / n, unit vectors) are exact: the same NumPy draws as SciPy's."""
    from trnscipy.sparse.linalg._onenormest import _parallel, _random_signs, _resample

    op, opT = _df_operator(A), _df_operator(_transposed(A))
    device = op.parts[0].device
    n = A.shape[0]
    f32 = torch.float32

    def product(o, X):  # X: exact float32 columns (+-1, unit vectors), scaled by ``scale``
        return o.product((X, torch.zeros_like(X)))

    def col_abs_sums(Y):
        sign = torch.where(Y[0] < 0, -1.0, 1.0)
        s = _df.tree_sum(Y[0] * sign, Y[1] * sign, dim=0)
        return s, _host(s)

    if t >= n:
        E = product(op, torch.eye(n, dtype=f32).to(device))
        sums, host = col_abs_sums(E)
        j = int(np.argmax(host))
        return _result((sums[0][j], sums[1][j]), j, (E[0][:, j], E[1][:, j]), n, device,
                       compute_v, compute_w)
    if itmax < 2:
        raise ValueError("at least two iterations are required")
    if t < 1:
        raise ValueError("at least one column is required")
    X = torch.ones((n, t), dtype=f32).to(device)
    if t > 1:
        for i in range(1, t):
            X[:, i] = _random_signs(n, device, f32)
        for i in range(t):
            _resample(X, i, n)
    scale = _df.div((torch.ones(1, dtype=f32).to(device), torch.zeros(1, dtype=f32).to(device)),
                    (torch.full((1,), float(n), dtype=f32).to(device),
                     torch.zeros(1, dtype=f32).to(device)))  # 1/n in double-float
    first = True
    ind_hist = np.zeros(0, dtype=np.intp)
    est_old = 0
    S = torch.zeros((n, t), dtype=f32).to(device)
    k = 1
    ind = w = ind_best = est_pair = None
    while True:
        Y = product(op, X)
        if first:  # X = signs / n: (A signs) / n in double-float
            Y = _df.mul((scale[0].expand(1, t), scale[1].expand(1, t)), Y)
            first = False
        sums, mags = col_abs_sums(Y)
        est_h = mags.max()
        best_j = int(np.argmax(mags))
        est = (sums[0][best_j], sums[1][best_j])
        if est_h > est_old or k == 2:
            if k >= 2:
                ind_best = ind[best_j]
            w = (Y[0][:, best_j], Y[1][:, best_j])
        if k >= 2 and est_h <= est_old:
            est = est_pair
            break
        est_old, est_pair = est_h, est
        S_old = S
        if k > itmax:
            break
        S = torch.where(Y[0] < 0, -1.0, 1.0)  # SciPy's sign_round_up (0 -> 1)
        if np.all(np.any(_parallel((S.T @ S_old).tolist(), n), axis=1)):
            break
        if t > 1:
            for i in range(t):
                _resample(S, i, n, S_old)
        Z = product(opT, S)
        sign = torch.where(Z[0] < 0, -1.0, 1.0)
        hpair = _extreme((Z[0] * sign, Z[1] * sign), largest=True, dim=1)
        h = _host(hpair)
        if k >= 2 and h.max() == h[ind_best]:
            break
        ind = np.argsort(h, kind="stable")[::-1][:t + len(ind_hist)].copy()
        if t > 1:
            if np.isin(ind[:t], ind_hist).all():
                break
            seen = np.isin(ind, ind_hist)
            ind = np.concatenate((ind[~seen], ind[seen]))
        X = torch.zeros((n, t), dtype=f32).to(device)
        X[torch.as_tensor(ind[:t].copy()).to(device), torch.arange(t).to(device)] = 1
        new_ind = ind[:t][~np.isin(ind[:t], ind_hist)]
        ind_hist = np.concatenate((ind_hist, new_ind))
        k += 1
    return _result(est, int(ind_best), w, n, device, compute_v, compute_w)


def _host(pair):
    """A double-float pair read to the host (one read) as float64."""
    both = torch.stack([pair[0], pair[1]])
    backend(both.device).materialize([both])
    hi, lo = np.asarray(both.cpu(), dtype=np.float64)
    return hi + lo


def _result(est, j, w, n, device, compute_v, compute_w):
    est = _transfer.df_tensor(est[0].reshape(()), est[1].reshape(()))
    if not (compute_v or compute_w):
        return est
    result = (est,)
    if compute_v:
        v = np.zeros(n)
        v[j] = 1
        result += (_transfer.tensor_on(v, device),)
    if compute_w:
        result += (_transfer.df_tensor(*w),)
    return result


def _transposed(A):
    return A.mT if isinstance(A, torch.Tensor) else A.T
