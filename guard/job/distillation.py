"""Megatron-LM's knowledge distillation (--export-kd-teacher-load, megatron/post_training/model_builder.py): the
teacher the student carries, read into the job.

megatron-core 0.16.1 model_builder.py: the teacher's config is the student's arguments updated with the NeMo-format
`model_config.yaml` in the teacher's checkpoint folder (or --export-kd-teacher-model-config; num_layers,
hidden_size, ffn_hidden_size and num_attention_heads are required there); `_load_teacher_model` builds an
MCoreGPTModel with the student's model_kwargs (the same pre/post process: the same pipeline stage and tensor
parallel group) and modelopt wraps both in one DistillationModel, which Float16Module casts: the teacher's
weights sit on every rank in the compute dtype, with no gradients and no optimizer states."""

from __future__ import annotations

import os
from dataclasses import replace

from guard.job.architecture import Architecture

# NeMo model_config.yaml key -> Architecture field (model_builder.py _load_teacher_model_config)
TEACHER_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden", "ffn_hidden_size": "ffn_hidden",
                  "num_attention_heads": "heads", "num_query_groups": "query_groups", "kv_channels": "kv_channels"}


def teacher_config_path(load: str | None, explicit: str | None) -> str | None:
    """The YAML Megatron reads the teacher from: --export-kd-teacher-model-config, else model_config.yaml in
    --export-kd-teacher-load."""
    if explicit:
        return explicit
    return os.path.join(load, "model_config.yaml") if load else None


def teacher_architecture(student: Architecture, config: dict | None) -> Architecture:
    """The student's architecture updated with the teacher's YAML (None: the student's own, said by the caller).
    kv_channels is recomputed from the teacher's hidden size and heads unless the YAML gives it (model_builder.py
    deletes the student's before updating)."""
    if not config:
        return student
    changes = {field: int(config[key]) for key, field in TEACHER_FIELDS.items() if isinstance(config.get(key), int)}
    heads = changes.get("heads", student.heads)
    hidden = changes.get("hidden", student.hidden)
    changes.setdefault("kv_channels", hidden // heads)
    changes.setdefault("query_groups", heads if "heads" in changes else student.query_groups)
    if config.get("activation") == "swiglu":
        changes["gated_mlp"] = True
    if "share_embeddings_and_output_weights" in config:
        changes["tied_embeddings"] = bool(config["share_embeddings_and_output_weights"])
    return replace(student, name=f"teacher of {student.name or 'the student'}", **changes)
