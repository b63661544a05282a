"""Free memory of this rank's own GPU at start-up: NVML (no CUDA context), else torch, else simulated.

`GUARD_SIMULATED_GPUS` ("80GiB:78GiB,80GiB:40GiB": total:free per local rank) stands in for the device
only where CUDA is absent; every report says when it was used. The device is LOCAL_RANK's among those
CUDA_VISIBLE_DEVICES shows (by index or UUID).
"""

from __future__ import annotations

import os
import socket

from guard.units import parse_size

SIMULATED_ENV = "GUARD_SIMULATED_GPUS"


class ProbeError(RuntimeError):
    """No way to read this rank's GPU (one line, names the rank)."""


def simulated(local_rank: int, text: str) -> tuple[int, int]:
    """(total, free) of local rank `local_rank` from a GUARD_SIMULATED_GPUS value."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ProbeError(f"{SIMULATED_ENV} is empty")
    total, _, free = entries[min(local_rank, len(entries) - 1)].partition(":")
    try:
        return parse_size(total), parse_size(free or total)
    except ValueError as err:
        raise ProbeError(f"{SIMULATED_ENV}={text!r}: {err}") from None


def sample(rank: int, local_rank: int) -> dict:
    """What this rank sees: host, device, total and free bytes, other processes on it, and how it was read."""
    out = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "others": []}
    cuda = _cuda_available()
    text = os.environ.get(SIMULATED_ENV)
    if not cuda and text:
        total, free = simulated(local_rank, text)
        return {**out, "device": f"simulated:{local_rank}", "name": "simulated", "total": total, "free": free,
                "source": "simulated"}
    if not cuda:
        raise ProbeError(f"rank {rank}: no CUDA device and no {SIMULATED_ENV}: nothing to sample")
    return {**out, **(_nvml(local_rank) or _torch(local_rank))}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _visible(local_rank: int) -> str:
    """The physical device (index or UUID) of this local rank under CUDA_VISIBLE_DEVICES."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[local_rank] if local_rank < len(visible) else str(local_rank)


def _nvml(local_rank: int) -> dict | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        device = _visible(local_rank)
        handle = pynvml.nvmlDeviceGetHandleByUUID(device) if device.startswith(("GPU-", "MIG-")) else \
            pynvml.nvmlDeviceGetHandleByIndex(int(device))
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        others = [{"pid": p.pid, "bytes": int(p.usedGpuMemory or 0)} for p in procs if p.pid != os.getpid()]
        return {"device": device, "name": name.decode() if isinstance(name, bytes) else name,
                "total": int(memory.total), "free": int(memory.free), "others": others, "source": "nvml"}
    except (pynvml.NVMLError, ValueError):
        return None


def _torch(local_rank: int) -> dict:
    import torch

    index = local_rank % torch.cuda.device_count()
    free, total = torch.cuda.mem_get_info(index)  # creates this process's CUDA context on that device
    return {"device": str(index), "name": torch.cuda.get_device_name(index), "total": int(total), "free": int(free),
            "source": "torch"}
