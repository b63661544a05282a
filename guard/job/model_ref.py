"""The model a training config names: a local folder, the Hugging Face cache, guard's catalog, a preset, or the Hub
(config.json alone), in that order; each answer says where it came from."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache

from guard.errors import InputError
from guard.job import hf_config, hub_cache, model_catalog, presets
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


def resolve(name: str, base_dir: str = ".", *, offline: bool = False,
            revision: str | None = None) -> tuple[Architecture, str]:
    """(architecture, how it was found) for `model_name_or_path` / `base_model`. What the user has on disk wins
    (their revision of the model); the catalog and presets answer offline; the Hub is asked last, for config.json."""
    for folder in (os.path.expanduser(name), os.path.join(base_dir, name)):
        config = os.path.join(folder, "config.json")
        if os.path.isfile(config):
            return hf_config.load(config), config
    cached = hub_cache.cached_config(name, revision)
    if cached is not None:
        return hf_config.load(str(cached)), f"the Hugging Face cache ({cached})"
    found = known(name)
    if found is not None:
        return found
    if not hub_cache.offline(offline):
        fetched, why_not = hub_cache.download_config(name, revision)
        if fetched is not None:
            return hf_config.load(str(fetched)), f"the Hub (config.json, cached at {fetched})"
    else:
        why_not = "the Hub was not asked (--offline / HF_HUB_OFFLINE)"
    if not _hub_id(name):  # a path on some other machine (`/mnt/ckpt/llama`): only a config.json can stand in
        raise UnknownModel(f"model {name!r} is not a folder on this machine: give --hf-config path/to/config.json "
                           "(the model's own), or --model NAME (guard estimate --list-models)")
    raise UnknownModel(
        f"model {name!r} is not a local folder with a config.json, not in the Hugging Face cache "
        f"({hub_cache.cache_dir()}) and not in guard's catalog; {why_not}: give --hf-config path/to/config.json, "
        f"or --model NAME (guard estimate --list-models), or put its config.json in the cache "
        f"(huggingface-cli download {name} config.json)")


def _hub_id(name: str) -> bool:
    """`org/name` as the Hub spells it (not a path: no leading /, ~ or ., one slash)."""
    return bool(hub_cache.REPO_ID.match(name)) and name.count("/") == 1 and not name.startswith((".", "~"))


def known(name: str) -> tuple[Architecture, str] | None:
    """The catalog's entry or a preset, for the name or the base model of a chat/instruct variant."""
    key = name.strip().lower()
    for candidate, how in ((key, ""), (VARIANT.sub("", key), f" (the base model of {name})")):
        found = model_catalog.entry(candidate)
        if found is not None:
            canonical, data = found
            meta = {"name": canonical, "source": data["source"]}
            return hf_config.from_dict({**data["config"], "_guard": meta}, label=canonical), \
                f"guard's catalog: {canonical}{how}, from {data['source']}"
        if candidate in _repo_ids():
            preset = _repo_ids()[candidate]
            return presets.load(preset), f"preset {preset}{how}"
    if key in presets.names():
        return presets.load(key), f"preset {key}"
    return None
