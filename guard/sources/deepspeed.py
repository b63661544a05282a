"""Find the DeepSpeed config inside a parsed document: a DeepSpeed file, a GPT-NeoX YAML, or accelerate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard.sources.document import Document, escape

# Keys only GPT-NeoX configs have; NeoX passes its DeepSpeed keys through to deepspeed.initialize
# and accepts '-' for '_' in every key.
NEOX_MARKERS = {"pipe_parallel_size", "model_parallel_size", "num_layers", "num_attention_heads",
                "pos_emb", "norm", "seq_length", "hidden_size"}
ACCELERATE_MARKERS = {"distributed_type", "compute_environment", "deepspeed_config", "num_processes"}


@dataclass
class DeepSpeedView:
    kind: str  # "deepspeed", "neox" or "accelerate"
    data: dict[str, Any]
    origin: dict[str, str] = field(default_factory=dict)


def is_accelerate(doc: Document) -> bool:
    """An accelerate config YAML (`accelerate launch --config_file`), not a DeepSpeed config."""
    return doc.format == "yaml" and isinstance(doc.data, dict) and len(set(doc.data) & ACCELERATE_MARKERS) >= 2


def find_deepspeed(doc: Document, top_level_keys: set[str]) -> DeepSpeedView | None:
    """Return the DeepSpeed part of `doc`, or None when the file holds no DeepSpeed keys."""
    data = doc.data
    if not isinstance(data, dict):
        return None
    keys = set(data)
    if is_accelerate(doc):
        return DeepSpeedView("accelerate", data)
    normalised = {k.replace("-", "_"): k for k in keys}
    if len(set(normalised) & NEOX_MARKERS) >= 2:
        picked: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for name, written in normalised.items():
            if name in top_level_keys:
                picked[name] = data[written]
                origin[name] = "/" + escape(written)
        extra = data.get("deepspeed_extra_args") or data.get("deepspeed-extra-args")
        if isinstance(extra, dict):
            base = "/deepspeed_extra_args" if "deepspeed_extra_args" in data else "/deepspeed-extra-args"
            for name, value in extra.items():
                picked[name] = value
                origin[name] = f"{base}/{escape(name)}"
        return DeepSpeedView("neox", picked, origin)
    if keys & top_level_keys:
        return DeepSpeedView("deepspeed", data)
    return None
