"""Assemble one TrainingJob from what the user gave: a launch script or argv, or a DeepSpeed config and a model."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.inputs import split_inputs
from guard.job.origin import Origin
from guard.job.training_job import IncompleteJob, TrainingJob
from guard.settings import Settings
from guard.sources.document import pointer_of


class InputError(ValueError):
    """Inputs that do not describe one job (one line, exit 2)."""


@dataclass
class JobInputs:
    paths: list[str] = field(default_factory=list)  # launch scripts, command-line files, DeepSpeed configs
    megatron_args: str | None = None
    deepspeed: str | None = None
    hf_config: str | None = None
    model: str | None = None
    vocab_size: int | None = None
    seq_length: int | None = None
    micro_batch: int | None = None
    precision: str | None = None
    gradient_checkpointing: bool = False


@dataclass
class JobSource:
    """The job and what it was read from, which a writer edits: the Megatron command (a MegatronJob, with
    the argv text when it was given as a string), or the DeepSpeed config document."""

    job: TrainingJob
    command: object | None = None
    argv_text: str | None = None
    config: object | None = None  # guard.sources.document.Document


def read_job(inputs: JobInputs, settings: Settings) -> TrainingJob:
    """The job the inputs describe (values it lacks are in job.missing; job.require() refuses them)."""
    return read_source(inputs, settings).job


def read_source(inputs: JobInputs, settings: Settings) -> JobSource:
    """The job with its source (see JobSource), on the GPU the settings name (workspaces depend on it)."""
    source = _read_source(inputs, settings)
    if settings.gpu:
        source.job.gpu = settings.gpu
        source.job.origins["gpu"] = Origin("settings", "--gpu")
    return source


def _read_source(inputs: JobInputs, settings: Settings) -> JobSource:
    from guard.job.from_megatron import read_megatron

    arch = _architecture(inputs)
    configs, scripts = split_inputs(inputs.paths)
    configs = ([inputs.deepspeed] if inputs.deepspeed else []) + configs
    from guard.job.finetune_cli import CliTraining

    cmd = _megatron_command(inputs, scripts, settings)
    if isinstance(cmd, CliTraining):  # a fine-tuning command
        if configs:
            raise InputError(f"{cmd.command.path}: the fine-tuning command names its own config files; "
                             "do not give one separately")
        return _finetune_job(_cli_values(inputs, cmd.ft), arch, settings, cmd)
    if cmd is not None:
        if configs:
            raise InputError("a Megatron job reads its DeepSpeed config from --deepspeed_config in the "
                             "command; do not give one separately")
        if inputs.seq_length and not cmd.given("seq_length"):
            raise InputError("--seq-length: give it in the Megatron command line")
        return JobSource(read_megatron(cmd, arch, inputs.vocab_size), cmd, inputs.megatron_args)
    if not configs:
        raise InputError("nothing to estimate: give a launch script, --megatron-args, or --deepspeed "
                         "with --hf-config/--model")
    doc = _load_config(configs[0])
    from guard.job.finetune_config import read as read_training_config

    training = read_training_config(doc)
    if training is not None:
        return _finetune_job(_cli_values(inputs, training), arch, settings)
    if arch is None:
        raise InputError("a DeepSpeed config does not describe the model: give --hf-config or --model")
    return _deepspeed_job(inputs, configs[0], arch, settings, doc)


def _finetune_job(ft, arch, settings: Settings, cli=None) -> JobSource:
    """A LLaMA-Factory / axolotl / TRL training config, or a command that starts one (`cli`): the model it names
    (unless --hf-config/--model), the DeepSpeed file it names, the world from the command's launcher (unless
    --world-size is forced), else --world-size, else one process (said so)."""
    import os

    from guard.job import model_ref
    from guard.job.finetune_dialects import HF_PROGRAM
    from guard.job.from_finetune import read_finetune
    from guard.job.hf_config import HfConfigError
    from guard.job.layout import DEFAULT_GPUS_PER_NODE

    model_origin = Origin("cli", "--hf-config / --model")
    if arch is None:
        name = ft.get("model")
        if not isinstance(name, str) or not name:
            raise InputError(f"{ft.path}: no {ft.dialect.keys['model']}: give --hf-config or --model")
        try:
            arch, found = model_ref.resolve(name, os.path.dirname(ft.path))
        except (model_ref.UnknownModel, HfConfigError) as err:
            span = ft.span("model", value=True)
            raise InputError(f"{ft.path}:{span.line}:{span.col}: {err}") from None
        model_origin = Origin("key", f"{ft.dialect.keys['model']} {name} -> {found}", ft.path,
                              ft.span("model").line, ft.span("model").col)
    world, world_origin = settings.world_size, settings_origin(settings)
    launched = cli.world if cli is not None else None
    if launched is not None and launched.size and not (world and settings.force_world_size):
        world, world_origin = launched.size, launched.origin
    if not world:
        why = f"{launched.why}; " if launched is not None and launched.why else ""
        world, world_origin = 1, Origin("default", "world size", reason=f"{why}one process: give --world-size N")

    def load(path):
        doc = _load_config(path)
        return doc.data, lambda *p: (path, doc.span(pointer_of(p)))

    try:
        job = read_finetune(ft, arch, world, world_origin, load_config=load,
                            gpus_per_node=settings.gpus_per_node or DEFAULT_GPUS_PER_NODE)
    except IncompleteJob as err:
        raise InputError(str(err)) from None
    job.origins["model"] = model_origin
    if "seq_len" not in ft.written:
        if "seq_len" in ft.values:  # _cli_values: --seq-length for a program whose arguments have none
            job.origins["seq_length"] = Origin("cli", "--seq-length")
        elif ft.dialect is HF_PROGRAM:
            job.notes.append(f"TrainingArguments has no sequence length: {job.seq_length} (TRL SFT's max_length) "
                             "is priced; give --seq-length N")
    if cli is not None:
        job.notes.extend(f"{w.path}:{w.key.line}:{w.key.col}: {message} (the default is priced)"
                         for w, message in cli.unknown)
        if launched is not None and launched.size and world != launched.size:
            job.notes.append(f"the command starts {launched.size} processes ({launched.why}); {world} are priced "
                             "(--force-world-size)")
    return JobSource(job)


def _cli_values(inputs: JobInputs, ft):
    """The training config decides the batch, the precision and checkpointing; --seq-length only where it cannot
    (a plain HF Trainer program: TrainingArguments has no sequence length, TRL SFT's is priced unless given)."""
    from guard.job.finetune_dialects import HF_PROGRAM

    given = [flag for flag, value in (("--micro-batch-size", inputs.micro_batch), ("--precision", inputs.precision),
                                      ("--gradient-checkpointing", inputs.gradient_checkpointing)) if value]
    if inputs.seq_length and (ft.dialect is not HF_PROGRAM or "seq_len" in ft.written):
        given.insert(0, f"--seq-length (the config's {ft.dialect.keys['seq_len']})")
    if given:
        raise InputError(f"{', '.join(given)}: {ft.path} decides it; write it in the training config")
    if inputs.seq_length:
        ft.values["seq_len"] = inputs.seq_length
    return ft


def _deepspeed_job(inputs: JobInputs, path: str, arch, settings: Settings, doc) -> JobSource:
    from guard.job.from_deepspeed import read_deepspeed
    from guard.job.layout import DEFAULT_GPUS_PER_NODE

    config, locate, world, world_origin = _config_and_world(doc, path, settings)
    if not world:
        raise InputError("give --world-size N for a DeepSpeed config")
    try:
        job = read_deepspeed(config, path, arch, world, world_origin=world_origin,
                             seq_length=inputs.seq_length, micro_batch=inputs.micro_batch,
                             precision=inputs.precision, gradient_checkpointing=inputs.gradient_checkpointing,
                             gpus_per_node=settings.gpus_per_node or DEFAULT_GPUS_PER_NODE, locate=locate)
    except IncompleteJob as err:
        raise InputError(str(err)) from None
    return JobSource(job, config=doc)


def _config_and_world(doc, path: str, settings: Settings):
    """A plain DeepSpeed config, or the one an accelerate YAML describes (its num_processes is the world,
    as a launcher's is: it wins over --world-size unless forced)."""
    from guard.job import from_accelerate
    from guard.sources.deepspeed import is_accelerate

    def locate(*p):
        return path, doc.span(pointer_of(p))

    world, origin = settings.world_size, settings_origin(settings)
    if not is_accelerate(doc):
        return doc.data, locate, world, origin
    config, written = from_accelerate.deepspeed_config(doc.data, lambda f: _load_config(f).data)
    launched = from_accelerate.world_size(doc.data)
    if launched and not (world and settings.force_world_size):
        span = doc.span("/num_processes")
        world, origin = launched, Origin("key", "num_processes (accelerate)", path, span.line, span.col,
                                         "/num_processes")

    def accelerate_locate(*p):
        return locate(*written.get(".".join(p), p))

    return config, accelerate_locate, world, origin


def settings_origin(settings: Settings) -> Origin:
    return Origin(settings.world_size_source or "cli", settings.world_size_label or "--world-size")


def _architecture(inputs: JobInputs):
    from guard.job import hf_config, presets

    if inputs.hf_config and inputs.model:
        raise InputError("give --hf-config or --model, not both")
    try:
        if inputs.hf_config:
            return hf_config.load(inputs.hf_config)
        if inputs.model:
            return presets.load(inputs.model)
    except hf_config.HfConfigError as err:
        raise InputError(str(err)) from None
    return None


def _megatron_command(inputs: JobInputs, scripts: list[str], settings: Settings):
    from guard.megatron.from_script import analyse, job_from_argv
    from guard.sources.document import SourceError
    from guard.sources.loader import read_text

    if inputs.megatron_args is not None:
        cmd = job_from_argv(inputs.megatron_args, "<megatron-args>", settings)
        if cmd is None:
            raise InputError("--megatron-args: no Megatron command line in it")
        return cmd
    if not scripts:
        return None
    if len(scripts) > 1:
        raise InputError("give one launch script at a time")
    path = scripts[0]
    try:
        text, _ = read_text(path)
    except SourceError as err:
        raise InputError(f"{path}: {err.message}") from None
    from guard.job.finetune_cli import finetune_commands

    result = analyse(path, text, settings)
    found, jobs = finetune_commands(result, text)
    if found and not jobs:
        if found[0].error is not None:
            where, err = found[0].error
            raise InputError(f"{where}:{err.span.line}:{err.span.col}: {err.message}")
        return found[0]
    result.jobs = jobs
    if not result.jobs:
        first = result.findings[0] if result.findings else None
        where = f"{path}:{first.span.line}:{first.span.col}: " if first else f"{path}: "
        raise InputError(where + (first.message if first else "no Megatron command in this file"))
    return result.jobs[0]


def _load_config(path: str):
    from guard.sources.document import SourceError
    from guard.sources.loader import load_document

    try:
        doc = load_document(path)
    except SourceError as err:
        raise InputError(f"{path}:{err.span.line}:{err.span.col}: {err.message}") from None
    if not isinstance(doc.data, dict):
        raise InputError(f"{path}:1:1: a DeepSpeed config must be an object")
    return doc
