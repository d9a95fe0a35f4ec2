"""Demo: 2-D Poisson with cg, through SciPy and through trnscipy on the available devices.

    python -m trnscipy.demo [--grid 300] [--rtol 1e-8]

The SciPy script is the same for every lane; only where the data lives changes.
Prints the time of each solve, its iteration count, the true residual and the
agreement with SciPy's answer.
"""

import argparse
import os
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import trnscipy
import trnscipy.sparse.linalg


def poisson_2d(grid):
    """The 5-point Laplacian on a grid x grid mesh (SPD, grid**2 unknowns), as CSR."""
    one_d = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(grid, grid))
    eye = scipy.sparse.eye_array(grid)
    return (scipy.sparse.kron(one_d, eye) + scipy.sparse.kron(eye, one_d)).tocsr()


def _lanes():
    """(label, device) for every lane worth showing on this machine."""
    lanes = [("torch CPU tensors", "cpu")]
    import torch

    if torch.cuda.is_available():
        lanes.append(("CUDA", "cuda"))
    from trnscipy._torch import torch_xla_available

    if torch_xla_available():
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        lanes.append((f"XLA (PJRT_DEVICE={os.environ['PJRT_DEVICE']}, Trainium's route)", "xla"))
    return lanes


def _solve(A, b, rtol, count_iterations):
    iterations = [0]

    def callback(xk):
        iterations[0] += 1

    start = time.perf_counter()
    x, info = trnscipy.sparse.linalg.cg(A, b, rtol=rtol,
                                        callback=callback if count_iterations else None)
    x = trnscipy.to_host(x)  # includes the device->host copy and any pending device work
    return x, info, time.perf_counter() - start, iterations[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=300, help="grid side (unknowns = grid**2)")
    parser.add_argument("--rtol", type=float, default=1e-8)
    args = parser.parse_args(argv)

    A = poisson_2d(args.grid)
    b = np.ones(A.shape[0])
    print(f"2-D Poisson, {A.shape[0]} unknowns, {A.nnz} nonzeros, cg rtol={args.rtol}")

    # Iteration counts come from a separate run with a callback, so the timed runs
    # are the plain solves a script would do.
    _, _, _, iterations = _solve(A, b, args.rtol, count_iterations=True)
    x_ref, info, seconds, _ = _solve(A, b, args.rtol, count_iterations=False)
    bnorm = np.linalg.norm(b)
    print(f"\n{'lane':46s} {'time':>9s} {'info':>5s} {'rel. residual':>14s} "
          f"{'vs SciPy':>10s}")
    print(f"{'SciPy (NumPy inputs; ' + str(iterations) + ' iterations)':46s} "
          f"{seconds:8.3f}s {info:5d} {np.linalg.norm(b - A @ x_ref) / bnorm:14.2e} {'':>10s}")

    for label, device in _lanes():
        A_dev = trnscipy.to_device(A, device)
        b_dev = trnscipy.to_device(b, device)
        for run in ("cold", "warm"):
            x, info, seconds, _ = _solve(A_dev, b_dev, args.rtol, count_iterations=False)
            residual = np.linalg.norm(b - A @ x) / bnorm
            agreement = np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref)
            print(f"{label + ' (' + run + ')':46s} {seconds:8.3f}s {info:5d} "
                  f"{residual:14.2e} {agreement:10.1e}")
    print("\n'vs SciPy' is ||x - x_scipy|| / ||x_scipy||; 'cold' includes XLA graph "
          "compilation, 'warm' repeats the solve.")


if __name__ == "__main__":
    main()
