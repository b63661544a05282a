"""The one place that sorts what a user hands guard: DeepSpeed configs, launch scripts, command-line files."""

from __future__ import annotations

import os

CONFIG_SUFFIXES = (".json", ".hjson", ".yaml", ".yml")
SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")  # launch scripts; other named files: command lines
SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist"}


def is_config(path: str) -> bool:
    """A DeepSpeed config (JSON, hjson, YAML); anything else is read as a script or a command line."""
    return path.lower().endswith(CONFIG_SUFFIXES)


def split_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(configs, scripts): files named on the command line, by what guard reads them as."""
    return [p for p in paths if is_config(p)], [p for p in paths if not is_config(p)]


def expand(paths: list[str]) -> list[tuple[str, bool]]:
    """Files to check, each with whether the user named it (directories are walked)."""
    out: list[tuple[str, bool]] = []
    for path in paths:
        if os.path.isdir(path):
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                out.extend((os.path.join(folder, f), False) for f in sorted(files)
                           if f.lower().endswith(CONFIG_SUFFIXES + SCRIPT_SUFFIXES))
        else:
            out.append((path, True))
    return out
