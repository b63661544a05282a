"""guard's prediction for a failed rank beside what its log observed, term by term.

What each observation measures: Megatron's `report_memory` after an iteration (and DeepSpeed's `MA`) is taken
when the iteration's activations are freed, so `allocated` there is the model states and buffers; `max
allocated` is the peak; the OOM message's allocated bytes plus the request are a floor under the peak the rank
needed; Megatron's per-rank parameter count is exact; its theoretical "weight and optimizer" is its own model
of parameters, gradients and optimizer states (18 bytes per parameter, 6 + 12/DP with the distributed optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.diagnose.events import Event
from guard.diagnose.memory_lines import Reading

STATE_TERMS = ("params", "grads", "optimizer")


@dataclass
class Row:
    what: str
    predicted: int
    observed: int
    unit: str = "bytes"  # or "parameters"
    where: str = ""  # source:line of the observation

    @property
    def ratio(self) -> float:
        return self.predicted / self.observed if self.observed else float("inf")


@dataclass
class RankComparison:
    rank: int
    coordinates: dict[str, int]
    components: dict[str, int]  # guard's prediction for the rank's stage
    peak: int
    rows: list[Row] = field(default_factory=list)

    @property
    def dominant(self) -> str:
        return max(self.components, key=self.components.get)


def compare(estimate, rank: int, events: list[Event], readings: list[Reading]) -> RankComparison:
    """The rank's prediction and every observation of it (or of a rank with the same prediction: Megatron
    reports on one DP rank of each pipeline stage). `readings`: one per kind and rank (LogScan keeps those)."""
    layout = estimate.setup.layout
    coords = layout.coordinates(rank)
    stage = next(st for st in estimate.stages if st.pp_rank == coords["pp_rank"])
    comps = dict(stage.components)
    out = RankComparison(rank, coords, comps, stage.peak_bytes)
    static = sum(comps[k] for k in STATE_TERMS) + comps["buffers"]
    same_stage = {r for r in range(layout.world or 0) if layout.coordinates(r)["pp_rank"] == coords["pp_rank"]}
    for r in readings:
        where = f"{r.source}:{r.line}"
        label = r.label if r.rank in (rank, None) else f"rank {r.rank}, {r.label}"
        if r.kind == "megatron-params" and r.pp_rank == coords["pp_rank"] and r.tp_rank == coords["tp_rank"]:
            out.rows.append(Row("parameters on this rank", stage.inventory.total, r.parameters, "parameters", where))
        elif r.kind == "megatron-theoretical" and r.weight_and_optimizer and coords["pp_rank"] == 0:
            out.rows.append(Row("weights, gradients and optimizer (Megatron's own model)",
                                sum(comps[k] for k in STATE_TERMS), r.weight_and_optimizer, where=where))
        elif r.kind in ("megatron", "deepspeed", "summary") and (r.rank in same_stage or r.rank is None):
            if r.allocated and r.kind == "megatron":  # taken between iterations: no activations alive
                out.rows.append(Row(f"states and buffers ({label})", static, r.allocated, where=where))
            if r.max_allocated:
                out.rows.append(Row(f"peak allocated ({label})", stage.peak_bytes, r.max_allocated, where=where))
    for e in events:
        o = e.oom
        if e.rank == rank and o.allocated is not None and o.requested is not None:
            out.rows.append(Row("needed at the OOM (allocated + requested, a floor)", stage.peak_bytes,
                                o.allocated + o.requested, where=f"{e.source}:{e.line}"))
    return out


def as_dict(c: RankComparison) -> dict:
    return {"rank": c.rank, **c.coordinates, "predicted_peak_bytes": c.peak, "dominant": c.dominant,
            "predicted_components": c.components,
            "observed": [{"what": r.what, "predicted": r.predicted, "observed": r.observed, "unit": r.unit,
                          "where": r.where} for r in c.rows]}
