"""Why an out-of-memory event happened, from a fixed vocabulary, with the numbers that say so and the fix.

capacity: the job's own tensors fill the GPU; fragmentation: the caching allocator holds enough free
bytes but not in one piece; other-process: memory this process's allocator does not hold is in use (two
ranks on one GPU, a wrong CUDA_VISIBLE_DEVICES/LOCAL_RANK, a stray process); activation-growth: it ran for
steps before (a longer batch, variable sequence length); nccl; host-memory; unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.diagnose.events import Event
from guard.units import GIB

CONTEXT_ALLOWANCE = GIB  # CUDA context and NCCL of the process itself, outside PyTorch's reserved bytes
# Memory outside this process's allocator that is someone else's: NVML lists the processes (more than 1 GiB
# besides this one), or, in messages without that list, more than a tenth of the GPU beyond PyTorch's reserved
# bytes (this process's own CUDA context, NCCL buffers and cuBLAS workspaces take 0.5-2 GiB outside it).
FOREIGN_MIN = GIB
FOREIGN_INFERRED_SHARE = 0.10


@dataclass(frozen=True)
class Cause:
    name: str
    why: str
    fix: str


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def cause(event: Event, expandable: bool = False) -> Cause:
    """`expandable`: the log or a snapshot says PYTORCH_CUDA_ALLOC_CONF already has expandable_segments:True."""
    o = event.oom
    if o.kind == "nccl":
        return Cause("nccl", "NCCL could not allocate its buffers on the GPU",
                     "leave room for NCCL (smaller NCCL_BUFFSIZE or fewer channels), or free memory before "
                     "communicators are created")
    if o.kind in ("host", "host-killed"):
        return Cause("host-memory", "host RAM ran out" + (" (the kernel's OOM killer ended a rank)"
                                                           if o.kind == "host-killed" else ""),
                     "fewer data-loader workers or less pinned memory; offload less to the CPU; load checkpoints "
                     "on fewer ranks at a time")
    if o.kind != "cuda-oom" or o.total is None:
        return Cause("unknown", f"{o.kind} without sizes: the log does not say how full the GPU was",
                     "rerun with PyTorch's caching allocator message visible (or a memory snapshot)")
    foreign = _foreign(o)
    floor = FOREIGN_MIN if o.processes else FOREIGN_INFERRED_SHARE * o.total
    # someone else's memory matters when, without it, the request would have fit
    if foreign is not None and foreign >= max(floor, (o.requested or 0) - (o.free or 0)):
        mine = _mine(o)
        listed = ", ".join(f"pid {pid} {_gib(b)}" for pid, b in o.processes.items() if pid != mine)
        return Cause("other-process", f"{_gib(foreign)} of GPU {o.device} is held outside this process's allocator"
                                      + (f" ({listed})" if listed else ""),
                     "one rank per GPU: check CUDA_VISIBLE_DEVICES and LOCAL_RANK (torch.cuda.set_device), and "
                     "stop other processes on the device")
    spare = (o.reserved_unallocated or 0) + (o.free or 0)
    if o.reserved_unallocated is not None and spare >= (o.requested or 0) and \
            o.reserved_unallocated > 0.05 * o.total:
        return Cause("fragmentation", f"{_gib(o.reserved_unallocated)} reserved but unallocated and {_gib(o.free)} "
                                      f"free, yet {_gib(o.requested)} did not fit in one piece",
                     "expandable_segments is already on, so the pieces are what the job leaves between its "
                     "tensors: lower the peak (a layout that fits with room, guard plan) or free caches before "
                     "the phase that failed" if expandable else
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb on older PyTorch)")
    if event.phase.startswith("step ") and event.phase not in ("step 0", "step 1"):
        return Cause("activation-growth", f"it ran until {event.phase} before running out: a later batch needed "
                                          "more (longer sequences, or memory that grows step by step)",
                     "cap the sequence length or pack to a fixed length; look for tensors kept across steps")
    return Cause("capacity", f"PyTorch held {_gib(o.allocated)} of {_gib(o.total)} and asked for "
                             f"{_gib(o.requested)} more: the job does not fit",
                 "change the layout: guard plan with the job's inputs lists what fits")


def _foreign(o) -> int | None:
    """Bytes in use on the device that this process's allocator does not hold. NVML's list often holds the
    failing process itself under its container PID: the smallest entry that can hold PyTorch's reserved
    bytes is taken as this process."""
    reserved = o.reserved or 0
    if o.processes:
        mine = _mine(o)
        return sum(b for pid, b in o.processes.items() if pid != mine)
    if o.reserved is None or o.free is None:
        return None
    own = o.this_process if o.this_process and o.this_process >= reserved else reserved + CONTEXT_ALLOWANCE
    return max(0, o.total - o.free - own)


def _mine(o) -> int | None:
    """The pid NVML lists for the failing process itself: the smallest that holds PyTorch's reserved bytes."""
    holding = [(b, pid) for pid, b in o.processes.items() if b >= (o.reserved or 0)]
    return min(holding)[1] if holding else None
