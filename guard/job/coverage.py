"""What each Megatron flag and DeepSpeed config key does to GPU memory: read, no effect, or unmodelled."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from guard import resources

READ = "read"  # guard's job reader reads it into the TrainingJob the memory model prices
NO_EFFECT = "no-memory-effect"
UNMODELLED = "unmodelled"  # changes GPU memory, but guard does not price it (MEM002 names it)
CLASSES = (READ, NO_EFFECT, UNMODELLED)


@dataclass(frozen=True)
class Entry:
    """One row of schemas/coverage/: `name` is a Megatron dest or a dotted DeepSpeed key path."""

    name: str
    effect: str  # one of CLASSES
    feature: str = ""  # for UNMODELLED: what memory it changes, in a short phrase
    why: str = ""  # for a non-obvious NO_EFFECT (or an extra READ): the reason
    children: bool = False  # DeepSpeed only: the entry also covers every key below `name`


def _entry(row: dict, name_field: str, table: str) -> Entry:
    entry = Entry(name=row[name_field], effect=row["class"], feature=row.get("feature", ""),
                  why=row.get("why", ""), children=bool(row.get("children", False)))
    if entry.effect not in CLASSES:
        raise ValueError(f"schemas/coverage/{table}: {entry.name}: class {entry.effect!r} is not one of {CLASSES}")
    return entry


@functools.lru_cache(maxsize=None)
def megatron_entries() -> dict[str, Entry]:
    """Every classified Megatron flag, by dest (the union of the vendored flag tables and their entry points)."""
    rows = resources.load_json("coverage", "megatron.json")["flags"]
    return {row["dest"]: _entry(row, "dest", "megatron.json") for row in rows}


@functools.lru_cache(maxsize=None)
def deepspeed_entries() -> dict[tuple[str, ...], Entry]:
    """Every DeepSpeed coverage entry, by key path; an entry with `children` covers the keys below it too."""
    rows = resources.load_json("coverage", "deepspeed.json")["keys"]
    return {tuple(row["key"].split(".")): _entry(row, "key", "deepspeed.json") for row in rows}


def megatron_class(dest: str) -> Entry | None:
    """The flag's entry; None for a dest guard does not know (a fork): report 'unknown effect on memory'."""
    return megatron_entries().get(dest)


def deepspeed_class(path: tuple[str, ...]) -> Entry | None:
    """The most specific entry covering the key at `path`: its own, else the nearest section marked `children`.

    None means guard does not know the key: report 'unknown effect on memory'.
    """
    entries = deepspeed_entries()
    own = entries.get(tuple(path))
    if own is not None:
        return own
    for end in range(len(path) - 1, 0, -1):
        section = entries.get(tuple(path[:end]))
        if section is not None and section.children:
            return section
    return None
