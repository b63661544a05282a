"""Why an out-of-memory event happened, from a fixed vocabulary, with the numbers that say so and the fix.

capacity: the job's own tensors fill the GPU; fragmentation: the caching allocator holds enough free
bytes but not in one piece; other-process: memory this process does not hold is in use (two ranks on one GPU,
a wrong CUDA_VISIBLE_DEVICES/LOCAL_RANK, a stray process); growth: the rank's memory readings rose over time,
or it ran for steps before (a leak, longer batches); nccl: NCCL's own buffers; shared-memory: /dev/shm (NCCL's
shm transport, DataLoader workers); host-memory: host RAM (the allocator's message, or signal 9); unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.diagnose.events import Event
from guard.diagnose.growth import Growth
from guard.units import GIB

CONTEXT_ALLOWANCE = GIB  # CUDA context and NCCL of the process itself, outside PyTorch's reserved bytes
# Memory outside this process's allocator that is someone else's: NVML lists the processes (more than 1 GiB
# besides this one), or, in messages without that list, more than a tenth of the GPU beyond PyTorch's reserved
# bytes (this process's own CUDA context, NCCL buffers and cuBLAS workspaces take 0.5-2 GiB outside it).
FOREIGN_MIN = GIB
FOREIGN_INFERRED_SHARE = 0.10
# the message's figures are rounded to two decimals of their unit and taken at slightly different moments
ARITHMETIC_SLACK = GIB // 2
ARITHMETIC_SHARE = 0.02


@dataclass(frozen=True)
class Cause:
    name: str
    why: str
    fix: str


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def cause(event: Event, expandable: bool = False, growth: Growth | None = None) -> Cause:
    """`expandable`: the log or a snapshot says PYTORCH_CUDA_ALLOC_CONF already has expandable_segments:True;
    `growth`: what the rank's memory readings over time show (guard/diagnose/growth.py), if they rose."""
    o = event.oom
    named = _not_the_allocators(o)
    if named is not None:
        return named
    if o.kind != "cuda-oom" or o.total is None:
        return Cause("unknown", f"{o.kind} without sizes: the log does not say how full the GPU was",
                     "rerun with PyTorch's caching allocator message visible (or a memory snapshot)")
    foreign, rule = _foreign(o)
    floor = FOREIGN_MIN if o.processes else FOREIGN_INFERRED_SHARE * o.total
    # someone else's memory matters when, without it, the request would have fit
    if foreign is not None and foreign >= max(floor, (o.requested or 0) - (o.free or 0)):
        return Cause("other-process", f"{_gib(foreign)} of GPU {o.device} is held outside this process ({rule})",
                     "one rank per GPU: check CUDA_VISIBLE_DEVICES and LOCAL_RANK (torch.cuda.set_device), and "
                     "stop other processes on the device (nvidia-smi lists them)")
    if growth is not None:
        return Cause("growth", f"memory rose before it ran out: {growth.why}",
                     "find what is kept across steps (tensors held for logging, an evaluation loop that keeps "
                     "graphs: use torch.no_grad and .item(), caches never freed) or cap the sequence length")
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
        return Cause("growth", f"it ran until {event.phase} before running out: a later batch needed more "
                               "(longer sequences, or memory that grows step by step)",
                     "cap the sequence length or pack to a fixed length; look for tensors kept across steps")
    return Cause("capacity", f"PyTorch held {_gib(o.allocated)} of {_gib(o.total)} and asked for "
                             f"{_gib(o.requested)} more: the job does not fit",
                 "change the layout: guard plan with the job's inputs lists what fits")


def _not_the_allocators(o) -> Cause | None:
    """The failures that are not the caching allocator's message: NCCL, shared memory, vLLM, host RAM."""
    if o.kind == "nccl":
        asked = f" ({_gib(o.requested)} asked)" if o.requested else ""
        return Cause("nccl", f"NCCL could not allocate its buffers on the GPU{asked}",
                     "leave room for NCCL: a smaller NCCL_BUFFSIZE (default 4 MiB a channel and peer) or fewer "
                     "channels (NCCL_MAX_NCHANNELS), or free memory before the communicators are created")
    if o.kind == "shm":
        asked = f" ({_gib(o.requested)} asked)" if o.requested else ""
        return Cause("shared-memory", f"/dev/shm ran out{asked}: NCCL's shared-memory transport or the "
                                      "DataLoader workers' batches live there, and containers give it 64 MiB"
                     + (f" ({o.note})" if o.note else ""),
                     "give the container more shared memory (docker run --shm-size=16g, or a Kubernetes emptyDir "
                     "with medium: Memory at /dev/shm); else NCCL_SHM_DISABLE=1 (NCCL falls back to P2P or "
                     "sockets, slower) and fewer DataLoader workers")
    if o.kind == "vllm-startup":
        return Cause("other-process", f"vLLM found {_gib(o.free)} free of {_gib(o.total)} at start-up: "
                                      f"{_gib(o.total - o.free)} was already held (the trainer on the same GPU, "
                                      "another engine, a stray process)",
                     "lower gpu_memory_utilization to the share left to vLLM (colocated with training: TRL's "
                     "vllm_gpu_memory_utilization), or move vLLM to its own GPUs; stop other processes")
    if o.kind == "vllm-kv":
        return Cause("capacity", "vLLM's KV cache cannot hold the sequences it is configured for after the "
                                 "weights and activations took their share",
                     "raise gpu_memory_utilization if the GPU is vLLM's alone, else lower max_model_len or "
                     "max_num_seqs, or shard the model (tensor_parallel_size)")
    if o.kind in ("host", "host-killed"):
        asked = f", {_gib(o.requested)} asked" if o.requested else ""
        return Cause("host-memory", "host RAM ran out" + (" (the kernel's OOM killer ended a rank: signal 9)"
                                                           if o.kind == "host-killed" else asked)
                     + (f": {o.note}" if o.note else ""),
                     "fewer data-loader workers or less pinned memory; offload less to the CPU; load checkpoints "
                     "on fewer ranks at a time (or memory-mapped)")
    return None


def _foreign(o) -> tuple[int | None, str]:
    """(bytes in use on the device outside this process, the rule that decided). With the list NVML prints and
    this process's own figure, the arithmetic decides: the GPU's used memory (total - free) is this process plus
    the listed ones when they are others, or this process alone when the listed one is this process seen from
    another PID namespace (a container)."""
    used = None if o.free is None else o.total - o.free
    if o.processes and o.this_process is not None and used is not None:
        tolerance = max(ARITHMETIC_SLACK, ARITHMETIC_SHARE * o.total)
        # first: every listed process is another; then: the one whose figure is this process's is this process
        for own in [None, *(p for p, b in o.processes.items() if abs(b - o.this_process) <= tolerance)]:
            others = {p: b for p, b in o.processes.items() if p != own}
            if abs(used - (o.this_process + sum(others.values()))) <= tolerance:
                named = (f"pid {own} is this process under another PID namespace" if own is not None else "") + \
                    "".join(f"{'; ' if own is not None or i else ''}pid {p} {_gib(b)}"
                            for i, (p, b) in enumerate(others.items()))
                return sum(others.values()), f"used {_gib(used)} = this process {_gib(o.this_process)} + the " \
                                             f"others listed: {named}" if others else \
                    f"used {_gib(used)} = this process alone: {named}"
        return max(0, used - o.this_process), f"used {_gib(used)} less this process's {_gib(o.this_process)}"
    if o.processes:
        mine = _mine(o)
        others = {pid: b for pid, b in o.processes.items() if pid != mine}
        return sum(others.values()), ("NVML lists " + ", ".join(f"pid {p} {_gib(b)}" for p, b in others.items())
                                      + (f" besides pid {mine}, the one holding PyTorch's reserved bytes"
                                         if mine is not None else ""))
    if o.reserved is None or used is None:
        return None, ""
    own = o.this_process if o.this_process and o.this_process >= (o.reserved or 0) else \
        o.reserved + CONTEXT_ALLOWANCE
    return max(0, used - own), f"used {_gib(used)} less this process's {_gib(own)} (inferred: no process list)"


def _mine(o) -> int | None:
    """The pid NVML lists for the failing process itself: the smallest that holds PyTorch's reserved bytes."""
    holding = [(b, pid) for pid, b in o.processes.items() if b >= (o.reserved or 0)]
    return min(holding)[1] if holding else None
