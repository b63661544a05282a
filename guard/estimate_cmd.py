"""`guard estimate`: read the job, run the memory model, print; exit 1 when it does not fit."""

from __future__ import annotations

import argparse
import sys

from guard.cli_options import add_job_options, positive_int
from guard.report import ESTIMATE_FORMATS, estimate_writer
from guard.settings import Settings


class EstimateError(ValueError):
    """Bad input to the estimate: one line, exit 2."""


def add_parser(sub) -> None:
    est = sub.add_parser("estimate", help="predict peak GPU memory for every rank of a job")
    add_input_options(est)
    est.add_argument("--list-models", action="store_true", help="print the model presets and the GPU catalog")
    est.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="override a runtime term: cuda_context, nccl_per_group, cublas_workspace (sizes), "
                          "fragmentation (a fraction)")
    est.add_argument("--format", choices=ESTIMATE_FORMATS, default="text")
    est.add_argument("--explain", action="store_true", help="print every term with its formula and numbers")
    est.add_argument("--plot", default=None, metavar="FILE", help="stacked bars per stage (.png or .svg)")


def add_input_options(parser) -> None:
    """The inputs that describe one job (guard estimate and guard plan take the same)."""
    parser.add_argument("inputs", nargs="*", metavar="PATH",
                        help="a launch script / command-line file, or a DeepSpeed config (.json/.yaml)")
    parser.add_argument("--script", action="append", default=[], metavar="FILE",
                        help="a launch script or a file holding a launcher command line")
    parser.add_argument("--megatron-args", default=None, metavar="ARGS", help="a Megatron command line as one string")
    parser.add_argument("--deepspeed", default=None, metavar="FILE", help="a DeepSpeed config (HF Trainer jobs)")
    parser.add_argument("--hf-config", default=None, metavar="FILE", help="a Hugging Face config.json")
    parser.add_argument("--model", default=None, metavar="PRESET",
                        help="a preset from schemas/models (see guard estimate --list-models)")
    add_job_options(parser)
    parser.add_argument("--seq-length", type=positive_int, default=None, metavar="S")
    parser.add_argument("--micro-batch-size", type=positive_int, default=None, metavar="B")
    parser.add_argument("--vocab-size", type=positive_int, default=None, metavar="V",
                        help="the tokenizer's vocabulary, where the command line does not give it")
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None,
                        help="for DeepSpeed configs whose bf16/fp16 is \"auto\"")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="HF Trainer --gradient_checkpointing (full recompute, one layer per checkpoint)")


def _overrides(items: list[str]) -> dict[str, float]:
    from guard.memory.overheads import BUFFER_DEFAULTS, RUNTIME_DEFAULTS
    from guard.units import parse_size

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


def build(args, settings: Settings):
    """The job from the command's inputs, refused (one line) when the memory model cannot price it."""
    return build_source(args, settings).job


def build_source(args, settings: Settings, layout: bool = True):
    """The job with what it was read from (guard.job.from_inputs.JobSource), refused like `build` (a layout
    that cannot run too, unless `layout` is False)."""
    from guard.job.from_inputs import InputError, JobInputs, read_source
    from guard.job.training_job import IncompleteJob

    inputs = JobInputs(paths=list(args.script) + list(args.inputs), megatron_args=args.megatron_args,
                       deepspeed=args.deepspeed, hf_config=args.hf_config, model=args.model,
                       vocab_size=args.vocab_size, seq_length=args.seq_length, micro_batch=args.micro_batch_size,
                       precision=args.precision, gradient_checkpointing=args.gradient_checkpointing)
    try:
        source = read_source(inputs, settings)
        source.job.require(layout)
    except (InputError, IncompleteJob) as err:
        raise EstimateError(str(err)) from None
    return source


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.job import presets
    from guard.memory import catalog
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu

    if args.list_models:
        sys.stdout.write("models: " + ", ".join(presets.names()) + "\n")
        sys.stdout.write("gpus: " + ", ".join(catalog.names()) + "\n")
        return 0
    gpu = choose_gpu(settings.gpu, settings.gpu_memory)
    job = build(args, settings)
    job.overrides.update(_overrides(args.set))
    result = estimate(job, gpu)
    estimate_writer(args.format)(result, sys.stdout, explain=args.explain, color=sys.stdout.isatty())
    if args.plot:
        try:
            estimate_writer("plot")(result, args.plot)
        except (RuntimeError, OSError, ValueError) as err:
            raise EstimateError(f"--plot: {err}") from None
    return 1 if result.fits is False else 0
