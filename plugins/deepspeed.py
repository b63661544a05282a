"""`guard.plugins.deepspeed.install()` before `deepspeed.initialize`: the launch check runs on the config the
job passes and on its model (a transformers model's `.config`, or GUARD_MODEL / GUARD_HF_CONFIG), at the
sequence length GUARD_SEQ_LENGTH gives. A rewrite changes the config DeepSpeed is given (a copy: a config
file named by path is never written)."""

from __future__ import annotations

import copy
import json
import os

from guard.plugins.in_process import already_checked, run_check, settings_from_environment


def install() -> None:
    """Wrap deepspeed.initialize (once)."""
    import deepspeed

    original = deepspeed.initialize
    if getattr(original, "guard_wrapped", False):
        return

    def initialize(*args, **kwargs):
        config = kwargs.get("config", kwargs.get("config_params"))
        if config is None and kwargs.get("args") is not None:
            config = getattr(kwargs["args"], "deepspeed_config", None)
        if config is not None and not already_checked():
            checked = check_config(config, kwargs.get("model", args[1] if len(args) > 1 else None))
            kwargs.pop("config_params", None)
            kwargs["config"] = checked
        return original(*args, **kwargs)

    initialize.guard_wrapped = True
    deepspeed.initialize = initialize


def _architecture(model):
    from guard.job import hf_config, presets

    if model is not None and hasattr(getattr(model, "config", None), "to_dict"):
        return hf_config.from_dict(model.config.to_dict(), "the model's config")
    if os.environ.get("GUARD_HF_CONFIG"):
        return hf_config.load(os.environ["GUARD_HF_CONFIG"])
    if os.environ.get("GUARD_MODEL"):
        return presets.load(os.environ["GUARD_MODEL"])
    raise ValueError("guard cannot tell the model: give GUARD_MODEL or GUARD_HF_CONFIG")


def check_config(config, model) -> dict:
    """The config to start DeepSpeed with: the job's own, or the rewritten copy."""
    from guard.job.from_deepspeed import read_deepspeed
    from guard.job.from_inputs import JobSource
    from guard.job.origin import Origin
    from guard.launch.command import LaunchRequest

    data = config if isinstance(config, dict) else json.load(open(config, encoding="utf-8"))
    settings = settings_from_environment()
    seq = int(os.environ.get("GUARD_SEQ_LENGTH", "0")) or None
    job = read_deepspeed(data, str(config) if not isinstance(config, dict) else "<config>", _architecture(model),
                         settings.world_size, world_origin=Origin("launcher", "WORLD_SIZE"), seq_length=seq,
                         gpus_per_node=settings.gpus_per_node or 8)
    request = LaunchRequest(["deepspeed.initialize"], JobSource(job), settings.world_size)
    written: dict = {}

    def apply(ctx, verdict, _request, _rank):
        from guard.job.deepspeed_changes import config_changes
        from guard.launch.decision import Verdict

        plan = config_changes(data, job, verdict.candidate.job)
        if plan.refused:
            why = "; ".join(r.describe() for r in plan.refused)
            return Verdict("abort", f"cannot rewrite: {why}", verdict.report + [f"cannot rewrite: {why}"])
        written.update(copy.deepcopy(data))
        for change in plan.changes:
            node = written
            for key in change.path[:-1]:
                node = node.setdefault(key, {})
            node[change.path[-1]] = change.value
        notes = [f"DeepSpeed is given {'.'.join(c.path)} = {c.value!r}" for c in plan.changes]
        return Verdict("rewrite", verdict.reason, verdict.report + notes, verdict.candidate)

    verdict = run_check(request, apply)
    return written if verdict.action == "rewrite" and written else config
