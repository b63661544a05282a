"""The job a plugin checks from inside a running process: its own command line (Megatron), the config it hands
deepspeed.initialize, or the Trainer's arguments; its world is what the launcher told this process."""

from __future__ import annotations

import json
import os
from typing import Mapping

from guard.errors import InputError
from guard.intake.deepspeed import config_subject
from guard.intake.read import finish
from guard.intake.request import Request
from guard.intake.world import decide
from guard.job.architecture import Architecture
from guard.job.subject import Subject
from guard.launchers import registry
from guard.launchers.record import WorldReading
from guard.settings import Settings
from guard.sources.document import Document


def environment_world(env: Mapping[str, str] = os.environ) -> WorldReading:
    """The world size and local world size the launcher gave this process (its rank variables), else one."""
    for family in registry.rank_variables():
        size = env.get(family.world, "")
        if size.isdigit():
            local = env.get(family.local_world or "", "")
            return WorldReading(int(size), int(local) if local.isdigit() else None,
                                why=f"{family.world} {size} ({family.family})", spawns=False)
    return WorldReading(1, why="no rank variables: one process", spawns=False)


def settings_here(env: Mapping[str, str] = os.environ) -> Settings:
    """What a process knows of guard's settings: the GPU named in GUARD_GPU."""
    settings = Settings()
    settings.gpu = env.get("GUARD_GPU") or None
    return settings


def rank_command(argv: list[str], env: Mapping[str, str] = os.environ) -> Subject:
    """This rank's own Megatron command line (`sys.argv`, the interpreter first)."""
    import shlex

    from guard.intake.files import read_argv
    from guard.intake.megatron import megatron_subject

    settings = settings_here(env)
    found = read_argv(shlex.join(argv), settings)
    subject = next((s for s in found.subjects if s.kind == "megatron"), None)
    if subject is None:
        raise InputError(f"no Megatron command in this process's arguments: {shlex.join(argv)[:200]}")
    world = decide(environment_world(env), settings, subject.path)
    return finish(megatron_subject(subject.command, settings, argv_text=subject.argv_text, world=world), settings)


def deepspeed_config(config, arch: Architecture, seq_length: int | None, env: Mapping[str, str] = os.environ,
                     overrides: dict | None = None, label: str | None = None) -> Subject:
    """A config handed to deepspeed.initialize (a dict, or a path); `overrides`: keys the Trainer sets itself."""
    from guard.sources.loader import load_document

    if isinstance(config, dict):
        doc = _document({**config, **(overrides or {})}, label or "<config>")
    else:
        doc = load_document(str(config))
        if overrides:
            doc = _document({**doc.data, **overrides}, doc.path)
    settings = settings_here(env)
    request = Request(seq_length=seq_length)
    subject = config_subject(doc, settings, request, arch=arch, reading=environment_world(env))
    return finish(subject, settings)


def _document(data: dict, label: str) -> Document:
    """A config handed over as a dict, written out so that a rewrite can edit it like a file (never saved)."""
    from guard.sources.json_source import parse_json

    return parse_json(json.dumps(data, indent=2), label)


def trainer_arguments(args, arch: Architecture, env: Mapping[str, str] = os.environ) -> Subject:
    """The HF Trainer's arguments as DeepSpeed gets them: its config (or plain DP) with the per-device batch and
    accumulation it sets, precision, gradient checkpointing; the sequence from GUARD_SEQ_LENGTH or the model."""
    config = args.deepspeed if isinstance(args.deepspeed, dict) else {}
    if isinstance(args.deepspeed, str):
        with open(args.deepspeed, encoding="utf-8") as handle:
            config = json.load(handle)
    seq = int(env.get("GUARD_SEQ_LENGTH", "0")) or arch.max_positions
    overrides = {"train_micro_batch_size_per_gpu": args.per_device_train_batch_size,
                 "gradient_accumulation_steps": args.gradient_accumulation_steps}
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    settings = settings_here(env)
    doc = _document({**config, **overrides}, "the Trainer's arguments")
    request = Request(seq_length=seq, precision=precision, gradient_checkpointing=bool(args.gradient_checkpointing))
    return finish(config_subject(doc, settings, request, arch=arch, reading=environment_world(env)), settings)
