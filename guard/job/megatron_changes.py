"""Which Megatron flags a changed job needs (layout, batch, recompute, precision, sharding): data only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guard.job.edits import Refusal
from guard.megatron.flag_table import FlagTable

REMOVE = None  # FlagChange.value: the flag must not be on the command line


@dataclass(frozen=True)
class FlagChange:
    field: str  # the job field it writes ("layout.tp", "recompute", ...)
    dest: str  # argparse dest of the flag
    value: Any  # int/str: the value to write; True: the switch on; REMOVE: the flag off


class _Plan:
    def __init__(self, table: FlagTable, given: Callable[[str], bool]):
        self.table, self.given = table, given
        self.changes: list[FlagChange] = []
        self.refused: list[Refusal] = []
        self.mds = table.flavour == "megatron-deepspeed"

    def put(self, field: str, dest: str, value: Any) -> None:
        if dest not in self.table.by_dest:
            option = "--" + dest.replace("_", "-")
            self.refused.append(Refusal(field, f"{self.table.ref} has no {option}: this change cannot be written "
                                        "for this Megatron version"))
        elif value is not REMOVE or self.given(dest):
            self.changes.append(FlagChange(field, dest, value))

    def refuse(self, field: str, reason: str) -> None:
        self.refused.append(Refusal(field, reason))


def flag_changes(old, new, table: FlagTable, given: Callable[[str], bool], num_layers: int | None = None,
                 config: dict | None = None) -> tuple[list[FlagChange], list[Refusal]]:
    """The flags to set or remove so that guard reads `new` where it read `old`. `given(dest)`: whether the
    user wrote that flag (it picks the spelling to edit); `config`: a Megatron-DeepSpeed job's DeepSpeed config."""
    plan = _Plan(table, given)
    _layout(plan, old.layout, new.layout, num_layers, bool(new.arch and new.arch.num_experts))
    if new.micro_batch != old.micro_batch:
        plan.put("micro_batch", "micro_batch_size", new.micro_batch)
    implied = new.micro_batch * new.layout.dp if new.layout.dp else None
    if new.global_batch is not None and (new.global_batch != old.global_batch if given("global_batch_size")
                                         else new.global_batch != implied):
        plan.put("global_batch", "global_batch_size", new.global_batch)
    _precision(plan, old, new)
    _recompute(plan, old, new)
    _sharding(plan, old, new, config)
    return plan.changes, plan.refused


def _layout(plan: _Plan, old, new, num_layers: int | None, experts: bool = True) -> None:
    ep = "moe_expert_parallel_size" if plan.mds else "expert_model_parallel_size"
    for attr, dest in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                       ("cp", "context_parallel_size"), ("ep", ep), ("ulysses", "ds_sequence_parallel_size")):
        if getattr(new, attr) != getattr(old, attr) and getattr(new, attr) is not None:
            plan.put(f"layout.{attr}", dest, getattr(new, attr))
    for attr, dest in (("first_stage_layers", "decoder_first_pipeline_num_layers"),
                       ("last_stage_layers", "decoder_last_pipeline_num_layers")):
        if getattr(new, attr) != getattr(old, attr):
            plan.put(f"layout.{attr}", dest, getattr(new, attr))  # None: REMOVE (the even split)
    if new.etp != old.etp and experts:  # a dense model has no expert TP to write
        if plan.mds:
            plan.refuse("layout.etp", "Megatron-DeepSpeed's expert TP follows TP (--enable-expert-tensor-"
                        "parallelism) or is 1: it has no flag of its own")
        else:
            plan.put("layout.etp", "expert_tensor_parallel_size", REMOVE if new.etp is None else new.etp)
    # guard reads SP as the flag and TP > 1: a flag left under TP 1 is harmless, under TP > 1 it must match
    if new.sequence_parallel and not plan.given("sequence_parallel"):
        plan.put("layout.sequence_parallel", "sequence_parallel", True)
    elif not new.sequence_parallel and (new.tp or 1) > 1:
        plan.put("layout.sequence_parallel", "sequence_parallel", REMOVE)
    if new.vpp != old.vpp or (new.pp != old.pp and plan.given("num_layers_per_virtual_pipeline_stage")):
        _vpp(plan, new, num_layers)


def _vpp(plan: _Plan, new, num_layers: int | None) -> None:
    """Virtual stages as the user wrote them: per pipeline rank, or layers per virtual stage (recomputed)."""
    per_rank, per_stage = "num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage"
    if plan.given(per_rank) or (not plan.given(per_stage) and per_rank in plan.table.by_dest):
        if new.vpp > 1 or plan.given(per_rank):
            plan.put("layout.vpp", per_rank, new.vpp)
        return
    if new.vpp == 1:
        plan.put("layout.vpp", per_stage, REMOVE)
        return
    total = (num_layers or 0) + int(new.account_embedding) + int(new.account_loss)
    per_pp = total // (new.pp or 1)
    layers = per_pp // new.vpp
    if not num_layers or layers < 1 or per_pp // layers != new.vpp:
        plan.refuse("layout.vpp", f"{new.vpp} virtual stages cannot be written as layers per virtual stage "
                    f"({num_layers or 'unknown'} layers over PP {new.pp})")
        return
    plan.put("layout.vpp", per_stage, layers)


def _precision(plan: _Plan, old, new) -> None:
    if new.params_dtype == old.params_dtype:
        return
    if new.params_dtype not in ("bf16", "fp16", "fp32"):
        plan.refuse("params_dtype", f"{new.params_dtype} is not a Megatron training precision (--bf16/--fp16)")
        return
    for dest in ("bf16", "fp16"):
        plan.put("params_dtype", dest, True if new.params_dtype == dest else REMOVE)


def _recompute(plan: _Plan, old, new) -> None:
    full = (new.recompute_method, new.recompute_num_layers)
    if new.recompute == old.recompute and (new.recompute != "full" or full ==
                                           (old.recompute_method, old.recompute_num_layers)):
        return
    if new.recompute not in ("none", "selective", "full"):
        plan.refuse("recompute", f"unknown recompute granularity {new.recompute!r}")
        return
    legacy = ("checkpoint_activations", "deepspeed_activation_checkpointing") if plan.mds else ()
    if new.recompute == "none":
        _remove_known(plan, "recompute_granularity", "recompute_method", "recompute_num_layers",
                      "recompute_activations", *legacy)
        return
    if new.recompute == "selective":
        plan.put("recompute", "recompute_granularity", "selective")
        _remove_known(plan, "recompute_method", "recompute_num_layers", *legacy)  # refused with selective
        return
    if plan.mds and not plan.given("recompute_granularity"):
        plan.put("recompute", "checkpoint_activations", True)  # Megatron-DeepSpeed's spelling of full recompute
    else:
        plan.put("recompute", "recompute_granularity", "full")
    # megatron-core's TransformerConfig needs both with full granularity; Megatron-DeepSpeed defaults them
    for dest, value, fallback in (("recompute_method", new.recompute_method, "uniform"),
                                  ("recompute_num_layers", new.recompute_num_layers, 1)):
        if not plan.mds or plan.given(dest) or value != fallback:
            plan.put("recompute", dest, value)
    if plan.mds and plan.given("checkpoint_num_layers"):
        plan.put("recompute", "checkpoint_num_layers", new.recompute_num_layers)


def _remove_known(plan: _Plan, *dests: str) -> None:
    for dest in dests:
        if dest in plan.table.by_dest:
            plan.put("recompute", dest, REMOVE)


def _sharding(plan: _Plan, old, new, config: dict | None) -> None:
    if new.distributed_optimizer != old.distributed_optimizer:
        if plan.mds and new.distributed_optimizer:
            plan.refuse("distributed_optimizer", "Megatron-DeepSpeed shards the optimizer with ZeRO "
                        "(zero_stage), not --use-distributed-optimizer")
        else:
            plan.put("distributed_optimizer", "use_distributed_optimizer", True if new.distributed_optimizer
                     else REMOVE)
    if new.zero_stage != old.zero_stage:
        zero = (config or {}).get("zero_optimization")
        in_config = isinstance(zero, dict) and "stage" in zero
        if not plan.mds:
            plan.refuse("zero_stage", "Megatron-LM has no ZeRO stage: shard with the distributed optimizer")
        elif plan.given("zero_stage") or not in_config:  # keep the flag in step with the config's stage
            plan.put("zero_stage", "zero_stage", new.zero_stage)
    for attr in ("offload_optimizer", "offload_param", "checkpoint_partition", "checkpoint_cpu"):
        if getattr(new, attr) != getattr(old, attr) and (not plan.mds or config is None):
            plan.refuse(attr, "written in a DeepSpeed config, and this job has none guard can edit"
                        if plan.mds else "Megatron-LM's offload is not a setting guard writes")
