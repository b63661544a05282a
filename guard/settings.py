"""User settings: command-line options merged over `[tool.guard]` in pyproject.toml (guard/option_table.py
declares each option, its validator and its key)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.errors import InputError


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["ALL"])
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    context: str = "auto"
    fail_on: str = "warning"  # the least severity that makes `guard check` exit 1
    deepspeed_version: str | None = None
    world_size: int | None = None
    world_size_source: str = ""  # "settings" ([tool.guard]) or "cli" (--world-size)
    world_size_label: str = ""  # how messages name it
    force_world_size: bool = False  # the user's world size wins over the launcher's
    gpus_per_node: int | None = None
    megatron_version: str | None = None  # a vendored flag table (None: detect the flavour, newest)
    megatron_source: str | None = None  # a Megatron checkout (a fork) whose own flag table judges the commands
    gpu: str | None = None  # a GPU catalog name or a size ("80GiB"): enables the out-of-memory check
    gpu_memory: str | None = None  # usable memory ("80GiB"), alone or overriding the named GPU's
    root: Path = field(default_factory=Path.cwd)

    def ignores_for(self, path: str) -> list[str]:
        """Codes ignored for `path` by per-file-ignores (globs relative to the settings root)."""
        try:
            rel = os.path.relpath(os.path.abspath(path), self.root)
        except ValueError:
            rel = path
        rel = rel.replace(os.sep, "/")
        out: list[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(os.path.basename(path), pattern):
                out.extend(codes)
        return out


def find_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_table(pyproject: Path) -> dict[str, Any]:
    """The `[tool.guard]` table of a pyproject.toml, as written (guard/option_table.py validates each value)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with open(pyproject, "rb") as handle:
            table = tomllib.load(handle).get("tool", {}).get("guard", {})
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise InputError(f"{pyproject}: cannot read [tool.guard]: {err}") from None
    if not isinstance(table, dict):
        raise InputError(f"{pyproject}: [tool.guard] must be a table")
    return table
