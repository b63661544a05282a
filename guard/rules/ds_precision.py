"""DS4xx: precision blocks: fp16 vs bf16, the legacy bfloat16 spelling, loss scaling, master weights."""

from __future__ import annotations

from typing import Any

from guard.diagnostic import Related
from guard.rules.context import DsConfig, flag, fmt
from guard.rules.registry import check, rule

BOTH = rule(
    "DS401", "fp16-and-bf16-enabled", "error",
    "fp16 and bf16 are both enabled.",
    what="Reports a config with `fp16.enabled` and `bf16.enabled` (or the legacy `bfloat16`) both true.",
    why="DeepSpeed refuses it: `AssertionError: bfloat16 and fp16 modes cannot be simultaneously "
        "enabled`. Older releases read the string \"false\" as true, so `\"enabled\": \"false\"` "
        "did the same.",
    example='{"fp16": {"enabled": true}, "bf16": {"enabled": true}}',
    use_instead='{"bf16": {"enabled": true}}',
    references=("deepspeed/runtime/config.py: DeepSpeedConfig._do_error_check",
                "https://github.com/huggingface/transformers/issues/39849"),
)

LEGACY_IGNORED = rule(
    "DS402", "bfloat16-block-ignored", "warning",
    "Both `bf16` and the legacy `bfloat16` block are given; `bfloat16` is ignored.",
    what="Reports a legacy `bfloat16` block next to a `bf16` block.",
    why="DeepSpeed reads `bfloat16` only when `bf16` is absent, so every setting in it is dropped "
        "without a word.",
    example='{"bf16": {"enabled": false}, "bfloat16": {"enabled": true}}',
    use_instead='{"bf16": {"enabled": true}}',
    references=("deepspeed/runtime/precision_config.py: get_bfloat16_config",),
)

LOSS_SCALE = rule(
    "DS403", "fp16-loss-scale-invalid", "error",
    "fp16 loss-scaling values that DeepSpeed's validators refuse.",
    what="Checks `fp16.loss_scale >= 0`, and with dynamic loss scaling (`loss_scale: 0`) "
         "`loss_scale_window > 0` and `min_loss_scale > 0`.",
    why="DeepSpeed 0.19 raises 'fp16.loss_scale must be >= 0 (0 enables dynamic loss scaling)', "
        "'fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled (loss_scale=0)' "
        "or 'fp16.min_loss_scale must be > 0 ...'; older releases accepted them and crashed later "
        "with a ZeroDivisionError.",
    example='{"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 0}}',
    use_instead='{"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000}}',
    references=("deepspeed/runtime/precision_config.py: DeepSpeedFP16Config validators",),
)

MASTER_WEIGHTS = rule(
    "DS404", "low-precision-master-weights-unsupported", "error",
    "16-bit master weights or optimizer states without the ZeRO setup they require.",
    what="Reports `fp16.fp16_master_weights_and_grads`, `bf16.bf16_master_weights_and_grads` or "
         "`bf16.bf16_optimizer_states` outside ZeRO stages 1-3, `bf16_optimizer_states` without "
         "`bf16_master_weights_and_grads`, and stage 1/2 without optimizer offload to the CPU.",
    why="DeepSpeed refuses them at start-up: 'Fp16_master_weights_and_grads is only supported with "
        "ZeRO Stage 1, 2, or 3.', 'bf16_optimizer_states requires bf16_master_weights_and_grads to "
        "be enabled.', 'Master weights feature requires ZeRO-Offload with DeepSpeedCPUAdam'.",
    example='{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 0}}',
    use_instead='{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, '
                '"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}',
    references=("deepspeed/runtime/config.py", "deepspeed/runtime/engine.py"),
)

PARAM_DTYPE = rule(
    "DS405", "param-dtype-conflict", "error",
    "`data_types.param_dtype` disagrees with the enabled precision.",
    what="Reports `data_types.param_dtype` naming a dtype other than the one fp16/bf16 enable.",
    why="DeepSpeed raises `data_types.param_dtype='...' conflicts with the enabled precision mode "
        "(model dtype ...). Set the matching fp16/bf16 'enabled' flag or omit data_types.param_dtype.`",
    example='{"bf16": {"enabled": true}, "data_types": {"param_dtype": "fp16"}}',
    use_instead='{"bf16": {"enabled": true}}',
    references=("deepspeed/runtime/engine.py",),
)

_DTYPES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
           "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
           "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32"}


def _on(ctx: DsConfig, *path: str) -> bool:
    """A precision flag as the target reads it: pydantic converts "false" (0.17.1+), get_scalar_param
    before it hands the string on and `if "false":` is true."""
    return flag(ctx.get(*path), False, pydantic=ctx.schema.in_pydantic_section(path))


def _bf16_block(ctx: DsConfig) -> str | None:
    if isinstance(ctx.data.get("bf16"), dict):
        return "bf16"
    return "bfloat16" if isinstance(ctx.data.get("bfloat16"), dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float: bigger than any setting
        return float("inf") if value > 0 else float("-inf")


@check(BOTH, LEGACY_IGNORED)
def both_enabled(ctx: DsConfig) -> None:
    bf = _bf16_block(ctx)
    if "bf16" in ctx.data and "bfloat16" in ctx.data:
        ctx.report(LEGACY_IGNORED, ("bfloat16",), "both 'bf16' and the legacy 'bfloat16' are given: "
                   "DeepSpeed reads only 'bf16' and ignores this block",
                   help="merge the settings into 'bf16' and delete 'bfloat16'",
                   related=[Related("'bf16' is here", ctx.doc.path, ctx.span("bf16"))])
    if bf and _on(ctx, "fp16", "enabled") and _on(ctx, bf, "enabled"):
        ctx.report(BOTH, (bf, "enabled"), "fp16 and bf16 are both enabled: DeepSpeed asserts "
                   "'bfloat16 and fp16 modes cannot be simultaneously enabled'",
                   related=[Related("fp16 is enabled here", ctx.doc.path, ctx.span("fp16", "enabled"))],
                   help="enable one of them (bf16 on Ampere or newer GPUs)")


@check(LOSS_SCALE)
def loss_scale(ctx: DsConfig) -> None:
    fp16 = ctx.section("fp16")
    scale = _number(fp16.get("loss_scale", 0))
    if scale is not None and scale < 0:
        ctx.report(LOSS_SCALE, ("fp16", "loss_scale"), "fp16.loss_scale must be >= 0 (0 enables "
                   "dynamic loss scaling)", at_value=True, help="use 0 for dynamic loss scaling")
    if not _on(ctx, "fp16", "enabled") or scale != 0:
        return
    for key in ("loss_scale_window", "min_loss_scale"):
        value = _number(fp16.get(key))
        if value is not None and value <= 0:
            ctx.report(LOSS_SCALE, ("fp16", key), f"fp16.{key} must be > 0 when dynamic loss scaling "
                       f"is enabled (loss_scale=0); it is {fmt(fp16[key])}", at_value=True,
                       help="DeepSpeed's default is 1000" if key == "loss_scale_window" else "DeepSpeed's default is 1")


@check(MASTER_WEIGHTS)
def master_weights(ctx: DsConfig) -> None:
    stage = ctx.job.zero_stage
    bf = _bf16_block(ctx) or "bf16"
    flags = [(("fp16", "fp16_master_weights_and_grads"), "Fp16_master_weights_and_grads"),
             ((bf, "bf16_master_weights_and_grads"), "Bf16_master_weights_and_grads"),
             ((bf, "bf16_optimizer_states"), "bf16_optimizer_states")]
    device = ctx.offload_device("offload_optimizer")
    for path, name in flags:
        if not _on(ctx, *path):
            continue
        if stage not in (1, 2, 3):
            ctx.report(MASTER_WEIGHTS, path, f"{name} is only supported with ZeRO Stage 1, 2, or 3 "
                       f"(the stage is {stage})", help="use ZeRO stage 1-3 with optimizer offload to cpu")
        elif device not in ("cpu", "auto"):
            ctx.report(MASTER_WEIGHTS, path, f"{name} with ZeRO stage {stage} requires "
                       "zero_optimization.offload_optimizer.device 'cpu' and DeepSpeedCPUAdam: "
                       "'Master weights feature requires ZeRO-Offload with DeepSpeedCPUAdam'",
                       help='set "offload_optimizer": {"device": "cpu"}')
    if _on(ctx, bf, "bf16_optimizer_states") and not _on(ctx, bf, "bf16_master_weights_and_grads"):
        ctx.report(MASTER_WEIGHTS, (bf, "bf16_optimizer_states"), "bf16_optimizer_states requires "
                   "bf16_master_weights_and_grads to be enabled.",
                   help='add "bf16_master_weights_and_grads": true')


@check(PARAM_DTYPE)
def param_dtype(ctx: DsConfig) -> None:
    declared = ctx.get("data_types", "param_dtype")
    if not isinstance(declared, str) or declared.lower() not in _DTYPES:
        return
    bf = _bf16_block(ctx)
    model = "bf16" if bf and _on(ctx, bf, "enabled") else \
        "fp16" if _on(ctx, "fp16", "enabled") else "fp32"
    if _DTYPES[declared.lower()] != model:
        ctx.report(PARAM_DTYPE, ("data_types", "param_dtype"), f"data_types.param_dtype='{declared}' "
                   f"conflicts with the enabled precision mode (model dtype {model})", at_value=True,
                   help="set the matching fp16/bf16 'enabled' flag or omit data_types.param_dtype")
