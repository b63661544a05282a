"""The options of every command, each declared once (guard/options.py says what a declaration holds), and how
their values merge over `[tool.guard]` into one Settings and one Request."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard import options as o
from guard.errors import InputError
from guard.intake.request import Request
from guard.options import Option
from guard.report import FORMATS
from guard.settings import Settings, find_pyproject, read_table

JOB, FILES = o.JOB_COMMANDS, o.FILE_COMMANDS
ALL = JOB | {"check"}
MODEL = "the model, where the files do not describe it"

OPTIONS: tuple[Option, ...] = (
    # -- the files a job is read from -----------------------------------------------------------------------
    Option(("--script",), FILES, "a launch script or a file holding a launcher command line", metavar="FILE",
           action="append"),
    Option(("--megatron-args",), FILES | {"check"}, "a Megatron command line as one string", metavar="ARGS",
           action="append"),
    Option(("--deepspeed",), FILES, "a DeepSpeed config (HF Trainer / plain DeepSpeed jobs)", metavar="FILE"),
    # -- what the files may leave out ----------------------------------------------------------------------
    Option(("--hf-config",), ALL, f"{MODEL}: a Hugging Face config.json", metavar="FILE"),
    Option(("--model",), ALL, f"{MODEL}: a preset from schemas/models (guard estimate --list-models)",
           metavar="PRESET"),
    Option(("--offline",), ALL, "never ask the Hugging Face Hub for a model's config.json (HF_HUB_OFFLINE=1 too)",
           action="store_true", default=False),
    Option(("--seq-length",), ALL, "the sequence length, where the files do not give it", o.positive_int, "S"),
    Option(("--micro-batch-size",), ALL, "the micro-batch, for a DeepSpeed config whose own is \"auto\"",
           o.positive_int, "B"),
    Option(("--vocab-size",), ALL, "the tokenizer's vocabulary, where the command line does not give it",
           o.positive_int, "V"),
    Option(("--precision",), ALL, "for DeepSpeed configs whose bf16/fp16 is \"auto\"", o.one_of("bf16", "fp16", "fp32"),
           "bf16|fp16|fp32"),
    Option(("--gradient-checkpointing",), ALL, "HF Trainer --gradient_checkpointing (full recompute, one layer per "
           "checkpoint)", action="store_true", default=False),
    # -- where it runs -------------------------------------------------------------------------------------
    Option(("--world-size",), ALL, "ranks the job runs on, where the launcher does not say (a launcher that does "
           "wins)", o.positive_int, "N", toml="world-size", setting="world_size"),
    Option(("--force-world-size",), ALL, "let --world-size / [tool.guard] world-size win over the launcher's",
           action="store_true", default=False, setting="force_world_size"),
    Option(("--gpus-per-node",), ALL, "GPUs per node, where the launcher does not say (tensor-parallel placement)",
           o.positive_int, "G", toml="gpus-per-node", setting="gpus_per_node"),
    Option(("--gpu",), ALL, "the GPU: a catalog name (H100-SXM, A100-40GB) or a size (80GiB)", o.gpu, "NAME|SIZE",
           toml="gpu", setting="gpu"),
    Option(("--gpu-memory",), ALL, "usable memory per GPU with a unit: 80GiB (2^30) or 80GB (10^9)", o.size, "SIZE",
           toml="gpu-memory", setting="gpu_memory"),
    # -- how the files are read ----------------------------------------------------------------------------
    Option(("--megatron-version",), ALL, "Megatron flag table to read command lines with (default: main for "
           "Megatron-LM, Megatron-DeepSpeed's when the command uses --deepspeed/--zero-stage)", o.megatron_version,
           "REF", toml="megatron-version", setting="megatron_version"),
    Option(("--megatron-source",), ALL, "the Megatron checkout the job runs (a fork): its own flags, choices and "
           "defaults judge the command", o.megatron_source, "PATH", toml="megatron-source", setting="megatron_source"),
    Option(("--deepspeed-version",), ALL, o.deepspeed_help, o.release, "X.Y.Z", toml="deepspeed-version",
           setting="deepspeed_version"),
    Option(("--context",), ALL, "hf: HF Trainer/accelerate fill \"auto\"; deepspeed: plain DeepSpeed; "
           "megatron-deepspeed: it passes its own optimizer; auto (default): hf when the config uses \"auto\"",
           o.one_of(*o.CONTEXTS), "|".join(o.CONTEXTS), toml="context", setting="context"),
    Option(("--config",), ALL, "read [tool.guard] from this file instead of the nearest pyproject.toml",
           metavar="PYPROJECT"),
    Option(("--isolated",), ALL, "ignore every pyproject.toml", action="store_true", default=False),
    # -- check ---------------------------------------------------------------------------------------------
    Option(("--select",), {"check"}, "rule codes or prefixes to enable (comma-separated; default ALL)", o.codes,
           "CODES", action="append", toml="select", setting="select"),
    Option(("--extend-select",), {"check"}, "codes to enable besides --select", o.codes, "CODES", action="append",
           toml="extend-select", setting="extend_select"),
    Option(("--ignore",), {"check"}, "codes to disable", o.codes, "CODES", action="append", toml="ignore",
           setting="ignore"),
    Option(("--fail-on",), {"check"}, "exit 1 when a finding of this severity or worse is found (default warning)",
           o.one_of(*o.FAIL_ON), "|".join(o.FAIL_ON), toml="fail-on", setting="fail_on"),
    Option(("--exit-zero",), {"check"}, "exit 0 even when findings are found", action="store_true", default=False),
    # -- plan and launch -----------------------------------------------------------------------------------
    Option(("--headroom",), {"plan", "launch"}, "memory to leave free on every GPU: a size (2GiB) or a share of it "
           "(10%%)", o.headroom, "SIZE|PCT", default=o.headroom("0")),
    Option(("--allow",), {"plan", "launch"}, "comma-separated knobs a plan may change: tp, pp, vpp, cp, ep, "
           "micro_batch, recompute, sharding, offload (plan: all; launch: micro_batch,recompute,sharding,offload)",
           o.knobs, "KNOBS", defaults={"launch": frozenset({"micro_batch", "recompute", "sharding", "offload"})}),
    Option(("--top",), {"plan"}, "how many layouts to show (5)", o.positive_int, "K", default=5),
    Option(("--moe-imbalance",), {"plan", "estimate"}, "MoE, dropless routing: the busiest expert-parallel rank's "
           "routed tokens over the balanced share (1 = balanced, the default; estimate: its expert activations, "
           "plan: its expert GEMMs, permutation and all-to-all set the layer's pace)",
           o.at_least_one, "X", default=1.0),
    Option(("--measured",), {"plan"}, "a Megatron-LM training log of this job: its iteration time and timers "
           "against guard's prediction, term by term", metavar="LOG"),
    # -- output --------------------------------------------------------------------------------------------
    Option(("--format",), {"check"}, "output format (default concise)", o.one_of(*FORMATS), "|".join(FORMATS)),
    Option(("--format",), {"estimate", "plan"}, "output format", o.one_of("text", "json"), "text|json",
           default="text"),
    Option(("--format",), {"diagnose"}, "output format", o.one_of("text", "json", "markdown"),
           "text|json|markdown", default="text"),
    Option(("--explain",), {"estimate", "plan"}, "every term (estimate) or step-time term (plan) with its formula "
           "and source", action="store_true", default=False),
    Option(("--plot",), {"estimate"}, "stacked bars per stage (.png or .svg)", metavar="FILE"),
    Option(("--set",), {"estimate"}, "override a runtime term: cuda_context, nccl_per_group, cublas_workspace "
           "(sizes), fragmentation (a fraction)", o.override, "NAME=VALUE", action="append"),
    Option(("--list-models",), {"estimate"}, "print the model presets and the GPU catalog", action="store_true",
           default=False),
    Option(("--snapshot",), {"diagnose"}, "a memory snapshot (torch.cuda.memory._dump_snapshot), read without "
           "running its code", metavar="FILE", action="append"),
    Option(("--policy",), {"launch"}, "abort (default), warn, or rewrite the job to fit", o.one_of(*o.POLICIES),
           "|".join(o.POLICIES), default="abort"),
    Option(("--exchange-timeout",), {"launch"}, "seconds the ranks wait for each other's GPU samples (default "
           "120)", o.positive_int, "S", default=120),
)
TOML = {opt.toml: opt for opt in OPTIONS if opt.toml}
TOML_ONLY = {"per-file-ignores"}


def settings_for(args: argparse.Namespace, command: str) -> Settings:
    """[tool.guard] (unless --isolated), then the command line over it; every value through its validator."""
    settings = Settings()
    if not args.isolated:
        path = Path(args.config) if args.config else find_pyproject(Path.cwd())
        if args.config and not path.is_file():
            raise InputError(f"--config: no such file: {args.config}")
        if path is not None:
            _from_table(settings, path)
    for opt in OPTIONS:
        value = getattr(args, opt.dest, None) if command in opt.commands else None
        if opt.setting is None or value in (None, False):
            continue
        if opt.setting in ("extend_select", "ignore"):  # the command line adds to [tool.guard]'s
            value = getattr(settings, opt.setting) + list(value)
        setattr(settings, opt.setting, list(value) if opt.action == "append" else value)
    if args.world_size:
        settings.world_size_source, settings.world_size_label = "cli", "--world-size"
    return settings


def _from_table(settings: Settings, pyproject: Path) -> None:
    table = read_table(pyproject)
    unknown = sorted(set(table) - set(TOML) - TOML_ONLY)
    if unknown:
        raise InputError(f"{pyproject}: unknown [tool.guard] setting(s): {', '.join(unknown)}")
    settings.root = pyproject.parent
    for key, value in table.items():
        if key == "per-file-ignores":
            if not isinstance(value, dict):
                raise InputError(f"{pyproject}: [tool.guard] per-file-ignores must be a table")
            settings.per_file_ignores = {k: o.toml_value(Option((f"--{k}",), frozenset(), parse=o.codes,
                                                                toml=f"per-file-ignores.{k}"), v, pyproject)
                                         for k, v in value.items()}
            continue
        opt = TOML[key]
        if key == "megatron-source":  # a path relative to the pyproject.toml that names it
            value = str((pyproject.parent / str(value)).resolve())
        checked = o.toml_value(opt, value, pyproject)
        setattr(settings, opt.setting, [checked] if opt.action == "append" and isinstance(checked, str) else checked)
    if "world-size" in table:
        settings.world_size_source, settings.world_size_label = "settings", f"[tool.guard] world-size in {pyproject}"


def request_for(args: argparse.Namespace, paths: list[str] = ()) -> Request:
    """What the command line says of the job itself (guard/intake reads it)."""
    return Request(paths=tuple(getattr(args, "script", None) or ()) + tuple(paths),
                   megatron_args=tuple(getattr(args, "megatron_args", None) or ()),
                   deepspeed=getattr(args, "deepspeed", None), hf_config=args.hf_config, model=args.model,
                   vocab_size=args.vocab_size, seq_length=args.seq_length, micro_batch=args.micro_batch_size,
                   precision=args.precision, gradient_checkpointing=args.gradient_checkpointing,
                   # guard check never asks the Hub: a pre-commit hook must answer in a fraction of a second
                   offline=bool(getattr(args, "offline", False)) or getattr(args, "command", None) == "check")
