"""Sparse constructors (``scipy.sparse._construct``) on device data.

Each public function is SciPy's under the routing rule: host inputs go to SciPy
itself and give SciPy's own objects (also inside ``offload()``: constructors
are not offloaded); device operands (trnscipy sparse objects, torch tensors)
give trnscipy sparse objects on their device, of the kind (``*_array`` or
``*_matrix``), format, dtype and index dtype SciPy gives.

trnscipy's addition: ``device=`` on eye, eye_array, identity, diags,
diags_array, spdiags, random, random_array and rand builds the result on that
device directly (its index and data tensors are created there by torch ops).
"""

import functools
import inspect
import math
import numbers
import sys
import warnings

import numpy as np
import scipy.sparse as _sp
from array_api_compat import is_torch_array
from scipy.sparse._sputils import upcast

from trnscipy._capabilities import runs_on_device
from trnscipy._device import device_kind, resolve_device
from trnscipy._dispatch import dispatch, find_device
from trnscipy._dtypes import to_numpy_dtype, to_torch_dtype
from trnscipy._errors import fallback
from trnscipy._kernels import _df, _plan, backend
from trnscipy._torch import torch
from trnscipy._transfer import (
    _to_device,
    _to_host,
    df_tensor,
    df_triple,
    held_as_parts,
    stores_float32,
    tensor_on,
)
from trnscipy.sparse import _sputils as su
from trnscipy.sparse._base import issparse, sparray
from trnscipy.sparse._bsr import bsr_array, bsr_matrix
from trnscipy.sparse._coo import coo_array, coo_matrix
from trnscipy.sparse._csc import csc_array, csc_matrix
from trnscipy.sparse._csr import csr_array, csr_matrix
from trnscipy.sparse._dia import dia_array, dia_matrix

__all__ = ["spdiags", "eye", "eye_array", "identity", "kron", "kronsum", "hstack", "vstack",
           "bmat", "block_array", "block_diag", "diags", "diags_array", "rand", "random",
           "random_array", "expand_dims"]

_INT32_MAX = np.iinfo(np.int32).max
_UNSET = object()  # "dtype not given" (SciPy's deprecated default for diags)

_DEVICE_DOC = """
    trnscipy: ``device`` (keyword only; a name such as 'cpu', 'cuda', 'xla' or a
    torch.device) builds the result on that device, its tensors created there by
    torch ops.  Without it, host inputs give SciPy's own result.
"""


# --------------------------------------------------------------------------- helpers

_PARTS = {"coo": ("data", "row", "col"), "csr": ("data", "indices", "indptr"),
          "csc": ("data", "indices", "indptr"), "bsr": ("data", "indices", "indptr"),
          "dia": ("data", "offsets")}


def _finish(result):
    """``result`` (device sparse object, or tuple of tensors) with its tensors materialised."""
    if isinstance(result, tuple):
        tensors = result
    else:
        tensors = [getattr(result, part) for part in _PARTS.get(result.format, ())]
        major = _plan.get(result, None, "major")
        if major is not None:  # the row index products gather by
            tensors.append(major)
    if tensors:
        backend(tensors[0].device).materialize(tensors)
    return result


_CLASSES = {"bsr": (bsr_matrix, bsr_array), "coo": (coo_matrix, coo_array),
            "csc": (csc_matrix, csc_array), "csr": (csr_matrix, csr_array),
            "dia": (dia_matrix, dia_array)}


def _cls(fmt, array):
    """The trnscipy container class for ``fmt`` ('coo', 'csr', ...) of the given kind."""
    return _CLASSES[fmt][bool(array)]


def _is_sparray(x):
    return isinstance(x, (_sp.sparray, sparray))


def _is_sparse(x):
    return _sp.issparse(x) or issparse(x)


def _is_tensor(x):
    return is_torch_array(x)


_SCALARS = frozenset({int, float, complex, bool, str, type(None)})


def _is_torch_generator(x):
    torch_module = sys.modules.get("torch")  # no torch imported: not a torch.Generator
    return torch_module is not None and isinstance(x, torch_module.Generator)


def _np_dtype(x):
    """NumPy dtype of a tensor, device object, ndarray or array-like."""
    if _is_tensor(x):
        return to_numpy_dtype(x.dtype)
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(x).dtype


def _index_dtype(maxval, *arrays):
    """SciPy's index dtype rule: int64 if ``maxval`` or any index array needs it."""
    if maxval > _INT32_MAX or any(a.dtype == torch.int64 for a in arrays):
        return torch.int64
    return torch.int32


def _tensor(x, device, dtype=None):
    """``x`` (tensor, ndarray, list, scalar) as a tensor on ``device``."""
    return tensor_on(x if _is_tensor(x) else np.asarray(x), device,
                     to_torch_dtype(dtype) if dtype is not None else None)


def _host_ints(x):
    """Offsets and the like, given as ints, lists, ndarrays or tensors, as an int ndarray."""
    if _is_tensor(x):
        x = _to_host(x, strict=True)
    return np.atleast_1d(np.asarray(x))


def _empty_coo(shape, array, device, dtype=np.float64):
    idx = _index_dtype(max(shape, default=0))
    empty = torch.zeros(0, dtype=idx, device=device)
    data = torch.zeros(0, dtype=to_torch_dtype(dtype), device=device)
    return _cls("coo", array)((data, (empty, empty.clone())), shape=shape)


def _with_device_keyword(scipy_func, dtype_of, double_float=()):
    """Decorator: ``dispatch(scipy_func, offloadable=False, double_float=...)`` on the
    device implementation, plus trnscipy's ``device=`` keyword.

    With ``device`` given (or a torch.Generator as ``rng``) the implementation
    runs on that device, after the capability table accepts the result dtype
    ``dtype_of(bound arguments)``; otherwise the routing rule applies.
    """
    name = f"{scipy_func.__module__}.{scipy_func.__name__}"

    def decorate(impl):
        routed = _routed(scipy_func, double_float)(impl)
        impl_signature = inspect.signature(impl)

        @functools.wraps(routed)
        def wrapper(*args, device=None, **kwargs):
            if device is None:
                generator = next((x for x in (*args, *kwargs.values())
                                  if type(x) not in _SCALARS and _is_torch_generator(x)),
                                 None)
                if generator is None:
                    return routed(*args, **kwargs)
                device = generator.device
            device = resolve_device(device)
            found = find_device(args, kwargs)
            if found is not None and found != device:
                raise ValueError(f"device={device} but the operands are on {found}")
            bound = impl_signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if runs_on_device(name, device_kind(device), dtype_of(bound.arguments)):
                return _finish(impl(*args, device=device, **kwargs))
            host_args = [_to_host(x, strict=False) for x in args]
            host_kwargs = {k: _to_host(v, strict=False) for k, v in kwargs.items()}
            return _to_device(scipy_func(*host_args, **host_kwargs), device, strict=False)

        wrapper._trnscipy_route = "device"
        wrapper._trnscipy_device_impl = impl
        signature = inspect.signature(scipy_func)
        device_param = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None)
        params = list(signature.parameters.values())
        if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
            params.insert(len(params) - 1, device_param)
        else:
            params.append(device_param)
        wrapper.__signature__ = signature.replace(parameters=params)
        wrapper.__doc__ = (scipy_func.__doc__ or "") + _DEVICE_DOC + (impl.__doc__ or "")
        return wrapper

    return decorate


def _explicit_dtype(arguments):
    dtype = arguments.get("dtype")
    return np.dtype(np.float64 if dtype is None else dtype)


def _routed(scipy_func, double_float=()):
    """``dispatch(scipy_func, offloadable=False, double_float=...)`` on the device
    implementation, whose results are materialised (see ``_finish``)."""

    def decorate(impl):
        @functools.wraps(impl)
        def finished(*args, **kwargs):
            return _finish(impl(*args, **kwargs))

        return dispatch(scipy_func, offloadable=False, double_float=double_float)(finished)

    return decorate


# Constructors that only place values moved exactly (given diagonals, the host's draws)
# or built exactly (ones): they run on a device without float64 (docs/design.md).
_DOUBLE_FLOAT = ("neuron",)


# --------------------------------------------------------------------------- diagonals


def _diagonals_dtype(diagonals, dtype):
    """SciPy's result dtype for ``diags_array`` (``dtype`` may be _UNSET or None)."""
    dtypes = [_np_dtype(d) for d in diagonals]
    if dtype is None:
        return np.result_type(*dtypes)
    if dtype is _UNSET:
        old = np.dtype(np.common_type(*(np.empty(0, dt) for dt in dtypes)))
        future = np.result_type(*dtypes)
        if old != future:
            warnings.warn(f"Input has data type {future}, but the output has been cast to "
                          f"{old}.  In the future, the output data type will match the input. "
                          "To avoid this warning, set the `dtype` parameter to `None` to have "
                          "the output dtype match the input, or set it to the desired output "
                          "data type.", FutureWarning, stacklevel=5)
        return old
    return np.dtype(dtype)


def _isscalarlike(x):
    if _is_tensor(x):
        return x.ndim == 0
    return np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0)


def _normalize_diagonals(diagonals, offsets):
    if _isscalarlike(offsets):
        if len(diagonals) == 0 or _isscalarlike(diagonals[0]):
            diagonals = [diagonals]
        else:
            raise ValueError("Different number of diagonals and offsets.")
    else:
        diagonals = list(diagonals)
    offsets = _host_ints(offsets)
    if len(diagonals) != len(offsets):
        raise ValueError("Different number of diagonals and offsets.")
    return diagonals, [int(o) for o in offsets]


def _diags_dtype_of(arguments):
    diagonals, _ = _normalize_diagonals(arguments["diagonals"], arguments["offsets"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the implementation warns
        return _diagonals_dtype(diagonals, arguments["dtype"])


def _diags(diagonals, offsets, shape, format, dtype, array, device):
    diagonals, offsets = _normalize_diagonals(diagonals, offsets)
    device = device if device is not None else find_device(diagonals)
    diagonals = [torch.atleast_1d(_tensor(d, device)) for d in diagonals]
    if shape is None:
        m = len(diagonals[0]) + abs(offsets[0])
        shape = (m, m)
    dtype = _diagonals_dtype(diagonals, dtype)
    m, n = (int(s) for s in shape)
    width = max(0, max(min(m + o, n - o) + max(0, o) for o in offsets))
    data = torch.zeros((len(offsets), width), dtype=to_torch_dtype(dtype), device=device)
    for j, (diagonal, offset) in enumerate(zip(diagonals, offsets, strict=True)):
        start = max(0, offset)
        length = min(m + offset, n - offset, m, n)
        if length < 0:
            raise ValueError(f"Offset {offset} (index {j}) out of bounds")
        if diagonal.ndim != 1 or (len(diagonal) < length and len(diagonal) != 1):
            raise ValueError(f"Diagonal length (index {j}: {len(diagonal)} at offset {offset}) "
                             f"does not agree with array size ({m}, {n}).")
        values = diagonal[:length] if len(diagonal) >= length else diagonal.expand(length)
        data[j, start:start + length] = values.to(data.dtype)
    index = _index_dtype(max(m, n))
    offsets = torch.tensor(offsets, dtype=index, device=device)
    return _cls("dia", array)((data, offsets), shape=(m, n)).asformat(format)


@_with_device_keyword(_sp.diags_array, _diags_dtype_of, _DOUBLE_FLOAT)
def diags_array(diagonals, /, *, offsets=0, shape=None, format=None, dtype=_UNSET, device=None):
    return _diags(diagonals, offsets, shape, format, dtype, True, device)


@_with_device_keyword(_sp.diags, _diags_dtype_of, _DOUBLE_FLOAT)
def diags(diagonals, offsets=0, shape=None, format=None, dtype=_UNSET, device=None):
    return _diags(diagonals, offsets, shape, format, dtype, False, device)


@_with_device_keyword(_sp.spdiags, lambda arguments: _np_dtype(arguments["data"]),
                      _DOUBLE_FLOAT)
def spdiags(data, diags, m=None, n=None, format=None, device=None):
    device = device if device is not None else find_device((data,))
    if m is None and n is None:
        m = n = len(data[0])
    elif n is None:
        m, n = m
    offsets = _host_ints(diags)
    index = _index_dtype(max(m, n))
    offsets = torch.as_tensor(offsets, device=device).to(index)
    return _cls("dia", False)((_tensor(data, device), offsets), shape=(m, n)).asformat(format)


# --------------------------------------------------------------------------- identity


def _ones(shape, torch_dtype, device):
    """Ones on ``device``; float64 (complex128) on a device without float64 as exact
    double-float storage (float32 ones, zero low parts): no float64 arithmetic."""
    if torch_dtype in (torch.float64, torch.complex128) and stores_float32(device):
        narrow = torch.complex64 if torch_dtype.is_complex else torch.float32
        return tensor_on(torch.ones(shape, dtype=narrow, device=device), device, torch_dtype)
    return torch.ones(shape, dtype=torch_dtype, device=device)


def _eye(m, n, k, dtype, format, array, device):
    n = m if n is None else n
    m, n, k = int(m), int(n), int(k)
    torch_dtype = to_torch_dtype(np.dtype(dtype))
    # csr/csc/coo built directly: a DIA conversion compares the values with zero
    # (arithmetic on a device without float64); a bad offset raises in _diags
    if format in ("csr", "csc", "coo") and min(m + k, n - k, m, n) >= 0:
        first_row, first_col = max(0, -k), max(0, k)
        length = max(0, min(m - first_row, n - first_col))
        index = _index_dtype(max(m, n))
        ones = _ones(length, torch_dtype, device)
        rows = torch.arange(first_row, first_row + length, dtype=index, device=device)
        cols = torch.arange(first_col, first_col + length, dtype=index, device=device)
        if format == "coo":
            return _cls("coo", array)((ones, (rows, cols)), shape=(m, n))
        # row (column) i's entry, if any, is entry i - first_row (i - first_col)
        first, minor, size = (first_row, cols, m) if format == "csr" else (first_col, rows, n)
        indptr = torch.arange(-first, size + 1 - first, dtype=index,
                              device=device).clamp(0, length)
        return _cls(format, array)((ones, minor, indptr), shape=(m, n))
    data = _ones((1, max(0, min(m + k, n))), torch_dtype, device)
    return _diags(data, [k], (m, n), format, dtype, array, device)


@_with_device_keyword(_sp.eye, _explicit_dtype, _DOUBLE_FLOAT)
def eye(m, n=None, k=0, dtype=float, format=None, device=None):
    return _eye(m, n, k, dtype, format, False, resolve_device(device))


@_with_device_keyword(_sp.eye_array, _explicit_dtype, _DOUBLE_FLOAT)
def eye_array(m, n=None, *, k=0, dtype=float, format=None, device=None):
    return _eye(m, n, k, dtype, format, True, resolve_device(device))


@_with_device_keyword(_sp.identity, _explicit_dtype, _DOUBLE_FLOAT)
def identity(n, dtype="d", format=None, device=None):
    return _eye(n, n, 0, dtype, format, False, resolve_device(device))


# --------------------------------------------------------------------------- kron


def _ndim(x):
    return x.ndim if _is_sparse(x) or _is_tensor(x) else np.ndim(x)


def _as_row(x):
    """A 1-D sparse array as a (1, n) one of its format (SciPy's stacking, block and
    Kronecker functions take a 1-D array as one row); anything else as it is."""
    if _is_sparse(x) and x.ndim == 1:
        return x.reshape((1, x.shape[0])).asformat(x.format)
    return x


def _as(fmt, x, array, device, copy=False):
    """``x`` (device sparse, tensor, list) as a device sparse object of ``fmt`` and kind.

    A 1-D dense operand is taken as one row, as SciPy's matrices (and its array
    Kronecker products, which prepend a unit axis) do."""
    if not _is_sparse(x):
        x = _tensor(x, device)
        if x.ndim < 2:
            x = x.reshape(1, -1)
    x = _as_row(x)
    return _cls(fmt, array)(x, copy=copy) if copy else _cls(fmt, array)(x)


def _outer(a, b, dtype, device, shape):
    """The products a_i * b_j of 1-D ``a``, ``b`` in ``dtype``, reshaped to ``shape``.
    float64 on a device without float64: triple-float products of the exact parts
    (float32 ops only), within a unit of float64 rounding of the float64 products."""
    if held_as_parts(dtype, device):
        a = df_triple(tensor_on(a, device, dtype))
        b = df_triple(tensor_on(b, device, dtype))
        parts = _df.mul3([p[:, None] for p in a], [p[None, :] for p in b])
        return df_tensor(*(p.reshape(shape) for p in parts))
    return (a.to(dtype)[:, None] * b.to(dtype)[None, :]).reshape(shape)


def _kron(A, B, format, array):
    device = find_device((A, B))
    ndim_a, ndim_b = _ndim(A), _ndim(B)
    B = _as("coo", B, array, device)
    dense_b = 2 * B.nnz >= math.prod(B.shape)
    if format in (None, "bsr") and (ndim_b == 2 or not array) and dense_b \
            and (ndim_a == 2 or not array):  # SciPy's BSR route: A's entries times dense B
        A = _as("csr", A, array, device, copy=True)
        out_shape = (A.shape[0] * B.shape[0], A.shape[1] * B.shape[1])
        if A.nnz == 0 or B.nnz == 0:
            return _empty_coo(out_shape, array, device).asformat(format)
        dtype = to_torch_dtype(np.result_type(A.dtype, B.dtype))
        blocks = _outer(A.data, B.toarray().reshape(-1), dtype, device, (A.nnz, *B.shape))
        return _cls("bsr", array)((blocks, A.indices, A.indptr), shape=out_shape)
    A = _as("coo", A, array, device)
    out_shape = (A.shape[0] * B.shape[0], A.shape[1] * B.shape[1])
    if A.nnz == 0 or B.nnz == 0:
        return _empty_coo(out_shape, array, device).asformat(format)
    index = _index_dtype(max(out_shape), A.row)
    row = A.row.to(torch.int64)[:, None] * B.shape[0] + B.row.to(torch.int64)[None, :]
    col = A.col.to(torch.int64)[:, None] * B.shape[1] + B.col.to(torch.int64)[None, :]
    dtype = to_torch_dtype(np.result_type(A.dtype, B.dtype))
    data = _outer(A.data, B.data, dtype, device, (-1,))
    coords = (row.reshape(-1).to(index), col.reshape(-1).to(index))
    return _cls("coo", array)((data, coords), shape=out_shape).asformat(format)


@_routed(_sp.kron, _DOUBLE_FLOAT)
def kron(A, B, format=None):
    out = _kron(A, B, format, _is_sparray(A) or _is_sparray(B))
    if _ndim(A) == 1 and _ndim(B) == 1 and (_is_sparse(A) or _is_sparse(B)):
        return out.reshape((out.shape[1],)).asformat(format)  # 1-D, as SciPy
    return out


@_routed(_sp.kronsum, _DOUBLE_FLOAT)
def kronsum(A, B, format=None):
    array = _is_sparray(A) or _is_sparray(B)
    device = find_device((A, B))
    A, B = _as("coo", A, array, device), _as("coo", B, array, device)
    if A.shape[0] != A.shape[1]:
        raise ValueError("A is not square")
    if B.shape[0] != B.shape[1]:
        raise ValueError("B is not square")
    dtype = upcast(A.dtype, B.dtype)
    I_n = _eye(A.shape[0], None, 0, dtype, None, array, device)
    I_m = _eye(B.shape[0], None, 0, dtype, None, array, device)
    L = _kron(I_m, A, "coo", array)
    R = _kron(B, I_n, "coo", array)
    return (L + R).asformat(format)


# --------------------------------------------------------------------------- blocks


def _grid(blocks):
    """``blocks`` as a 2-D object ndarray, without NumPy looking inside tensors."""
    if isinstance(blocks, np.ndarray):
        grid = blocks
    else:
        rows = list(blocks)
        if not rows or not all(type(r) in (list, tuple) for r in rows) \
                or len({len(r) for r in rows}) != 1:
            raise ValueError("blocks must be 2-D")
        grid = np.empty((len(rows), len(rows[0])), dtype=object)
        for i, row in enumerate(rows):
            for j, block in enumerate(row):
                grid[i, j] = block
    if grid.ndim != 2:
        raise ValueError("blocks must be 2-D")
    return grid


def _lengths(grid, shapes):
    """Row heights and column widths of the block grid (SciPy's checks and messages)."""
    M, N = grid.shape
    heights, widths = [0] * M, [0] * N
    for (i, j), shape in shapes.items():
        if heights[i] == 0:
            heights[i] = shape[0]
        elif heights[i] != shape[0]:
            raise ValueError(f"blocks[{i},:] has incompatible row dimensions. Got "
                             f"blocks[{i},{j}].shape[0] == {shape[0]}, expected {heights[i]}.")
        if widths[j] == 0:
            widths[j] = shape[1]
        elif widths[j] != shape[1]:
            raise ValueError(f"blocks[:,{j}] has incompatible column dimensions. Got "
                             f"blocks[{i},{j}].shape[1] == {shape[1]}, expected {widths[j]}.")
    return heights, widths


def _stack_compressed(grid, fmt, array):
    """All blocks CSR (or all CSC): stack the compressed arrays, keeping every
    block's entries and their order (duplicates and unsorted indices stay), as SciPy."""
    if fmt == "csc":
        grid = grid.T  # a CSC grid is the CSR grid of the transposes
    M, N = grid.shape
    major = [[b.shape[0] if fmt == "csr" else b.shape[1] for b in row] for row in grid]
    minor = [[b.shape[1] if fmt == "csr" else b.shape[0] for b in row] for row in grid]
    for i in range(M):
        if len(set(major[i])) != 1:
            raise ValueError(f"Mismatching dimensions along axis {0 if fmt == 'csr' else 1}: "
                             f"{set(major[i])}")
    for j in range(N):
        if len({minor[i][j] for i in range(M)}) != 1:
            raise ValueError(f"incompatible dimensions for axis {1 if fmt == 'csr' else 0}")
    heights = [major[i][0] for i in range(M)]
    widths = [minor[0][j] for j in range(N)]
    blocks = list(grid.flat)
    nnz = sum(int(b.indices.shape[0]) for b in blocks)
    index = _index_dtype(max(nnz, sum(widths)), *(b.indptr for b in blocks))
    col_starts = np.cumsum([0] + widths[:-1])
    datas, indices, rows, indptrs = [], [], [], []
    nnz_before = 0
    for i in range(M):
        row_start = sum(heights[:i])
        row_indptr = sum(b.indptr.to(torch.int64) for b in grid[i])
        indptrs.append((row_indptr[:-1] if i < M - 1 else row_indptr) + nnz_before)
        nnz_before += sum(int(b.indices.shape[0]) for b in grid[i])
        for j, b in enumerate(grid[i]):
            count = int(b.indices.shape[0])
            datas.append(b.data)
            indices.append(b.indices.to(torch.int64) + int(col_starts[j]))
            if N > 1:
                lengths = (b.indptr[1:] - b.indptr[:-1]).to(torch.int64)
                local = torch.arange(heights[i], device=b.data.device)
                rows.append(torch.repeat_interleave(local, lengths, output_size=count)
                            + row_start)
    dtype = to_torch_dtype(upcast(*(b.dtype for b in blocks)))
    data = torch.cat([d.to(dtype) for d in datas])
    indices = torch.cat(indices)
    if N > 1:  # entries of a row: block by block, each block's in its order
        order = su.argsort(torch.cat(rows), stable=True)
        data, indices = data[order], indices[order]
    indptr = torch.cat(indptrs)
    shape = (sum(heights), sum(widths))
    if fmt == "csc":
        shape = shape[::-1]
    return _cls(fmt, array)((data, indices.to(index), indptr.to(index)), shape=shape)


def _block(blocks, format, dtype, array):
    grid = _grid(blocks).copy()
    for ij, b in np.ndenumerate(grid):
        grid[ij] = _as_row(b)
    present = [b for b in grid.flat if b is not None]
    for fmt in ("csr", "csc"):
        if format in (None, fmt) and len(present) == grid.size \
                and all(_is_sparse(b) and b.format == fmt for b in present):
            result = _stack_compressed(grid, fmt, array)
            return result if dtype is None else result.astype(dtype, copy=False)
    device = find_device(present)
    coos = {}
    for (i, j), block in np.ndenumerate(grid):
        if block is not None:
            coos[i, j] = _cls("coo", True)(block)
    heights, widths = _lengths(grid, {ij: b.shape for ij, b in coos.items()})
    if dtype is None:
        dtype = upcast(*(b.dtype for b in coos.values())) if coos else np.float64
    row_starts, col_starts = np.cumsum([0] + heights), np.cumsum([0] + widths)
    shape = (int(row_starts[-1]), int(col_starts[-1]))
    index = _index_dtype(max(shape), *(b.row for b in coos.values()))
    torch_dtype = to_torch_dtype(dtype)
    data = [torch.zeros(0, dtype=torch_dtype, device=device)]
    rows = [torch.zeros(0, dtype=index, device=device)]
    cols = [torch.zeros(0, dtype=index, device=device)]
    for (i, j), b in sorted(coos.items()):
        data.append(b.data.to(torch_dtype))
        rows.append((b.row.to(torch.int64) + int(row_starts[i])).to(index))
        cols.append((b.col.to(torch.int64) + int(col_starts[j])).to(index))
    coords = (torch.cat(rows), torch.cat(cols))
    return _cls("coo", array)((torch.cat(data), coords), shape=shape).asformat(format)


def _object_arrays_as_lists(routed):
    """Let the routing rule see device blocks given in an object ndarray (SciPy
    accepts ``blocks`` as one): pass such an array on as nested lists."""

    @functools.wraps(routed)
    def wrapper(blocks, *args, **kwargs):
        if isinstance(blocks, np.ndarray) and blocks.dtype == object:
            blocks = blocks.tolist()
        return routed(blocks, *args, **kwargs)

    return wrapper


def _blocks_kind(blocks):
    return any(_is_sparray(b) for b in _grid(blocks).flat)


@_object_arrays_as_lists
@_routed(_sp.hstack)
def hstack(blocks, format=None, dtype=None):
    grid = [list(blocks)]
    return _block(grid, format, dtype, _blocks_kind(grid))


@_object_arrays_as_lists
@_routed(_sp.vstack)
def vstack(blocks, format=None, dtype=None):
    grid = [[b] for b in blocks]
    return _block(grid, format, dtype, _blocks_kind(grid))


@_object_arrays_as_lists
@_routed(_sp.bmat)
def bmat(blocks, format=None, dtype=None):
    return _block(blocks, format, dtype, _blocks_kind(blocks))


@_object_arrays_as_lists
@_routed(_sp.block_array)
def block_array(blocks, *, format=None, dtype=None):
    return _block(blocks, format, dtype, True)


@_routed(_sp.block_diag)
def block_diag(mats, format=None, dtype=None):
    mats = list(mats)
    array = any(_is_sparray(a) for a in mats)
    device = find_device(mats)
    rows, cols, datas, first_int64 = [], [], [], []
    r, c = 0, 0
    for a in map(_as_row, mats):
        if isinstance(a, (list, numbers.Number)):  # SciPy keeps only their nonzeros
            a = _cls("coo", True)(_tensor(np.atleast_2d(a), device))
        if _is_sparse(a):
            a = a.tocoo()
            if not first_int64 and a.row.dtype == torch.int64:
                first_int64.append(a.row)
            nrows, ncols = a.shape
            row, col, values = a.row, a.col, a.data
        else:  # a dense block keeps all its entries, zeros too
            nrows, ncols = a.shape
            flat = torch.arange(nrows * ncols, device=device)
            row, col, values = flat // max(ncols, 1), flat % max(ncols, 1), a.reshape(-1)
        rows.append(row.to(torch.int64) + r)
        cols.append(col.to(torch.int64) + c)
        datas.append(values)
        r, c = r + nrows, c + ncols
    index = _index_dtype(max(r, c), *first_int64)
    data_dtype = to_torch_dtype(np.result_type(*(_np_dtype(d) for d in datas)))
    data = torch.cat([d.to(data_dtype) for d in datas])
    coords = (torch.cat(rows).to(index), torch.cat(cols).to(index))
    result = _cls("coo", array)((data, coords), shape=(r, c))
    if dtype is not None:
        result = result.astype(dtype)
    return result.asformat(format)


# --------------------------------------------------------------------------- random


def _positions(total, size, generator, device):
    """``size`` distinct flat positions out of ``total``, uniformly, in random order."""
    if size > total // 8 or total <= 1 << 20:
        return torch.randperm(total, generator=generator, device=device)[:size]
    chosen = torch.zeros(0, dtype=torch.int64, device=device)
    while True:  # sample with replacement; the distinct values are a uniform subset
        draw = torch.randint(0, total, (size + size // 8 + 16,), generator=generator,
                             device=device)
        chosen = torch.unique(torch.cat([chosen, draw]))
        if chosen.numel() >= size:
            pick = torch.randperm(chosen.numel(), generator=generator, device=device)[:size]
            return chosen[pick]


def _default_values(size, dtype, generator, device):
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return torch.randint(int(info.min), int(info.max), (size,), generator=generator,
                             dtype=to_torch_dtype(dtype), device=device)
    if dtype.kind == "c":
        real = torch.float32 if dtype == np.complex64 else torch.float64
        parts = torch.rand((2, size), generator=generator, dtype=real, device=device)
        return torch.complex(parts[0], parts[1])
    real = to_torch_dtype(dtype) if dtype.kind == "f" else torch.float64
    if real == torch.float64 and stores_float32(device):  # no float64 draws there: float32
        # uniforms (24 random bits), held exactly as float64
        draws = torch.rand(size, generator=generator, dtype=torch.float32, device=device)
        return tensor_on(draws, device, torch.float64)
    return torch.rand(size, generator=generator, dtype=real, device=device)


def _random(shape, density, format, dtype, generator, sampler, array, device):
    """The random COO built on ``device`` with ``generator`` (None: the device's default)."""
    if density < 0 or density > 1:
        raise ValueError("density expected to be 0 <= density <= 1")
    if len(shape) == 1 and array:  # a 1-D sparse array: the (1, n) one, reshaped
        out = _random((1, shape[0]), density, "coo", dtype, generator, sampler, True, device)
        return out.reshape((int(shape[0]),)).asformat(format)
    if len(shape) != 2:
        raise ValueError(f"trnscipy's device sparse arrays are 1-D or 2-D, not shape "
                         f"{shape}")
    m, n = (int(s) for s in shape)
    size = int(round(density * m * n))
    flat = _positions(m * n, size, generator, device)
    index = _index_dtype(max(m, n))
    row, col = (flat % max(m, 1)).to(index), (flat // max(m, 1)).to(index)
    value_dtype = np.dtype(np.float64 if dtype is None else dtype)
    if sampler is None:
        values = _default_values(size, value_dtype, generator, device)
    else:
        values = sampler(size)
    values = _tensor(values, device, value_dtype)
    return _cls("coo", array)((values, (row, col)), shape=(m, n)).asformat(format)


def _host_generator(rng):
    """True when ``rng`` is a NumPy randomness source (seed, Generator, RandomState...)."""
    return rng is not None and not _is_torch_generator(rng)


_RANDOM_DOC = """
    trnscipy, on device: with ``rng`` None (torch's default generator of the
    device) or a torch.Generator, the sparsity structure and the values are drawn
    on the device by torch: SciPy's distributions, not NumPy's numbers.  A NumPy
    randomness source (an int seed, Generator, RandomState; also ``random_state``)
    draws on the host exactly as SciPy does and the result is moved to the
    device (exactly, also to a device without float64).  On a device without
    float64, float64 values drawn by torch are float32 uniforms (24 random
    bits) held exactly as float64.  A torch.Generator as ``rng`` builds on its
    device when ``device`` is not given.
"""


def _random_matrix(m, n, density, format, dtype, rng, data_rvs, random_state, device):
    source = rng if random_state is None else random_state
    if _host_generator(source):
        key = "rng" if random_state is None else "random_state"
        host = _sp.random(m, n, density, format, dtype, data_rvs=data_rvs, **{key: source})
        return _to_device(host, device, strict=True)
    n = m if n is None else n
    return _random((m, n), density, format, dtype, source, data_rvs, False, device)


@_with_device_keyword(_sp.random_array, _explicit_dtype, _DOUBLE_FLOAT)
def random_array(shape, *, density=0.01, format="coo", dtype=None, rng=None,
                 data_sampler=None, random_state=None, device=None):
    source = rng if random_state is None else random_state
    if _host_generator(source):
        key = "rng" if random_state is None else "random_state"
        host = _sp.random_array(shape, density=density, format=format, dtype=dtype,
                                data_sampler=data_sampler, **{key: source})
        return _to_device(host, device, strict=True)
    sampler = None if data_sampler is None else (lambda size: data_sampler(size=size))
    return _random(tuple(shape), density, format, dtype, source, sampler, True, device)


@_with_device_keyword(_sp.random, _explicit_dtype, _DOUBLE_FLOAT)
def random(m, n, density=0.01, format="coo", dtype=None, rng=None, data_rvs=None, *,
           random_state=None, device=None):
    return _random_matrix(m, n, density, format, dtype, rng, data_rvs, random_state, device)


@_with_device_keyword(_sp.rand, _explicit_dtype, _DOUBLE_FLOAT)
def rand(m, n, density=0.01, format="coo", dtype=None, rng=None, *, random_state=None,
         device=None):
    return _random_matrix(m, n, density, format, dtype, rng, None, random_state, device)


for _f in (random_array, random, rand):
    _f.__doc__ += _RANDOM_DOC
del _f


# --------------------------------------------------------------------------- axes


@dispatch(_sp.expand_dims, composite=True)
def expand_dims(A, /, *, axis=0):
    """A 1-D sparse array becomes a (1, n) or (n, 1) coo_array on its device (data
    movement only: float64 stays exact on a device without it); a 2-D input gives SciPy's
    3-D coo_array on the host with a DeviceFallbackWarning (trnscipy's device containers
    have at most 2 dimensions, so the result cannot go back to the device)."""
    if not isinstance(axis, (int, np.integer)):
        raise ValueError(f"Invalid axis {axis}. Must be an integer.")
    ndim = A.ndim
    idx = axis if axis >= 0 else axis + ndim + 1
    if not 0 <= idx <= ndim:
        raise ValueError(f"Invalid axis {axis} for N={ndim}. Must be in [-N-1, N].")
    if ndim != 1:
        fallback("scipy.sparse.expand_dims", "the result has more than 2 dimensions, "
                 "which trnscipy's device containers cannot hold; it is SciPy's host "
                 "coo_array", stacklevel=5)
        return _sp.expand_dims(_to_host(A, strict=True), axis=axis)
    coo = A.tocoo(copy=True)
    zeros = torch.zeros_like(coo.col)
    n = A.shape[0]
    row, col, shape = (zeros, coo.col, (1, n)) if idx == 0 else (coo.col, zeros, (n, 1))
    return _cls("coo", True)._construct(shape, row=row, col=col, data=coo.data,
                                        _canonical=coo.has_canonical_format)
