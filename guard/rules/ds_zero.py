"""DS5xx: ZeRO settings that DeepSpeed refuses, or silently ignores, for the chosen stage."""

from __future__ import annotations

from typing import Any

from guard.diagnostic import Related
from guard.rules.context import DsConfig, flag, fmt
from guard.rules.registry import check, rule

Z = "zero_optimization"

PRESCALE = rule(
    "DS501", "prescale-with-reduce-scatter", "error",
    "Gradient pre-scaling or pre-division with ZeRO-2/3 reduce-scatter.",
    what="Reports `prescale_gradients: true` or `gradient_predivide_factor` other than 1.0 with ZeRO "
         "stage 2 or 3 while `reduce_scatter` is on (its default).",
    why="The engine refuses both at start-up: 'pre-scale gradients is not yet supported with ZeRO-2 "
        "with reduce scatter enabled' and 'gradient_predivide_factor != 1.0 is not yet supported "
        "with ZeRO-2 with reduce scatter enabled' (ZeRO-3 likewise).",
    example='{"prescale_gradients": true, "zero_optimization": {"stage": 2}}',
    use_instead='{"zero_optimization": {"stage": 2}}',
    references=("deepspeed/runtime/engine.py: DeepSpeedEngine._configure_zero_optimizer",),
)

ALLREDUCE_SUM = rule(
    "DS502", "allreduce-sum-with-zero3", "error",
    '`gradient_allreduce_op: "sum"` with ZeRO-3.',
    what='Reports `gradient_allreduce_op: "sum"` together with ZeRO stage 3.',
    why="DeepSpeed raises `ValueError: gradient_allreduce_op='sum' is not supported with ZeRO stage 3`.",
    example='{"gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}}',
    use_instead='{"zero_optimization": {"stage": 3}}',
    references=("deepspeed/runtime/config.py",),
)

Z3_SAVE = rule(
    "DS503", "zero3-save-not-gathered", "info",
    "ZeRO-3 under the HF Trainer/accelerate without gathering 16-bit weights on save.",
    what="In the HF/accelerate context, reports ZeRO-3 without "
         "`stage3_gather_16bit_weights_on_model_save: true` (\"auto\" is filled with false).",
    why="`trainer.save_model()` then saves no loadable model: transformers logs 'Saving the full "
        "checkpoint instead, use zero_to_fp32.py to recover weights' and writes the sharded ZeRO "
        "checkpoint, which needs a conversion before `from_pretrained`. It is said in the log and "
        "the weights are kept, so this is advice (info); programs that save through their own "
        "gathering code are not affected.",
    example='{"zero_optimization": {"stage": 3}, "train_batch_size": "auto"}',
    use_instead='{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}, '
                '"train_batch_size": "auto"}',
    references=("https://github.com/deepspeedai/DeepSpeed/issues/3841",
                "https://github.com/hiyouga/LlamaFactory/issues/253",
                "https://github.com/lm-sys/FastChat/issues/508"),
)

OFFLOAD_PARAM_IGNORED = rule(
    "DS504", "offload-param-ignored", "warning",
    "`offload_param` with ZeRO stage 0-2, where it does nothing.",
    what="Reports a parameter offload device other than none with ZeRO stage below 3.",
    why="Only the stage-3 optimizer reads `offload_param`; with stage 1 or 2 the parameters stay on "
        "the GPU while the config suggests otherwise, and the job may OOM.",
    example='{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}',
    use_instead='{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}',
    references=("https://github.com/Lightning-AI/pytorch-lightning/issues/18134",),
)

NVME_PATH = rule(
    "DS505", "nvme-offload-without-path", "error",
    "NVMe offload without `nvme_path`.",
    what='Reports `"device": "nvme"` in `offload_param` or `offload_optimizer` without `nvme_path`.',
    why="ZeRO-Infinity asserts '\"nvme_path\" in DeepSpeed Config cannot be None if remote device "
        "is nvme'.",
    example='{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}',
    use_instead='{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}}}',
    references=("deepspeed/runtime/zero/partition_parameters.py",),
)

PARTIAL_OFFLOAD = rule(
    "DS506", "partial-offload-needs-zero3", "error",
    "`offload_optimizer.ratio` below 1.0 without ZeRO-3.",
    what="Reports partial optimizer offload (`ratio < 1`) with a stage other than 3.",
    why="DeepSpeed asserts 'Partial offloading only supported for ZeRO Stage 3.'",
    example='{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}}',
    use_instead='{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}}',
    references=("deepspeed/runtime/zero/config.py: offload_ratio_check",),
)

GRAD_NORM = rule(
    "DS508", "compute-grad-norm-off-unsupported", "error",
    "`compute_grad_norm: false` in a combination DeepSpeed refuses.",
    what="Reports `compute_grad_norm: false` with a stage other than 1 or 2, with optimizer offload, "
         "or with gradient clipping on (the default `gradient_clipping` is 1.0 since 0.19.3).",
    why="DeepSpeed raises 'compute_grad_norm=false is supported only with ZeRO Stage 1 or 2', "
        "'zero_optimization.compute_grad_norm=false does not support optimizer offload' or "
        "'zero_optimization.compute_grad_norm=false requires gradient_clipping=0'.",
    example='{"zero_optimization": {"stage": 2, "compute_grad_norm": false}}',
    use_instead='{"gradient_clipping": 0.0, "zero_optimization": {"stage": 2, "compute_grad_norm": false}}',
    references=("deepspeed/runtime/zero/config.py", "deepspeed/runtime/zero/stage_1_and_2.py"),
)

STAGE3_KEYS = rule(
    "DS509", "stage3-keys-ignored", "warning",
    "ZeRO-3 tuning keys set while the stage is below 3.",
    what="Reports `stage3_*` knobs (prefetch, persistence, live parameters, reuse distance, ...) and "
         "`sub_group_size` with ZeRO stage 0-2.",
    why="Only ZeRO-3 reads them, so the config suggests tuning that never happens; usually a sign "
        "that the stage was lowered from 3 and the config not cleaned up.",
    example='{"zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e9}}',
    use_instead='{"zero_optimization": {"stage": 2}}',
    references=("https://github.com/Lightning-AI/pytorch-lightning/issues/18134",),
)

MOE = rule(
    "DS510", "moe-zero-constraint", "error",
    "Expert parallelism (AutoEP `expert_parallel`) combined with ZeRO settings it does not support.",
    what="With an `expert_parallel` section: ZeRO-3 with `zero_quantized_gradients`, "
         "`zero_hpz_partition_size` > 1 or `expert_tensor_parallel_size` > 1, and ZeRO-2 with "
         "`contiguous_gradients` or `reduce_scatter` turned off.",
    why="The engine refuses them: 'Contiguous Gradients in ZeRO Stage 2 must be set to True for "
        "MoE', 'Reduce Scatter in ZeRO Stage 2 must be set to True for MoE', and AutoEP's ZeRO-3 "
        "restrictions.",
    example='{"expert_parallel": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_scatter": false}}',
    use_instead='{"expert_parallel": {"enabled": true}, "zero_optimization": {"stage": 2}}',
    references=("deepspeed/runtime/engine.py", "deepspeed/runtime/zero/stage_1_and_2.py"),
)

MANAGED_GAS = rule(
    "DS511", "unmanaged-accumulation-overlap", "error",
    "`managed_gradient_accumulation: false` with overlapped communication below ZeRO-2.",
    what="Reports `managed_gradient_accumulation: false` with `overlap_comm: true` and ZeRO stage 0 or 1.",
    why="The engine asserts `zero_optimization_partition_gradients() or not zero_overlap_comm()` "
        "with the message 'managed_gradient_accumulation=False supports ZeRO overlap_comm only "
        "with ZeRO stage 2' (stage 3 partitions gradients too, so it passes).",
    example='{"managed_gradient_accumulation": false, "zero_optimization": {"stage": 1, "overlap_comm": true}}',
    use_instead='{"managed_gradient_accumulation": false, "zero_optimization": {"stage": 1}}',
    references=("deepspeed/runtime/engine.py: DeepSpeedEngine._do_sanity_check",),
)

_STAGE3_ONLY = ("stage3_prefetch_bucket_size", "prefetch_bucket_size", "stage3_param_persistence_threshold",
                "param_persistence_threshold", "stage3_model_persistence_threshold",
                "model_persistence_threshold", "stage3_max_live_parameters", "max_live_parameters",
                "stage3_max_reuse_distance", "max_reuse_distance", "sub_group_size",
                "stage3_module_granularity_threshold", "module_granularity_threshold")


def _zero(ctx: DsConfig) -> dict[str, Any]:
    return ctx.section(Z)


@check(PRESCALE)
def prescale(ctx: DsConfig) -> None:
    stage = ctx.job.zero_stage
    if stage < 2 or not flag(_zero(ctx).get("reduce_scatter"), True):
        return
    if flag(ctx.get("prescale_gradients"), False, pydantic=False):
        ctx.report(PRESCALE, ("prescale_gradients",), f"pre-scale gradients is not yet supported with "
                   f"ZeRO-{stage} with reduce scatter enabled", help="remove prescale_gradients")
    factor = ctx.get("gradient_predivide_factor")
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor != 1.0:
        ctx.report(PRESCALE, ("gradient_predivide_factor",), f"gradient_predivide_factor != 1.0 is not "
                   f"yet supported with ZeRO-{stage} with reduce scatter enabled (it is {fmt(factor)})",
                   help="remove gradient_predivide_factor")


@check(ALLREDUCE_SUM)
def allreduce_sum(ctx: DsConfig) -> None:
    op = ctx.get("gradient_allreduce_op")
    if ctx.job.zero_stage == 3 and isinstance(op, str) and op.strip().lower() == "sum":
        ctx.report(ALLREDUCE_SUM, ("gradient_allreduce_op",), "gradient_allreduce_op='sum' is not "
                   "supported with ZeRO stage 3", at_value=True, help='use "mean" (the default)')


@check(Z3_SAVE)
def zero3_save(ctx: DsConfig) -> None:
    if not ctx.is_hf or ctx.job.zero_stage != 3:
        return
    zero = _zero(ctx)
    key = "stage3_gather_16bit_weights_on_model_save" if "stage3_gather_16bit_weights_on_model_save" in zero \
        else ctx.written_key(Z, "gather_16bit_weights_on_model_save")  # the deprecated stage3_gather_fp16_* too
    if key and flag(zero[key], False):
        return
    state = f"'{key}' is {fmt(zero[key])}" if key else "'stage3_gather_16bit_weights_on_model_save' is not set"
    ctx.report(Z3_SAVE, (Z, key) if key else (Z, "stage"), f"ZeRO-3 with HF saving: {state}, so "
               "save_model() writes only the sharded ZeRO checkpoint (convert it with zero_to_fp32.py)",
               help='set "stage3_gather_16bit_weights_on_model_save": true (or use zero_to_fp32.py)')


@check(OFFLOAD_PARAM_IGNORED, NVME_PATH, PARTIAL_OFFLOAD)
def offload(ctx: DsConfig) -> None:
    zero, stage = _zero(ctx), ctx.job.zero_stage
    for block in ("offload_param", "offload_optimizer"):
        conf, device = zero.get(block), ctx.offload_device(block)
        if not isinstance(conf, dict):
            if device == "cpu" and block == "offload_param" and stage < 3:  # cpu_offload_param: true
                ctx.report(OFFLOAD_PARAM_IGNORED, (Z, ctx.written_key(Z, block)), "cpu_offload_param (offload_param "
                           f"to cpu) only works with ZeRO stage 3; with stage {stage} it is silently ignored",
                           help="use stage 3, or remove cpu_offload_param")
            continue
        if device == "nvme" and not conf.get("nvme_path"):
            ctx.report(NVME_PATH, (Z, block, "device"), f'{block}.device is "nvme" but nvme_path is not '
                       "set: '\"nvme_path\" in DeepSpeed Config cannot be None if remote device is nvme'",
                       help="add nvme_path pointing at a local NVMe mount")
        if block == "offload_param" and device in ("cpu", "nvme") and stage < 3:
            ctx.report(OFFLOAD_PARAM_IGNORED, (Z, block), f"offload_param (device {fmt(device)}) only "
                       f"works with ZeRO stage 3; with stage {stage} it is silently ignored",
                       help="use stage 3, or remove offload_param")
        ratio = conf.get("ratio")
        if (block == "offload_optimizer" and isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
                and ratio < 1.0 and stage != 3):
            ctx.report(PARTIAL_OFFLOAD, (Z, block, "ratio"), "Partial offloading only supported for "
                       f"ZeRO Stage 3 (ratio {fmt(ratio)}, stage {stage})", at_value=True,
                       help="use stage 3, or set ratio to 1.0")


@check(GRAD_NORM)
def compute_grad_norm(ctx: DsConfig) -> None:
    zero = _zero(ctx)
    if flag(zero.get("compute_grad_norm"), True):
        return
    at = (Z, "compute_grad_norm")
    if ctx.job.zero_stage not in (1, 2):
        ctx.report(GRAD_NORM, at, f"compute_grad_norm=false is supported only with ZeRO Stage 1 or 2 "
                   f"(the stage is {ctx.job.zero_stage})", help="remove compute_grad_norm")
        return
    if ctx.offload_device("offload_optimizer") in ("cpu", "nvme"):
        ctx.report(GRAD_NORM, at, "zero_optimization.compute_grad_norm=false does not support "
                   "optimizer offload", help="remove compute_grad_norm or the offload")
    clip = ctx.get("gradient_clipping", default=1.0 if ctx.version >= (0, 19, 3) else 0.0)
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip != 0:
        why = "" if ctx.has("gradient_clipping") else " (gradient_clipping defaults to 1.0 since DeepSpeed 0.19.3)"
        ctx.report(GRAD_NORM, at, f"zero_optimization.compute_grad_norm=false requires "
                   f"gradient_clipping=0{why}", help='set "gradient_clipping": 0.0')


@check(STAGE3_KEYS)
def stage3_keys(ctx: DsConfig) -> None:
    if ctx.job.zero_stage >= 3:
        return
    for key in _STAGE3_ONLY:
        if key in _zero(ctx):
            ctx.report(STAGE3_KEYS, (Z, key), f"'{key}' only applies to ZeRO stage 3; with stage "
                       f"{ctx.job.zero_stage} it is ignored", help=f"remove '{key}'")


@check(MOE)
def moe(ctx: DsConfig) -> None:
    if not isinstance(ctx.data.get("expert_parallel"), dict):
        return
    zero, stage = _zero(ctx), ctx.job.zero_stage
    if stage == 2:
        for key in ("contiguous_gradients", "reduce_scatter"):
            if not flag(zero.get(key), True):
                name = "Contiguous Gradients" if key == "contiguous_gradients" else "Reduce Scatter"
                ctx.report(MOE, (Z, key), f"{name} in ZeRO Stage 2 must be set to True for MoE",
                           at_value=True, help=f"remove '{key}: false'")
    if stage == 3:
        checks = [((Z, "zero_quantized_gradients"), lambda v: flag(v, False), "zero_quantized_gradients"),
                  ((Z, "zero_hpz_partition_size"), lambda v: isinstance(v, int) and v > 1,
                   "zero_hpz_partition_size must be 1"),
                  (("expert_parallel", "expert_tensor_parallel_size"), lambda v: isinstance(v, int) and v > 1,
                   "expert_tensor_parallel_size must be 1")]
        for path, bad, what in checks:
            if bad(ctx.get(*path)):
                ctx.report(MOE, path, f"AutoEP with ZeRO-3 does not support {what}", at_value=True,
                           help="remove it, or use ZeRO stage 1/2 for the MoE model")


@check(MANAGED_GAS)
def managed_accumulation(ctx: DsConfig) -> None:
    if flag(ctx.get("managed_gradient_accumulation"), True, pydantic=False):
        return
    stage = ctx.job.zero_stage
    # overlap_comm defaults to true only for stage 3, which partitions gradients and passes.
    if stage < 2 and flag(_zero(ctx).get("overlap_comm"), False):
        ctx.report(MANAGED_GAS, ("managed_gradient_accumulation",), "managed_gradient_accumulation="
                   f"False supports ZeRO overlap_comm only with ZeRO stage 2 (stage {stage} with "
                   "overlap_comm on)", related=[Related("overlap_comm", ctx.doc.path,
                                                        ctx.span(Z, "overlap_comm"))],
                   help='set "overlap_comm": false, or use stage 2 or 3')
