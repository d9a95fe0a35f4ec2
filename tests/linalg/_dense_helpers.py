"""Helpers for the dense linalg tests."""

import numpy as np


def to_np(x):
    """Tensor -> ndarray (complex128 read back through its real view: torch-xla 2.9
    drops the imaginary part of complex128 tensors in ``.cpu()``)."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.is_complex():
            return torch.view_as_complex(torch.view_as_real(x.resolve_conj()).cpu()).numpy()
        return x.cpu().numpy()
    return np.asarray(x)


def tensor(a, device):
    """ndarray -> tensor on ``device`` (complex through its real view, as above; float64
    through trnscipy.to_device, exact where the device holds float64 as float32)."""
    import torch

    import trnscipy

    a = np.ascontiguousarray(a)
    if a.dtype == np.float64:
        return trnscipy.to_device(a, device)
    if np.iscomplexobj(a):
        return torch.view_as_complex(torch.from_numpy(a.view(a.real.dtype).reshape(
            a.shape + (2,))).to(device))
    return torch.from_numpy(a).to(device)


def eps(dtype):
    return np.finfo(np.dtype(dtype)).eps


def random(n, dtype, rng, m=None):
    m = n if m is None else m
    a = rng.standard_normal((m, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((m, n))
    return a.astype(dtype)


def hpd(n, dtype, rng):
    a = random(n, dtype, rng)
    return (a @ a.conj().T + n * np.eye(n)).astype(dtype)


def generic_kernels(device):
    """True where the torch.linalg ("generic") kernels serve ``device``: CUDA, or the
    test's ``generic`` lane (CPU with SciPy's kernels removed)."""
    import trnscipy._kernels as seam

    return device.type == "cuda" or (device.type == "cpu"
                                     and ("linalg.qr", "cpu") not in seam._IMPLS)
