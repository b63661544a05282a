"""A Hub model's files where huggingface_hub keeps them (the cache folder, a ref's snapshot), or its config.json from
the Hub itself."""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

# a Hub repo id: "org/name" (or a bare legacy name such as "gpt2"); never a path on disk
REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")
HUB_TIMEOUT_S = 5.0  # config.json is a few KiB: a Hub that does not answer in this time is treated as unreachable


def cache_dir() -> Path:
    """The folder huggingface_hub caches models in (huggingface_hub/constants.py: HF_HUB_CACHE, else HF_HOME/hub,
    HF_HOME defaulting to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface; the legacy HUGGINGFACE_HUB_CACHE
    still read)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def offline(flag: bool = False) -> bool:
    """--offline, or the variables huggingface_hub and transformers honour (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE)."""
    truthy = ("1", "on", "yes", "true")
    variables = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return flag or any(os.environ.get(v, "").strip().lower() in truthy for v in variables)


def cached_config(repo_id: str, revision: str | None = None) -> Path | None:
    """The model's config.json in the cache (cached_file)."""
    return cached_file(repo_id, "config.json", revision)


def cached_file(repo_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A cached file of `repo_id` at `revision` (default main), as huggingface_hub lays it out:
    models--org--name/refs/<revision> holds a commit, snapshots/<commit>/<filename> the file. A revision that is
    itself a commit names its snapshot directly; with no ref, the newest snapshot holding the file."""
    if not REPO_ID.match(repo_id):
        return None
    folder = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    if commit and (snapshots / commit / filename).is_file():
        return snapshots / commit / filename
    if revision and ref.is_file():
        return None  # the revision asked for is not cached: another snapshot would be another model version
    found = [p / filename for p in snapshots.iterdir() if (p / filename).is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def download_config(repo_id: str, revision: str | None = None) -> tuple[Path | None, str]:
    """(config.json fetched from the Hub into the cache, or None; why not). Only config.json is asked for, through
    huggingface_hub (its endpoint, token and cache), never the weights. huggingface_hub retries a failed connection
    with back-off for most of a minute; the call runs in a daemon thread and is given HUB_TIMEOUT_S in all."""
    if not REPO_ID.match(repo_id) or "/" not in repo_id:
        return None, "it is not a Hub repo id (org/name)"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None, "the Hub was not asked (huggingface_hub is not installed)"
    answer: list = []

    def ask() -> None:
        try:
            answer.append(Path(hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=HUB_TIMEOUT_S)))
        except Exception as err:  # noqa: BLE001 - any failure (network, 401 on a gated repo, 404) means: not from here
            answer.append(err)

    # its retry warnings are not guard's to print (also after the wait: the thread may still be retrying)
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(HUB_TIMEOUT_S)
    if not answer:
        return None, f"the Hub did not answer within {HUB_TIMEOUT_S:g} s"
    if isinstance(answer[0], Exception):
        return None, f"the Hub did not give it ({type(answer[0]).__name__})"
    return answer[0], ""
