"""Counting torch-xla's silent aten CPU fallbacks (``aten::*`` counters)."""

import contextlib

# a device value read on the host (``bool(t)``, ``.item()``: a validation check or a
# result), a transfer rather than computation on the host
_READ = "aten::_local_scalar_dense"


def _aten():
    import torch_xla.debug.metrics as met

    return {name: met.counter_value(name) or 0 for name in met.counter_names()
            if name.startswith("aten::") and name != _READ}


@contextlib.contextmanager
def aten_fallbacks(device):
    """Yields a dict that, after the block, maps each aten op torch-xla ran on the host
    inside the block to its count (scalar reads excepted; always empty off XLA)."""
    found = {}
    if device.type != "xla":
        yield found
        return
    import torch_xla

    torch_xla.sync()
    before = _aten()
    yield found
    torch_xla.sync()
    after = _aten()
    found.update({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)})
