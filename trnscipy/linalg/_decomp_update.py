"""qr_update, qr_insert and qr_delete on device tensors.

SciPy's sequences of plane rotations and reflectors (its ``_decomp_update.pyx``: LAPACK's
``lartg``/``larfg`` conventions), so that Q and R equal SciPy's to rounding, signs
included, also the trailing columns of a full Q that the factorization leaves free.  Each
sweep is one ``device_loop`` of fixed-shape steps over the whole stack: a step gathers the
two rows it rotates (or the rows a reflector spans), updates them and writes them back
with ``index_copy``.  What varies per matrix (the index ``k`` of a stack) enters as masks:
a step outside a matrix's range rotates by the identity.  CPU tensors run SciPy itself on
zero-copy views.  float64 on Neuron (no float64 arithmetic): the float32 sequence on the
high parts, refined by the double-float QR refinement of the updated matrix
(``_refine_orth``).
"""

import contextlib
import math

import numpy as np
import scipy.linalg as _sl
from array_api_compat import is_torch_array

from trnscipy._dispatch import behaved, contiguity, dispatch
from trnscipy._double_float import is_exact
from trnscipy._kernels import backend, kernel, register
from trnscipy._torch import torch
from trnscipy._transfer import tensor_on
from trnscipy.linalg._validate import LinAlgError, device_of
from trnscipy.linalg._validate import check_finite as _check_finite

__all__ = ["qr_update", "qr_insert", "qr_delete"]

_DTYPES = ("float32", "float64", "complex64", "complex128")


# ----------------------------------------------------------------------------------------
# SciPy's argument checks (its messages)


def _tensor(x, device):
    if not is_torch_array(x):
        x = np.asarray(x)
        if x.dtype.kind not in "biufc":
            raise ValueError("Only arrays with dtypes float32, float64, complex64, and "
                             "complex128 are supported.")
    return tensor_on(x, device)


def _name(t):
    return str(t.dtype).removeprefix("torch.")


def _validate_qr(Q, R, device):
    """(Q, R, economic) as SciPy's validate_qr checks them (stacks: the last two axes); the
    finiteness check is the caller's (``_checked_after``)."""
    Q, R = _tensor(Q, device), _tensor(R, device)
    if Q.ndim < 2 or R.ndim < 2:
        raise ValueError("Q and R must be 2-D")
    if Q.dtype != R.dtype:
        raise ValueError("Q and R must have the same dtype")
    if _name(Q) not in _DTYPES:
        raise ValueError("Only arrays with dtypes float32, float64, complex64, and "
                         "complex128 are supported.")
    qs, rs = tuple(Q.shape[-2:]), tuple(R.shape[-2:])
    if qs[1] != rs[0]:
        raise ValueError("Q and R do not have compatible shapes. Expected (M,M) (M,N) or "
                         f"(M,N) (N,N) but found {qs} {rs} for Q and R respectively")
    economic = qs[0] != qs[1] and rs[0] == rs[1]
    if qs[0] != qs[1] and not economic:
        raise ValueError(f"Expected (M,M) (M,N) or (M,N) (N,N) but found {qs} {rs} for Q "
                         "and R respectively")
    return Q, R, economic


@contextlib.contextmanager
def _checked_after(finite, Q, R):
    """SciPy checks Q and R for inf and NaN before the other arguments: where one of those
    checks fails, Q and R are checked first (one host read, as the call's single check of
    all its operands otherwise)."""
    try:
        yield
    except ValueError:
        if finite:
            _check_finite(Q, R)
        raise


def _stack(Q, R, *others):
    """The operands broadcast to one batch: (Q, R, others, batch shape)."""
    batch = torch.broadcast_shapes(Q.shape[:-2], R.shape[:-2],
                                   *(x.shape[:-c] if c else x.shape for x, c in others))
    Q = Q.expand(batch + Q.shape[-2:])
    R = R.expand(batch + R.shape[-2:])
    others = tuple(x.expand(batch + (x.shape[x.ndim - c:] if c else ())) for x, c in others)
    return Q, R, others, batch


def _index(k, bound, batch, inclusive=False):
    """``k`` (an int, or a stack's integers: read once) as a NumPy int array of the batch
    shape, negative values counted from ``bound``; SciPy's error when out of range
    (``inclusive``: k = bound allowed, an insertion after the last row or column)."""
    if is_torch_array(k):
        k = k.cpu().numpy()  # (an index: metadata, read once for the stack)
    k = np.asarray(k)
    if k.dtype.kind not in "iub":
        k = k.astype(np.int64)  # (SciPy: its int conversion)
    if np.any(k < -bound) or np.any(k > bound if inclusive else k >= bound):
        raise ValueError("'k' is out of bounds")
    return np.broadcast_to(np.where(k < 0, k + bound, k), batch).astype(np.int64)


# ----------------------------------------------------------------------------------------
# public functions


def _batch_of(x):
    return tuple(x.shape) if is_torch_array(x) else np.shape(x)


@dispatch(_sl.qr_update, stacks=True, double_float=("neuron",))
def qr_update(Q, R, u, v, overwrite_qruv=False, check_finite=True):
    device = device_of(Q, R, u, v)
    Q, R, economic = _validate_qr(Q, R, device)
    with _checked_after(check_finite, Q, R):
        u, v = _tensor(u, device), _tensor(v, device)
        if u.dtype != Q.dtype or v.dtype != Q.dtype:
            raise ValueError("u and v must have the same type as Q and R")
        cu = 2 if u.ndim >= 2 else 1  # SciPy's batch rule: '1|2' core dimensions
        cv = 2 if v.ndim >= 2 else 1
        m, n = Q.shape[-2], R.shape[-1]
        if u.ndim == 0 or u.shape[u.ndim - cu] != m:
            raise ValueError("u.shape[0] must equal Q.shape[0]")
        if v.ndim == 0 or v.shape[v.ndim - cv] != n:
            raise ValueError("v.shape[0] must equal R.shape[1]")
        if cu != cv:
            raise ValueError("u and v must have the same number of dimensions")
        if cu == 2 and u.shape[-1] != v.shape[-1]:
            raise ValueError("Second dimension of u and v must be the same")
        p = 1 if cu == 1 else u.shape[-1]
        if p > n or p > m:
            raise ValueError("Update rank larger than np.dot(Q, R).")
        if not economic and m > n and 1 < p and m - n < p:  # (SciPy's ormqr: k = p)
            raise ValueError("The 5th argument to ?ormqr/?unmqr was invalid")
    if check_finite:
        _check_finite(Q, R, u, v)
    q1, r1 = kernel("linalg.qr_update", device)(Q, R, u, v, economic=economic, core=cu)
    # (SciPy's layouts it computes in: a full rank-p update column-major Q and R, else a
    # contiguous Q and any R)
    block = not economic and p > 1
    if u.is_complex() and not block:  # (SciPy's rotations read conj(v), conjugated in v;
        # a full rank-1 update forms Q^H u of a C-ordered Q from conj(u), in u)
        if not economic and _computes_in(overwrite_qruv, Q, order="C"):
            _in_place(overwrite_qruv, u, u.conj().resolve_conj())
        _in_place(overwrite_qruv, v, v.conj().resolve_conj())
    return (_in_place(overwrite_qruv, Q, q1, order="F" if block else "contiguous"),
            _in_place(overwrite_qruv, R, r1, order="F" if block else "any"))


@dispatch(_sl.qr_insert, stacks=True, double_float=("neuron",))
def qr_insert(Q, R, u, k, which="row", rcond=None, overwrite_qru=False, check_finite=True):
    if which == "row":
        if rcond is not None:
            raise ValueError("'rcond' is unused when inserting rows and must be None")
    elif which != "col":
        raise ValueError("'which' must be either 'row' or 'col'")
    device = device_of(Q, R, u)
    Q, R, economic = _validate_qr(Q, R, device)
    with _checked_after(check_finite, Q, R):
        u = _tensor(u, device)
        m, n = Q.shape[-2], R.shape[-1]
        if u.dtype != Q.dtype:
            raise ValueError("'u' must have the same type as 'Q' and 'R'" if which == "row"
                             else "'u' must have the same type as Q and R")
        core = 2 if u.ndim >= 2 else 1
        shape = tuple(u.shape[u.ndim - core:])
        batch = torch.broadcast_shapes(Q.shape[:-2], R.shape[:-2], u.shape[:u.ndim - core],
                                       _batch_of(k))
        kk = _index(k, m if which == "row" else n, batch, inclusive=True)
        if u.ndim == 0 or shape[-1 if which == "row" else 0] != (n if which == "row" else m):
            raise ValueError(("'u' should be either (N,) or (p,N) when inserting rows. "
                              if which == "row" else "'u' should be either (M,) or (M,p) when "
                              "inserting columns. ") + f"Found {shape}.")
        if which == "col" and rcond is not None and not economic:
            raise ValueError("'rcond' is not used when updating full, (M,M) (M,N) "
                             "decompositions and must be None.")
    if check_finite:
        _check_finite(Q, R, u)
    q1, r1 = kernel("linalg.qr_insert", device)(Q, R, u, k, kk, which=which, rcond=rcond,
                                                 economic=economic, core=core, batch=batch)
    if which == "col" and not economic:  # (the one insertion SciPy computes in Q itself)
        if core == 1 and u.is_complex() and _computes_in(overwrite_qru, Q, order="C"):
            # (SciPy forms Q^H u of a C-ordered Q from conj(u), conjugated in u itself)
            _in_place(overwrite_qru, u, u.conj().resolve_conj())
        q1 = _in_place(overwrite_qru, Q, q1, order="F" if core == 2 else "contiguous")
    elif which == "row" and economic:  # (SciPy's economic row insertion computes in R)
        r1 = _in_place(overwrite_qru, R, r1, order="any" if core == 1 else "F")
    return q1, r1


@dispatch(_sl.qr_delete, stacks=True, double_float=("neuron",))
def qr_delete(Q, R, k, p=1, which="row", overwrite_qr=False, check_finite=True):
    if which not in ("row", "col"):
        raise ValueError("'which' must be either 'row' or 'col'")
    device = device_of(Q, R)
    Q, R, economic = _validate_qr(Q, R, device)
    p = int(p)  # (SciPy's C int: a float truncated)
    with _checked_after(check_finite, Q, R):
        m, n = Q.shape[-2], R.shape[-1]
        bound = m if which == "row" else n
        batch = torch.broadcast_shapes(Q.shape[:-2], R.shape[:-2], _batch_of(k))
        kk = _index(k, bound, batch)
        if np.any(kk + p > bound) or p <= 0:
            raise ValueError("'p' is out of range")
    if check_finite:
        _check_finite(Q, R)
    q1, r1 = kernel("linalg.qr_delete", device)(Q, R, k, kk, p=p, which=which,
                                                 economic=economic, batch=batch)
    if which == "row" and economic:  # (SciPy's p_eco rows moved last, p_full from the top)
        eco = min(p, Q.shape[-2] - Q.shape[-1])
        at_q = (slice(p - eco, Q.shape[-2] - eco), slice(p - eco, None))
        at_r = (slice(p - eco, None), slice(None))
    elif which == "row":
        at_q, at_r = (slice(p, None), slice(p, None)), (slice(p, None), slice(None))
    elif economic:
        at_q, at_r = (slice(None), slice(None, -p)), (slice(None, -p), slice(None, -p))
    else:
        at_q, at_r = (slice(None), slice(None)), (slice(None), slice(None, -p))
    # (SciPy's layouts it computes in: contiguous Q for an economic row deletion,
    # column-major for a block of columns, else any)
    order = "F" if which == "col" and p > 1 else "any"
    return (_in_place(overwrite_qr, Q, q1, at_q, "contiguous" if which == "row" and economic
                      else order), _in_place(overwrite_qr, R, r1, at_r, order))


def _in_place(overwrite, given, value, at=(), order="any"):
    """``value``, written into ``given[at]`` where SciPy's overwrite_* computes in the
    caller's array (``_computes_in``); offload writes the host array."""
    if not (_computes_in(overwrite, given, order) and is_exact(given) == is_exact(value)
            and given.dtype == value.dtype):
        return value
    view = given[at]
    if view.shape != value.shape:
        return value
    with torch.no_grad():
        view.copy_(value)
    return view


def _computes_in(overwrite, given, order="any"):
    """Whether SciPy's update computes in the caller's ``given`` itself: overwrite asked,
    a plain matrix or vector (float64 held as exact parts on Neuron too: their copy is
    exact) in a layout SciPy takes as it is (``behaved``; ``order``: 'any' positively
    strided, 'contiguous', 'F', 'C': C and not F)."""
    if not (overwrite and torch.is_tensor(given) and given.ndim in (1, 2)
            and not given.requires_grad and behaved(given)):
        return False
    c, f = contiguity(given)
    return {"any": True, "contiguous": c or f, "F": f, "C": c and not f}[order]


# ----------------------------------------------------------------------------------------
# the kernels: SciPy on views (cpu), the torch methods below (generic: CUDA, XLA)


def _view(x):
    return x.detach().resolve_conj().resolve_neg().numpy() if is_torch_array(x) else x


def _scipy(func, *args, **kwargs):
    """SciPy itself on zero-copy views of CPU tensors (its own batch loop for stacks)."""
    out = func(*(_view(a) for a in args), check_finite=False, **kwargs)
    return tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in out)


@register("linalg.qr_update", "cpu")
def _qr_update_cpu(Q, R, u, v, economic, core):
    return _scipy(_sl.qr_update, Q, R, u, v)


@register("linalg.qr_insert", "cpu")
def _qr_insert_cpu(Q, R, u, k, kk, which, rcond, economic, core, batch):
    return _scipy(_sl.qr_insert, Q, R, u, k, which=which, rcond=rcond)


@register("linalg.qr_delete", "cpu")
def _qr_delete_cpu(Q, R, k, kk, p, which, economic, batch):
    return _scipy(_sl.qr_delete, Q, R, k, p=p, which=which)


@register("linalg.qr_update", "generic")
def _qr_update(Q, R, u, v, economic, core):
    m, n = Q.shape[-2], R.shape[-1]
    Q, R, (u, v), batch = _stack(Q, R, (u, core), (v, core))
    if core == 1:
        u, v = u.unsqueeze(-1), v.unsqueeze(-1)
    p = u.shape[-1]
    q, r = _flat(Q), _flat(R)
    u, v = u.reshape(-1, m, p), v.reshape(-1, n, p)
    if economic:
        for j in range(p):  # SciPy's economic rank-p update: p rank-1 updates
            q, r = _thin_rank1(q, r, u[..., j], v[..., j])
    elif p == 1:
        q, r = _rank1(q, r, u[..., 0], v[..., 0])
    else:
        q, r = _rank_p(q, r, u, v)
    return _unflat(q, batch), _unflat(r, batch)


@register("linalg.qr_insert", "generic")
def _qr_insert(Q, R, u, k, kk, which, rcond, economic, core, batch):
    m, n = Q.shape[-2], R.shape[-1]
    p = 1 if core == 1 else u.shape[-2 if which == "row" else -1]
    Q, R, (u,), _ = _stack(Q, R, (u, core))
    Q, R = Q.expand(batch + Q.shape[-2:]), R.expand(batch + R.shape[-2:])
    u = u.expand(batch + u.shape[u.ndim - core:])
    q, r, kf = _flat(Q), _flat(R), kk.reshape(-1)
    if which == "row":
        q, r = _insert_rows(q, r, u.reshape(-1, p, n), kf, economic)
    else:
        u = u.reshape(-1, m, p)
        q, r = (_thin_insert_cols(q, r, u, kf, rcond) if economic else
                _insert_cols(q, r, u, kf))
    return _unflat(q, batch), _unflat(r, batch)


@register("linalg.qr_delete", "generic")
def _qr_delete(Q, R, k, kk, p, which, economic, batch):
    Q, R = Q.expand(batch + Q.shape[-2:]), R.expand(batch + R.shape[-2:])
    q, r, kf = _flat(Q), _flat(R), kk.reshape(-1)
    if which == "row":
        q, r = (_thin_delete_rows if economic else _delete_rows)(q, r, kf, p)
    else:
        q, r = _delete_cols(q, r, kf, p, economic)
    return _unflat(q, batch), _unflat(r, batch)


def _mm(a, b):
    """a @ b as products and additions in a fixed order (``_chain_sum``; up to 64 terms):
    a batch then equals its single calls bit for bit, which SciPy's test_batch asks in
    single precision (XLA's dot and reductions add in another order for a stack)."""
    prod = a.unsqueeze(-1) * b.unsqueeze(-3)
    return (_chain_sum(prod, -2) if a.shape[-1] <= 64 else prod.sum(-2, keepdim=True)
            ).squeeze(-2)


def _chain_sum(x, dim):
    """The sum along ``dim`` (a short axis) as a chain of additions, first to last: in a
    loop body XLA lays a stack out otherwise than a matrix and its reductions then add in
    another order (an ulp apart); additions in sequence keep one order."""
    parts = x.unbind(dim)
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total.unsqueeze(dim)


def _flat(x):
    return x.reshape((-1,) + tuple(x.shape[-2:])).clone()


def _unflat(x, batch):
    return x.reshape(tuple(batch) + tuple(x.shape[-2:]))


# ----------------------------------------------------------------------------------------
# the device methods: stacks (b, M, N), the same step count for every matrix


def _lartg(f, g):
    """LAPACK's lartg (3.10+): c real >= 0, s and r with [c s; -conj(s) c] [f; g] = [r; 0]."""
    af, ag = f.abs(), g.abs()
    big = torch.maximum(af, ag)
    scale = torch.where(big > 0, big, torch.ones_like(big))
    h = scale * torch.sqrt((af / scale) ** 2 + (ag / scale) ** 2)
    safe_h = torch.where(h > 0, h, torch.ones_like(h))
    safe_af = torch.where(af > 0, af, torch.ones_like(af))
    safe_ag = torch.where(ag > 0, ag, torch.ones_like(ag))
    c = af / safe_h
    if f.is_complex():
        r = f / torch.where(c > 0, c, torch.ones_like(c))
        s = g.conj() * (f / (safe_af * safe_h))
        s0 = g.conj() / safe_ag
    else:
        r = torch.where(f < 0, -h, h)  # (copysign does not lower: torch-xla 2.9)
        s = g / torch.where(r != 0, r, torch.ones_like(r))
        s0 = torch.where(g < 0, -torch.ones_like(g), torch.ones_like(g))
    g0, f0 = ag == 0, af == 0
    one = torch.ones_like(c)
    c = torch.where(g0, one, torch.where(f0, torch.zeros_like(c), c))
    s = torch.where(g0, torch.zeros_like(s), torch.where(f0, s0, s))
    r = torch.where(g0, f, torch.where(f0, ag.to(f.dtype), r))
    return c, s, r


def _rotate(q, r, a, b, col, active=None):
    """One rotation of rows ``a``, ``b`` of r and columns ``a``, ``b`` of q (1-element
    index tensors, the same for the stack), computed from r's entries in column ``col``
    ((b, 1, 1) per matrix) as SciPy's lartg + rot; those entries become (r, 0) exactly.
    ``active`` ((b, 1, 1) bool): where False the step leaves the matrix as it is."""
    ra, rb = r.index_select(-2, a), r.index_select(-2, b)
    f, g = ra.gather(-1, col), rb.gather(-1, col)
    c, s, rr = _lartg(f, g)
    if active is not None:
        c = torch.where(active, c, torch.ones_like(c))
        s = torch.where(active, s, torch.zeros_like(s))
        rr = torch.where(active, rr, f)
        gz = torch.where(active, torch.zeros_like(g), g)
    else:
        gz = torch.zeros_like(g)
    at = torch.arange(r.shape[-1], device=r.device) == col
    na = torch.where(at, rr, c * ra + s * rb)
    nb = torch.where(at, gz, c * rb - s.conj() * ra)
    r = r.index_copy(-2, a, na).index_copy(-2, b, nb)
    qa, qb = q.index_select(-1, a), q.index_select(-1, b)
    s = s.transpose(-1, -2)
    c = c.transpose(-1, -2)
    q = q.index_copy(-1, a, c * qa + s.conj() * qb).index_copy(-1, b, c * qb - s * qa)
    return q, r


def _loop(step, carry, count):
    """``count`` steps ``carry = step(carry, t)`` (t a (1,) int64 tensor) in one
    ``device_loop``."""
    if count <= 0:
        return carry
    dev = carry[0].device
    bounds = [torch.tensor(i, dtype=torch.int64, device=dev) for i in (0, count)]
    return backend(dev).device_loop(lambda c, t: tuple(step(c, t.reshape(1))), tuple(carry),
                                    *bounds)


def _up_sweep(q, r, col, top, bottom=0):
    """Rotations of rows (j, j+1), j = top .. bottom, from column ``col`` (an int)."""
    colt = torch.full((r.shape[0], 1, 1), col, dtype=torch.int64, device=r.device)

    def step(carry, t):
        q, r = carry
        j = top - t
        return _rotate(q, r, j, j + 1, colt)

    return _loop(step, (q, r), top - bottom + 1)


def _hessenberg(q, r, start, stop, k=None):
    """SciPy's hessenberg_qr: rotations of rows (j, j+1) from column j, j = start ..
    stop - 1 (where ``k`` is given, (b, 1, 1) per matrix: only j >= k)."""
    def step(carry, t):
        q, r = carry
        j = t + start
        col = j.reshape(1, 1, 1).expand(r.shape[0], 1, 1)
        return _rotate(q, r, j, j + 1, col, None if k is None else j >= k)

    return _loop(step, (q, r), stop - start)


def _rank1(q, r, u, v):
    """Full rank-1 update: w = Q^H u reduced to a multiple of e_1 from the bottom (rows of
    R rotated along), v added to R's first row, the Hessenberg R back to triangular."""
    m, n = r.shape[-2:]
    w = _mm(q.mH, u.unsqueeze(-1))
    return _rank1_from(q, r, w, v, m, n)


def _rank1_from(q, r, w, v, m, n):
    ra = torch.cat([r, w], dim=-1)  # (w rotates with R's rows: the column after R's)
    q, ra = _up_sweep(q, ra, n, m - 2)
    r = ra[..., :n] + ra[..., :, n:] * _first_row(m, ra) * v.conj().unsqueeze(-2)
    return _hessenberg(q, r, 0, min(m - 1, n))


def _first_row(m, like):
    e = torch.zeros((m, 1), dtype=like.dtype, device=like.device)
    e[0] = 1
    return e


def _thin_rank1(q, r, u, v):
    """Economic rank-1 update: u split into Q's span and a unit vector orthogonal to it
    (SciPy's reorth), then the full method on [Q u_perp], [R; 0]."""
    m, n = q.shape[-2:]
    s, w = _reorth(q, u)
    qa = torch.cat([q, w.unsqueeze(-1)], dim=-1)
    ra = torch.cat([r, r.new_zeros(r.shape[0], 1, n)], dim=-2)
    qa, ra = _rank1_from(qa, ra, s.unsqueeze(-1), v, n + 1, n)
    return qa[..., :n], ra[..., :n, :]


def _norm(x, dim=-1, chain=False):
    """The 2-norm along ``dim``, scaled by the largest modulus (torch-xla 2.9's
    vector_norm takes no complex input, nor the modulus of one in a loop body); ``chain``:
    summed by ``_chain_sum`` (a short axis in a loop body)."""
    sq = x.real * x.real + x.imag * x.imag if x.is_complex() else x * x
    big = sq.amax(dim=dim, keepdim=True)
    big = torch.where(big > 0, big, torch.ones_like(big))
    total = _chain_sum(sq / big, dim) if chain else (sq / big).sum(dim=dim, keepdim=True)
    return torch.sqrt(big) * torch.sqrt(total)


def _reorth(q, u, rc=False):
    """SciPy's reorth (Daniel et al.): (s of length n + 1, w) with u = Q s[:n] + s[n] w,
    w of unit length orthogonal to Q (zero, s[n] = 0, where u lies in Q's span); with
    ``rc`` also SciPy's reciprocal condition estimate of [Q, u/||u||] (b, 1)."""
    unorm = _norm(u)
    u = u / unorm
    s = _mm(q.mH, u.unsqueeze(-1)).squeeze(-1)
    w = u - _mm(q, s.unsqueeze(-1)).squeeze(-1)
    wnorm = _norm(w)
    cond = wnorm / (1 + _norm(s))  # (SciPy's sigma_min / sigma_max: sqrt(1 + ||s||) each)
    # SciPy's first test compares with sqrt(2) (its constant is named inv_root2): a unit
    # u never passes it, so one reorthogonalization always follows
    s2 = _mm(q.mH, w.unsqueeze(-1)).squeeze(-1)
    w2 = w - _mm(q, s2.unsqueeze(-1)).squeeze(-1)
    wpnorm = _norm(w2)
    first = wnorm > math.sqrt(2)
    # (u exactly in Q's span leaves a zero remainder: in the span too, as SciPy's result
    # for it (scipy/scipy#9733), not a 0/0)
    span = (wpnorm < wnorm / math.sqrt(2)) | (wpnorm == 0)
    s_out = torch.where(first, s, s + s2) * unorm
    last = torch.where(first, unorm * wnorm, torch.where(span, 0, wpnorm * unorm))
    w_out = torch.where(first, w / wnorm, torch.where(span, 0, w2 / wpnorm))
    out = torch.cat([s_out, last.to(s_out.dtype)], dim=-1), w_out
    return out + (cond,) if rc else out


def _rank_p(q, r, u, v):
    """Full rank-p update (SciPy's qr_rank_p_update): W = Q^H U; below R's rows a QR of
    W's lower block applied to Q's trailing columns; rotations reduce W to triangular (R's
    rows along); R += triu(W) V^H; R's p subdiagonals removed with reflectors."""
    m, n = r.shape[-2:]
    p = u.shape[-1]
    w = _mm(q.mH, u)
    if m > n:
        q, w = _lower_qr(q, w, n)
        top = [n + i - 1 for i in range(p)]
    else:
        top = [m - 2] * p
    top = [min(t, m - 2) for t in top]
    length = max(t - i + 1 for i, t in enumerate(top))
    ra = torch.cat([r, w], dim=-1)
    tops = torch.tensor(top, dtype=torch.int64, device=r.device)

    def step(carry, t):
        q, ra = carry
        i = torch.div(t, length, rounding_mode="floor")
        j = tops.index_select(0, i) - (t - i * length)
        col = (n + i).reshape(1, 1, 1).expand(ra.shape[0], 1, 1)
        active = (j >= i).reshape(1, 1, 1)
        j = j.clamp(min=0)
        return _rotate(q, ra, j, j + 1, col, active)

    q, ra = _loop(step, (q, ra), p * length)
    r, w = ra[..., :n], ra[..., n:]
    upd = _mm(torch.triu(w[..., :p, :p]), v.mH)
    r = torch.cat([r[..., :p, :] + upd, r[..., p:, :]], dim=-2)
    return _p_subdiag(q, r, 0, min(m - 1, n), p)


def _lower_qr(q, w, n):
    """SciPy's geqrf of W's rows n.. and ormqr of its reflectors into Q's columns n..:
    LAPACK's unblocked Householder QR (larfg, larf: geqrf's method at these sizes)."""
    m, p = w.shape[-2:]
    ql, wl = _p_subdiag(q[..., n:], w[..., n:, :], 0, min(m - n, p), m - n - 1)
    return torch.cat([q[..., :n], ql], dim=-1), torch.cat([w[..., :n, :], wl], dim=-2)


def _larfg(alpha, xnorm):
    """LAPACK's larfg for (alpha, x) with ||x|| = xnorm: (beta, tau, 1 / (alpha - beta))
    (tau = 0: the identity).  Complex values from real operations: XLA's complex division
    rounds a stack otherwise than a matrix."""
    cplx = alpha.is_complex()
    ar = alpha.real if cplx else alpha
    ai = alpha.imag if cplx else torch.zeros_like(alpha)
    keep = (xnorm == 0) & (ai == 0)
    norm = torch.sqrt(ar * ar + ai * ai + xnorm * xnorm)
    beta = torch.where(ar >= 0, -norm, norm)
    safe = torch.where(keep, torch.ones_like(beta), beta)
    tr = torch.where(keep, torch.zeros_like(ar), (safe - ar) / safe)
    dr = torch.where(keep, torch.ones_like(ar), ar - beta)
    if not cplx:
        return torch.where(keep, ar, beta), tr, 1 / dr
    ti = torch.where(keep, torch.zeros_like(ai), -ai / safe)
    di = torch.where(keep, torch.zeros_like(ai), ai)
    mod = dr * dr + di * di
    return (torch.where(keep, ar, beta), _complex(tr, ti, alpha.dtype),
            _complex(dr / mod, -di / mod, alpha.dtype))


def _complex(re, im, dtype):
    # (torch.complex does not lower in a loop body: torch-xla 2.9; these products are exact)
    return re.to(dtype) + im.to(dtype) * 1j


def _reflect(q, r, rows, j, col, active):
    """The reflector of r's column ``col`` over the rows ``rows`` (index tensor, first the
    pivot row) applied as SciPy's larfg + larf (left with conj(tau), right to q's columns
    ``rows``); the column becomes (beta, 0, ...)."""
    win = r.index_select(-2, rows)  # (b, L, N)
    x = win.gather(-1, col.expand(-1, win.shape[-2], 1))  # (b, L, 1)
    alpha = x[..., :1, :]
    tail = x[..., 1:, :]
    xnorm = _norm(tail, dim=-2, chain=True)
    beta, tau, scale = _larfg(alpha, xnorm)
    tau = torch.where(active, tau, torch.zeros_like(tau))
    vec = torch.cat([torch.ones_like(alpha), tail * scale], dim=-2)  # (b, L, 1)
    win = win - tau.conj() * vec * _chain_sum(vec.conj() * win, -2)
    at = torch.arange(r.shape[-1], device=r.device) == col
    lead = torch.arange(win.shape[-2], device=r.device).reshape(-1, 1) == 0
    fixed = torch.where(lead, beta.to(win.dtype), torch.zeros_like(win))
    win = torch.where(at & active, fixed, win)
    r = r.index_copy(-2, rows, win)
    qw = q.index_select(-1, rows)  # (b, M, L)
    qw = qw - tau * _chain_sum(qw * vec.mT, -1) * vec.mH
    return q.index_copy(-1, rows, qw), r


def _p_subdiag(q, r, start, stop, p, k=None):
    """SciPy's p_subdiag_qr: reflectors of length p + 1 (fewer at the bottom: zero rows
    padded below) remove R's p subdiagonals in columns start .. stop - 1 (only j >= k)."""
    b, o, n = r.shape
    m = q.shape[-2]
    r = torch.cat([r, r.new_zeros(b, p, n)], dim=-2)
    q = torch.cat([q, q.new_zeros(b, m, p)], dim=-1)
    span = torch.arange(p + 1, device=r.device)

    def step(carry, t):
        q, r = carry
        j = t + start
        col = j.reshape(1, 1, 1).expand(b, 1, 1)
        active = torch.ones((b, 1, 1), dtype=torch.bool, device=r.device) if k is None \
            else j >= k
        return _reflect(q, r, j + span, j, col, active)

    q, r = _loop(step, (q, r), stop - start)
    return q[..., :o], r[..., :o, :]


def _k_tensor(kf, device):
    return torch.as_tensor(kf, device=device).reshape(-1, 1, 1)


def _insert_rows(q, r, u, kf, economic):
    """Rows u inserted before row k: Q extended by the identity, u appended below R, R
    re-triangularized (one row: rotations against the new row; p rows: reflectors over
    each column, SciPy's block method), then Q's new rows moved to k."""
    b, m, o = q.shape
    n = r.shape[-1]
    p = u.shape[-2]
    qn = torch.zeros((b, m + p, o + p), dtype=q.dtype, device=q.device)
    qn[..., :m, :o] = q
    qn[..., m:, o:] = torch.eye(p, dtype=q.dtype, device=q.device)
    rn = torch.cat([r, u], dim=-2)
    mm = rn.shape[-2]
    if p == 1:
        last = torch.tensor([mm - 1], device=q.device)

        def step(carry, t):
            q, r = carry
            col = t.reshape(1, 1, 1).expand(b, 1, 1)
            return _rotate(q, r, t, last, col)

        qn, rn = _loop(step, (qn, rn), min(mm - 1, n))
    else:  # (reflectors over the whole column below the diagonal: SciPy's block method)
        qn, rn = _p_subdiag(qn, rn, 0, min(mm, n), mm - 1)
    # Q's rows m .. m+p-1 move to k .. k+p-1
    kt = torch.as_tensor(kf, device=q.device).reshape(-1, 1)
    i = torch.arange(m + p, device=q.device).reshape(1, -1)
    src = torch.where(i < kt, i, torch.where(i < kt + p, m + i - kt, i - p))
    qn = qn.gather(-2, src.unsqueeze(-1).expand(b, m + p, qn.shape[-1]))
    if economic:  # (the eliminated rows of u dropped)
        return qn[..., :, :o], rn[..., :o, :]
    return qn, rn


def _insert_cols(q, r, u, kf):
    """Columns u (M, p) inserted before column k (full Q): W = Q^H u placed in R at k.
    One column: W reduced from the bottom by rotations of rows (j, j+1), j >= k (SciPy's
    qr_col_insert).  p columns (SciPy's qr_block_col_insert): where M >= N + p a QR of W's
    rows below R's first N (applied to Q's columns there) first, then the rotations of
    each new column i from row N + i - 1 (or M - 2) up to k + i."""
    b, m, _ = q.shape
    n = r.shape[-1]
    p = u.shape[-1]
    w = _mm(q.mH, u)
    top = m - 2
    if p > 1 and m >= n + p:
        q, w = _lower_qr(q, w, n)
        top = n - 1
    kt = torch.as_tensor(kf, device=q.device).reshape(-1, 1)
    c = torch.arange(n + p, device=q.device).reshape(1, -1)
    inside = (c >= kt) & (c < kt + p)
    src = torch.where(c < kt, c, c - p).clamp(min=0)
    rn = r.gather(-1, src.unsqueeze(-2).expand(b, m, n + p))
    new = w.gather(-1, (c - kt).clamp(0, p - 1).unsqueeze(-2).expand(b, m, n + p))
    rn = torch.where(inside.unsqueeze(-2), new, rn)
    k3 = kt.reshape(-1, 1, 1)
    length = top + 1  # (rows top + i down to k + i for column i: at most top + 1 steps)

    def step(carry, t):
        q, r = carry
        i = torch.div(t, length, rounding_mode="floor")
        j = (top + (i if top == n - 1 else 0)) - (t - i * length)
        j = j.clamp(max=m - 2)
        col = k3 + i.reshape(1, 1, 1)
        return _rotate(q, r, j.clamp(min=0), j.clamp(min=0) + 1, col, j >= col)

    return _loop(step, (q, rn), p * length)


def _thin_insert_cols(q, r, u, kf, rcond):
    """Columns u (M, p) inserted before column k of an economic factorization (SciPy's
    thin_qr_col_insert): each column split by reorth into Q's span and a new unit column
    of Q (its R column s), s reduced by rotations of rows (i+j, i+j+1), i = n-1 .. k;
    columns past M - N: the full method.  SciPy's LinAlgError where [Q, u/||u||] is
    conditioned below ``rcond`` (one host read for all columns and matrices)."""
    b, m, n = q.shape
    p = u.shape[-1]
    p_eco = p if n + p <= m else m - n
    given, rcond = rcond, torch.finfo(q.dtype).eps if rcond is None else rcond
    kt = torch.as_tensor(kf, device=q.device).reshape(-1, 1)
    c = torch.arange(n + p, device=q.device).reshape(1, -1)
    src = torch.where(c < kt, c, c - p).clamp(min=0)
    inside = ((c >= kt) & (c < kt + p)).unsqueeze(-2)
    rn = torch.where(inside, 0, r.gather(-1, src.unsqueeze(-2).expand(b, n, n + p)))
    rn = torch.cat([rn, rn.new_zeros(b, p_eco, n + p)], dim=-2)
    k3 = kt.reshape(-1, 1, 1)
    conds = []
    rows = torch.arange(n + p_eco, device=q.device).reshape(1, -1, 1)
    for j in range(p_eco):
        s, w, cond = _reorth(q, u[..., j], rc=True)
        conds.append(cond)
        q = torch.cat([q, w.unsqueeze(-1)], dim=-1)
        scol = torch.cat([s, s.new_zeros(b, p_eco - j - 1)], dim=-1).unsqueeze(-1)
        rn = torch.where((c == kt + j).unsqueeze(-2) & (rows < n + j + 1), scol, rn)
        qa = torch.cat([q, q.new_zeros(b, m, p_eco - j - 1)], dim=-1)

        def step(carry, t, j=j):
            qa, r = carry
            i = (n - 1) - t
            a = (i + j).clamp(min=0)
            return _rotate(qa, r, a, a + 1, k3 + j, i >= k3)

        qa, rn = _loop(step, (qa, rn), n)
        q = qa[..., :n + j + 1]
    cond = torch.cat(conds, dim=-1)  # (b, p_eco)
    bad = cond < rcond
    if bool(bad.any()):
        bad, cond = bad.cpu().numpy(), cond.cpu().numpy()
        first = np.argwhere(bad)[0]  # (SciPy's loop: the first matrix, its first column)
        # (what SciPy prints: the estimate for float64, its float64 threshold for
        # complex128, float64's machine epsilon for the single precisions)
        dbl = float(np.finfo(np.float64).eps)
        shown = {torch.float64: float(cond[tuple(first)]),
                 torch.complex128: dbl if given is None else float(given)}.get(q.dtype, dbl)
        raise LinAlgError("One of the columns of u lies in the span of Q. Found reciprocal "
                          f"condition number of {shown} for Q augmented with u/||u||.")
    if p > p_eco:  # (Q is square now: the rest as into a full factorization)
        keep = (c < kt + p_eco) | (c >= kt + p)
        idx = torch.where(keep, c, c.new_tensor(n + p)).sort(-1).values[..., :n + p_eco]
        rest = rn.gather(-1, idx.unsqueeze(-2).expand(b, m, n + p_eco))
        return _insert_cols(q, rest, u[..., p_eco:], kf + p_eco)
    return q, rn


def _delete_rows(q, r, kf, p):
    """Rows k .. k+p-1 deleted (full Q): SciPy's row swaps bring them to the top; the
    rows of W = conj(Q[:p]) are reduced to e_i by rotations of (j, j+1) from the bottom
    (W^T rotating with R's rows); the result is Q[p:, p:], R[p:]."""
    b, m, _ = q.shape
    n = r.shape[-1]
    perms = np.empty((b, m), dtype=np.int64)
    for i, k in enumerate(kf):  # (SciPy's sequence of swaps, on the row numbers)
        order = np.arange(m)
        for j in range(int(k), 0, -1):
            order[[j + p - 1, j - 1]] = order[[j - 1, j + p - 1]]
        perms[i] = order
    perm = torch.as_tensor(perms, device=q.device)
    q = q.gather(-2, perm.unsqueeze(-1).expand(b, m, m))
    ra = torch.cat([r, q[..., :p, :].mT.conj()], dim=-1)
    length = m - 1

    def step(carry, t):
        q, ra = carry
        i = torch.div(t, length, rounding_mode="floor")
        j = (m - 2) - (t - i * length)
        col = (n + i).reshape(1, 1, 1).expand(b, 1, 1)
        return _rotate(q, ra, j, j + 1, col, (j >= i).reshape(1, 1, 1))

    q, ra = _loop(step, (q, ra), p * length)
    return q[..., p:, p:], ra[..., p:, :n]


def _reorth_row(q, j):
    """SciPy's reorthx: e_j minus its projection on Q's span, once reorthogonalized:
    (s = conj(Q[j]) with s[n] the remainder's norm, the unit remainder, success).  Where
    e_j lies in the span: s[n] = 0, a zero vector, False.  ``j``: (b,) row per matrix."""
    b, m, n = q.shape
    e = (torch.arange(m, device=q.device) == j.reshape(-1, 1)).to(q.dtype)
    s = _mm(e.unsqueeze(-2), q).squeeze(-2).conj()
    w = e - _mm(q, s.unsqueeze(-1)).squeeze(-1)
    wnorm = _norm(w)
    w2 = w - _mm(q, _mm(q.mH, w.unsqueeze(-1))).squeeze(-1)
    wpnorm = _norm(w2)
    first = wnorm > math.sqrt(2)  # (never, for a unit vector: SciPy's constant)
    # (a zero remainder fails too: SciPy's 1/0 raises inside reorthx, which returns False)
    ok = first | ((wpnorm >= wnorm / math.sqrt(2)) & (wpnorm > 0))
    last = torch.where(first, wnorm, torch.where(ok, wpnorm, 0))
    w_out = torch.where(first, w / wnorm, torch.where(ok, w2 / wpnorm, 0))
    return torch.cat([s, last.to(s.dtype)], dim=-1), w_out, ok.reshape(-1)


def _thin_delete_rows(q, r, kf, p):
    """Rows k .. k+p-1 deleted from an economic factorization (SciPy's thin_qr_row_delete):
    for each row, it moves to the bottom, e_last split into conj(Q[last]) and a unit vector
    u orthogonal to Q (Daniel et al.; from Q's row of least norm where e_last lies in the
    span), rotations (n, j), j = n-1 .. 0, fold s into an extra row of R and u into Q,
    and the last row of Q goes; rows past M - N: the full method.  SciPy's ValueError
    where no reorthogonalization succeeds (one host read)."""
    b, m, n = q.shape
    p_eco = p if m - p >= n else m - n
    kt = torch.as_tensor(kf, device=q.device).reshape(-1, 1)
    failed = torch.zeros(b, dtype=torch.bool, device=q.device)
    colt = torch.full((b, 1, 1), n, dtype=torch.int64, device=q.device)
    row_n = torch.tensor([n], device=q.device)
    for _ in range(p_eco):
        i = torch.arange(m, device=q.device).reshape(1, -1)
        src = torch.where(i < kt, i, torch.where(i < m - 1, i + 1, kt))
        q = q.gather(-2, src.unsqueeze(-1).expand(b, m, n))
        last = torch.full((b,), m - 1, dtype=torch.int64, device=q.device)
        s, w, ok = _reorth_row(q, last)
        least = _norm(q).squeeze(-1).argmin(-1)  # (SciPy's first minimum)
        _, w_least, ok_least = _reorth_row(q, least)
        s = torch.where(ok.reshape(-1, 1), s, torch.cat([s[..., :n], s.new_zeros(b, 1)], -1))
        w = torch.where(ok.reshape(-1, 1), w, w_least)
        failed = failed | (~ok & ~ok_least)
        qa = torch.cat([q, w.unsqueeze(-1)], dim=-1)
        ra = torch.cat([torch.cat([r, r.new_zeros(b, 1, n)], dim=-2), s.unsqueeze(-1)], dim=-1)

        def step(carry, t):
            qa, ra = carry
            return _rotate(qa, ra, row_n, (n - 1) - t, colt)

        qa, ra = _loop(step, (qa, ra), n)
        q, r, m = qa[..., :m - 1, :n], ra[..., :n, :n], m - 1
    if bool(failed.any()):
        raise ValueError("Reorthogonalization Failed, unable to perform row deletion.")
    if p > p_eco:
        return _delete_rows(q, r, kf, p - p_eco)
    return q, r


def _delete_cols(q, r, kf, p, economic):
    """Columns k .. k+p-1 deleted: R's later columns move left, then rotations (one
    column) or reflectors of length p + 1 (SciPy's p_subdiag_qr) from column k on."""
    b, m, o = q.shape
    n = r.shape[-1]
    kt = torch.as_tensor(kf, device=q.device).reshape(-1, 1)
    c = torch.arange(n - p, device=q.device).reshape(1, -1)
    src = torch.where(c < kt, c, c + p)
    r = r.gather(-1, src.unsqueeze(-2).expand(b, r.shape[-2], n - p))
    k3 = kt.reshape(-1, 1, 1)
    if p == 1:
        q, r = _hessenberg(q, r, 0, min(m - 1, n - 1), k3)
    else:
        q, r = _p_subdiag(q, r, 0, min(m - 1, n - p), p, k3)
    if economic:
        return q[..., :, :o - p], r[..., :o - p, :]
    return q, r
