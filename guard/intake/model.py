"""The model a job trains when its files do not say: --hf-config (a config.json) or --model (a preset, or a Hub id
of guard's catalog)."""

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
        if request.model.strip().lower() in presets.names():
            return presets.load(request.model)
        from guard.job import model_ref

        known = model_ref.known(request.model)  # a Hub id of guard's catalog (or a preset's)
        if known is None:
            raise InputError(f"--model {request.model}: neither a preset nor a model of guard's catalog "
                             "(guard estimate --list-models)")
        return known[0]
    return None
