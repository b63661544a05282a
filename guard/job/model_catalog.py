"""The shipped catalog of Hub architectures (schemas/catalog/catalog.json, built by scripts/build_model_catalog.py)."""

from __future__ import annotations

import json
from functools import lru_cache

from guard.resources import schemas_dir


@lru_cache(maxsize=1)
def _catalog() -> dict:
    return json.loads((schemas_dir() / "catalog" / "catalog.json").read_text(encoding="utf-8"))


def entry(name: str) -> tuple[str, dict] | None:
    """(canonical Hub id, its entry: config, source, published parameter count) for a Hub id, variant or mirror."""
    data = _catalog()
    canonical = data["aliases"].get(name.strip().lower())
    return (canonical, data["models"][canonical]) if canonical else None


def entries() -> dict[str, dict]:
    return _catalog()["models"]
