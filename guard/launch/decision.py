"""The launch decision from the predicted peaks and the sampled free memory of every rank: the same on
every rank, because every rank decides from the same data. Pure: no torch, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from guard.launch.context import LaunchContext, StagePrediction
from guard.units import GIB

SHOWN = 8  # short ranks reported one by one
# (usable bytes) -> the Plan of the job on GPUs with that much free, searched within `allow`
Planner = Callable[[int, frozenset[str] | None], object]


@dataclass
class Short:
    prediction: StagePrediction
    sample: dict
    need: int  # what the rank needs free: the prediction (or its lower bound), plus headroom

    @property
    def missing(self) -> int:
        return self.need - self.sample["free"]


@dataclass
class Verdict:
    action: str  # run | abort | rewrite
    reason: str
    report: list[str] = field(default_factory=list)
    candidate: object | None = None  # the plan's candidate a rewrite applies (on the deciding rank)
    change: dict | None = None  # what every rank applies: {"flags": [...]} or {"config": path, "text": ...}

    def as_dict(self) -> dict:
        return {"action": self.action, "reason": self.reason, "report": self.report, "change": self.change}


def available(ctx: LaunchContext, sample: dict, prediction: StagePrediction) -> int:
    """Free bytes for the job on this rank: a torch sample already holds this process's CUDA context, which the
    prediction counts too; the headroom is taken once, here."""
    free = sample["free"] + (prediction.cuda_context if sample.get("source") == "torch" else 0)
    return free - ctx.room(sample["total"])


def _pairs(ctx: LaunchContext, samples: list[dict]):
    return [(ctx.prediction(s["rank"]), s) for s in samples]


def shortfalls(ctx: LaunchContext, samples: list[dict], certain: bool) -> list[Short]:
    """Ranks whose predicted peak (`certain`: the lower bound) exceeds what they have free."""
    out = []
    for prediction, sample in _pairs(ctx, samples):
        need = prediction.lower if certain else prediction.peak
        if need > available(ctx, sample, prediction):
            out.append(Short(prediction, sample, need))
    return out


def decide(ctx: LaunchContext, samples: list[dict], planner: Planner) -> Verdict:
    pairs = _pairs(ctx, samples)
    short = shortfalls(ctx, samples, certain=False)
    capacity = min(available(ctx, s, p) for p, s in pairs)
    if not short:
        p, s = min(pairs, key=lambda ps: available(ctx, ps[1], ps[0]) - ps[0].peak)
        return Verdict("run", f"every rank fits; the tightest, rank {s['rank']}, has "
                              f"{(available(ctx, s, p) - p.peak) / GIB:.1f} GiB to spare", _footer(ctx, samples))
    if ctx.unmodelled:  # honest confidence: stop only on what is certain
        certain = shortfalls(ctx, samples, certain=True)
        if not certain:
            return Verdict("run", "the prediction exceeds free memory, but guard does not model some features "
                                  f"({', '.join(ctx.unmodelled)}) and what is certain fits: running",
                           [_line(ctx, s) for s in short[:SHOWN]] + _footer(ctx, samples))
        short = certain
    report = [_line(ctx, s) for s in short[:SHOWN]]
    if len(short) > SHOWN:  # thousands of ranks: the first ones say what the rest would
        report.append(f"... and {len(short) - SHOWN} more ranks short of memory")
    if ctx.policy == "rewrite":
        plan = planner(capacity, frozenset(ctx.allow))
        if plan.candidates:
            best = plan.candidates[0]
            return Verdict("rewrite", f"rewritten to fit {capacity / GIB:.1f} GiB: {_knobs(best)}",
                           report + _footer(ctx, samples), best)
        report.append(f"no layout within --allow {','.join(ctx.allow)} fits {capacity / GIB:.1f} GiB")
    elif ctx.policy == "abort":
        report += _nearest(planner, capacity)
    action = "run" if ctx.policy == "warn" else "abort"
    reason = f"{len(short)} of {len(samples)} ranks would run out of memory"
    return Verdict(action, reason, report + _footer(ctx, samples))


def failed(samples: list[dict]) -> list[str]:
    """The ranks whose check itself failed (no GPU to read, an exception), each as one line."""
    return [f"rank {s['rank']}: {s['error']}" for s in samples if s.get("error")]


def _line(ctx: LaunchContext, short: Short) -> str:
    p, s = short.prediction, short.sample
    bound = "lower bound" if ctx.unmodelled and short.need == p.lower else "predicted peak"
    line = (f"rank {s['rank']} (pipeline stage {p.pp_rank}; {s['host']}, GPU {s['device']}): needs "
            f"{short.need / GIB:.1f} GiB ({bound}, dominated by {p.dominant}) but {s['free'] / GIB:.1f} of "
            f"{s['total'] / GIB:.1f} GiB are free: short by {short.missing / GIB:.1f} GiB")
    for other in s.get("others", []):
        line += f"\n    another process on that GPU: pid {other['pid']} holds {other['bytes'] / GIB:.1f} GiB"
    return line


def _nearest(planner: Planner, capacity: int) -> list[str]:
    plan = planner(capacity, None)
    if not plan.candidates:
        return [f"no layout guard plan searches fits {capacity / GIB:.1f} GiB on every rank"]
    out = [f"nearest layouts that fit {capacity / GIB:.1f} GiB (guard plan):"]
    for n, cand in enumerate(plan.candidates[:3], 1):
        out.append(f"  {n}. {_knobs(cand)}: peak {cand.peak_bytes / GIB:.1f} GiB, {cand.time.seconds:.2f} s/step")
    return out


def _knobs(cand) -> str:
    k, lay = cand.knobs, cand.job.layout
    parts = [f"TP {lay.tp} PP {lay.pp}" + (f" VPP {lay.vpp}" if lay.vpp > 1 else "") +
             (f" CP {lay.cp}" if (lay.cp or 1) > 1 else ""), f"micro-batch {k.micro_batch}",
             f"recompute {k.recompute}" + (f" ({k.recompute_method} {k.recompute_layers})" if k.recompute == "full"
                                           else "")]
    if k.zero_stage:
        parts.append(f"ZeRO {k.zero_stage}" + (", optimizer offload" if k.offload_optimizer != "none" else "") +
                     (", parameter offload" if k.offload_param != "none" else ""))
    elif k.distributed_optimizer:
        parts.append("distributed optimizer")
    return ", ".join(parts)


def _footer(ctx: LaunchContext, samples: list[dict]) -> list[str]:
    out = []
    if any(s.get("source") == "simulated" for s in samples):
        out.append("(GPU memory simulated by GUARD_SIMULATED_GPUS: no CUDA device was read)")
    if ctx.unmodelled:
        out.append(f"(not modelled, so not in the prediction: {', '.join(ctx.unmodelled)})")
    return out
