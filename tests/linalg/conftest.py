"""Lanes for the dense linalg tests.

``cpu``: CPU tensors (SciPy's LAPACK on zero-copy views); ``generic``: CPU
tensors with the CPU kernels removed, so the torch.linalg kernels that serve
CUDA run (and are tested) here; ``xla``: torch-xla (PJRT_DEVICE=CPU); ``cuda``
where a GPU is present.
"""

import pytest

LANES = ["cpu", "generic", pytest.param("xla", marks=pytest.mark.xla),
         pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=LANES)
def dlane(request, monkeypatch):
    torch = pytest.importorskip("torch")
    import trnscipy

    if request.param == "xla":
        pytest.importorskip("torch_xla")
        return trnscipy.resolve_device("xla")
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        return torch.device("cuda")
    if request.param == "generic":
        import trnscipy._kernels as seam
        import trnscipy.linalg  # noqa: F401  (registers the kernels)

        # every family loaded first: a kernel module imported under the patch would
        # register into the copy, and its kernels would be lost when the patch ends
        for fam in seam.PROVIDERS:
            seam._load(fam)
        impls = {k: v for k, v in seam._IMPLS.items()
                 if not (k[1] == "cpu" and k[0].startswith("linalg."))}
        monkeypatch.setattr(seam, "_IMPLS", impls)
    return torch.device("cpu")

