"""When the job is known (the inputs of guard estimate, or the arguments Megatron printed in the log, both read
by guard/intake): each failed rank's coordinates and guard's prediction beside what the log saw, and the
planner's layouts that fit the GPU the log reports (each judged by every rule), as flags or a config diff."""

from __future__ import annotations

from dataclasses import replace

from guard.diagnose.compare import RankComparison, compare
from guard.diagnose.events import Event
from guard.diagnose.memory_lines import Reading


def comparisons(job, events: list[Event], readings: list[Reading]) -> list[RankComparison]:
    """One per failed rank that lies in the job's world."""
    from guard.memory.estimate import estimate

    result = estimate(job)
    world = job.layout.world
    ranks = sorted({e.rank for e in events if e.rank is not None and (not world or e.rank < world)})
    return [compare(result, rank, events, readings) for rank in ranks]


def layouts_that_fit(subject, events: list[Event], gpu_name: str | None, verify=None, top: int = 3,
                     diff: bool = True) -> list[dict]:
    """The planner's fastest layouts for the same world and global batch on the GPU size the log reports, each
    with the change written into the user's own files (flags and a diff; never saved). `diff=False` when the
    job came from the log: there is no file of the user's to show a diff of."""
    from guard.memory import catalog
    from guard.plan.rewrite import write_candidate
    from guard.plan.search import plan

    totals = [e.oom.total for e in events if e.oom.total]
    if not totals:
        return []
    try:
        gpu = catalog.lookup(gpu_name or "H100-SXM")
    except ValueError:
        gpu = catalog.lookup("H100-SXM")
    gpu = replace(gpu, usable_bytes=min(totals), usable_note="the total the out-of-memory message reports")
    result = plan(subject.job, gpu, top=top, verify=verify)
    out = []
    for cand in result.candidates:
        written = write_candidate(subject, cand.job)
        out.append({"layout": cand.knobs.describe(), "peak_bytes": cand.peak_bytes, "step_time_s": cand.time.seconds,
                    "changes": _change(subject.job, cand), "flags": written.flags,
                    "diff": written.diff if diff else "",
                    "refused": [r.describe() for r in written.refused]})
    return out


def _change(job, cand) -> str:
    """The change in words: the knobs that differ from the job's."""
    from guard.plan.space import changed, knobs_of

    names = sorted(changed(cand.knobs, knobs_of(job)))
    k = cand.knobs
    values = {"tp": f"TP {k.layout.tp}", "pp": f"PP {k.layout.pp}", "vpp": f"VPP {k.layout.vpp}",
              "cp": f"CP {k.layout.cp}", "ep": f"EP {k.layout.ep}", "micro_batch": f"micro-batch {k.micro_batch}",
              "recompute": f"recompute {k.recompute}", "offload": f"offload {k.offload_optimizer}",
              "sharding": f"ZeRO {k.zero_stage}" if k.zero_stage else
              f"distributed optimizer {'on' if k.distributed_optimizer else 'off'}"}
    words = [values[n] for n in names]
    if k.layout.sequence_parallel != job.layout.sequence_parallel and (k.layout.tp or 1) > 1:
        words.append(f"sequence parallel {'on' if k.layout.sequence_parallel else 'off'}")
    return ", ".join(words) or "no change"
