"""DS7xx: credentials in monitor sections, and value checks DeepSpeed makes in code that the schema cannot express."""

from __future__ import annotations

import re
from typing import Any

from guard.rules.context import DsConfig, flag
from guard.rules.registry import check, rule

MONITORS = ("tensorboard", "wandb", "csv_monitor", "comet")
# Key names that hold credentials: api_key, apikey, api-key, *_token, password, secret, ...
SECRET_KEY = re.compile(r"api[_-]?key|token|passw(or)?d|secret|credential", re.IGNORECASE)
SAMPLING = ("data_efficiency", "data_sampling")

SECRET = rule(
    "DS701", "secret-in-monitor-config", "warning",
    "An API key, token or password written into a monitor section of the config.",
    what="Reports a non-empty string under a key named like `api_key`, `token`, `password` or "
         "`secret` anywhere inside `tensorboard`, `wandb`, `csv_monitor` or `comet` (DeepSpeed's "
         "`comet.api_key` is the usual one). The value is never repeated in the message.",
    why="Training configs are committed, copied into checkpoints and experiment trackers and "
        "pasted into issues; a key written there leaks with them. Comet reads `COMET_API_KEY` and "
        "wandb `WANDB_API_KEY` from the environment, so the config never needs the secret.",
    example='{"comet": {"enabled": true, "project": "llm", "api_key": "<your key>"}}',
    use_instead='{"comet": {"enabled": true, "project": "llm"}}\n# export COMET_API_KEY=... in the job environment',
    references=("deepspeed/monitor/config.py: CometConfig.api_key",
                "https://www.comet.com/docs/v2/guides/experiment-management/configure-sdk/"),
)

CURRICULUM_METRICS = rule(
    "DS702", "curriculum-metrics-missing", "error",
    "Curriculum learning is enabled without `curriculum_metrics`.",
    what="Reports `data_efficiency.data_sampling.curriculum_learning` with `enabled` set and no "
         "`curriculum_metrics`.",
    why="DeepSpeed parses the block when it reads the config, whether or not data efficiency "
        "itself is enabled, and asserts: `AssertionError: Curriculum learning is enabled, "
        "curriculum_metrics must be specified`.",
    example='{"data_efficiency": {"data_sampling": {"curriculum_learning": {"enabled": true}}}}',
    use_instead='{"data_efficiency": {"data_sampling": {"curriculum_learning": {"enabled": true,\n'
                '  "curriculum_metrics": {"seqlen": {"difficulty_type": "value", "min_difficulty": 64,\n'
                '   "max_difficulty": 2048, "schedule_type": "fixed_linear",\n'
                '   "schedule_config": {"total_curriculum_step": 10000, "difficulty_step": 8}}}}}}}',
    references=("deepspeed/runtime/data_pipeline/config.py: get_curriculum_learning",),
)

DYNAMIC_BATCHING = rule(
    "DS703", "dynamic-batching-max-tokens-missing", "error",
    "Dynamic batching is enabled without `max_tokens`.",
    what="Reports `data_efficiency.data_sampling.dynamic_batching` with `enabled` set and no "
         "`max_tokens`.",
    why="DeepSpeed parses the block when it reads the config and asserts: `AssertionError: "
        "Dynamic batching is enabled, so max_tokens must be specified`.",
    example='{"data_efficiency": {"data_sampling": {"dynamic_batching": {"enabled": true}}}}',
    use_instead='{"data_efficiency": {"data_sampling": {"dynamic_batching": {"enabled": true, "max_tokens": 65536}}}}',
    references=("deepspeed/runtime/data_pipeline/config.py: get_dynamic_batching",),
)

AUTOTUNING_DIR = rule(
    "DS704", "autotuning-dir-empty", "error",
    "`autotuning.results_dir` or `autotuning.exps_dir` is an empty string.",
    what="Reports `autotuning.results_dir` or `autotuning.exps_dir` set to `\"\"`.",
    why="DeepSpeed builds its autotuning config for every run, enabled or not, and asserts: "
        "`AssertionError: results_dir cannot be empty` (or `exps_dir cannot be empty`).",
    example='{"autotuning": {"enabled": false, "results_dir": ""}}',
    use_instead='{"autotuning": {"enabled": false, "results_dir": "autotuning_results"}}',
    references=("deepspeed/autotuning/config.py: DeepSpeedAutotuningConfig._initialize",),
)


def _secrets(path: tuple[str, ...], value: Any):
    """(path, key) of every non-empty string under a credential-like key, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = (*path, str(key))
            if isinstance(item, str) and item.strip() and SECRET_KEY.search(str(key)):
                yield here
            else:
                yield from _secrets(here, item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _secrets((*path, str(index)), item)


@check(SECRET)
def secrets(ctx: DsConfig) -> None:
    for monitor in MONITORS:
        for path in _secrets((monitor,), ctx.get(monitor)):
            name = ".".join(path)
            env = {"comet": "COMET_API_KEY", "wandb": "WANDB_API_KEY"}.get(monitor)
            ctx.report(SECRET, path, f"'{name}' holds a credential in plain text; it travels with every "
                       "copy of this config", help=f"remove it and set {env} in the job environment"
                       if env else "remove it and pass the credential through the environment")


def _enabled(value: Any) -> bool:
    return flag(value, False, pydantic=False)


@check(CURRICULUM_METRICS, DYNAMIC_BATCHING)
def data_sampling(ctx: DsConfig) -> None:
    sampling = ctx.get(*SAMPLING)
    if not isinstance(sampling, dict):
        return
    curriculum = sampling.get("curriculum_learning")
    if isinstance(curriculum, dict) and _enabled(curriculum.get("enabled")) \
            and "curriculum_metrics" not in curriculum:
        ctx.report(CURRICULUM_METRICS, (*SAMPLING, "curriculum_learning", "enabled"),
                   "Curriculum learning is enabled, curriculum_metrics must be specified",
                   help="add curriculum_metrics (one entry per metric) or disable curriculum learning")
    batching = sampling.get("dynamic_batching")
    if isinstance(batching, dict) and _enabled(batching.get("enabled")) and "max_tokens" not in batching:
        ctx.report(DYNAMIC_BATCHING, (*SAMPLING, "dynamic_batching", "enabled"),
                   "Dynamic batching is enabled, so max_tokens must be specified",
                   help="add \"max_tokens\" (tokens per batch) or disable dynamic batching")


@check(AUTOTUNING_DIR)
def autotuning_dirs(ctx: DsConfig) -> None:
    section = ctx.section("autotuning")
    for key in ("results_dir", "exps_dir"):
        # Only "": null, false or 0 fail the same assertion but are type errors that ds_keys reports.
        if section.get(key) == "":
            ctx.report(AUTOTUNING_DIR, ("autotuning", key), f"{key} cannot be empty",
                       help=f"remove it (default \"autotuning_{key.split('_')[0]}\") or name a directory",
                       at_value=True)
