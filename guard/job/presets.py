"""Model presets: Hugging Face style config.json files shipped in schemas/models/."""

from __future__ import annotations

from pathlib import Path

from guard.job import hf_config
from guard.job.architecture import Architecture
from guard.resources import schemas_dir


def folder() -> Path:
    return schemas_dir() / "models"


def names() -> list[str]:
    return sorted(p.stem for p in folder().glob("*.json"))


def load(name: str) -> Architecture:
    key = name.strip().lower()
    path = folder() / f"{key}.json"
    if not path.is_file():
        raise hf_config.HfConfigError(f"unknown model preset {name!r} (known: {', '.join(names())})")
    return hf_config.load(str(path))
