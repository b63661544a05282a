"""The model a job trains when its files do not say: --hf-config (a config.json) or --model (a preset)."""

from __future__ import annotations

from guard.errors import InputError
from guard.intake.request import Request
from guard.job.architecture import Architecture


def given_model(request: Request) -> Architecture | None:
    from guard.job import hf_config, presets

    if request.hf_config and request.model:
        raise InputError("give --hf-config or --model, not both")
    if request.hf_config:
        return hf_config.load(request.hf_config)
    if request.model:
        return presets.load(request.model)
    return None
