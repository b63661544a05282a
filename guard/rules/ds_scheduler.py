"""DS604-DS607: the LR scheduler DeepSpeed builds from the config, checked against its real signature."""

from __future__ import annotations

from typing import Any

from guard.rules.context import DsConfig
from guard.rules.ds_classes import DATA, load_classes, table
from guard.rules.registry import check, rule
from guard.suggest import did_you_mean

SCHEDULES = "deepspeed/runtime/lr_schedules.py"

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

def _scheduler(ctx: DsConfig, data: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    written = ctx.get("scheduler", "type")
    if not isinstance(written, str) or not written or written == "auto":
        return None
    for kind in ("lr_schedulers", "torch_lr_schedulers"):
        entry = table(data, kind).get(written)
        if isinstance(entry, dict):
            return written, entry
    return written, {}


@check(UNKNOWN_SCHEDULER, UNKNOWN_SCHEDULER_PARAM, SCHEDULER_INT, SCHEDULER_REQUIRED)
def scheduler(ctx: DsConfig) -> None:
    data = load_classes(ctx.version)
    found = _scheduler(ctx, data) if data else None
    if found is None:
        return
    name, entry = found
    if not entry:
        names = list(table(data, "lr_schedulers")) + list(table(data, "torch_lr_schedulers"))
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

