"""`guard plan --format json`: {"candidates": [...], "current": {...}} (DESIGN.md contract), plus the search."""

from __future__ import annotations

import json
from typing import TextIO

from guard.plan.assumptions import ASSUMPTIONS
from guard.plan.search import Candidate, Plan


def metrics(result: Plan, cand: Candidate) -> dict:
    """Step time, throughput, MFU, bubble and peak of one candidate (None for a layout that cannot run)."""
    job, time = cand.job, cand.time
    if time is None:
        return dict.fromkeys(("step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble", "peak_bytes", "peak_pp_rank",
                              "dominant"))
    world = job.layout.world or 1
    sequences = job.global_batch or job.micro_batch * job.num_microbatches * job.dp
    peak = cand.estimate.peak_stage if cand.estimate else None
    return {"step_time_s": time.seconds, "tokens_per_s_per_gpu": sequences * job.seq_length / time.seconds / world,
            "mfu": time.mfu(world, result.hardware.peak_flops), "bubble": time.bubble,
            "peak_bytes": cand.peak_bytes, "peak_pp_rank": peak.pp_rank if peak else None,
            "dominant": cand.dominant}


def layout(cand: Candidate) -> dict:
    job, knobs = cand.job, cand.knobs
    lay = job.layout
    return {**knobs.describe(), "num_microbatches": job.num_microbatches,
            "first_stage_layers": lay.first_stage_layers, "last_stage_layers": lay.last_stage_layers}


def candidate_dict(result: Plan, cand: Candidate, explain: bool = False) -> dict:
    terms = cand.time.terms if cand.time else {}
    out = {"layout": layout(cand), **metrics(result, cand),
           "terms": {name: seconds for name, seconds in sorted(terms.items(), key=lambda kv: -kv[1])}}
    written = cand.changes
    if written:
        out["changes"] = written.as_json()
        out["diff"] = written.diff
        out["flags"] = written.flags
        out["refused"] = [r.describe() for r in written.refused]
    else:
        out["changes"] = []
    if explain and cand.estimate:
        out["stages"] = [{"pp_rank": st.pp_rank, "layers": st.layers, "peak_bytes": st.peak_bytes,
                          "components": st.components} for st in cand.estimate.stages]
    return out


def to_dict(result: Plan, explain: bool = False) -> dict:
    current = candidate_dict(result, result.current, explain)
    current["feasible"] = not result.current.reason
    current["reason"] = result.current.reason
    job = result.current.job
    return {
        "model": {"name": job.arch.name, "seq_length": job.seq_length, "global_batch": job.global_batch},
        "gpu": {"name": result.hardware.name, "capacity_bytes": result.capacity},
        "candidates": [candidate_dict(result, c, explain) for c in result.candidates],
        "current": current,
        "search": {"tried": result.searched, "fit": len(result.feasible),
                   "rejected": [{"layout": layout(c), "reason": why} for c, why in result.rejected]},
        "close_calls": result.close_calls,
        "measured": result.measured,
        "assumptions": list(ASSUMPTIONS),
        "moe_imbalance": result.current.job.step.moe_imbalance,
        "constants": result.hardware.sources(),
    }


def write(result: Plan, out: TextIO, *, explain: bool = False) -> None:
    json.dump(to_dict(result, explain), out, indent=2)
    out.write("\n")
