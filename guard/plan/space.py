"""The knobs guard plan turns, and the values each may take for one job (Megatron or DeepSpeed).

Megatron: TP within a node dividing the heads and query groups; CP (powers of two dividing s / 2);
PP with even stages, or one layer lighter first and last stages (they hold the embedding and the loss);
VPP over the layers of a stage; EP (and expert-TP 1 or TP) for MoE; DP what is left; micro-batch sizes
that divide the global batch per DP rank; recompute none, selective, full over half the layers of each
chunk (block) or all (uniform). Sequence parallel is on whenever TP > 1 and the distributed optimizer
whenever DP > 1: each moves the same bytes as its alternative and holds less.
DeepSpeed: ZeRO stage 0-3, optimizer offload (stage >= 1) and parameter offload (stage 3) to the CPU,
micro-batch with gradient accumulation, activation checkpointing; the layout is pure DP.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from guard.job.layout import ParallelLayout
from guard.job.training_job import TrainingJob

MAX_MICRO_BATCH = 64
MAX_CP = 8


@dataclass(frozen=True)
class Knobs:
    """Everything the planner may set; the rest of the job stays as the user wrote it."""

    layout: ParallelLayout
    micro_batch: int
    recompute: str = "none"  # none | selective | full
    recompute_method: str = "uniform"
    recompute_layers: int = 1
    distributed_optimizer: bool = False
    zero_stage: int = 0
    offload_optimizer: str = "none"
    offload_param: str = "none"

    def describe(self) -> dict:
        lay = self.layout
        recompute = self.recompute if self.recompute != "full" else (
            "full" if self.recompute_method == "uniform" else f"full (first {self.recompute_layers} of each chunk)")
        return {**lay.as_dict(), "micro_batch_size": self.micro_batch, "sequence_parallel": lay.sequence_parallel,
                "recompute": recompute, "distributed_optimizer": self.distributed_optimizer,
                "zero_stage": self.zero_stage,
                "offload": {"optimizer": self.offload_optimizer, "param": self.offload_param}}


KNOBS = ("tp", "pp", "vpp", "cp", "ep", "micro_batch", "recompute", "sharding", "offload")


def changed(knobs: Knobs, current: Knobs) -> set[str]:
    """The knobs (KNOBS names) on which `knobs` differs from `current`: what a launcher's --allow must permit."""
    a, b = knobs.layout, current.layout
    out = {name for name in ("tp", "pp", "vpp", "cp", "ep") if getattr(a, name) != getattr(b, name)}
    if (a.etp, a.first_stage_layers, a.last_stage_layers) != (b.etp, b.first_stage_layers, b.last_stage_layers):
        out.add("ep" if a.etp != b.etp else "pp")
    if knobs.micro_batch != current.micro_batch:
        out.add("micro_batch")
    if (knobs.recompute, knobs.recompute_method, knobs.recompute_layers) != \
            (current.recompute, current.recompute_method, current.recompute_layers):
        out.add("recompute")
    if (knobs.distributed_optimizer, knobs.zero_stage) != (current.distributed_optimizer, current.zero_stage):
        out.add("sharding")
    if (knobs.offload_optimizer, knobs.offload_param) != (current.offload_optimizer, current.offload_param):
        out.add("offload")
    return out


def knobs_of(job: TrainingJob) -> Knobs:
    return Knobs(job.layout, job.micro_batch, job.recompute, job.recompute_method, job.recompute_num_layers,
                 job.distributed_optimizer, job.zero_stage, job.offload_optimizer, job.offload_param)


def apply(job: TrainingJob, knobs: Knobs, laid_out: TrainingJob | None = None) -> TrainingJob:
    """The job with these knobs: microbatches, stages and vocabulary padding follow the layout.
    `laid_out`: `job.with_layout(knobs.layout)` when the caller has it (a search prices many knobs on one)."""
    base = laid_out if laid_out is not None else job.with_layout(knobs.layout)
    dp = knobs.layout.dp or 1
    steps = max(1, job.global_batch // (knobs.micro_batch * dp)) if job.global_batch else base.num_microbatches
    return replace(base, micro_batch=knobs.micro_batch, num_microbatches=steps, recompute=knobs.recompute,
                   recompute_method=knobs.recompute_method, recompute_num_layers=knobs.recompute_layers,
                   distributed_optimizer=knobs.distributed_optimizer, zero_stage=knobs.zero_stage,
                   offload_optimizer=knobs.offload_optimizer, offload_param=knobs.offload_param)


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def micro_batches(job: TrainingJob, dp: int) -> list[int]:
    """Micro-batch sizes that keep the global batch: they divide global batch / DP."""
    if not job.global_batch:
        return [job.micro_batch]
    if job.global_batch % dp:
        return []
    return _divisors(job.global_batch // dp, MAX_MICRO_BATCH)


def recompute_levels(job: TrainingJob, chunk_layers: int) -> list[tuple[str, str, int]]:
    """(recompute, method, layers) from the fastest (holds the most) to the leanest."""
    levels = [("none", "uniform", 1), ("selective", "uniform", 1)]
    if job.framework == "deepspeed":
        return [("none", "uniform", 1), ("full", "uniform", 1)]
    if chunk_layers >= 2:
        levels.append(("full", "block", chunk_layers // 2))
    levels.append(("full", "uniform", 1))
    return levels


def megatron_layouts(job: TrainingJob) -> Iterator[tuple[ParallelLayout, bool]]:
    """(layout, distributed optimizer) for every structure the Megatron space holds."""
    arch, world, node = job.arch, job.layout.world, job.layout.gpus_per_node
    layers = arch.num_layers
    tps = [t for t in _divisors(min(node, world)) if arch.heads % t == 0 and arch.query_groups % t == 0]
    cps = [c for c in (1, 2, 4, 8) if c == 1 or (c <= MAX_CP and job.seq_length % (2 * c) == 0)]
    # Megatron-DeepSpeed has no --context-parallel-size nor uneven-stage flags, and DeepSpeed's pipeline
    # engine runs plain 1F1B: its space is TP x even PP (what its writer can express)
    mds = job.framework == "megatron-deepspeed"
    cps = [1] if mds else cps
    for tp in tps:
        for cp in cps:
            for pp in _divisors(world // (tp * cp), layers):
                if world % (tp * cp * pp):
                    continue
                for stages in _stage_splits(layers, pp):
                    if mds and stages != (None, None, 1):
                        continue
                    for ep, etp in _experts(job, world, tp, pp):
                        lay = ParallelLayout(world=world, gpus_per_node=node, tp=tp, pp=pp, vpp=stages[2], cp=cp,
                                             ep=ep, etp=etp, sequence_parallel=tp > 1,
                                             first_stage_layers=stages[0], last_stage_layers=stages[1])
                        if _same_structure(lay, job.layout):  # the user's own, as written (split flags kept)
                            lay = replace(job.layout, sequence_parallel=lay.sequence_parallel)
                        if lay.problems(arch.num_experts) or not lay.dp:
                            continue
                        # Megatron-DeepSpeed shards with its DeepSpeed config's ZeRO stage: its choice is kept
                        yield lay, (lay.dp * cp > 1 if job.framework == "megatron" else job.distributed_optimizer)


def _same_structure(mine: ParallelLayout, users: ParallelLayout) -> bool:
    """The user's degrees and stage split (a user's layout string stands in for the space's even split)."""
    def degrees(lay: ParallelLayout) -> tuple:
        return lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.expert_tp

    if degrees(mine) != degrees(users):
        return False
    if users.layout_string is not None:
        return mine.first_stage_layers is None
    return (mine.first_stage_layers, mine.last_stage_layers) == (users.first_stage_layers, users.last_stage_layers)


def _stage_splits(layers: int, pp: int) -> Iterator[tuple[int | None, int | None, int]]:
    """(first stage layers, last stage layers, virtual stages per rank)."""
    if pp == 1:
        yield None, None, 1
        return
    if layers % pp == 0:
        per = layers // pp
        for v in _divisors(per):
            yield None, None, v
        if pp > 2 and per > 1 and (layers - 2 * (per - 1)) % (pp - 2) == 0:
            yield per - 1, per - 1, 1
        return
    if pp > 2:  # the lightest edges that leave equal middle stages
        for edge in range(layers // pp, 0, -1):
            middle = layers - 2 * edge
            if middle > 0 and middle % (pp - 2) == 0 and middle // (pp - 2) >= edge:
                yield edge, edge, 1
                return


def _experts(job: TrainingJob, world: int, tp: int, pp: int) -> Iterator[tuple[int, int | None]]:
    experts = job.arch.num_experts
    if not experts:  # a dense model: EP and expert TP mean nothing, so the job's own are kept (no change)
        yield job.layout.ep, job.layout.etp
        return
    for ep in _divisors(experts):
        for etp in sorted({1, tp}):
            if world % (etp * ep * pp) == 0:
                yield ep, etp


def deepspeed_options(job: TrainingJob) -> Iterator[tuple[int, str, str]]:
    """(ZeRO stage, optimizer offload, parameter offload) of the DeepSpeed space."""
    for stage in (0, 1, 2, 3):
        for optimizer in ("none",) if stage == 0 else ("none", "cpu"):
            for param in ("none", "cpu") if stage == 3 and optimizer == "cpu" else ("none",):
                yield stage, optimizer, param
