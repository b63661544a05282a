"""Values DeepSpeed itself derives from a config, read once: the ZeRO stage and the batch triangle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ASSERTION = ("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
             "gradient_acc_step * world_size")
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def zero_stage(config: dict[str, Any]) -> tuple[int, str]:
    """(stage, why it is not a stage DeepSpeed runs: "" when it is).

    runtime/zero/config.py get_zero_config: a boolean `zero_optimization` is the deprecated form, true meaning
    stage 1 (read_zero_config_deprecated); a section without `stage` is stage 0; pydantic's lax mode takes
    true/false, 2.0, "2" and " 3" for the stage (checked against DeepSpeedZeroConfig), "auto" as the default."""
    zero = config.get("zero_optimization")
    if isinstance(zero, bool):
        return int(zero), ""
    if not isinstance(zero, dict):
        return 0, ""
    stage = zero.get("stage", 0)
    if isinstance(stage, str):
        text = stage.strip()
        if text == "auto":
            return 0, ""
        try:
            stage = float(text)
        except ValueError:
            return 0, f"zero_optimization.stage must be 0-3, got {zero.get('stage')!r}"
    # compared as numbers, never converted: a huge integer (10**400) has no float
    if isinstance(stage, (bool, int, float)) and stage in (0, 1, 2, 3):
        return int(stage), ""
    return 0, f"zero_optimization.stage must be 0-3, got {zero.get('stage')!r}"


def count(value: Any) -> int | None:
    """A positive batch number as DeepSpeed reads it (hjson turns an integral float, 3.2e1, into an int)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class Batch:
    """The triangle after DeepSpeed's derivation (config.py _set_batch_related_parameters, _batch_assertion)."""

    train: int | None
    micro: int | None
    accumulation: int | None
    derived: str | None = None  # the key DeepSpeed computed (None: all three were given, or none could be)
    problem: str = ""  # what DeepSpeed asserts (""): the job does not start


def derive(train: int | None, micro: int | None, accumulation: int | None, dp: int) -> Batch:
    """DeepSpeed's floor divisions for the missing keys on `dp` data-parallel ranks, then its assertions."""
    derived = None
    if train and micro and accumulation:
        pass
    elif train and micro:
        accumulation, derived = train // micro // dp, "gradient_accumulation_steps"
    elif train and accumulation:
        micro, derived = train // dp // accumulation, "train_micro_batch_size_per_gpu"
    elif micro and accumulation:
        train, derived = micro * accumulation * dp, "train_batch_size"
    elif train:
        accumulation, micro, derived = 1, train // dp, "train_micro_batch_size_per_gpu"
    elif micro:
        train, accumulation, derived = micro * dp, 1, "train_batch_size"
    else:
        return Batch(train, micro, accumulation, None, "Either train_batch_size or train_micro_batch_size_per_gpu "
                                                        "needs to be provided")
    for value, what in ((train, "Train batch size"), (micro, "Micro batch size per gpu"),
                        (accumulation, "Gradient accumulation steps")):
        if value <= 0:
            return Batch(train, micro, accumulation, derived, f"{what}: {value} has to be greater than 0")
    if train != micro * accumulation * dp:
        return Batch(train, micro, accumulation, derived,
                     f"{ASSERTION} {train} != {micro} * {accumulation} * {dp}")
    return Batch(train, micro, accumulation, derived)


def cpu_optimizer_forced(config: dict) -> bool:
    """The optimizer offloaded to the CPU with no `optimizer` section and zero_force_ds_cpu_optimizer left true:
    accelerate's _prepare_deepspeed swaps the Trainer's optimizer for DeepSpeedCPUAdam
    (utils/deepspeed.py map_pytorch_optim_to_deepspeed)."""
    zero = config.get("zero_optimization")
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    return isinstance(offload, dict) and str(offload.get("device", "none")).lower() not in ("none", "") \
        and "optimizer" not in config and config.get("zero_force_ds_cpu_optimizer", True) is not False
