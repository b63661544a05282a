"""Before the launcher starts: predict every rank of the job and write the context the ranks decide from."""

from __future__ import annotations

from dataclasses import asdict

from guard.launch.command import LaunchRequest
from guard.launch.context import LaunchContext, RankPrediction
from guard.settings import Settings

SETTINGS_KEPT = ("world_size", "world_size_source", "world_size_label", "force_world_size", "gpus_per_node", "gpu",
                 "gpu_memory", "megatron_version")


def predictions(request: LaunchRequest) -> list[RankPrediction]:
    """Every global rank's predicted peak, its certain lower bound and its dominating term."""
    from guard.memory.estimate import estimate

    job = request.source.job
    result = estimate(job)
    out = []
    for stage in result.stages:
        c = stage.components
        lower = stage.peak_bytes if not job.unmodelled else \
            c["params"] + c["grads"] + c["optimizer"] + c["buffers"]
        dominant = max(c, key=c.get)
        context = int(stage.terms.get("runtime", {}).get("CUDA context", 0))
        for rank in result.stage_ranks(stage.pp_rank):
            out.append(RankPrediction(rank, stage.pp_rank, stage.peak_bytes, lower, dominant, context))
    return out


def context_for(request: LaunchRequest, inputs, settings: Settings, policy: str, allow: list[str], headroom: str,
                timeout: float, directory: str) -> LaunchContext:
    job = request.source.job
    kept = {name: getattr(settings, name) for name in SETTINGS_KEPT}
    fields = {k: v for k, v in asdict(inputs).items() if k not in ("paths", "megatron_args", "deepspeed")}
    return LaunchContext(policy, allow, headroom, list(request.argv), fields, kept, predictions(request),
                         [feature for feature, _ in job.unmodelled], float(timeout), directory)
