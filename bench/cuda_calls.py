"""Per-call times on CUDA beside torch and SciPy on the same machine: dense n=256 (the
per-call overhead), eigsh on 2-D Poisson 10^4 and svds of a 3000x800 sparse matrix (the
restart cycles as captured CUDA graphs; capture failures printed).

    python -m bench.cuda_calls      # on a CUDA machine

Each figure: the best of 3-20 calls after a first call.  Figures: docs/benchmarks-cuda.md.
"""

import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla


def main():
    import torch

    import trnscipy
    import trnscipy.linalg as tl
    import trnscipy.sparse.linalg as tsl
    from trnscipy._kernels import _cuda

    cuda = torch.device("cuda")

    def best(f, reps=5):
        f()
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return min(times) * 1e3

    failures = []
    capture = _cuda._CudaGraph._capture

    def recording(self, args):
        plan = capture(self, args)
        if self.failure:
            failures.append(self.failure[:300])
        return plan

    _cuda._CudaGraph._capture = recording

    n = 256
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, dtype=torch.float64, generator=g)
    a = (a @ a.T + n * torch.eye(n, dtype=torch.float64)).to(cuda)
    b = torch.randn(n, dtype=torch.float64, generator=g).to(cuda)
    dense = (("cholesky", lambda: tl.cholesky(a), lambda: torch.linalg.cholesky(a).mT),
             ("solve", lambda: tl.solve(a, b), lambda: torch.linalg.solve(a, b)),
             ("lu_factor", lambda: tl.lu_factor(a), lambda: torch.linalg.lu_factor(a)),
             ("eigh", lambda: tl.eigh(a), lambda: torch.linalg.eigh(a)))
    for label, ours, theirs in dense:
        print(f"dense n=256 float64 {label}: trnscipy {best(ours, 20):.3f} ms, "
              f"torch {best(theirs, 20):.3f} ms", flush=True)

    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(100, 100))
    A = sp.csr_array(sp.kron(sp.eye(100), T) + sp.kron(T, sp.eye(100)))
    Ad = trnscipy.to_device(A, cuda)
    for which in ("LA", "SA"):
        ref = spla.eigsh(A, 6, which=which)[0]
        t = time.perf_counter()
        w = tsl.eigsh(Ad, 6, which=which)[0]
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        ours = best(lambda w=which: tsl.eigsh(Ad, 6, which=w), 3)
        theirs = best(lambda w=which: spla.eigsh(A, 6, which=w), 3)
        err = np.abs(np.sort(w.cpu().numpy()) - np.sort(ref)).max() / np.abs(ref).max()
        print(f"eigsh k=6 {which} Poisson 10^4: trnscipy CUDA {ours:.1f} ms (first "
              f"{first * 1e3:.0f} ms), SciPy {theirs:.1f} ms, rel err {err:.1e}, "
              f"capture failures {failures}", flush=True)
        failures.clear()

    D = sp.csr_array(sp.random(3000, 800, density=0.005, random_state=0, format="csr")
                     + sp.eye(3000, 800))
    Dd = trnscipy.to_device(D, cuda)
    ref = spla.svds(D, 10)[1]
    ours, theirs = best(lambda: tsl.svds(Dd, 10), 3), best(lambda: spla.svds(D, 10), 3)
    s = tsl.svds(Dd, 10)[1].cpu().numpy()
    err = np.abs(np.sort(s) - np.sort(ref)).max() / ref.max()
    print(f"svds k=10 3000x800: trnscipy CUDA {ours:.1f} ms, SciPy {theirs:.1f} ms, rel err "
          f"{err:.1e}, capture failures {failures}", flush=True)


if __name__ == "__main__":
    main()
