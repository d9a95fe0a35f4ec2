"""Krylov solves on CUDA with and without CUDA graphs, beside cupyx.scipy.

    python -m bench.cuda_graphs      # on a CUDA machine with CuPy

Times each solve after one call (best of 5, rtol 1e-5): trnscipy with its
``graph_function`` kernel (captured CUDA graphs), the same with the eager generic
kernel, and cupyx.scipy's solver where CuPy has one.  Prints one line per solve with
the capture failures, if any.  Figures: docs/benchmarks-cuda.md.
"""

import inspect
import time

import numpy as np
import scipy.sparse as sp


def _poisson(k):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(k, k))
    return sp.csr_array(sp.kron(sp.eye(k), T) + sp.kron(T, sp.eye(k)))


def _convdiff(k, c=0.4):
    T = sp.diags_array([-1.0 - c, 2.0, -1.0 + c], offsets=[-1, 0, 1], shape=(k, k))
    return sp.csr_array(sp.kron(sp.eye(k), T) + sp.kron(T, sp.eye(k)))


CASES = [("cg", _poisson, 100, "float64", {}), ("cg", _poisson, 100, "float32", {}),
         ("gmres", _poisson, 100, "float64", {}), ("gmres", _convdiff, 100, "float64", {}),
         ("cg", _poisson, 1000, "float64", {"maxiter": 100}),
         ("gmres", _poisson, 1000, "float64", {"maxiter": 5}),
         ("bicgstab", _convdiff, 100, "float64", {}), ("minres", _poisson, 100, "float64", {}),
         ("cgs", _convdiff, 100, "float64", {}), ("lgmres", _convdiff, 100, "float64", {}),
         ("gcrotmk", _convdiff, 100, "float64", {}), ("qmr", _convdiff, 100, "float64", {}),
         ("tfqmr", _convdiff, 100, "float64", {}), ("bicg", _convdiff, 100, "float64", {})]


def main():
    import cupy
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cspla
    import torch

    import trnscipy
    import trnscipy.sparse.linalg as tsl
    from trnscipy._kernels import _cuda, _generic, backend

    cuda = torch.device("cuda")
    failures = []
    capture = _cuda._CudaGraph._capture

    def recording(self, args):
        plan = capture(self, args)
        if self.failure:
            failures.append(self.failure[:200])
        return plan

    _cuda._CudaGraph._capture = recording

    def best(f, reps=5):
        f()
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            f()
            torch.cuda.synchronize()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t)
        return min(times)

    for name, problem, k, dtype, kw in CASES:
        A = problem(k).astype(dtype)
        b = np.random.default_rng(0).standard_normal(A.shape[0]).astype(dtype)
        Ad, bd = trnscipy.to_device(A, cuda), torch.from_numpy(b).to(cuda)
        solve = getattr(tsl, name)
        graphs = best(lambda: solve(Ad, bd, rtol=1e-5, **kw))  # noqa: B023
        x, info = solve(Ad, bd, rtol=1e-5, **kw)
        relres = np.linalg.norm(b - A @ x.cpu().numpy()) / np.linalg.norm(b)
        backend(cuda).graph_function = _generic.graph_function  # (the instance's own)
        eager = best(lambda: solve(Ad, bd, rtol=1e-5, **kw))  # noqa: B023
        del backend(cuda).graph_function  # (the class's again)
        theirs = float("nan")
        if hasattr(cspla, name):
            fn = getattr(cspla, name)
            rtol = "rtol" if "rtol" in inspect.signature(fn).parameters else "tol"
            Ac, bc = csp.csr_matrix(A), cupy.asarray(b)
            theirs = best(lambda: fn(Ac, bc, **{rtol: 1e-5}, **kw))  # noqa: B023
        print(f"{name:8s} {problem.__name__[1:]} n={A.shape[0]} {dtype} {kw}: "
              f"graphs {graphs * 1e3:.2f} ms, eager {eager * 1e3:.2f} ms, "
              f"cupyx {theirs * 1e3:.2f} ms; info {info}, relres {relres:.1e}; "
              f"capture failures {failures}", flush=True)
        failures.clear()


if __name__ == "__main__":
    main()
