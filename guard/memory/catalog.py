"""The GPU catalog (schemas/gpus/catalog.json): capacity, usable memory, bandwidths, peak FLOP/s."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from guard.resources import load_json


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    usable_bytes: int
    usable_note: str = ""
    entry: dict | None = None  # the whole catalog record (bandwidths, FLOP/s, sources)


@lru_cache(maxsize=1)
def _entries() -> list[dict]:
    return load_json("gpus", "catalog.json")["gpus"]


def names() -> list[str]:
    return [e["name"] for e in _entries()]


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def lookup(name: str) -> Gpu:
    wanted = _key(name)
    for entry in _entries():
        if wanted in {_key(entry["name"]), *(_key(a) for a in entry.get("aliases", []))}:
            return Gpu(entry["name"], int(entry["memory_bytes"]), int(entry["usable_bytes"]),
                       entry.get("usable_note", ""), entry)
    raise ValueError(f"unknown GPU {name!r} (known: {', '.join(names())}; or give --gpu-memory SIZE)")


def custom(capacity: int) -> Gpu:
    return Gpu("custom", capacity, capacity, "given with --gpu-memory: used as is")
