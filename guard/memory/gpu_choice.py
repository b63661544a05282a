"""Turn what the user typed (--gpu H100, --gpu-memory 80GiB, [tool.guard] gpu) into a Gpu."""

from __future__ import annotations

from guard.memory.catalog import Gpu, custom, lookup
from guard.units import parse_size


def choose_gpu(name: str | None = None, memory: str | None = None) -> Gpu | None:
    """A catalog name, or a size; both: the named GPU with the given usable memory."""
    gpu = None
    if name and memory is None and name.strip()[:1].isdigit():  # "80GiB": a size, not a catalog name
        return custom(parse_size(name))
    if name:
        gpu = lookup(name)
    if memory:
        size = parse_size(memory)
        if gpu is None:
            return custom(size)
        return Gpu(gpu.name, gpu.memory_bytes, size, "usable memory given with --gpu-memory", gpu.entry)
    return gpu
