"""ACC0xx: the `deepspeed_config:` block of an accelerate config YAML, as `accelerate launch` reads it."""

from __future__ import annotations

from typing import Any

from guard.rules.context import DsConfig
from guard.rules.registry import check, rule
from guard.suggest import did_you_mean

LAUNCH = "accelerate/commands/launch.py (DeepSpeed Arguments; _validate_launch_command)"
PLUGIN = "accelerate/utils/dataclasses.py: DeepSpeedPlugin"

# The `deepspeed_config:` keys `accelerate launch` turns into its DeepSpeed arguments (accelerate
# 16cb6eb, launch.py "DeepSpeed Arguments"); any other key is copied onto args and never read.
PLUGIN_FIELDS = (
    "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
    "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_accumulation_steps",
    "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_hostfile",
    "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
    "deepspeed_moe_layer_cls_names",
)
# DeepSpeedPlugin._deepspeed_config_checks: fields that conflict with `deepspeed_config_file`.
IGNORED_WITH_FILE = (
    "gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
    "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
    "zero3_save_16bit_model", "mixed_precision",
)
IGNORED_MESSAGE = ("When using `deepspeed_config_file`, the following accelerate config variables will be "
                   "ignored: ['gradient_accumulation_steps', 'gradient_clipping', 'zero_stage', "
                   "'offload_optimizer_device', 'offload_param_device', 'offload_param_nvme_path', "
                   "'offload_optimizer_nvme_path', 'zero3_save_16bit_model', 'mixed_precision'].")

UNKNOWN_PLUGIN_KEY = rule(
    "ACC001", "unknown-deepspeed-plugin-key", "warning",
    "A key in accelerate's inline `deepspeed_config:` block that accelerate never uses.",
    what="Reports keys of the accelerate YAML's `deepspeed_config:` block that are not accelerate "
         "DeepSpeed plugin fields (`zero_stage`, `offload_optimizer_device`, `offload_param_device`, "
         "`*_nvme_path`, `gradient_accumulation_steps`, `gradient_clipping`, `zero3_init_flag`, "
         "`zero3_save_16bit_model`, `deepspeed_config_file`, `deepspeed_hostfile`, ...). Says when "
         "the key is a DeepSpeed JSON key placed at the wrong layer, otherwise suggests the closest "
         "plugin field.",
    why="`accelerate launch` copies the block onto its arguments and turns only its own fields "
        "into the DeepSpeed config; anything else is dropped without a word. DeepSpeed JSON keys "
        "such as `zero_force_ds_cpu_optimizer` never reach DeepSpeed (OpenMOSS/MOSS#272: the job "
        "still failed with `You are using ZeRO-Offload with a client provided optimizer ... set "
        "<\"zero_force_ds_cpu_optimizer\": false>`).",
    example="deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
            "  zero_force_ds_cpu_optimizer: false",
    use_instead="deepspeed_config:\n  deepspeed_config_file: ds_config.json   "
                "# holds zero_optimization and \"zero_force_ds_cpu_optimizer\": false",
    references=(LAUNCH, "https://github.com/OpenMOSS/MOSS/issues/272"),
)

FILE_WITH_FIELDS = rule(
    "ACC002", "deepspeed-config-file-with-plugin-fields", "error",
    "`deepspeed_config_file` together with plugin fields that accelerate then refuses.",
    what="Reports, when `deepspeed_config:` names a `deepspeed_config_file`, each of "
         "`gradient_accumulation_steps`, `gradient_clipping`, `zero_stage`, `offload_*_device`, "
         "`offload_*_nvme_path`, `zero3_save_16bit_model` written beside it, and a top-level "
         "`mixed_precision`.",
    why="Those settings must come from the DeepSpeed JSON, and the DeepSpeed plugin stops the "
        "launch: `ValueError: When using `deepspeed_config_file`, the following accelerate config "
        "variables will be ignored: [...]. Please specify them appropriately in the DeepSpeed "
        "config file.` (a `--mixed_precision` given on the command line instead of the YAML is "
        "not an error).",
    example="mixed_precision: bf16\ndeepspeed_config:\n  deepspeed_config_file: ds_config.json\n  zero_stage: 2",
    use_instead="deepspeed_config:\n  deepspeed_config_file: ds_config.json   # sets zero_optimization.stage and bf16",
    references=(PLUGIN + "._deepspeed_config_checks", LAUNCH),
)

ZERO3_NOT_SAVED = rule(
    "ACC003", "zero3-without-16bit-save", "warning",
    "ZeRO-3 from the accelerate config without `zero3_save_16bit_model: true`.",
    what="Reports an inline `deepspeed_config:` with `zero_stage: 3` whose `zero3_save_16bit_model` "
         "is false or absent (accelerate's default is false).",
    why="accelerate writes it as `zero_optimization.stage3_gather_16bit_weights_on_model_save`. "
        "When it is false, `save_model()`/`save_pretrained()` cannot gather the partitioned "
        "weights and save an empty or tiny model file (tensors of shape [0]); only the sharded "
        "DeepSpeed checkpoint can be recovered with zero_to_fp32.py.",
    example="deepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: true",
    use_instead="deepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: true\n  zero3_save_16bit_model: true",
    references=(PLUGIN + ".__post_init__", "https://github.com/deepspeedai/DeepSpeed/issues/3841",
                "https://github.com/hiyouga/LlamaFactory/issues/253", "https://github.com/lm-sys/FastChat/issues/508",
                "https://github.com/huggingface/transformers/pull/25817"),
)


def _block(ctx: DsConfig) -> dict[str, Any] | None:
    """The `deepspeed_config:` block when the YAML launches DeepSpeed, else None."""
    distributed = ctx.data.get("distributed_type")
    block = ctx.data.get("deepspeed_config")
    if distributed is not None and str(distributed).upper() != "DEEPSPEED":
        return None  # `accelerate launch` uses the block only for DistributedType.DEEPSPEED
    return block if isinstance(block, dict) else None


def _config_file(block: dict[str, Any]) -> bool:
    value = block.get("deepspeed_config_file")
    return isinstance(value, str) and value.strip() not in ("", "none")


@check(UNKNOWN_PLUGIN_KEY, target="accelerate")
def unknown_plugin_keys(ctx: DsConfig) -> None:
    block = _block(ctx)
    if block is None:
        return
    top = set(ctx.schema.known_keys(()))
    zero = set(ctx.schema.known_keys(("zero_optimization",)))
    for key in block:
        if key in PLUGIN_FIELDS:
            continue
        name = str(key)
        if name in top or name in zero:
            where = "a DeepSpeed config key" if name in top else f"DeepSpeed's zero_optimization.{name}"
            message = (f"'{name}' is {where}, not an accelerate plugin field: accelerate never passes "
                       "it to DeepSpeed")
            fix = "move it into a DeepSpeed JSON file and point `deepspeed_config_file` at it"
        else:
            message = f"'{name}' is not an accelerate DeepSpeed plugin field and is ignored"
            fix = did_you_mean(name, PLUGIN_FIELDS)
        ctx.report(UNKNOWN_PLUGIN_KEY, ("deepspeed_config", name), message, help=fix)


@check(FILE_WITH_FIELDS, target="accelerate")
def config_file_with_fields(ctx: DsConfig) -> None:
    block = _block(ctx)
    if block is None or not _config_file(block):
        return
    for key in IGNORED_WITH_FILE:
        if key == "mixed_precision":
            # launch.py adds it to the conflicting fields whenever the YAML sets a value.
            if ctx.data.get("mixed_precision") is not None:
                ctx.report(FILE_WITH_FIELDS, ("mixed_precision",),
                           f"{IGNORED_MESSAGE} 'mixed_precision' comes from this YAML",
                           help="remove it and enable fp16/bf16 in the DeepSpeed config file")
        elif key in block:  # present at all: accelerate checks the key names, not the values
            ctx.report(FILE_WITH_FIELDS, ("deepspeed_config", key),
                       f"{IGNORED_MESSAGE} '{key}' is set beside deepspeed_config_file",
                       help="remove it here and set it in the DeepSpeed config file")


@check(ZERO3_NOT_SAVED, target="accelerate")
def zero3_save(ctx: DsConfig) -> None:
    block = _block(ctx)
    if block is None or _config_file(block) or ctx.job.zero_stage != 3:
        return  # with a DeepSpeed JSON file the flag lives (and is judged) there
    value = block.get("zero3_save_16bit_model")
    if str(value).lower() == "true":  # launch.py passes str(value).lower() on to the plugin
        return
    where = ("deepspeed_config", "zero3_save_16bit_model") if "zero3_save_16bit_model" in block \
        else ("deepspeed_config", "zero_stage")
    state = "false" if "zero3_save_16bit_model" in block else "not set (default false)"
    ctx.report(ZERO3_NOT_SAVED, where, f"ZeRO stage 3 with zero3_save_16bit_model {state}: save_model() "
               "will not gather the partitioned weights and writes an empty model file",
               help="set zero3_save_16bit_model: true (or recover weights with zero_to_fp32.py)")
