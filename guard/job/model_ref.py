"""The model a training config names, without the network: a local folder's config.json, or a known preset."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache

from guard.errors import InputError
from guard.job import hf_config, presets
from guard.job.architecture import Architecture

# fine-tunes published beside their base keep its config shapes (chat/instruct variants)
VARIANT = re.compile(r"(-instruct(-v0\.\d)?|-chat(-hf)?|-it)$", re.IGNORECASE)


class UnknownModel(InputError):
    """The name resolves to nothing guard can read (the message says what to give)."""


@lru_cache(maxsize=1)
def _repo_ids() -> dict[str, str]:
    """Hugging Face repo id (lowercase) -> preset name, from each preset's recorded source URL."""
    out = {}
    for name in presets.names():
        meta = json.loads((presets.folder() / f"{name}.json").read_text(encoding="utf-8")).get("_guard") or {}
        found = re.search(r"huggingface\.co/([^/]+/[^/]+)/", meta.get("source", ""))
        if found:
            out[found.group(1).lower()] = name
    return out


def resolve(name: str, base_dir: str = ".") -> tuple[Architecture, str]:
    """(architecture, how it was found) for `model_name_or_path` / `base_model`."""
    for folder in (name, os.path.join(base_dir, name)):
        config = os.path.join(folder, "config.json")
        if os.path.isfile(config):
            return hf_config.load(config), f"{config}"
    key = name.strip().lower()
    ids = _repo_ids()
    if key in ids:
        return presets.load(ids[key]), f"preset {ids[key]}"
    base = VARIANT.sub("", key)
    if base in ids:
        return presets.load(ids[base]), f"preset {ids[base]} (the base model of {name})"
    if key in presets.names():
        return presets.load(key), f"preset {key}"
    raise UnknownModel(f"model {name!r} is neither a local folder with a config.json nor a known preset "
                       f"(guard does not download): give --hf-config path/to/config.json or --model PRESET")
