"""DS2xx: "auto" values, which only the HF Trainer and accelerate replace, and only on some keys."""

from __future__ import annotations

import functools

from guard import resources
from guard.rules.context import DsConfig, fmt
from guard.rules.registry import check, rule

AUTO_CRASH = rule(
    "DS201", "auto-reaches-deepspeed", "error",
    '"auto" on a key that nothing fills, where DeepSpeed keeps the string and fails.',
    what='Reports "auto" outside DeepSpeed\'s pydantic sections (top-level batch sizes, '
         "`gradient_clipping`, optimizer and scheduler params) when nothing will replace it: "
         "always in a plain DeepSpeed launch (`--context deepspeed`), and in an HF/accelerate "
         "config on keys that neither the Trainer nor accelerate fill.",
    why='"auto" is not a DeepSpeed feature. DeepSpeed keeps the string and crashes when it uses '
        "it: `TypeError: '>' not supported between instances of 'str' and 'int'` (train_batch_size) "
        "or `... 'str' and 'float'` (gradient_clipping), or the optimizer constructor fails.",
    example='{"train_batch_size": "auto", "gradient_clipping": "auto"}   # deepspeed train.py',
    use_instead='{"train_batch_size": 64, "gradient_clipping": 1.0}',
    references=("https://github.com/deepspeedai/DeepSpeed/issues/1270",
                "https://github.com/huggingface/trl/issues/2154"),
)

AUTO_DEFAULTED = rule(
    "DS202", "auto-silently-defaulted", "warning",
    '"auto" on a key that nothing fills, inside a section where DeepSpeed quietly uses the default.',
    what='Reports "auto" inside pydantic sections (`zero_optimization`, `fp16`, `bf16`, ...) when '
         "nothing replaces it, naming the default DeepSpeed will use instead.",
    why='DeepSpeed\'s config models drop "auto" values before validation, so the field silently '
        'takes its default: `"fp16": {"enabled": "auto"}` under plain DeepSpeed trains in fp32, '
        '`"sub_group_size": "auto"` becomes 1e9.',
    example='{"zero_optimization": {"stage": 3, "sub_group_size": "auto"}}',
    use_instead='{"zero_optimization": {"stage": 3, "sub_group_size": 1000000000}}',
    references=("deepspeed/runtime/config_utils.py: DeepSpeedConfigModel.__init__ strips 'auto'",
                "https://github.com/huggingface/transformers/issues/16495"),
)

HF_NEEDS_ZERO = rule(
    "DS203", "hf-config-without-zero", "error",
    "An HF/accelerate DeepSpeed config with no `zero_optimization` section.",
    what="Reports a config judged in the HF/accelerate context that has no `zero_optimization`.",
    why="accelerate's DeepSpeedPlugin (used by the HF Trainer) refuses it: `ValueError: Please "
        "specify the ZeRO optimization config in the DeepSpeed config.`",
    example='{"train_batch_size": "auto", "bf16": {"enabled": "auto"}}',
    use_instead='{"train_batch_size": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}',
    references=("https://github.com/zjunlp/KnowLM/issues/87",),
)


@functools.lru_cache(maxsize=None)
def _filled() -> frozenset[str]:
    table = resources.load_json("deepspeed", "hf_auto.json")
    return frozenset(table["trainer"]) | frozenset(table["accelerate"])


def _auto_is_a_value(node: dict | None) -> bool:
    """Some DeepSpeed keys take "auto" as a real setting (pipeline.stages, keep_in_fp32_modules, ZenFlow)."""
    if not node:
        return False
    branches = [node, *node.get("anyOf", []), *node.get("oneOf", [])]
    return node.get("default") == "auto" or any(
        b.get("const") == "auto" or "auto" in b.get("enum", []) for b in branches if isinstance(b, dict))


@check(AUTO_CRASH, AUTO_DEFAULTED)
def auto_values(ctx: DsConfig) -> None:
    filled = _filled() if ctx.is_hf else frozenset()
    for path, value in ctx.walk():
        if value != "auto" or "/" + "/".join(path) in filled:
            continue
        if _auto_is_a_value(ctx.schema.node(path)):
            continue
        who = ("neither the HF Trainer nor accelerate fills this key" if ctx.is_hf
               else f"nothing replaces \"auto\" in a plain DeepSpeed launch ({ctx.context_reason})")
        name = ".".join(path)
        if ctx.schema.in_pydantic_section(path):
            default = (ctx.schema.node(path) or {}).get("default")
            shown = fmt(default) if default is not None else "its default"
            ctx.report(AUTO_DEFAULTED, path, f"'{name}' is \"auto\" but {who}; DeepSpeed drops it and "
                       f"uses {shown}", at_value=True, help="write the value you want explicitly",
                       data={"default": default})
        else:
            ctx.report(AUTO_CRASH, path, f"'{name}' is \"auto\" but {who}; DeepSpeed keeps the string "
                       "and fails with a TypeError when it uses it", at_value=True,
                       help="write the value explicitly" + ("" if ctx.is_hf else
                                                            ", or launch through the HF Trainer/accelerate"))


@check(HF_NEEDS_ZERO)
def hf_needs_zero(ctx: DsConfig) -> None:
    if ctx.is_hf and ctx.kind == "deepspeed" and "zero_optimization" not in ctx.data:
        ctx.report(HF_NEEDS_ZERO, (), f"no \"zero_optimization\" section ({ctx.context_reason}); "
                   "accelerate raises 'Please specify the ZeRO optimization config in the DeepSpeed config.'",
                   help='add "zero_optimization": {"stage": 0} (or the stage you want)')
