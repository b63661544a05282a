"""An installed distribution's version, read from its dist-info metadata on the search path: without importing the
package (DeepSpeed's import takes seconds, and torch) or importlib.metadata (50-90 ms, more than a lint)."""

from __future__ import annotations

import functools
import os
import sys


def version(dist: str) -> str | None:
    """The version of distribution `dist` (lower-case, as its dist-info folder spells it), None when not installed."""
    return _scan(tuple(sys.path), dist)


@functools.lru_cache(maxsize=16)
def _scan(path: tuple[str, ...], dist: str) -> str | None:
    """Once per search path and distribution: `guard check --help`'s text and the checker both ask on every run."""
    for entry in path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem, dot, kind = name.rpartition(".")
            if kind in ("dist-info", "egg-info") and stem.split("-")[0].lower() == dist:
                found = _metadata_version(os.path.join(entry or ".", name))
                if found:
                    return found
    return None


def _metadata_version(folder: str) -> str | None:
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, file), encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # the headers end at the first blank line
        except OSError:
            continue
    return None
