"""Which DeepSpeed config keys a changed job needs (batch, ZeRO, offload, precision, checkpointing): data only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard.job.edits import Refusal

MBS, GAS, TBS = "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"
ZERO = "zero_optimization"
MISSING = object()


@dataclass(frozen=True)
class KeyChange:
    path: tuple[str, ...]  # ("zero_optimization", "stage")
    value: Any
    field: str  # the job field it writes ("zero_stage", "micro_batch", ...)


@dataclass
class ConfigPlan:
    changes: list[KeyChange]
    refused: list[Refusal]
    notes: list[Refusal]


def config_changes(config: dict, old, new, *, megatron: bool = False, label: str | None = None,
                   locate=None) -> ConfigPlan:
    """The keys to set so that guard reads `new` back. `megatron`: a Megatron-DeepSpeed job's config, whose batch
    and (without a config stage) ZeRO stage come from the command's flags: only keys written there follow.
    `locate(*keys) -> (path, Span)` places what is refused at its key."""
    plan = ConfigPlan([], [], [])
    _batch(plan, config, old, new, megatron, label)
    _zero(plan, config, old, new, megatron)
    _offload(plan, config, old, new)
    _precision(plan, config, old, new, megatron, label)
    if not megatron and (new.recompute, new.recompute_method) != (old.recompute, old.recompute_method):
        # an HF model checkpoints its layers when the Trainer says so; no DeepSpeed key turns it on
        plan.refused.append(Refusal("recompute", "activation checkpointing of a transformers model is the "
                                    "Trainer's: --gradient_checkpointing" + (" on" if new.recompute != "none"
                                                                               else " off") +
                                    " (TrainingArguments(gradient_checkpointing=...)), not a DeepSpeed key"))
    if locate is not None:
        plan.refused = [_located(r, locate) for r in plan.refused]
        plan.notes = [_located(r, locate) for r in plan.notes]
    for attr, key in (("checkpoint_partition", "partition_activations"), ("checkpoint_cpu", "cpu_checkpointing")):
        if getattr(new, attr) != getattr(old, attr):
            plan.changes.append(KeyChange(("activation_checkpointing", key), bool(getattr(new, attr)), attr))
    return plan


# the key each refusal is about, by the job field it names
KEYS = {"micro_batch": (MBS,), "num_microbatches": (GAS,), "global_batch": (TBS,), "params_dtype": ("bf16",)}


def _located(refusal: Refusal, locate) -> Refusal:
    keys = KEYS.get(refusal.field)
    if keys is None:
        return refusal
    path, span = locate(*keys)
    return Refusal(refusal.field, refusal.reason, path, span.line, span.col)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _read_triangle(config: dict, dp: int, cli_micro: int | None) -> tuple[int | None, int]:
    """(micro, accumulation) as DeepSpeed completes the triangle train_batch = micro x accumulation x DP."""
    mbs = cli_micro or _int(config.get(MBS))
    tbs, gas = _int(config.get(TBS)), _int(config.get(GAS))
    if mbs is None and tbs and gas and tbs % (gas * dp) == 0:
        mbs = tbs // (gas * dp)
    if gas is None and tbs and mbs and tbs % (mbs * dp) == 0:
        gas = tbs // (mbs * dp)
    return mbs, gas or 1


def _batch(plan: ConfigPlan, config: dict, old, new, megatron: bool, label: str | None) -> None:
    dp = new.layout.dp if megatron else (new.layout.dp or 1)
    micro, total, accumulation = new.micro_batch, new.global_batch, new.num_microbatches
    if megatron:  # Megatron's global batch decides; the accumulation follows when DP is known
        accumulation = total // (micro * dp) if total and dp and total % (micro * dp) == 0 else None
    else:  # DeepSpeed's triangle: the global batch follows micro x accumulation x DP
        total = micro * accumulation * dp
    before = (old.micro_batch, old.global_batch if megatron else old.num_microbatches, old.layout.dp)
    if (micro, total if megatron else accumulation, new.layout.dp) == before:
        return
    from_cli = not megatron and old.origin("micro_batch").kind == "cli"
    if from_cli and micro != old.micro_batch:
        plan.refused.append(Refusal("micro_batch", "the micro batch comes from the command line (--micro-batch-size,"
                                    " the Trainer's per-device batch), not from this config", label))
    targets = {MBS: None if from_cli else micro, GAS: accumulation, TBS: total}
    olds = {MBS: old.micro_batch, GAS: old.num_microbatches, TBS: old.global_batch}
    fields = {MBS: "micro_batch", GAS: "num_microbatches", TBS: "global_batch"}
    after = dict(config)
    for key, target in targets.items():
        current = config.get(key, MISSING)
        if current is MISSING or target is None:
            continue
        if current == "auto":
            if target != olds[key]:  # the Trainer fills it from its own arguments: they must change instead
                (plan.notes if key == TBS else plan.refused).append(Refusal(
                    fields[key], f'{key} is "auto": left for the HF Trainer to fill in from its arguments', label))
            continue
        if current != target:
            plan.changes.append(KeyChange((key,), target, fields[key]))
            after[key] = target
    if megatron:
        return
    # keys the user left out: add the ones DeepSpeed could not complete the triangle without
    mbs, gas = _read_triangle(after, dp, old.micro_batch if from_cli else None)
    if mbs != micro and not from_cli and config.get(MBS) != "auto":
        plan.changes.append(KeyChange((MBS,), micro, "micro_batch"))
        after[MBS] = micro
        mbs, gas = _read_triangle(after, dp, None)
    if gas != accumulation and config.get(GAS) != "auto":
        plan.changes.append(KeyChange((GAS,), accumulation, "num_microbatches"))


def _zero(plan: ConfigPlan, config: dict, old, new, megatron: bool) -> None:
    if new.zero_stage == old.zero_stage:
        return
    zero = config.get(ZERO)
    if megatron and not (isinstance(zero, dict) and "stage" in zero):
        return  # the command's --zero-stage decides (write_megatron edits it)
    plan.changes.append(KeyChange((ZERO, "stage"), new.zero_stage, "zero_stage"))


def _offload(plan: ConfigPlan, config: dict, old, new) -> None:
    zero = config.get(ZERO) if isinstance(config.get(ZERO), dict) else {}
    for section in ("offload_optimizer", "offload_param"):
        device = getattr(new, section)
        if device == getattr(old, section):
            continue
        current = zero.get(section, MISSING)
        if current is None:  # `"offload_param": null`: the section is replaced by one that names the device
            plan.changes.append(KeyChange((ZERO, section), {"device": device}, section))
        elif isinstance(current, dict) or device != "none":
            plan.changes.append(KeyChange((ZERO, section, "device"), device, section))
        if section == "offload_optimizer" and device == "none" and zero.get("cpu_offload") is True:
            plan.changes.append(KeyChange((ZERO, "cpu_offload"), False, section))  # the pre-0.4 spelling


def _precision(plan: ConfigPlan, config: dict, old, new, megatron: bool, label: str | None) -> None:
    if new.params_dtype == old.params_dtype:
        return
    sections = {"bf16": "bf16" if config.get("bf16") or not config.get("bfloat16") else "bfloat16", "fp16": "fp16"}
    written = {s for s in sections.values() if isinstance(config.get(s), dict) and "enabled" in config[s]}
    if megatron and not written:
        return  # no precision in the config: Megatron-DeepSpeed's --bf16/--fp16 decide
    if new.params_dtype not in ("bf16", "fp16", "fp32"):
        plan.refused.append(Refusal("params_dtype", f"{new.params_dtype} is not a DeepSpeed precision section",
                                    label))
        return
    if any(config[s]["enabled"] == "auto" for s in written):
        plan.refused.append(Refusal("params_dtype", 'bf16/fp16 "enabled" is "auto": the HF Trainer\'s --bf16/--fp16 '
                                    "decide; change them there", label))
        return
    for kind, section in sections.items():
        want = new.params_dtype == kind
        current = config.get(section)
        if want and not (isinstance(current, dict) and current.get("enabled") is True):
            plan.changes.append(KeyChange((section, "enabled"), True, "params_dtype"))
        elif not want and isinstance(current, dict) and current.get("enabled") is True:
            plan.changes.append(KeyChange((section, "enabled"), False, "params_dtype"))
