"""Options `guard check` and `guard estimate` share (GPU, world size, Megatron version, settings file), and
how they merge over `[tool.guard]` into one Settings."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.settings import Settings, find_pyproject, load_settings


class UsageError(Exception):
    """Bad command-line usage: one line on stderr, exit code 2."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world-size", type=positive_int, default=None, metavar="N",
                        help="ranks the job runs on, where the launcher does not say (a launcher that does wins)")
    parser.add_argument("--force-world-size", action="store_true",
                        help="let --world-size / [tool.guard] world-size win over the launcher's")
    parser.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="G",
                        help="GPUs per node, where the launcher does not say (tensor-parallel placement)")
    parser.add_argument("--gpu", default=None, metavar="NAME|SIZE",
                        help="the GPU the job runs on: a catalog name (H100-SXM, A100-40GB) or a size (80GiB)")
    parser.add_argument("--gpu-memory", default=None, metavar="SIZE",
                        help="usable memory per GPU with a unit: 80GiB (2^30) or 80GB (10^9)")
    parser.add_argument("--megatron-version", default=None, metavar="REF",
                        help="Megatron flag table to read command lines with (default: main for Megatron-LM, "
                             "Megatron-DeepSpeed's when the command uses --deepspeed/--zero-stage)")
    parser.add_argument("--megatron-source", default=None, metavar="PATH",
                        help="the Megatron checkout the job runs (a fork): its own flags, choices and defaults "
                             "judge the command (default: the checkout a script's program path lies in)")
    parser.add_argument("--config", default=None, metavar="PYPROJECT",
                        help="read [tool.guard] from this file instead of the nearest pyproject.toml")
    parser.add_argument("--isolated", action="store_true", help="ignore every pyproject.toml")


def job_settings(args: argparse.Namespace, command: str) -> Settings:
    """[tool.guard], then the command line over it; GPU and Megatron version checked here, once."""
    if args.isolated:
        settings = Settings()
    else:
        path = Path(args.config) if args.config else find_pyproject(Path.cwd())
        if args.config and not path.is_file():
            raise UsageError(f"--config: no such file: {args.config}")
        settings = load_settings(path)
    if args.world_size:
        settings.world_size, settings.world_size_source, settings.world_size_label = \
            args.world_size, "cli", "--world-size"
    settings.force_world_size = args.force_world_size
    settings.gpus_per_node = args.gpus_per_node or settings.gpus_per_node
    settings.gpu = args.gpu or settings.gpu
    settings.gpu_memory = args.gpu_memory or settings.gpu_memory
    if settings.gpu or settings.gpu_memory:
        from guard.memory.gpu_choice import choose_gpu

        try:
            choose_gpu(settings.gpu, settings.gpu_memory)
        except ValueError as err:
            raise UsageError(f"guard {command}: --gpu/--gpu-memory: {err}") from None
    settings.megatron_source = args.megatron_source or settings.megatron_source
    if settings.megatron_source:
        from guard.megatron.source_tables import checkout_root

        where = Path(settings.megatron_source)
        if not where.is_dir() or checkout_root(where) != where.resolve():
            raise UsageError(f"guard {command}: --megatron-source: {settings.megatron_source}: not a Megatron "
                             "checkout (no megatron/training/arguments.py or megatron/arguments.py in it)")
    version = args.megatron_version or settings.megatron_version
    if version:
        from guard.megatron.flag_table import resolve_version

        try:
            settings.megatron_version = resolve_version(version)
        except ValueError as err:
            raise UsageError(f"guard {command}: --megatron-version: {err}") from None
    return settings

