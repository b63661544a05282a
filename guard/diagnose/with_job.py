"""When the job is known too (the inputs of guard estimate): each failed rank's coordinates, guard's prediction
for it beside what the log saw, and the planner's layouts that fit the GPU the log reports."""

from __future__ import annotations

from dataclasses import replace

from guard.diagnose.events import Event


def rank_rows(job, events: list[Event]) -> dict[int, dict]:
    """rank -> coordinates, predicted peak and its dominating term, for the ranks the events name."""
    from guard.memory.estimate import estimate

    result = estimate(job)
    by_stage = {st.pp_rank: st for st in result.stages}
    out = {}
    for rank in sorted({e.rank for e in events if e.rank is not None}):
        if job.layout.world and rank >= job.layout.world:
            continue
        coords = job.layout.coordinates(rank)
        stage = by_stage[coords["pp_rank"]]
        comps = stage.components
        out[rank] = {**coords, "predicted_peak_bytes": stage.peak_bytes, "dominant": max(comps, key=comps.get)}
    return out


def layouts_that_fit(job, events: list[Event], gpu_name: str | None, verify=None, top: int = 3) -> list[dict]:
    """The planner's fastest layouts for the same world and global batch on the GPU size the log reports."""
    from guard.memory import catalog
    from guard.plan.search import plan

    totals = [e.oom.total for e in events if e.oom.total]
    if not totals:
        return []
    try:
        gpu = catalog.lookup(gpu_name or "H100-SXM")
    except ValueError:
        gpu = catalog.lookup("H100-SXM")
    gpu = replace(gpu, usable_bytes=min(totals), usable_note="the total the out-of-memory message reports")
    result = plan(job, gpu, top=top, verify=verify)
    return [{"layout": c.knobs.describe(), "peak_bytes": c.peak_bytes, "step_time_s": c.time.seconds,
             "changes": _change(job, c)} for c in result.candidates]


def _change(job, cand) -> str:
    """The change in words a user can apply: the flags (Megatron) or the keys (DeepSpeed) that differ."""
    from guard.plan.space import changed, knobs_of

    names = sorted(changed(cand.knobs, knobs_of(job)))
    k = cand.knobs
    values = {"tp": f"TP {k.layout.tp}", "pp": f"PP {k.layout.pp}", "vpp": f"VPP {k.layout.vpp}",
              "cp": f"CP {k.layout.cp}", "ep": f"EP {k.layout.ep}", "micro_batch": f"micro-batch {k.micro_batch}",
              "recompute": f"recompute {k.recompute}", "offload": f"offload {k.offload_optimizer}",
              "sharding": f"ZeRO {k.zero_stage}" if k.zero_stage else
              f"distributed optimizer {'on' if k.distributed_optimizer else 'off'}"}
    return ", ".join(values[n] for n in names) or "no change"
