"""Process group, placement and the counted collectives every distributed object uses."""

import atexit
import gc
import os
import sys
from datetime import timedelta

import numpy as np

from trnscipy._torch import torch

__all__ = ["Placement", "placement", "allsum", "agree", "comm_counts", "reset_comm_counts"]

_COUNTS = {"all_reduce": 0, "halo_messages": 0, "halo_bytes": 0}


def comm_counts():
    """Collectives this process has issued since the last reset: ``all_reduce`` calls,
    halo ``halo_messages`` (point-to-point sends) and ``halo_bytes`` (bytes sent)."""
    return dict(_COUNTS)


def reset_comm_counts():
    for key in _COUNTS:
        _COUNTS[key] = 0


def _dist():
    import torch.distributed as dist

    return dist


def _default_backend(device):
    return {"cuda": "nccl", "xla": "xla"}.get(device.type, "gloo")


def _init_from_env(device):
    """Initialise the default process group from torchrun's environment variables."""
    dist = _dist()
    if dist.is_initialized():
        return
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ValueError("no torch.distributed process group: launch with torchrun (or "
                         "call torch.distributed.init_process_group first)")
    backend = _default_backend(device)
    if backend == "xla":
        import torch_xla.distributed.xla_backend  # noqa: F401  (registers the backend)
    timeout = timedelta(seconds=float(os.environ.get("TRNSCIPY_DIST_TIMEOUT", 300)))
    dist.init_process_group(backend, timeout=timeout)


class Placement:
    """Where a distributed object lives: a process group and the local device.

    The routing rule sends any call with an operand carrying a placement to the
    distributed implementation; two operands with different placements raise
    ValueError (the same check on every rank, so no rank waits for another)."""

    distributed = True

    def __init__(self, group, device):
        dist = _dist()
        self.group = group
        self.device = device
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def __eq__(self, other):
        return (isinstance(other, Placement) and other.group is self.group
                and other.device == self.device)

    def __hash__(self):
        return hash((id(self.group), str(self.device)))

    def __repr__(self):
        return f"distributed({self.size} ranks, group {id(self.group):#x}, {self.device})"


_PLACEMENTS = {}

# Seconds the exit barrier waits for the other ranks before giving up on a clean teardown.
_EXIT_BARRIER_TIMEOUT = 60


def _teardown():
    """At interpreter exit: a barrier of all ranks, then the default process group is
    destroyed.  A script that leaves with the group alive lets each rank's gloo threads
    be torn down by the C++ runtime while peers may still talk to it: one rank in about
    ten aborted so (SIGABRT, "terminate called without an active exception") after
    correct results, and torchrun reported the job failed.  Skipped after an uncaught
    exception (the other ranks may be inside another collective) and where the user has
    destroyed the group.  A barrier that fails (a peer is gone: a rank that caught the lost
    peer's error and exits with its own code) still destroys the group, else that rank
    aborted at finalization in one CI run; one that times out leaves it alone (the peers
    may be inside another collective)."""
    dist = _dist()
    if not dist.is_initialized():
        return
    if getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None):
        return
    try:
        work = dist.barrier(async_op=True)
        if work.wait(timeout=timedelta(seconds=_EXIT_BARRIER_TIMEOUT)) is False:
            return
    except Exception:  # noqa: BLE001  (a lost peer: its group is torn down all the same)
        pass
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001, S110  (nothing left to release)
        pass
    # release the group now (gloo's shutdown is its destructor): left to interpreter
    # finalization it is destroyed after the runtime it needs, and aborts the rank
    _PLACEMENTS.clear()
    gc.collect()


def _register_teardown():
    if not _TEARDOWN:
        _TEARDOWN.append(True)
        atexit.register(_teardown)


_TEARDOWN = []


def placement(device=None, group=None):
    """The placement for ``group`` (default: the world) on ``device`` (default: the CPU
    under gloo, ``cuda:LOCAL_RANK`` under nccl, the XLA device under xla)."""
    from trnscipy._device import resolve_device

    dist = _dist()
    if device is None:
        if dist.is_initialized():
            backend = dist.get_backend(group)
            if backend == "nccl":
                device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
            elif backend == "xla":
                device = "xla"
            else:
                device = "cpu"
        else:
            device = "cpu"
    if device == "cuda":  # one GPU per process: torchrun's LOCAL_RANK picks it
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    device = resolve_device(device)
    _init_from_env(device)
    _register_teardown()
    group = group if group is not None else dist.group.WORLD
    key = (id(group), str(device))
    if key not in _PLACEMENTS:
        _PLACEMENTS[key] = Placement(group, device)
    return _PLACEMENTS[key]


def allsum(where, values, dtype):
    """Sum a list of local partial results (0-d tensors or numbers) over the group in
    one all_reduce; returns a 1-D tensor on the host."""
    buf = torch.stack([torch.as_tensor(v, dtype=dtype, device=where.device) for v in values])
    if where.size > 1:
        _dist().all_reduce(buf, group=where.group)
        _COUNTS["all_reduce"] += 1
    return buf.cpu()


def allsum_tensor(where, t):
    """All-reduce (sum) a tensor in place over the group; returns it."""
    if where.size > 1:
        _dist().all_reduce(t, group=where.group)
        _COUNTS["all_reduce"] += 1
    return t


def agree(where, error):
    """Collective error check: every rank passes its own error (an exception or None);
    if any rank has one, every rank raises ValueError with the first failing rank's
    message.  Keeps bad input from leaving some ranks waiting in a collective."""
    dist = _dist()
    if where.size == 1:
        if error is not None:
            raise error
        return
    flag = torch.tensor([where.size if error is None else where.rank], dtype=torch.int64,
                        device=where.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=where.group)
    first = int(flag.item())
    if first == where.size:
        return
    message = [f"{type(error).__name__}: {error}" if error is not None else None]
    dist.broadcast_object_list(message, group=where.group, group_src=first)
    if error is not None and where.rank == first:
        raise error
    raise ValueError(f"rank {first} failed: {message[0]}")


def send_recv(where, sends, recvs):
    """Start point-to-point transfers: ``sends`` and ``recvs`` map a group rank to a
    contiguous tensor.  Returns the requests to wait on."""
    dist = _dist()
    ops = []
    for peer, buf in recvs.items():
        ops.append(dist.P2POp(dist.irecv, buf, group=where.group,
                              group_peer=peer))
    for peer, buf in sends.items():
        ops.append(dist.P2POp(dist.isend, buf, group=where.group, group_peer=peer))
        _COUNTS["halo_messages"] += 1
        _COUNTS["halo_bytes"] += buf.numel() * buf.element_size()
    return dist.batch_isend_irecv(ops) if ops else []


def all_gather_ints(where, values):
    """All-gather an int64 vector of the same length from every rank: a (size, len) array."""
    dist = _dist()
    mine = torch.as_tensor(np.asarray(values, dtype=np.int64), device=where.device)
    if where.size == 1:
        return mine.cpu().numpy()[None, :]
    out = [torch.empty_like(mine) for _ in range(where.size)]
    dist.all_gather(out, mine, group=where.group)
    return torch.stack(out).cpu().numpy()


def broadcast_ints(where, values, src, length):
    """Rank ``src``'s int64 vector of ``length`` entries, on every rank."""
    buf = (torch.as_tensor(np.asarray(values, dtype=np.int64), device=where.device)
           if where.rank == src else torch.empty(length, dtype=torch.int64, device=where.device))
    if where.size > 1:
        _dist().broadcast(buf, group=where.group, group_src=src)
    return buf.cpu().numpy()


def halo_collective(where):
    """True where halo exchanges go through one all_to_all per product: the ``xla``
    backend (torch-xla turns every point-to-point message into a collective permute of
    its own) or ``TRNSCIPY_HALO=alltoall``; elsewhere point-to-point messages to the
    neighbours only."""
    mode = os.environ.get("TRNSCIPY_HALO")
    if where.size == 1:
        return False
    if mode not in (None, "", "alltoall", "p2p"):
        raise ValueError(f"TRNSCIPY_HALO must be 'alltoall' or 'p2p', not {mode!r}")
    if mode:
        return mode == "alltoall"
    return _dist().get_backend(where.group) == "xla"


def all_to_all(where, out, send, out_sizes, in_sizes):
    """Start one all_to_all_single (rows of ``send`` split by ``in_sizes`` to each rank;
    ``out`` receives ``out_sizes`` rows from each); returns the request."""
    _COUNTS["halo_messages"] += 1
    _COUNTS["halo_bytes"] += send.numel() * send.element_size()
    return _dist().all_to_all_single(out, send, output_split_sizes=out_sizes,
                                     input_split_sizes=in_sizes, group=where.group,
                                     async_op=True)
