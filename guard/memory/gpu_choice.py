"""Turn what the user typed (--gpu H100, --gpu-memory 80GiB, [tool.guard] gpu) into a Gpu."""

from __future__ import annotations

from guard.memory.catalog import Gpu, custom, lookup
from guard.memory.units import parse_size


def choose_gpu(name: str | None = None, memory: str | None = None) -> Gpu | None:
    """A catalog name, or a size; both: the named GPU with the given usable memory."""
    gpu = None
    if name:
        try:
            gpu = lookup(name)
        except ValueError:
            if memory is None and any(ch.isdigit() for ch in name):
                try:
                    return custom(parse_size(name))
                except ValueError:
                    pass
            raise
    if memory:
        size = parse_size(memory)
        if gpu is None:
            return custom(size)
        return Gpu(gpu.name, gpu.memory_bytes, size, "usable memory given with --gpu-memory", gpu.entry)
    return gpu
