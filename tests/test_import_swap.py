"""A SciPy script with only its imports swapped gives bit-identical results."""

import numpy as np
import scipy.sparse

SCRIPT = '''
import numpy as np
import {pkg}.sparse as sparse
import {pkg}.sparse.linalg as spla
import {pkg}.linalg as la

rng = np.random.default_rng(7)
n = 12
lap = sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
A = (sparse.kron(lap, sparse.eye_array(n)) + sparse.kron(sparse.eye_array(n), lap)).tocsr()
M = sparse.csr_matrix(A)
b = rng.standard_normal(n * n)
out = {{}}
out["A@b"] = A @ b
out["M*b"] = M * b
out["sum0"] = A.sum(axis=0)
out["msum0"] = M.sum(axis=0)
out["cg"] = spla.cg(A, b, rtol=1e-10)
out["gmres"] = spla.gmres(A, b, rtol=1e-10, restart=10)
out["bicgstab"] = spla.bicgstab(A, b, rtol=1e-10)
out["minres"] = spla.minres(A, b, rtol=1e-10)
out["spsolve"] = spla.spsolve(A.tocsc(), b)
out["eigsh"] = spla.eigsh(A, k=3, which="LA", v0=np.ones(n * n))[0]
out["norm"] = spla.norm(A)
out["expm_multiply"] = spla.expm_multiply(-0.1 * A.tocsc(), b)
D = A.toarray()[:20, :20]
out["cholesky"] = la.cholesky(D)
out["cho_solve"] = la.cho_solve(la.cho_factor(D), b[:20])
out["eigh"] = la.eigh(D)
out["solve"] = la.solve(D, b[:20], assume_a="pos")
out["lu_factor"] = la.lu_factor(D)
out["qr"] = la.qr(D, mode="economic")
out["svd"] = la.svd(D)
out["det"] = la.det(D)
out["inv"] = la.inv(D)
out["expm"] = la.expm(-D)
out["random"] = sparse.random_array((8, 8), density=0.3, rng=np.random.default_rng(1)).toarray()
'''


def _run(pkg):
    namespace = {}
    exec(SCRIPT.format(pkg=pkg), namespace)
    return namespace["out"]


def _assert_identical(a, b, key):
    assert type(a) is type(b), (key, type(a), type(b))
    if isinstance(a, tuple):
        assert len(a) == len(b), key
        for x, y in zip(a, b, strict=True):
            _assert_identical(x, y, key)
    elif scipy.sparse.issparse(a):
        assert a.format == b.format, key
        np.testing.assert_array_equal(a.toarray(), b.toarray(), err_msg=key)
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        np.testing.assert_array_equal(a, b, err_msg=key)


def test_swapped_imports_give_bit_identical_results():
    theirs, ours = _run("scipy"), _run("trnscipy")
    assert theirs.keys() == ours.keys()
    for key in theirs:
        _assert_identical(ours[key], theirs[key], key)
