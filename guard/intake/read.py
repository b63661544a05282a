"""The one job a request describes, for the commands that price, plan, diagnose or launch one job."""

from __future__ import annotations

from dataclasses import replace

from guard.errors import InputError
from guard.inputs import split_inputs
from guard.intake.deepspeed import config_subject
from guard.intake.files import read_argv
from guard.intake.finetune import finetune_subject
from guard.intake.model import given_model
from guard.intake.request import Request
from guard.job.origin import Origin
from guard.job.subject import Subject
from guard.settings import Settings
from guard.sources.document import SourceError
from guard.sources.loader import load_document, read_text


def read(request: Request, settings: Settings) -> Subject:
    """InputError when the request names no job, or more than one. The job may lack values (`job.missing`):
    `job.require()` refuses one the memory model cannot price."""
    given_model(request)  # a bad --hf-config / --model is refused first, whatever the files say
    configs, scripts = split_inputs(list(request.paths))
    configs = ([request.deepspeed] if request.deepspeed else []) + configs
    if len(request.megatron_args) + len(scripts) > 1:
        raise InputError("give one launch script or command line at a time")
    command = _command(request, scripts, settings)
    if command is not None:
        if configs:
            raise InputError(f"{command.path}: the command names its own config files (--deepspeed_config, the "
                             "training config); do not give one separately")
        return finish(command, settings)
    if not configs:
        raise InputError("nothing to estimate: give a launch script, --megatron-args, or --deepspeed with "
                         "--hf-config/--model")
    doc = load_config(configs[0])
    from guard.job.finetune_config import read as read_training_config

    training = read_training_config(doc)
    subject = finetune_subject(training, settings, request, load=load_config) if training is not None \
        else config_subject(doc, settings, request)
    if training is None and "model" in subject.job.missing and not (request.hf_config or request.model):
        subject = _companion(configs[0], settings, request) or subject
    return finish(subject, settings)


def _companion(path: str, settings: Settings, request: Request) -> Subject | None:
    """The one job near a bare DeepSpeed config that uses it (guard/intake/companion.py), read whole; several:
    refused, naming them."""
    import os

    from guard.intake.companion import companions
    from guard.intake.files import read_file

    target, jobs = os.path.realpath(path), []
    for candidate in companions(path):
        try:
            found = read_file(candidate, settings, request)
        except InputError:
            continue
        jobs += [(candidate, s) for s in found.subjects if s.kind != "deepspeed" and s.deepspeed is not None
                 and os.path.realpath(s.deepspeed.doc.path) == target and s.error is None]
    if len(jobs) > 1:
        raise InputError(f"{path}: a DeepSpeed config does not describe the model, and {len(jobs)} jobs near it use "
                         f"it: {', '.join(sorted({c for c, _ in jobs}))}; estimate one of them")
    if not jobs:
        return None
    candidate, subject = jobs[0]
    subject.job.notes.insert(0, f"{path} describes no model: priced as the job that uses it, {candidate}")
    return subject


def finish(subject: Subject, settings: Settings) -> Subject:
    """What every command's job gets: the GPU it runs on (its workspaces depend on it), and no file it needs
    left unread."""
    if subject.error is not None:
        path, err = subject.error
        raise InputError(f"{path}:{err.span.line}:{err.span.col}: {err.message}")
    if settings.gpu:
        subject.job.gpu = settings.gpu
        subject.job.origins["gpu"] = Origin("settings", "--gpu")
    return subject


def _command(request: Request, scripts: list[str], settings: Settings) -> Subject | None:
    """The command of --megatron-args or of the one launch script: a Megatron command or a fine-tuning one."""
    if request.megatron_args:
        text = request.megatron_args[0]
        found = read_argv(text, settings, request)
        if found.errors:
            raise _unreadable(*found.errors[0])
        if not found.subjects:
            raise InputError("--megatron-args: no Megatron command line in it")
        return checked(found.subjects[0], request)
    if not scripts:
        return None
    from guard.intake.files import read_file

    path = scripts[0]
    try:
        read_text(path)
    except SourceError as err:
        raise InputError(f"{path}: {err.message}") from None
    found = read_file(path, settings, request, config=False)
    commands = [s for s in found.subjects if s.kind != "deepspeed"]  # not the heredocs it writes
    if found.unreadable is not None:
        raise _unreadable(*found.unreadable)
    if found.errors and not commands:
        raise _unreadable(*found.errors[0])
    if not commands:
        first = found.findings[0] if found.findings else None
        where = f"{path}:{first.span.line}:{first.span.col}: " if first else f"{path}: "
        raise InputError(where + (first.message if first else "no Megatron command in this file"))
    return checked(commands[0], request)


def checked(subject: Subject, request: Request) -> Subject:
    """A Megatron command gives its own sequence length (a model and --vocab-size fill what its flags lack)."""
    if subject.kind == "megatron" and request.seq_length and not subject.command.given("seq_length"):
        raise InputError("--seq-length: give it in the Megatron command line")
    return subject


def _unreadable(path: str, err: SourceError) -> InputError:
    return InputError(f"{path}:{err.span.line}:{err.span.col}: {err.message}")


def load_config(path: str):
    """A config file the user names: unreadable or unparsable is one line with its position."""
    try:
        doc = load_document(path)
    except SourceError as err:
        raise _unreadable(path, err) from None
    if not isinstance(doc.data, dict):
        raise InputError(f"{path}:1:1: a DeepSpeed config must be an object")
    return doc
