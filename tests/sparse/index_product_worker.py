"""Index paths and format conversions followed by products, on one device.

    python tests/sparse/index_product_worker.py xla ["NAME;NAME..."]

Run in a subprocess by test_indexing.py: torch-xla 2.9 aborted the whole process on
``K[:, idx] @ v`` (an index made by a sort feeding the product's gather), so each case
prints ``ok NAME`` before the next starts and the test names the case that died.
Each result is compared with SciPy's on the same float32 data (backward error).
"""

import sys

import numpy as np
import scipy.sparse as sp


def cases(n=400):
    rng = np.random.default_rng(0)
    A = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1],
                 format="csr").astype(np.float32)
    R = sp.random_array((60, 50), density=0.2, format="csr", rng=rng, dtype=np.float32)
    even = np.arange(0, n, 2)
    perm = rng.permutation(n)[:150]
    mask = rng.random(n) < 0.4
    yield "A[:, idx] @ v", A, lambda K: K[:, even], "v"
    yield "A[idx] @ v", A, lambda K: K[even], "v"
    yield "A[idx, :] @ X", A, lambda K: K[even, :], "X"
    yield "A[:, perm] @ v", A, lambda K: K[:, perm], "v"
    yield "A[perm][:, perm] @ X", A, lambda K: K[perm][:, perm], "X"
    yield "A[mask] @ v", A, lambda K: K[mask], "v"
    yield "A[:, mask] @ v", A, lambda K: K[:, mask], "v"
    yield "A[3:300:3, 5:] @ v", A, lambda K: K[3:300:3, 5:], "v"
    yield "A[:, idx].T @ v", A, lambda K: K[:, even].T, "v"
    yield "A[:, idx].tocsc() @ X", A, lambda K: K[:, even].tocsc(), "X"
    yield "A.tocsc() @ v", A, lambda K: K.tocsc(), "v"
    yield "A.tocsc() @ X", A, lambda K: K.tocsc(), "X"
    yield "A.tocsc().tocsr() @ v", A, lambda K: K.tocsc().tocsr(), "v"
    yield "A.tocoo() @ v", A, lambda K: K.tocoo(), "v"
    yield "A.tocoo().tocsr() @ v", A, lambda K: K.tocoo().tocsr(), "v"
    yield "A.T @ v", A, lambda K: K.T, "v"
    yield "A.tocsc().T @ X", A, lambda K: K.tocsc().T, "X"
    yield "A.todia() @ v", A, lambda K: K.todia(), "v"
    yield "A.tobsr((2, 2)) @ v", A, lambda K: K.tobsr(blocksize=(2, 2)), "v"
    yield "(A @ A) @ v", A, lambda K: K @ K, "v"
    yield "(A + A.T) @ v", A, lambda K: K + K.T, "v"
    yield "R.tocsc()[:, idx] @ v", R, lambda K: K.tocsc()[:, [1, 7, 3, 3, 40]], "v"
    yield "R[[rows]] @ X", R, lambda K: K[[5, 0, 59, 5]], "X"
    yield "R.T.tocsr() @ v", R, lambda K: K.T.tocsr(), "v"
    yield "R.nonzero-based", R, lambda K: K.tocsc().sorted_indices(), "v"


def main(device, names=None):
    import torch

    import trnscipy

    rng = np.random.default_rng(1)
    for name, A, make, rhs in cases():
        if names is not None and name not in names:
            continue
        K = trnscipy.to_device(A, device)
        S = make(K)
        host = make(A)
        shape = (host.shape[1],) if rhs == "v" else (host.shape[1], 3)
        x = rng.standard_normal(shape).astype(np.float32)
        y = S @ torch.from_numpy(x).to(S.device)
        y = y.cpu().numpy()
        expected = host @ x
        scale = np.abs(host.toarray()).max() * np.abs(x).max() * max(1, host.shape[1])
        err = np.abs(y - expected).max() / scale
        if y.shape != expected.shape or not err < 1e-6:
            print(f"WRONG {name}: shape {y.shape} vs {expected.shape}, error {err:.1e}",
                  flush=True)
        else:
            print(f"ok {name}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(";") if len(sys.argv) > 2 else None)
