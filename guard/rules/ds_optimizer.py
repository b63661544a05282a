"""DS601-DS603, DS608-DS611, DS507: the optimizer DeepSpeed builds from the config (or is handed), against ZeRO."""

from __future__ import annotations

from guard.rules.context import DsConfig, flag, fmt
from guard.rules.ds_classes import (
    DATA,
    accepted_keys,
    class_names,
    load_classes,
    resolve_optimizer,
    section_params,
    table,
    written_optimizer,
)
from guard.rules.registry import check, rule
from guard.suggest import did_you_mean

ZERO = "zero_optimization"

ENGINE = "deepspeed/runtime/engine.py: DeepSpeedEngine._configure_basic_optimizer"
SANITY = "deepspeed/runtime/engine.py: DeepSpeedEngine._do_sanity_check"

# 1-bit Adam, 0/1 Adam and 1-bit LAMB: DeepSpeed names (lower-cased) -> the engine's ZeRO assertion
# in the releases that still had them. 0.19.8's DEEPSPEED_OPTIMIZERS no longer lists them.
ONEBIT = {"onebitadam": "1bit-Adam is not compatible with ZeRO",
          "zerooneadam": "0/1 Adam is not compatible with ZeRO",
          "onebitlamb": "1bit-Lamb is not compatible with ZeRO"}
ONEBIT_REMOVED_IN = (0, 19, 8)

UNKNOWN_OPTIMIZER = rule(
    "DS601", "unknown-optimizer-type", "error",
    "`optimizer.type` is neither a DeepSpeed optimizer nor a `torch.optim` class.",
    what="Reports an `optimizer.type` that DeepSpeed cannot build. DeepSpeed's own names (`adam`, "
         "`adamw`, `lamb`, `lion`, `adagrad`, `muon`, ...) are matched case-insensitively; any other "
         "name must be the exact, case-sensitive name of a `torch.optim` class. Suggests the closest "
         "name.",
    why="The engine asserts at `deepspeed.initialize`: `AssertionError: <type> is not a supported "
        "DeepSpeed Optimizer`. `\"sgd\"` or `\"adamW8bit\"` look plausible but only `\"SGD\"` exists in "
        "torch.optim, and third-party optimizers must be passed in code, not named in the config.",
    example='{"optimizer": {"type": "sgd", "params": {"lr": 0.01}}}',
    use_instead='{"optimizer": {"type": "SGD", "params": {"lr": 0.01}}}',
    references=(SANITY, "deepspeed/runtime/config.py: DEEPSPEED_OPTIMIZERS", DATA),
)

MAX_GRAD_NORM = rule(
    "DS602", "max-grad-norm-in-optimizer-params", "error",
    "`max_grad_norm` inside `optimizer.params` instead of top-level `gradient_clipping`.",
    what="Reports `optimizer.params.max_grad_norm`.",
    why="DeepSpeed clips gradients itself and refuses the key before it builds the optimizer "
        "(every release since v0.3.0): `ValueError: 'max_grad_norm' is not supported as an optimizer "
        "parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: "
        "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details`.",
    example='{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}}',
    use_instead='{"gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}',
    references=(ENGINE, "https://www.deepspeed.ai/docs/config-json/#gradient-clipping"),
)

UNKNOWN_OPTIMIZER_PARAM = rule(
    "DS603", "unknown-optimizer-param", "error",
    "An `optimizer.params` key that the optimizer class DeepSpeed builds does not accept.",
    what="Works out which class DeepSpeed builds for `optimizer.type` (FusedAdam, DeepSpeedCPUAdam "
         "with optimizer offload, torch Adam/AdamW with `torch_adam`, FusedLamb, FusedLion, "
         "torch.optim classes, ...) and reports params keys that its constructor does not take, "
         "apart from the keys DeepSpeed consumes itself (`torch_adam`, `adam_w_mode`, "
         "`fp32_optimizer_states` for adam/adamw). Suggests the closest parameter.",
    why="DeepSpeed passes `params` as keyword arguments, so the launch fails with `TypeError: "
        "__init__() got an unexpected keyword argument '<key>'` — typically `momentum` for Adam, "
        "`beta1`/`beta2` instead of `betas`, or `adamw_mode` (DeepSpeed's key is `adam_w_mode`).",
    example='{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "beta1": 0.9, "beta2": 0.95}}}',
    use_instead='{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95]}}}',
    references=(ENGINE, "deepspeed/runtime/engine.py: DeepSpeedEngine.get_optimizer_configuration", DATA),
)


LAMB_STATIC_SCALE = rule(
    "DS608", "lamb-static-loss-scale", "error",
    "The `lamb` optimizer with a static fp16 `loss_scale`.",
    what="Reports `optimizer.type` `lamb` together with a non-zero `fp16.loss_scale`.",
    why="DeepSpeed's LAMB needs dynamic loss scaling and the engine asserts: `AssertionError: "
        "DeepSpeed lamb optimizer requires dynamic loss scaling`. The check reads `loss_scale == 0`, "
        "whatever `fp16.enabled` says.",
    example='{"optimizer": {"type": "Lamb"}, "fp16": {"enabled": true, "loss_scale": 128}}',
    use_instead='{"optimizer": {"type": "Lamb"}, "fp16": {"enabled": true, "loss_scale": 0}}',
    references=(SANITY,),
)

UNTESTED_ZERO = rule(
    "DS609", "untested-zero-optimizer", "error",
    "ZeRO with an optimizer DeepSpeed has not tested, without `zero_allow_untested_optimizer`.",
    what="With ZeRO stage >= 1, reports an `optimizer.type` whose built class is not in "
         "DeepSpeed's `ZERO_SUPPORTED_OPTIMIZERS` (FusedAdam, DeepSpeedCPUAdam, torch Adam/AdamW/"
         "Adagrad, DeepSpeedCPUAdagrad, FusedLion/DeepSpeedCPULion, Muon) — `SGD`, `lamb`, "
         "`RMSprop`, ... — unless `zero_allow_untested_optimizer` is true.",
    why="The engine asserts: `You are using an untested ZeRO Optimizer. Please add "
        "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.` The HF "
        "Trainer and accelerate set the flag only when the optimizer is created in code; an "
        "optimizer named in the config is built by DeepSpeed and hits the assertion in every context.",
    example='{"zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}',
    use_instead='{"zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": true,\n'
                ' "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}',
    references=("deepspeed/runtime/engine.py: DeepSpeedEngine._do_optimizer_sanity_check",
                "deepspeed/runtime/zero/utils.py: ZERO_SUPPORTED_OPTIMIZERS", DATA),
)

ONEBIT_WITH_ZERO = rule(
    "DS610", "onebit-optimizer-with-zero", "error",
    "1-bit Adam, 0/1 Adam or 1-bit LAMB combined with ZeRO (DeepSpeed < 0.19.8).",
    what="For a target DeepSpeed older than 0.19.8, reports `OneBitAdam`, `ZeroOneAdam` or "
         "`OneBitLamb` with ZeRO stage >= 1.",
    why="The engine asserts `1bit-Adam is not compatible with ZeRO`, `0/1 Adam is not compatible "
        "with ZeRO` or `1bit-Lamb is not compatible with ZeRO`: the compressed-communication "
        "optimizers do their own allreduce, which ZeRO's partitioned gradients replace.",
    example='{"zero_optimization": {"stage": 3}, "optimizer": {"type": "ZeroOneAdam", "params": {"lr": 1e-4}}}',
    use_instead='{"zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}',
    references=(ENGINE + " (releases that still had them, e.g. 0.19.6)",
                "https://github.com/OpenGVLab/InternVL/blob/2410d1dbf208f0e799459aff9376e5747dbf41a2/"
                "segmentation/zero_configs/adam_zero3_fp16.json"),
)

ONEBIT_REMOVED = rule(
    "DS611", "onebit-optimizer-removed", "error",
    "1-bit Adam, 0/1 Adam and 1-bit LAMB are no longer DeepSpeed optimizers (0.19.8).",
    what="For a target DeepSpeed 0.19.8 or newer, reports `optimizer.type` `OneBitAdam`, "
         "`ZeroOneAdam` or `OneBitLamb` (any case).",
    why="0.19.8's `DEEPSPEED_OPTIMIZERS` no longer lists them and torch.optim has no such class, so "
        "the engine asserts `<type> is not a supported DeepSpeed Optimizer`. In the releases that "
        "had them they were also incompatible with ZeRO (`0/1 Adam is not compatible with ZeRO`).",
    example='{"optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4, "freeze_step": 400}}}',
    use_instead='{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}',
    references=("deepspeed/runtime/config.py: DEEPSPEED_OPTIMIZERS", SANITY),
)


@check(UNKNOWN_OPTIMIZER, ONEBIT_REMOVED, ONEBIT_WITH_ZERO)
def optimizer_type(ctx: DsConfig) -> None:
    data = load_classes(ctx.version)
    written = written_optimizer(ctx)
    if data is None or written is None or not ctx.builds_optimizer:
        return
    path = ("optimizer", "type")
    if written.lower() in ONEBIT:
        if ctx.version >= ONEBIT_REMOVED_IN:
            also = f"; with ZeRO stage {ctx.job.zero_stage} older releases also fail: " \
                   f"{ONEBIT[written.lower()]!r}" if ctx.job.zero_stage >= 1 else ""
            ctx.report(ONEBIT_REMOVED, path, f"{written!r} is not a supported DeepSpeed Optimizer: DeepSpeed "
                       f"0.19.8 removed 1-bit Adam, 0/1 Adam and 1-bit LAMB{also}",
                       help="use \"AdamW\" (or \"Lamb\"), or pin an older DeepSpeed without ZeRO",
                       at_value=True)
        elif ctx.job.zero_stage >= 1:
            ctx.report(ONEBIT_WITH_ZERO, path, f"{ONEBIT[written.lower()]}: {written!r} with ZeRO stage "
                       f"{ctx.job.zero_stage}", help="disable ZeRO or use \"AdamW\"", at_value=True)
        return
    if written.lower() in table(data, "deepspeed_optimizers") or written in table(data, "torch_optimizers"):
        return
    names = list(table(data, "deepspeed_optimizers")) + list(table(data, "torch_optimizers"))
    ctx.report(UNKNOWN_OPTIMIZER, path, f"{written!r} is not a supported DeepSpeed Optimizer: not one of "
               "DeepSpeed's names (any case) nor a torch.optim class (exact case)",
               help=did_you_mean(written, names), at_value=True)


@check(MAX_GRAD_NORM, UNKNOWN_OPTIMIZER_PARAM)
def optimizer_params(ctx: DsConfig) -> None:
    if not ctx.builds_optimizer:
        return  # the program passes its own optimizer: DeepSpeed never reads optimizer.params
    params = section_params(ctx, "optimizer")
    if "max_grad_norm" in params and params["max_grad_norm"] != "auto":
        ctx.report(MAX_GRAD_NORM, ("optimizer", "params", "max_grad_norm"),
                   "'max_grad_norm' is not supported as an optimizer parameter; DeepSpeed clips with "
                   "the top-level 'gradient_clipping'",
                   help=f"remove it and set \"gradient_clipping\": {fmt(params['max_grad_norm'])}")
    data = load_classes(ctx.version)
    resolved = resolve_optimizer(ctx, data) if data else None
    if resolved is None:
        return
    name, builds, popped = resolved
    accepted = [accepted_keys(b, popped) for b in builds]
    if not builds or any(a is None for a in accepted):
        return
    allowed = set().union(*accepted)
    cls = class_names(builds)
    for key, value in params.items():
        if key in allowed or key == "max_grad_norm" or value == "auto":
            continue
        ctx.report(UNKNOWN_OPTIMIZER_PARAM, ("optimizer", "params", key),
                   f"{cls}.__init__() got an unexpected keyword argument {key!r} (optimizer {name!r})",
                   help=did_you_mean(key, sorted(allowed)))


@check(LAMB_STATIC_SCALE)
def lamb_loss_scale(ctx: DsConfig) -> None:
    written = written_optimizer(ctx)
    scale = ctx.get("fp16", "loss_scale")
    if written is None or written.lower() != "lamb" or not ctx.builds_optimizer:
        return
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale == 0:
        return
    ctx.report(LAMB_STATIC_SCALE, ("fp16", "loss_scale"),
               f"DeepSpeed lamb optimizer requires dynamic loss scaling, but fp16.loss_scale is {fmt(scale)}",
               help="set \"loss_scale\": 0 (dynamic) or remove it", at_value=True)


@check(UNTESTED_ZERO)
def untested_zero_optimizer(ctx: DsConfig) -> None:
    if ctx.job.zero_stage < 1 or ctx.get("zero_allow_untested_optimizer") or not ctx.builds_optimizer:
        return  # DeepSpeed's assertion reads the flag's truthiness
    data = load_classes(ctx.version)
    resolved = resolve_optimizer(ctx, data) if data else None
    if resolved is None:
        return
    name, builds, _ = resolved
    flags = [b.get("zero_supported") for b in builds]
    if not flags or any(f is not False for f in flags):
        return  # supported, or unknown (an optimizer guard could not import when it was generated)
    cls = class_names(builds)
    ctx.report(UNTESTED_ZERO, ("optimizer", "type"),
               f"You are using an untested ZeRO Optimizer: {name!r} builds {cls}, which is not in "
               f"DeepSpeed's ZeRO-supported list (ZeRO stage {ctx.job.zero_stage})",
               help='add "zero_allow_untested_optimizer": true, or use "AdamW"', at_value=True)


CLIENT_OPTIMIZER = rule(
    "DS507", "offload-with-client-optimizer", "warning",
    "Optimizer offload with no `optimizer` block: the code's own optimizer is used.",
    what="In a plain DeepSpeed launch, reports optimizer offload to cpu/nvme (`offload_optimizer`, or the "
         "deprecated `cpu_offload: true`) when the config names no optimizer and "
         "`zero_force_ds_cpu_optimizer` is not false. Not for HF Trainer/accelerate configs (accelerate "
         "wraps the Trainer's optimizer in DeepSpeedCPUAdam itself) nor for Megatron-DeepSpeed's "
         "config (it passes its own optimizer; MDS006 judges its `--cpu-optimizer`).",
    why="Unless the training script passes DeepSpeedCPUAdam itself, DeepSpeed raises "
        "`ZeRORuntimeException: You are using ZeRO-Offload with a client provided optimizer (...) "
        "which in most cases will yield poor performance.`",
    example='{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}',
    use_instead='{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, '
                '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}',
    references=("https://github.com/deepspeedai/DeepSpeed/issues/7524",
                "https://github.com/deepspeedai/Megatron-DeepSpeed/issues/298"),
)


@check(CLIENT_OPTIMIZER)
def client_optimizer(ctx: DsConfig) -> None:
    # hf: accelerate wraps the Trainer's optimizer in DeepSpeedCPUAdam itself (Accelerator._prepare_deepspeed);
    # megatron-deepspeed: the command's --cpu-optimizer decides, which MDS006 judges.
    if ctx.framework != "deepspeed" or ctx.offload_device("offload_optimizer") not in ("cpu", "nvme"):
        return
    if ctx.job.zero_stage == 0 or "optimizer" in ctx.data or \
            not flag(ctx.get("zero_force_ds_cpu_optimizer"), True, pydantic=False):
        return
    key = ctx.written_key(ZERO, "offload_optimizer")
    at = (ZERO, key, "device") if key == "offload_optimizer" else (ZERO, key)
    ctx.report(CLIENT_OPTIMIZER, at, "optimizer offload with no 'optimizer' block: unless the script passes "
               "DeepSpeedCPUAdam, DeepSpeed raises 'You are using ZeRO-Offload with a client provided optimizer'",
               help='add an "optimizer" block, or set "zero_force_ds_cpu_optimizer": false')
