"""What a call costs on an XLA device: graph compilations, executions, transfers.

On Trainium each graph execution costs about 1-3 ms of dispatch and each new
graph a compile of seconds, so these counts, not flops, decide speed there.
Used by the tests (the XLA lane reports them) and by bench/.
"""

import contextlib
from dataclasses import dataclass

__all__ = ["XlaCounts", "xla_counts"]

_COUNTED = {
    "compilations": "CompileTime",
    "executions": "ExecuteTime",
    "transfers_to_device": "TransferToDeviceTime",
    "transfers_from_device": "TransferFromDeviceTime",
}


@dataclass
class XlaCounts:
    compilations: int = 0
    executions: int = 0
    transfers_to_device: int = 0
    transfers_from_device: int = 0

    def __str__(self):
        return (f"compilations={self.compilations} executions={self.executions} "
                f"transfers to/from device={self.transfers_to_device}/"
                f"{self.transfers_from_device}")


def _snapshot():
    import torch_xla.debug.metrics as met

    values = {}
    for field, metric in _COUNTED.items():
        data = met.metric_data(metric)
        values[field] = data[0] if data else 0
    return values


def _flush():
    """Run pending work and wait for it (torch_xla.sync() returns before it finishes)."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    torch_xla.sync()
    xm.wait_device_ops()


@contextlib.contextmanager
def xla_counts(sync=True):
    """Count XLA graph compilations, executions and transfers inside the block.

    With ``sync`` (default) pending work is flushed before and after, so the
    counts belong to the block alone.
    """
    if sync:
        _flush()
    before = _snapshot()
    counts = XlaCounts()
    yield counts
    if sync:
        _flush()
    after = _snapshot()
    for field in _COUNTED:
        setattr(counts, field, after[field] - before[field])
