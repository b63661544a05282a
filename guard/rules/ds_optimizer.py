"""DS6xx: the optimizer and LR scheduler DeepSpeed builds from the config, checked against their real signatures."""

from __future__ import annotations

import functools
from typing import Any

from guard import resources
from guard.rules.context import DsConfig, did_you_mean, flag, fmt
from guard.rules.registry import check, rule

ENGINE = "deepspeed/runtime/engine.py: DeepSpeedEngine._configure_basic_optimizer"
SANITY = "deepspeed/runtime/engine.py: DeepSpeedEngine._do_sanity_check"
SCHEDULES = "deepspeed/runtime/lr_schedules.py"
DATA = "schemas/deepspeed/<version>/optimizers.json (scripts/gen_deepspeed_optimizers.py)"

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

UNKNOWN_SCHEDULER = rule(
    "DS604", "unknown-scheduler-type", "error",
    "`scheduler.type` is neither a DeepSpeed LR schedule nor a `torch.optim.lr_scheduler` class.",
    what="Reports a `scheduler.type` that is not one of DeepSpeed's schedules (`WarmupLR`, "
         "`WarmupDecayLR`, `WarmupCosineLR`, `OneCycle`, `LRRangeTest`) or a "
         "`torch.optim.lr_scheduler` class. Names are case-sensitive. Suggests the closest name.",
    why="The engine asserts when it builds the scheduler: `AssertionError: DeepSpeed does not "
        "recognize LR scheduler <type>`. HF scheduler names such as `\"cosine\"` or "
        "`\"linear\"` belong to `--lr_scheduler_type`, not to the DeepSpeed config.",
    example='{"scheduler": {"type": "WarmupCosine", "params": {"total_num_steps": 1000}}}',
    use_instead='{"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000}}}',
    references=("deepspeed/runtime/engine.py: DeepSpeedEngine._scheduler_from_config", SCHEDULES, DATA),
)

UNKNOWN_SCHEDULER_PARAM = rule(
    "DS605", "unknown-scheduler-param", "error",
    "A `scheduler.params` key that the scheduler class does not accept.",
    what="Reports `scheduler.params` keys that the scheduler's constructor does not take, with "
         "the closest parameter name.",
    why="DeepSpeed calls `scheduler(optimizer, **params)`: an unknown key fails the launch with "
        "`TypeError: __init__() got an unexpected keyword argument '<key>'` (for example "
        "`warmup_ratio`, or `warmup_min_lr` for `WarmupCosineLR`, which takes `warmup_min_ratio`).",
    example='{"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000, "warmup_min_lr": 0}}}',
    use_instead='{"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000, "warmup_min_ratio": 0}}}',
    references=("deepspeed/runtime/engine.py: DeepSpeedEngine._scheduler_from_config", SCHEDULES, DATA),
)

SCHEDULER_INT = rule(
    "DS606", "scheduler-steps-not-positive-int", "error",
    "A scheduler step count that DeepSpeed requires to be a positive integer is a float or <= 0.",
    what="Reports `warmup_num_steps` (WarmupLR, WarmupDecayLR, WarmupCosineLR) and "
         "`lr_range_test_step_size` (LRRangeTest) that are <= 0 or not whole, and, in an "
         "HF/accelerate config, written as a float (`1e3`, `1000.0`). The list comes from the "
         "`isinstance(..., int)` checks in DeepSpeed's scheduler constructors.",
    why="The constructors check `isinstance(x, int)`. DeepSpeed itself reads a config file with "
        "hjson, which turns `1e3` into the int 1000, but transformers and accelerate read it with "
        "`json.load`, where `1e3` is the float 1000.0: `ValueError: warmup_num_steps must be a "
        "positive integer, got 1000.0`.",
    example='{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1e3}}}',
    use_instead='{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1000}}}',
    references=(SCHEDULES + ": WarmupLR.__init__, WarmupCosineLR.__init__, LRRangeTest.__init__", DATA),
)

SCHEDULER_REQUIRED = rule(
    "DS607", "scheduler-missing-required-param", "error",
    "A scheduler parameter without a default is missing from `scheduler.params`.",
    what="Reports a scheduler whose constructor has required parameters (`total_num_steps` for "
         "WarmupDecayLR and WarmupCosineLR, `cycle_min_lr`/`cycle_max_lr` for OneCycle) that "
         "`scheduler.params` does not give.",
    why="`scheduler(optimizer, **params)` fails with `TypeError: __init__() missing 1 required "
        "positional argument: 'total_num_steps'`. The HF Trainer and accelerate fill "
        "`total_num_steps` only when it is written as `\"auto\"`; a missing key stays missing.",
    example='{"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 100}}}',
    use_instead='{"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 100, "total_num_steps": 10000}}}',
    references=(SCHEDULES, DATA),
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


@functools.lru_cache(maxsize=None)
def _load(version: tuple[int, ...]) -> dict[str, Any] | None:
    """optimizers.json of the oldest vendored release not older than `version`, else the newest."""
    try:
        found = resources.nearest_deepspeed_version(version, "optimizers.json")
        if found is None:
            return None
        data = resources.load_json("deepspeed", found, "optimizers.json")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _truthy(value: Any) -> bool:
    return flag(value, False, pydantic=False)


def _optimizer_type(ctx: DsConfig) -> str | None:
    value = ctx.get("optimizer", "type")
    return value if isinstance(value, str) and value and value != "auto" else None


def _params(ctx: DsConfig, section: str) -> dict[str, Any]:
    value = ctx.get(section, "params")
    return value if isinstance(value, dict) else {}


def _builds(ctx: DsConfig, name: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The classes DeepSpeed may build for DeepSpeed optimizer `name` with this config."""
    builds = entry.get("builds") if isinstance(entry.get("builds"), dict) else {}
    params = _params(ctx, "optimizer")
    if "torch_adam" in builds and _truthy(params.get("torch_adam")):
        # get_optimizer_configuration: AdamW when the name is adamw or adam_w_mode (default true).
        w_mode = params.get("adam_w_mode", True)
        picked = ["torch_adam" if name == "adamw" or w_mode is not False else "torch_adam_no_w"]
    else:
        device = ctx.get("zero_optimization", "offload_optimizer", "device")
        if device in ("cpu", "nvme"):
            picked = ["offload"]
        elif isinstance(device, str) and device not in ("none", ""):
            picked = ["offload", "default"]  # "auto" (filled by accelerate) or a bad value: either
        else:
            picked = ["default"]
    out = [builds[p] for p in picked if isinstance(builds.get(p), dict)]
    return out or [b for b in builds.values() if isinstance(b, dict)][:1]


def _resolve(ctx: DsConfig, data: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[str]] | None:
    """(name as DeepSpeed keeps it, candidate class entries, keys the engine pops) or None."""
    written = _optimizer_type(ctx)
    if written is None:
        return None
    ds = _table(data, "deepspeed_optimizers")
    if written.lower() in ds:
        entry = ds[written.lower()] if isinstance(ds[written.lower()], dict) else {}
        popped = entry.get("engine_params") if isinstance(entry.get("engine_params"), list) else []
        return written.lower(), _builds(ctx, written.lower(), entry), popped
    torch_entry = _table(data, "torch_optimizers").get(written)
    if isinstance(torch_entry, dict):
        return written, [torch_entry], []
    return None


def _accepted(entry: dict[str, Any], popped: list[str]) -> set[str] | None:
    """Keys a build accepts in params, or None when it cannot be told (**kwargs, not importable)."""
    params = entry.get("params")
    if not isinstance(params, list) or entry.get("var_kwargs") or entry.get("unknown_params") == "ignored":
        return None
    engine = entry.get("engine_kwargs") if isinstance(entry.get("engine_kwargs"), list) else []
    return (set(params) - set(engine)) | set(popped)


@check(UNKNOWN_OPTIMIZER, ONEBIT_REMOVED, ONEBIT_WITH_ZERO)
def optimizer_type(ctx: DsConfig) -> None:
    data = _load(ctx.version)
    written = _optimizer_type(ctx)
    if data is None or written is None:
        return
    path = ("optimizer", "type")
    if written.lower() in ONEBIT:
        if ctx.version >= ONEBIT_REMOVED_IN:
            also = f"; with ZeRO stage {ctx.zero_stage} older releases also fail: " \
                   f"{ONEBIT[written.lower()]!r}" if ctx.zero_stage >= 1 else ""
            ctx.report(ONEBIT_REMOVED, path, f"{written!r} is not a supported DeepSpeed Optimizer: DeepSpeed "
                       f"0.19.8 removed 1-bit Adam, 0/1 Adam and 1-bit LAMB{also}",
                       help="use \"AdamW\" (or \"Lamb\"), or pin an older DeepSpeed without ZeRO",
                       at_value=True)
        elif ctx.zero_stage >= 1:
            ctx.report(ONEBIT_WITH_ZERO, path, f"{ONEBIT[written.lower()]}: {written!r} with ZeRO stage "
                       f"{ctx.zero_stage}", help="disable ZeRO or use \"AdamW\"", at_value=True)
        return
    if written.lower() in _table(data, "deepspeed_optimizers") or written in _table(data, "torch_optimizers"):
        return
    names = list(_table(data, "deepspeed_optimizers")) + list(_table(data, "torch_optimizers"))
    ctx.report(UNKNOWN_OPTIMIZER, path, f"{written!r} is not a supported DeepSpeed Optimizer: not one of "
               "DeepSpeed's names (any case) nor a torch.optim class (exact case)",
               help=did_you_mean(written, names), at_value=True)


@check(MAX_GRAD_NORM, UNKNOWN_OPTIMIZER_PARAM)
def optimizer_params(ctx: DsConfig) -> None:
    params = _params(ctx, "optimizer")
    if "max_grad_norm" in params and params["max_grad_norm"] != "auto":
        ctx.report(MAX_GRAD_NORM, ("optimizer", "params", "max_grad_norm"),
                   "'max_grad_norm' is not supported as an optimizer parameter; DeepSpeed clips with "
                   "the top-level 'gradient_clipping'",
                   help=f"remove it and set \"gradient_clipping\": {fmt(params['max_grad_norm'])}")
    data = _load(ctx.version)
    resolved = _resolve(ctx, data) if data else None
    if resolved is None:
        return
    name, builds, popped = resolved
    accepted = [_accepted(b, popped) for b in builds]
    if not builds or any(a is None for a in accepted):
        return
    allowed = set().union(*accepted)
    cls = " or ".join(str(b.get("class", "?")).rsplit(".", 1)[-1] for b in builds)
    for key, value in params.items():
        if key in allowed or key == "max_grad_norm" or value == "auto":
            continue
        ctx.report(UNKNOWN_OPTIMIZER_PARAM, ("optimizer", "params", key),
                   f"{cls}.__init__() got an unexpected keyword argument {key!r} (optimizer {name!r})",
                   help=did_you_mean(key, sorted(allowed)))


def _scheduler(ctx: DsConfig, data: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    written = ctx.get("scheduler", "type")
    if not isinstance(written, str) or not written or written == "auto":
        return None
    for table in ("lr_schedulers", "torch_lr_schedulers"):
        entry = _table(data, table).get(written)
        if isinstance(entry, dict):
            return written, entry
    return written, {}


@check(UNKNOWN_SCHEDULER, UNKNOWN_SCHEDULER_PARAM, SCHEDULER_INT, SCHEDULER_REQUIRED)
def scheduler(ctx: DsConfig) -> None:
    data = _load(ctx.version)
    found = _scheduler(ctx, data) if data else None
    if found is None:
        return
    name, entry = found
    if not entry:
        names = list(_table(data, "lr_schedulers")) + list(_table(data, "torch_lr_schedulers"))
        ctx.report(UNKNOWN_SCHEDULER, ("scheduler", "type"), f"DeepSpeed does not recognize LR scheduler {name}",
                   help=did_you_mean(name, names), at_value=True)
        return
    params = ctx.get("scheduler", "params")
    if params is not None and not isinstance(params, dict):
        return  # a wrongly typed params block is ds_keys' to report
    params = params or {}
    known = entry.get("params") if isinstance(entry.get("params"), list) else None
    if known is not None and not entry.get("var_kwargs"):
        for key, value in params.items():
            if key not in known and value != "auto":
                ctx.report(UNKNOWN_SCHEDULER_PARAM, ("scheduler", "params", key),
                           f"{name}.__init__() got an unexpected keyword argument {key!r}",
                           help=did_you_mean(key, known))
        missing = [p for p in entry.get("required") or [] if p not in params]
        if missing:
            ctx.report(SCHEDULER_REQUIRED, ("scheduler", "params") if "params" in ctx.section("scheduler")
                       else ("scheduler", "type"),
                       f"{name}.__init__() missing {len(missing)} required argument(s): "
                       + ", ".join(repr(m) for m in missing),
                       help="add " + ", ".join(f'"{m}"' for m in missing) + " to scheduler.params"
                       + (' (or "auto" under the HF Trainer/accelerate)' if "total_num_steps" in missing else ""))
    checks = entry.get("positive_int_params") if isinstance(entry.get("positive_int_params"), dict) else {}
    for key, template in checks.items():
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # absent, "auto", strings and bools belong to other rules
        if isinstance(value, int) and value > 0:
            continue
        if isinstance(value, float) and value.is_integer() and value > 0 and not ctx.is_hf:
            continue  # DeepSpeed reads the file with hjson, which turns 1e3 into the int 1000
        got = repr(value) if isinstance(value, float) else str(value)
        text = str(template).replace("{" + key + "}", got) or f"{key} must be a positive integer, got {got}"
        fix = f"write {int(value)}" if isinstance(value, float) and value.is_integer() and value > 0 \
            else "write a whole number greater than 0"
        ctx.report(SCHEDULER_INT, ("scheduler", "params", key), text, help=fix, at_value=True)


@check(LAMB_STATIC_SCALE)
def lamb_loss_scale(ctx: DsConfig) -> None:
    written = _optimizer_type(ctx)
    scale = ctx.get("fp16", "loss_scale")
    if written is None or written.lower() != "lamb":
        return
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale == 0:
        return
    ctx.report(LAMB_STATIC_SCALE, ("fp16", "loss_scale"),
               f"DeepSpeed lamb optimizer requires dynamic loss scaling, but fp16.loss_scale is {fmt(scale)}",
               help="set \"loss_scale\": 0 (dynamic) or remove it", at_value=True)


@check(UNTESTED_ZERO)
def untested_zero_optimizer(ctx: DsConfig) -> None:
    if ctx.zero_stage < 1 or ctx.get("zero_allow_untested_optimizer"):
        return  # DeepSpeed's assertion reads the flag's truthiness
    data = _load(ctx.version)
    resolved = _resolve(ctx, data) if data else None
    if resolved is None:
        return
    name, builds, _ = resolved
    flags = [b.get("zero_supported") for b in builds]
    if not flags or any(f is not False for f in flags):
        return  # supported, or unknown (an optimizer guard could not import when it was generated)
    cls = " or ".join(str(b.get("class", "?")).rsplit(".", 1)[-1] for b in builds)
    ctx.report(UNTESTED_ZERO, ("optimizer", "type"),
               f"You are using an untested ZeRO Optimizer: {name!r} builds {cls}, which is not in "
               f"DeepSpeed's ZeRO-supported list (ZeRO stage {ctx.zero_stage})",
               help='add "zero_allow_untested_optimizer": true, or use "AdamW"', at_value=True)
