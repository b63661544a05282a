"""`guard.plugins.deepspeed.install()` before `deepspeed.initialize`: the launch check runs on the config the
job passes and on its model (a transformers model's `.config`, or GUARD_MODEL / GUARD_HF_CONFIG), at the
sequence length GUARD_SEQ_LENGTH gives. A rewrite changes the config DeepSpeed is given (a copy: a config
file named by path is never written)."""

from __future__ import annotations

import os

from guard.plugins.in_process import already_checked, guarded


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
    from guard.errors import InputError
    from guard.job import hf_config, presets

    if model is not None and hasattr(getattr(model, "config", None), "to_dict"):
        return hf_config.from_dict(model.config.to_dict(), "the model's config")
    if os.environ.get("GUARD_HF_CONFIG"):
        return hf_config.load(os.environ["GUARD_HF_CONFIG"])
    if os.environ.get("GUARD_MODEL"):
        return presets.load(os.environ["GUARD_MODEL"])
    raise InputError("guard cannot tell the model: give GUARD_MODEL or GUARD_HF_CONFIG")


def check_config(config, model):
    """The config to start DeepSpeed with: the job's own, or the rewritten copy."""
    from guard.intake.in_process import deepspeed_config

    seq = int(os.environ.get("GUARD_SEQ_LENGTH", "0")) or None
    verdict = guarded(lambda: deepspeed_config(config, _architecture(model), seq))
    if verdict is None or "text" not in verdict.change:
        return config
    from guard.sources.json_source import parse_json

    return parse_json(verdict.change["text"], "<rewritten config>").data  # DeepSpeed takes the dict
