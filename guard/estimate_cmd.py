"""`guard estimate`: read the job and the architecture, run the memory model, print; exit 1 when it does not fit."""

from __future__ import annotations

import argparse
import sys

from guard.settings import Settings

CONFIG_SUFFIXES = (".json", ".hjson", ".yaml", ".yml")


class EstimateError(ValueError):
    """Bad input to the estimate: one line, exit 2."""


def add_parser(sub, positive_int) -> None:
    est = sub.add_parser("estimate", help="predict peak GPU memory for every rank of a job")
    est.add_argument("inputs", nargs="*", metavar="PATH",
                     help="a launch script / command-line file, or a DeepSpeed config (.json/.yaml)")
    est.add_argument("--script", action="append", default=[], metavar="FILE",
                     help="a launch script or a file holding a launcher command line")
    est.add_argument("--megatron-args", default=None, metavar="ARGS", help="a Megatron command line as one string")
    est.add_argument("--deepspeed", default=None, metavar="FILE", help="a DeepSpeed config (HF Trainer jobs)")
    est.add_argument("--hf-config", default=None, metavar="FILE", help="a Hugging Face config.json")
    est.add_argument("--model", default=None, metavar="PRESET", help="a preset from schemas/models (see --list-models)")
    est.add_argument("--list-models", action="store_true", help="print the model presets and the GPU catalog")
    est.add_argument("--gpu", default=None, metavar="NAME", help="a GPU from the catalog, e.g. H100-SXM, A100-40GB")
    est.add_argument("--gpu-memory", default=None, metavar="SIZE", help="usable memory, e.g. 80GiB or 80GB")
    est.add_argument("--world-size", type=positive_int, default=None, metavar="N")
    est.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="G")
    est.add_argument("--seq-length", type=positive_int, default=None, metavar="S")
    est.add_argument("--micro-batch-size", type=positive_int, default=None, metavar="B")
    est.add_argument("--vocab-size", type=positive_int, default=None, metavar="V",
                     help="the tokenizer's vocabulary, where the command line does not give it")
    est.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None,
                     help="for DeepSpeed configs whose bf16/fp16 is \"auto\"")
    est.add_argument("--gradient-checkpointing", action="store_true",
                     help="HF Trainer --gradient_checkpointing (full recompute, one layer per checkpoint)")
    est.add_argument("--megatron-version", default=None, metavar="REF")
    est.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="override a runtime term: cuda_context, nccl_per_group, cublas_workspace (sizes), "
                          "fragmentation (a fraction)")
    est.add_argument("--format", choices=("text", "json"), default="text")
    est.add_argument("--explain", action="store_true", help="print every term with its formula and numbers")
    est.add_argument("--plot", default=None, metavar="FILE", help="stacked bars per stage (.png or .svg)")


def _overrides(items: list[str]) -> dict[str, float]:
    from guard.memory.overheads import BUFFER_DEFAULTS, RUNTIME_DEFAULTS
    from guard.memory.units import parse_size

    out: dict[str, float] = {}
    known = {**RUNTIME_DEFAULTS, **BUFFER_DEFAULTS}
    for item in items:
        name, _, value = item.partition("=")
        if name not in known or not value:
            raise EstimateError(f"--set {item}: expected NAME=VALUE with NAME one of {', '.join(known)}")
        try:
            out[name] = float(value) if known[name].unit == "fraction" else parse_size(value)
        except ValueError as err:
            raise EstimateError(f"--set {item}: {err}") from None
    return out


def _architecture(args):
    from guard.memory import hf_config, presets

    if args.hf_config and args.model:
        raise EstimateError("give --hf-config or --model, not both")
    try:
        if args.hf_config:
            return hf_config.load(args.hf_config)
        if args.model:
            return presets.load(args.model)
    except hf_config.HfConfigError as err:
        raise EstimateError(str(err)) from None
    return None


def _megatron_job(args, settings: Settings):
    from guard.megatron.from_script import analyse, job_from_argv
    from guard.sources.document import SourceError
    from guard.sources.loader import read_text

    scripts = list(args.script) + [p for p in args.inputs if not p.lower().endswith(CONFIG_SUFFIXES)]
    if args.megatron_args is not None:
        job = job_from_argv(args.megatron_args, "<megatron-args>", settings)
        if job is None:
            raise EstimateError("--megatron-args: no Megatron command line in it")
        return job
    if not scripts:
        return None
    if len(scripts) > 1:
        raise EstimateError("give one launch script at a time")
    path = scripts[0]
    try:
        text, _ = read_text(path)
    except SourceError as err:
        raise EstimateError(f"{path}: {err.message}") from None
    result = analyse(path, text, settings)
    if not result.jobs:
        first = result.diagnostics[0] if result.diagnostics else None
        where = f"{path}:{first.line}:{first.col}: " if first else f"{path}: "
        raise EstimateError(where + (first.message if first else "no Megatron command in this file"))
    return result.jobs[0]


def _deepspeed_config(path: str) -> dict:
    from guard.sources.document import SourceError
    from guard.sources.loader import load_document

    try:
        doc = load_document(path)
    except SourceError as err:
        raise EstimateError(f"{path}:{err.span.line}:{err.span.col}: {err.message}") from None
    if not isinstance(doc.data, dict):
        raise EstimateError(f"{path}: a DeepSpeed config must be an object")
    return doc.data


def build(args, settings: Settings):
    from guard.memory.from_deepspeed import setup_from_config
    from guard.memory.from_megatron import SetupError, setup_from_job

    arch = _architecture(args)
    configs = ([args.deepspeed] if args.deepspeed else []) + [p for p in args.inputs
                                                               if p.lower().endswith(CONFIG_SUFFIXES)]
    try:
        job = _megatron_job(args, settings)
        if job is not None:
            if configs:
                raise EstimateError("a Megatron job reads its DeepSpeed config from --deepspeed_config in the "
                                    "command; do not give one separately")
            if args.seq_length and not job.given("seq_length"):
                raise EstimateError("--seq-length: give it in the Megatron command line")
            return setup_from_job(job, arch, args.vocab_size, args.world_size)
        if not configs:
            raise EstimateError("nothing to estimate: give a launch script, --megatron-args, or --deepspeed "
                                "with --hf-config/--model")
        if arch is None:
            raise EstimateError("a DeepSpeed config does not describe the model: give --hf-config or --model")
        if not args.world_size:
            raise EstimateError("give --world-size N for a DeepSpeed config")
        seq = args.seq_length or None
        return setup_from_config(_deepspeed_config(configs[0]), configs[0], arch, args.world_size, seq,
                                 args.micro_batch_size, args.precision, args.gradient_checkpointing,
                                 args.gpus_per_node or settings.gpus_per_node or 8)
    except SetupError as err:
        raise EstimateError(str(err)) from None


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.memory import catalog, presets
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu
    from guard.report import memory_json, memory_text

    if args.list_models:
        sys.stdout.write("models: " + ", ".join(presets.names()) + "\n")
        sys.stdout.write("gpus: " + ", ".join(catalog.names()) + "\n")
        return 0
    try:
        gpu = choose_gpu(args.gpu or settings.gpu, args.gpu_memory)
    except ValueError as err:
        raise EstimateError(f"--gpu: {err}") from None
    setup = build(args, settings)
    setup.overrides.update(_overrides(args.set))
    result = estimate(setup, gpu)
    if args.format == "json":
        memory_json.write(result, sys.stdout)
    else:
        memory_text.write(result, sys.stdout, explain=args.explain, color=sys.stdout.isatty())
    if args.plot:
        from guard.report.memory_plot import plot

        try:
            plot(result, args.plot)
        except (RuntimeError, OSError, ValueError) as err:
            raise EstimateError(f"--plot: {err}") from None
    return 1 if result.fits is False else 0
