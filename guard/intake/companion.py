"""The job that uses a DeepSpeed config given alone: the one launch script or training config near it that names it.

A DeepSpeed file says nothing of the model; the script or YAML beside it (the same folder or up to two above, as
repositories keep `scripts/` and `configs/` apart) usually does. Only a file that names this config (by its file
name, then resolved to this very file) counts, and only when exactly one does: otherwise the user is told which.
"""

from __future__ import annotations

import os

SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch", ".yaml", ".yml")
MAX_FILES = 400  # a large repository is not walked whole: the search is bounded
MAX_BYTES = 512 * 1024


def companions(config_path: str, levels: int = 2) -> list[str]:
    """Files near `config_path` whose text names its file name (candidates, nearest folder first)."""
    name = os.path.basename(config_path)
    start = os.path.dirname(os.path.abspath(config_path))
    folders = [start]
    for _ in range(levels):
        parent = os.path.dirname(folders[-1])
        if parent == folders[-1] or os.path.isdir(os.path.join(folders[-1], ".git")):
            break  # the repository's top (or the disk's): no further
        folders.append(parent)
    seen, found = 0, []
    for top in reversed(folders):  # the widest folder covers the rest
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__"))
            for file in sorted(files):
                if not file.endswith(SUFFIXES) or os.path.join(root, file) == os.path.abspath(config_path):
                    continue
                seen += 1
                if seen > MAX_FILES:
                    return found
                path = os.path.join(root, file)
                if _names(path, name):
                    relative = os.path.relpath(path)  # said as the user would type it, where it is below
                    found.append(path if relative.startswith("..") else relative)
        break
    return found


def _names(path: str, name: str) -> bool:
    """Whether the file (a small text file) mentions `name`."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return False
        with open(path, encoding="utf-8", errors="replace") as handle:
            return name in handle.read()
    except OSError:
        return False
