"""A LLaMA-Factory / axolotl / TRL training config (or a command that starts one) read into its subject: the
model it names, the world its launcher starts, and the DeepSpeed file it names as the Trainer hands it over."""

from __future__ import annotations

import os

from guard.errors import InputError
from guard.intake.model import given_model
from guard.intake.request import Request
from guard.intake.world import decide
from guard.job import model_ref, openrlhf, trainer_fill
from guard.job.architecture import Architecture
from guard.job.finetune_config import FineTuneConfig
from guard.job.finetune_dialects import HF_PROGRAM, OPENRLHF
from guard.job.from_finetune import deepspeed_file, read_finetune
from guard.job.origin import Origin
from guard.job.subject import DeepSpeedDoc, FineTunePair, Subject
from guard.job.world import World
from guard.launchers.record import WorldReading
from guard.settings import Settings
from guard.sources.document import SourceError, pointer_of


def finetune_subject(ft: FineTuneConfig, settings: Settings, request: Request = Request(), *, load,
                     arch: Architecture | None = None, found=None) -> Subject:
    """`found`: the guard/intake/trainer_commands.py TrainerCommand that runs the config (its launcher's world);
    `load(path)` -> Document, or SourceError (kept in subject.error: the job is then not judged, exit 2)."""
    _refuse_overrides(request, ft)
    if request.seq_length:
        ft.values["seq_len"] = request.seq_length
    model_problem = ""
    model_origin = Origin("cli", "--hf-config / --model")
    arch = arch or given_model(request)
    if arch is None:
        arch, model_problem, model_origin = _model(ft, request)
    if arch is not None and arch.is_moe:  # transformers' MoE blocks (a loop over experts) are not what guard prices
        model_problem = (f"{ft.path}: {arch.name or 'the model'} is a mixture-of-experts model ({arch.num_experts} "
                         "experts): guard does not price MoE fine-tuning (LoRA or full) under transformers")
        arch = None
    world = _world(found.reading if found else None, settings, ft)
    if ft.dialect is OPENRLHF:  # its DeepSpeed config is built from its flags, not read from a file
        ft.values["grad_accum"] = openrlhf.gradient_accumulation(ft, world.size) or 1
        ft.values["deepspeed"] = openrlhf.deepspeed_config(ft)
    comments = {ft.path: ft.doc.comments} if ft.doc.format != "argv" else {}
    subject = Subject(None, "finetune", ft.path, training=ft, pair=FineTunePair(), launch=found.launch if found else
                      None, comments=comments)
    filled, label, locate = _deepspeed(subject, ft, world, load)
    subject.job = job = read_finetune(ft, arch, world, deepspeed=filled, label=label, locate=locate,
                                      named_missing=subject.pair.named_missing)
    if model_problem:
        job.missing["model"] = model_problem
    job.origins["model"] = model_origin
    if model_origin.kind == "key" and not model_problem:  # which source the name was found in, said once
        job.notes.append(f"model: {model_origin.label.split(', from ')[0]}")
    if "seq_len" not in ft.written:
        if request.seq_length:  # --seq-length for a program whose arguments have none
            job.origins["seq_length"] = Origin("cli", "--seq-length")
        elif ft.dialect is HF_PROGRAM:
            job.notes.append(f"TrainingArguments has no sequence length: {job.seq_length} (TRL SFT's max_length) "
                             "is priced; give --seq-length N")
    if world.origin is not None and world.origin.kind == "default":
        sharded = "; ZeRO shards the model states over the world, so each rank of a larger one holds less" \
            if (job.zero_stage or 0) >= 1 else ""
        job.notes.append(f"world: 1 process assumed ({world.why or 'nothing says how many processes run it'}): "
                         f"give --world-size N{sharded}")
    if found is not None:
        job.notes.extend(f"{w.path}:{w.key.line}:{w.key.col}: {message} (the default is priced)"
                         for w, message in found.unknown)
    if world.overruled is None and found is not None and found.reading.size and world.size != found.reading.size:
        job.notes.append(f"the command starts {found.reading.size} processes ({found.reading.why}); {world.size} are "
                         "priced (--force-world-size)")
    return subject


def _refuse_overrides(request: Request, ft: FineTuneConfig) -> None:
    """The training config decides the batch, the precision and checkpointing; --seq-length only where it cannot
    (a plain HF Trainer program: TrainingArguments has no sequence length, TRL SFT's is priced unless given; GRPO
    and RLOO: a prompt, as long as the dataset's, and its completion)."""
    given = [flag for flag, value in (("--micro-batch-size", request.micro_batch), ("--precision", request.precision),
                                      ("--gradient-checkpointing", request.gradient_checkpointing)) if value]
    no_length = ft.dialect is HF_PROGRAM or str(ft.get("rl_method")) in ("grpo", "rloo")
    if request.seq_length and (not no_length or "seq_len" in ft.written):
        given.insert(0, f"--seq-length (the config's {ft.dialect.keys['seq_len']})")
    if given:
        raise InputError(f"{', '.join(given)}: {ft.path} decides it; write it in the training config")


def _model(ft: FineTuneConfig, request: Request) -> tuple[Architecture | None, str, Origin]:
    """The model the config names: a local folder's config.json or a known preset; else why not (one line)."""
    name = ft.get("model")
    if not isinstance(name, str) or not name:
        return None, f"{ft.path}: no {ft.dialect.keys['model']}: give --hf-config or --model", \
            Origin("default", "model")
    try:
        arch, found = model_ref.resolve(name, os.path.dirname(ft.path), offline=request.offline)
    except InputError as err:
        span = ft.span("model", value=True)
        return None, f"{ft.path}:{span.line}:{span.col}: {err}", Origin("default", "model")
    span = ft.span("model")
    return arch, "", Origin("key", f"{ft.dialect.keys['model']} {name} -> {found}", ft.path, span.line, span.col)


def _world(reading: WorldReading | None, settings: Settings, ft: FineTuneConfig) -> World:
    """The launcher's world (unless --world-size is forced), else --world-size, else one process, said so."""
    world = decide(reading, settings, ft.path)
    if world.size is None:
        why = f"{reading.why}; " if reading is not None and reading.why else ""
        return World(1, Origin("default", "world size", reason=f"{why}one process: give --world-size N"),
                     world.why, world.gpus_per_node)
    return world


def _deepspeed(subject: Subject, ft: FineTuneConfig, world: World, load):
    """(the DeepSpeed config the Trainer hands over, its label, its locator): the file or the inline config the
    training config names, "auto" filled from the training arguments (mismatches kept for FT001); the train
    batch size only on a world that was given (one process assumed is no launch to pin it to)."""
    written, path = ft.get("deepspeed"), deepspeed_file(ft)
    size = world.size if world.origin is not None and world.origin.kind != "default" else None
    if isinstance(written, str) and written and path is None:
        subject.pair.named_missing = True
        return None, None, None
    if isinstance(written, dict):
        filled, subject.pair.mismatches = trainer_fill.fill(written, ft, size)
        return filled, ft.path, None
    if not path:
        return None, None, None
    try:
        doc = load(path)
    except SourceError as err:
        subject.error = (path, err)
        return None, None, None
    if not isinstance(doc.data, dict):
        subject.error = (path, SourceError("a DeepSpeed config must be an object"))
        return None, None, None
    filled, subject.pair.mismatches = trainer_fill.fill(doc.data, ft, size)
    from dataclasses import replace

    subject.deepspeed = DeepSpeedDoc(replace(doc, data=filled), filled, framework="hf",
                                     batch_filled=doc.data.get("train_batch_size") == "auto")
    subject.comments[doc.path] = doc.comments
    return filled, path, lambda *p: (path, doc.span(pointer_of(p)))
