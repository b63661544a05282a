"""Before the launcher starts: predict every pipeline stage of the job and build the context the ranks decide
from, with the launcher records' knowledge of which processes are ranks."""

from __future__ import annotations

from guard.intake.request import Request
from guard.job.subject import Subject
from guard.launch.context import LaunchContext, Ranks, StagePrediction
from guard.launchers import registry
from guard.settings import Settings

SETTINGS_KEPT = ("world_size", "world_size_source", "world_size_label", "force_world_size", "gpus_per_node", "gpu",
                 "gpu_memory", "megatron_version", "megatron_source", "deepspeed_version", "context")


def predictions(subject: Subject) -> list[StagePrediction]:
    """Each stage's predicted peak, its certain lower bound and its dominating term (ranks share their stage's)."""
    from guard.memory.estimate import estimate

    job = subject.job
    out = []
    for stage in estimate(job).stages:
        c = stage.components
        lower = stage.peak_bytes if not job.unmodelled else c["params"] + c["grads"] + c["optimizer"] + c["buffers"]
        context = int(stage.terms.get("runtime", {}).get("CUDA context", 0))
        out.append(StagePrediction(stage.pp_rank, stage.peak_bytes, lower, max(c, key=c.get), context))
    return out


def ranks_of(subject: Subject) -> Ranks:
    """Which processes are ranks: the variables of the launcher that starts them, and the entry points of the
    launchers' own Python processes (agents), from guard/launchers."""
    launch = subject.launch
    starter = launch.starter if launch is not None else registry.get("python")
    agents = [a for layer in (launch.layers if launch else []) for a in registry.get(layer.kind).agents]
    if launch is not None and not launch.world.spawns:
        agents = [a for a in agents if a not in registry.get(launch.layers[-1].kind).agents]
    variables = [[v.rank, v.local_rank, v.world, v.local_world] for v in starter.ranks]
    return Ranks(starter.kind, variables, sorted(set(agents)))


def context_for(subject: Subject, request: Request, settings: Settings, policy: str, allow: frozenset[str],
                headroom, timeout: float, argv: list[str]) -> LaunchContext:
    job = subject.job
    kept = {name: getattr(settings, name) for name in SETTINGS_KEPT}
    return LaunchContext(policy, sorted(allow), [headroom.size, headroom.share], list(argv), request.values(), kept,
                         job.layout.world or 1, predictions(subject), ranks_of(subject),
                         [feature for feature, _ in job.unmodelled], float(timeout))
