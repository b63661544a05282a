"""`guard estimate --format json`: the DESIGN.md contract, one entry per rank."""

from __future__ import annotations

import json
from typing import TextIO

from guard.memory.estimate import COMPONENTS, EXTRA_COMPONENTS, Estimate


def to_dict(est: Estimate) -> dict:
    s = est.setup
    ranks = []
    for st in est.stages:
        comps = {k: int(st.components[k]) for k in (*COMPONENTS, *EXTRA_COMPONENTS) if k in st.components}
        for rank in est.stage_ranks(st.pp_rank):
            coords = est.coordinates(rank)
            ranks.append({"rank": rank, **coords, "layers": st.layers, "chunk_layers": st.chunk_layers,
                          "inflight_microbatches": st.inflight, "components": comps, "phase": st.phase,
                          # each phase's allocated bytes, before the terms every phase holds (reference, vLLM)
                          "phases": dict(st.phases),
                          "peak_bytes": st.peak_bytes, "host_bytes": st.host_bytes,
                          # allocated between steps: states, buffers and the CUDA graphs' static buffers
                          "resident_bytes": st.resident_bytes,
                          "lower_bytes": st.margin.lower if st.margin else None,
                          "upper_bytes": st.margin.upper if st.margin else None,
                          "params_by_bucket": {b: st.inventory.bucket(b) for b in
                                               ("tp_sharded", "tp_replicated", "expert")}})
    peak = est.peak_stage
    return {
        "model": {"param_count": est.param_count, "trainable_param_count": est.trainable_param_count,
                  "name": s.arch.name, "vocab_padded": s.vocab, "adapter": _adapter(s.adapter)},
        "layout": {**s.layout.as_dict(), "sequence_parallel": s.layout.sequence_parallel,
                   "micro_batch_size": s.micro_batch, "num_microbatches": s.num_microbatches,
                   "seq_length": s.seq_length, "framework": s.framework, "zero_stage": s.zero_stage,
                   "distributed_optimizer": s.distributed_optimizer, "recompute": s.recompute},
        "gpu": {"name": est.gpu.name if est.gpu else None, "capacity_bytes": est.capacity},
        "ranks": ranks,
        "peak": {"rank": est.stage_ranks(peak.pp_rank).start, "pp_rank": peak.pp_rank, "peak_bytes": peak.peak_bytes},
        # said only when every stage's upper bound fits (memory/margin.py); "verdict" tells may-not-fit apart
        "fits": None if est.verdict is None else est.verdict == "fits",
        "verdict": est.verdict,
        "margin": _margin(est),
        "refused": [{"code": d.code, "message": d.message, "path": d.path, "line": d.line, "col": d.col}
                    for d in est.refusals],
        "host_bytes_per_node": est.host_bytes_per_node(),
        "host_bytes_at_save": est.host_bytes_at_save(),
        "unmodelled": [_unmodelled(s, f, where) for f, where in s.unmodelled],
        "notes": s.notes,
        "origins": {key: origin.describe() for key, origin in sorted(s.origins.items())},
    }


def _margin(est: Estimate) -> dict | None:
    """The peak stage's margin: its bounds and what each unmodelled feature may add (null: unbounded)."""
    m = est.peak_stage.margin
    if m is None:
        return None
    return {"lower_bytes": m.lower, "predicted_bytes": m.predicted, "upper_bytes": m.upper,
            "added": [{"what": what, "bytes": bound} for what, bound in m.added]}


def _adapter(adapter) -> dict | None:
    if adapter is None:
        return None
    return {"method": adapter.method, "rank": adapter.rank, "alpha": adapter.alpha, "dropout": adapter.dropout,
            "targets": list(adapter.targets), "quant_bits": adapter.quant_bits, "double_quant": adapter.double_quant}


def _unmodelled(job, feature: str, setting: str) -> dict:
    """The feature, the flag or key that asks for it, and where it is written (when known)."""
    out = {"feature": feature, "setting": setting}
    origin = job.origins.get(f"unmodelled:{feature}")
    if origin is not None and origin.path:
        out.update(path=origin.path, line=origin.line, col=origin.col)
    return out


def write(est: Estimate, out: TextIO, explain: bool = False, color: bool = False) -> None:
    """The estimate as one JSON object (`explain` and `color` are for text: the JSON always has everything)."""
    out.write(json.dumps(to_dict(est)))  # json.dumps without indent runs the C encoder: 1024 ranks in ms
    out.write("\n")
