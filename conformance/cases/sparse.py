"""Cases for scipy.sparse: every container class (construction and its operators and
methods) in every format and kind, the constructors and functions, on a fixed 4x4
matrix with an empty row and on generated matrices (conformance.strategies.sparse_matrix:
empty and 1xN/Nx1 shapes, duplicate and unsorted indices, every format and dtype)."""

import functools
import io

import numpy as np
import scipy.sparse as sp

from conformance.registry import Case, draw
from conformance.strategies import sparse_any_format

FORMATS = ("csr", "csc", "coo", "bsr", "dia", "dok", "lil")
DEVICE_FORMATS = ("csr", "csc", "coo", "bsr", "dia")  # formats with a device form
DTYPES = (np.float64, np.float32, np.complex128)
KINDS = ("array", "matrix")
# float32 methods that always run on the XLA lanes (each op and shape compiles there):
# every one for csr_array, the main ones for the other device formats
XLA_METHODS = {"csr_array": ("toarray", "matvec", "matmat", "spgemm", "transpose",
                             "sum-axis0", "add", "multiply", "tocsc", "diagonal"),
               "other": ("toarray", "matvec")}


@functools.cache
def inputs(dtype):
    dtype = np.dtype(dtype)
    dense = np.array([[1, 0, 2, 0], [0, 0, 0, 0], [3, 4, 0, 5], [0, 6, 0, 7]], dtype=dtype)
    if dtype.kind == "c":
        dense = dense * (1 - 0.5j)
    return dict(dense=dense, v=np.array([1.0, -2.0, 0.5, 3.0], dtype=dtype),
                M=np.arange(8, dtype=dtype).reshape(4, 2) - 3)


def sparse_of(fmt, kind, dense):
    return getattr(sp, f"{fmt}_{kind}")(dense)


def _unsorted_csr(kind, dtype):
    """The fixed matrix as CSR with unsorted column indices and a duplicate entry."""
    data = np.array([2, 0.5, 0.5, 5, 3, 4, 7, 6], dtype=dtype)
    indices = np.array([2, 0, 0, 3, 0, 1, 3, 1], dtype=np.int32)
    indptr = np.array([0, 3, 3, 6, 8], dtype=np.int32)
    return getattr(sp, f"csr_{kind}")((data, indices, indptr), shape=(4, 4))


def _m(fn):
    """A call that applies ``fn`` to the (device) arguments, ignoring the class."""
    return lambda cls, *args: fn(*args)


# method tag: (call, needs) with needs in {'S', 'Sv', 'SM'}: the arguments passed
METHODS = {
    "toarray": (_m(lambda s: s.toarray()), "S"),
    "todense": (_m(lambda s: s.todense()), "S"),
    "matvec": (_m(lambda s, v: s @ v), "Sv"),
    "matmat": (_m(lambda s, m: s @ m), "SM"),
    "spgemm": (_m(lambda s: s @ s), "S"),
    "transpose": (_m(lambda s: s.T), "S"),
    "sum": (_m(lambda s: s.sum()), "S"),
    "sum-axis0": (_m(lambda s: s.sum(axis=0)), "S"),
    "sum-axis1": (_m(lambda s: s.sum(axis=1)), "S"),
    "scale": (_m(lambda s: s * 2), "S"),
    "add": (_m(lambda s: s + s), "S"),
    "sub": (_m(lambda s: s - s.T), "S"),
    "neg": (_m(lambda s: -s), "S"),
    "star": (_m(lambda s: s * s), "S"),
    "multiply": (_m(lambda s: s.multiply(s)), "S"),
    "abs": (_m(lambda s: abs(s)), "S"),
    "conj": (_m(lambda s: s.conj()), "S"),
    "power": (_m(lambda s: s.power(2)), "S"),
    "astype": (_m(lambda s: s.astype(np.complex128)), "S"),
    "tocsr": (_m(lambda s: s.tocsr()), "S"),
    "tocsc": (_m(lambda s: s.tocsc()), "S"),
    "tocoo": (_m(lambda s: s.tocoo()), "S"),
    "diagonal": (_m(lambda s: s.diagonal()), "S"),
    "nnz": (_m(lambda s: s.nnz), "S"),
    "count_nonzero": (_m(lambda s: s.count_nonzero()), "S"),
    "max": (_m(lambda s: s.max()), "S"),
    "shape": (_m(lambda s: s.shape), "S"),
    "dtype": (_m(lambda s: s.dtype), "S"),
    "bad-matvec-shape": (_m(lambda s, v: s @ v[:3]), "Sv"),
}
NOT_FOR = {"max": ("dia",)}  # SciPy's dia has no max()


def _method_cases(fmt, kind, s, I, tag, xla, methods=METHODS, xla_always=()):
    attr = f"{fmt}_{kind}"
    for name, (call, needs) in methods.items():
        if (name == "max" and s.dtype.kind == "c") or fmt in NOT_FOR.get(name, ()):
            continue  # SciPy has no complex max, nor dia max
        args = {"S": (s,), "Sv": (s, I["v"]), "SM": (s, I["M"])}[needs]
        yield Case("sparse", attr, f"{name}-{tag}", args, call=call, xla=xla,
                   xla_always=name in xla_always)


def _class_cases():
    for fmt in FORMATS:
        for kind in KINDS:
            attr = f"{fmt}_{kind}"
            for dtype in DTYPES:
                I = inputs(dtype)
                d = np.dtype(dtype).name
                always = ()
                if dtype == np.float32 and fmt in DEVICE_FORMATS and kind == "array":
                    always = XLA_METHODS.get(attr, XLA_METHODS["other"])
                yield Case("sparse", attr, f"from-dense-{d}", (I["dense"],))
                yield Case("sparse", attr, f"from-sparse-{d}", (sp.coo_array(I["dense"]),))
                yield from _method_cases(fmt, kind, sparse_of(fmt, kind, I["dense"]), I, d,
                                         True, xla_always=always)
            if fmt in ("csr", "csc", "coo"):
                dense = inputs(np.float64)["dense"]
                coo = sp.coo_array(dense)
                yield Case("sparse", attr, "from-triplet-float64",
                           ((coo.data, (coo.row, coo.col)),), {"shape": (4, 4)})
            if fmt in ("csr", "csc", "bsr"):
                s = sparse_of(fmt, "array", inputs(np.float64)["dense"])
                yield Case("sparse", attr, "from-parts-float64",
                           ((s.data, s.indices, s.indptr),), {"shape": (4, 4)})
        if fmt == "csr":
            for kind in KINDS:
                yield from _method_cases("csr", kind, _unsorted_csr(kind, np.float64),
                                         inputs(np.float64), "unsorted-dup-float64", False)


def _load_npz_of(s):
    def call(fn, **kwargs):
        buf = io.BytesIO()
        sp.save_npz(buf, s)
        buf.seek(0)
        return fn(buf, **kwargs)

    return call


def _function_cases():
    for dtype in (np.float64, np.float32):
        I = inputs(dtype)
        d = np.dtype(dtype).name
        a = sp.csr_array(I["dense"])
        b = sp.csr_array(I["dense"][:2])
        am = sp.csr_matrix(I["dense"])
        c = sp.coo_array(I["dense"])
        f = "sparse"
        yield from [
            Case(f, "block_array", f"csr-{d}", ([[a, None], [None, b]],)),
            Case(f, "bmat", f"csr-{d}", ([[am, None], [None, am]],)),
            Case(f, "block_diag", f"csr-{d}", ([a, b],)),
            Case(f, "hstack", f"csr-{d}", ([a, a],)),
            Case(f, "hstack", f"coo-{d}", ([c, c],), {"format": "csr"}),
            Case(f, "vstack", f"csr-{d}", ([a, b],)),
            Case(f, "kron", f"csr-{d}", (a, b)),
            Case(f, "kronsum", f"csr-{d}", (a, a)),
            Case(f, "tril", f"csr-{d}", (a,)),
            Case(f, "triu", f"csr-k1-{d}", (a,), {"k": 1}),
            Case(f, "find", f"csr-{d}", (a,)),
            Case(f, "diags", f"vec-{d}", (I["v"],)),
            Case(f, "diags", f"two-{d}", ([I["v"], I["v"][:3]], [0, 1])),
            Case(f, "diags_array", f"vec-{d}", (I["v"],), {"offsets": 1}),
            Case(f, "spdiags", f"two-{d}", (np.stack([I["v"], I["v"]]), [0, 1], 4, 4)),
            Case(f, "expand_dims", f"coo-{d}", (c,), {"axis": 0}),
            Case(f, "permute_dims", f"coo-{d}", (c,)),
            Case(f, "swapaxes", f"coo-{d}", (c, 0, 1)),
            Case(f, "issparse", f"csr-{d}", (a,)),
            Case(f, "isspmatrix", f"csr-matrix-{d}", (am,)),
            Case(f, "get_index_dtype", f"csr-{d}", ((a.indices, a.indptr),)),
            Case(f, "safely_cast_index_arrays", f"csr-{d}", (a,)),
            Case(f, "save_npz", f"csr-{d}", (a,), call=lambda fn, s: fn(io.BytesIO(), s)),
            Case(f, "load_npz", f"csr-{d}", (), call=_load_npz_of(a), device_kwarg=True),
            Case(f, "eye", f"device-{d}", (4,), {"dtype": dtype}, device_kwarg=True),
            Case(f, "eye", f"device-k1-{d}", (4, 5), {"k": 1, "dtype": dtype,
                                                      "format": "csr"}, device_kwarg=True),
            Case(f, "eye_array", f"device-{d}", (4,), {"dtype": dtype}, device_kwarg=True),
            Case(f, "identity", f"device-{d}", (4,), {"dtype": dtype, "format": "csr"},
                 device_kwarg=True),
            Case(f, "random", f"device-seed-{d}", (4, 5), {"density": 0.5, "format": "csr",
                                                         "dtype": dtype, "rng": 3},
                 device_kwarg=True),
            Case(f, "rand", f"device-seed-{d}", (4, 5), {"density": 0.5, "format": "csc",
                                                       "dtype": dtype, "rng": 3},
                 device_kwarg=True),
            Case(f, "random_array", f"device-seed-{d}", ((4, 5),),
                 {"density": 0.5, "dtype": dtype, "rng": 3}, device_kwarg=True),
        ]
        for fmt in FORMATS:
            for kind in KINDS:
                s = sparse_of(fmt, kind, I["dense"])
                yield Case(f, f"isspmatrix_{fmt}", f"{fmt}_{kind}-{d}", (s,))
                if fmt in DEVICE_FORMATS:
                    base = "sparray" if kind == "array" else "spmatrix"
                    yield Case(f, base, f"isinstance-{fmt}_{kind}-{d}", (s,),
                               call=lambda cls, x: isinstance(x, cls))
    I = inputs(np.float64)
    a = sp.csr_array(I["dense"])
    yield Case("sparse", "kron", "bad-1d", (I["v"], a))
    yield Case("sparse", "hstack", "bad-rows", ([a, sp.csr_array(I["dense"][:2])],))


GENERATED_METHODS = {k: METHODS[k] for k in ("toarray", "matvec", "transpose", "sum-axis0",
                                             "add", "tocsr", "nnz")}


def _generated(profile):
    strategy = sparse_any_format(DEVICE_FORMATS)
    if strategy is None:
        return
    seen = set()
    for i, (tag, s) in enumerate(draw(strategy, profile, scale=5)):
        if tag in seen:
            continue
        seen.add(tag)
        fmt, kind = s.format, "array" if isinstance(s, sp.sparray) else "matrix"
        v = np.arange(1, s.shape[1] + 1, dtype=np.float64)
        I = {"v": v, "M": np.stack([v, -v], axis=1)}
        xla = i < profile.xla_examples
        yield from _method_cases(fmt, kind, s, I, f"hyp{i}-{tag}", xla, GENERATED_METHODS)
        yield Case("sparse", "tril", f"hyp{i}-{tag}", (s,), xla=xla)
        yield Case("sparse", "find", f"hyp{i}-{tag}", (s,), xla=xla)


def cases(profile):
    yield from _class_cases()
    yield from _function_cases()
    yield from _generated(profile)
