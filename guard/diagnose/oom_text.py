"""PyTorch's CUDA out-of-memory message in every era, and the look-alikes (raw CUDA, cuBLAS/cuDNN, NCCL, host).

Eras (../shared/research/lint_rules.md §6.1): "(GPU 0; X total capacity; Y already allocated; Z free;
W cached)" before ~1.4; "... W reserved in total by PyTorch)" to 2.0 (with "X allowed;" under a memory
fraction); from 2.1 "GPU 0 has a total capac(i)ty of X of which Y is free. [Process N has X memory in use.]
[Including non-PyTorch memory, this process has X memory in use.] [X allowed;] Of the allocated memory X is
allocated by PyTorch, [with X allocated in private pools (e.g., CUDA Graphs), ]and Y is reserved by PyTorch
but unallocated." The era is read from the body, never from the class name in front of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
SIZE = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB|PiB)"
OOM = re.compile(r"CUDA out of memory\. Tried to allocate " + SIZE)
OLD = re.compile(r"\(GPU (\d*); " + SIZE + r" total capacity; " + SIZE + r" already allocated; " + SIZE +
                 r" free; (?:" + SIZE + r" allowed; )?" + SIZE + r" (reserved in total by PyTorch|cached)")
NEW_DEVICE = re.compile(r"GPU (\d*) ?has a total capac(?:i)?ty of " + SIZE + r" of which " + SIZE + r" is free")
PROCESS = re.compile(r"Process (\d+) has " + SIZE + r" memory in use")
SELF = re.compile(r"Including non-PyTorch memory, this process has " + SIZE + r" memory in use")
ALLOWED = re.compile(SIZE + r" allowed;")
BY_PYTORCH = re.compile(r"Of the allocated memory " + SIZE + r" is allocated by PyTorch, (?:with " + SIZE +
                        r" allocated in private pools \(e\.g\., CUDA Graphs\), )?and " + SIZE +
                        r" is reserved by PyTorch but unallocated")
LOOKALIKES = [  # (kind, pattern): OOMs that are not the caching allocator's message
    ("raw-cuda", re.compile(r"CUDA error: out of memory")),
    ("cublas", re.compile(r"CUBLAS_STATUS_ALLOC_FAILED")),
    ("cudnn", re.compile(r"CUDNN_STATUS_ALLOC_FAILED")),
    ("nccl", re.compile(r"Failed to CUDA calloc(?: async)? (\d+) bytes|Cuda failure (?:\d+ )?'out of memory'")),
    # vLLM's start-up check (v1 gpu_worker.init_device): others already hold the GPU
    ("vllm-startup", re.compile(r"Free memory on device \((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) GiB\) on startup is "
                                r"less than desired GPU memory utilization")),
    # vLLM's KV cache does not hold one sequence of max_model_len, or nothing is left for it
    ("vllm-kv", re.compile(r"larger than the maximum number of tokens that can be stored in KV cache|No available "
                           r"memory for the cache blocks|Not enough memory for the KV cache")),
    # shared memory: NCCL's shm transport (transport/shm.cc, misc/shmutils.cc: /dev/shm too small in a container,
    # WSL2) and PyTorch's DataLoader workers (their batches travel through /dev/shm)
    ("shm", re.compile(r"failed to extend \S*/dev/shm/\S+ to (\d+) bytes|Error while creating shared memory "
                       r"segment[^\n]*?\(size (\d+)\)|Error while creating shared memory segment|unable to allocate "
                       r"shared memory|out of shared memory|insufficient shared memory \(shm\)|No space left on "
                       r"device[^\n]*?/dev/shm|/dev/shm[^\n]*?No space left on device|"
                       r"shm\.cc:\d+ NCCL WARN")),
    ("host", re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)(?:[^\n]*?allocate (\d+) "
                        r"bytes)?")),
    # Python's own MemoryError (a traceback's last line), numpy's "Unable to allocate X GiB for an array"
    ("host", re.compile(r"^(?:builtins\.)?MemoryError\b|_ArrayMemoryError|Unable to allocate (\d+(?:\.\d+)? "
                        r"[KMGT]iB) for an array")),
    ("host-killed", re.compile(r"exitcode\s*:\s*-9\b|return code = -9\b|Signal 9 \(SIGKILL\)|oom[-_]kill")),
]


# one cheap search rules out the lines that hold none of the above (nearly all of a training log)
ANY = re.compile(r"out of memory|ALLOC_FAILED|calloc|DefaultCPUAllocator|-9\b|SIGKILL|oom[-_]kill|shm|shared memory|"
                 r"MemoryError|Unable to allocate|Free memory on device|KV cache|cache blocks")


def size(number: str, unit: str) -> int:
    return int(float(number) * UNITS[unit])


@dataclass
class OomText:
    """What one message says (None where it does not say it)."""

    kind: str  # "cuda-oom" (the caching allocator) or a look-alike kind
    start: int = field(compare=False)  # offset of the message in its line
    requested: int | None = None
    device: int | None = None
    total: int | None = None
    free: int | None = None
    allocated: int | None = None  # by PyTorch's allocator
    reserved: int | None = None
    reserved_unallocated: int | None = None
    allowed: int | None = None
    private_pools: int | None = None
    this_process: int | None = None  # NVML: this process, non-PyTorch memory included
    processes: dict[int, int] = field(default_factory=dict)  # other processes NVML lists: pid -> bytes
    era: str = ""
    note: str = field(default="", compare=False)  # what else the log said about it (a reading, the line after)


def messages(line: str) -> list[OomText]:
    """Every OOM message in a line (two ranks' messages can be glued into one); look-alikes too."""
    if not ANY.search(line):
        return []
    out = []
    starts = [m.start() for m in OOM.finditer(line)]
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        out.append(_cuda(line[start:end], start))
    if not out:
        for kind, pattern in LOOKALIKES:
            match = pattern.search(line)
            if match:
                out.append(_lookalike(kind, match))
                break
    return out


def _lookalike(kind: str, match: re.Match) -> OomText:
    """A look-alike with what it prints: the size asked (bytes, or "1.5 GiB"), vLLM's free and total."""
    if kind == "vllm-startup":
        free, total = (round(float(g) * UNITS["GiB"]) for g in match.groups())
        return OomText(kind, match.start(), total=total, free=free)
    text = next((g for g in match.groups() if g), None)
    if text is None:
        return OomText(kind, match.start())
    number, _, unit = text.partition(" ")
    return OomText(kind, match.start(), requested=size(number, unit) if unit else int(number))


def _cuda(text: str, start: int) -> OomText:
    head = OOM.match(text)
    out = OomText("cuda-oom", start, requested=size(head.group(1), head.group(2)))
    old = OLD.search(text)
    if old:
        g = old.groups()
        out.device = int(g[0]) if g[0] else None
        out.total, out.allocated, out.free = size(g[1], g[2]), size(g[3], g[4]), size(g[5], g[6])
        out.allowed = size(g[7], g[8]) if g[7] else None
        if g[11] == "cached":  # before 1.4 the last figure is the cache alone: reserved but unallocated
            out.reserved_unallocated = size(g[9], g[10])
            out.reserved = out.allocated + out.reserved_unallocated
            out.era = "cached (<= 1.3)"
        else:
            out.reserved = size(g[9], g[10])
            out.reserved_unallocated = max(0, out.reserved - out.allocated)
            out.era = "reserved in total (1.4 - 2.0)"
        return out
    new = NEW_DEVICE.search(text)
    if new:
        g = new.groups()
        out.device = int(g[0]) if g[0] else None
        out.total, out.free = size(g[1], g[2]), size(g[3], g[4])
        out.era = "total capacity of (>= 2.1)"
        out.processes = {int(m.group(1)): size(m.group(2), m.group(3)) for m in PROCESS.finditer(text)}
        own = SELF.search(text)
        out.this_process = size(own.group(1), own.group(2)) if own else None
        allowed = ALLOWED.search(text)
        out.allowed = size(allowed.group(1), allowed.group(2)) if allowed else None
        pytorch = BY_PYTORCH.search(text)
        if pytorch:
            p = pytorch.groups()
            out.allocated = size(p[0], p[1])
            out.private_pools = size(p[2], p[3]) if p[2] else None
            out.reserved_unallocated = size(p[4], p[5])
            out.reserved = out.allocated + out.reserved_unallocated + (out.private_pools or 0)
    return out
