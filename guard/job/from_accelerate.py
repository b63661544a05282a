"""An accelerate config YAML as the DeepSpeed config and world size `accelerate launch` hands DeepSpeed."""

from __future__ import annotations

from typing import Any

# accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__: each plugin field fills one config key
# (only where the config file does not already set it)
PLUGIN_KEYS = {
    "zero_stage": ("zero_optimization", "stage"),
    "offload_optimizer_device": ("zero_optimization", "offload_optimizer", "device"),
    "offload_param_device": ("zero_optimization", "offload_param", "device"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps",),
    "gradient_clipping": ("gradient_clipping",),
}


def deepspeed_config(data: dict[str, Any], load_file) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """(DeepSpeed config, where each config path was written in the YAML) for an accelerate YAML.

    `load_file(path)` reads `deepspeed_config_file` when the YAML names one (accelerate then takes the
    file whole and the plugin fields must be unset)."""
    plugin = data.get("deepspeed_config") if isinstance(data.get("deepspeed_config"), dict) else {}
    written: dict[str, tuple[str, ...]] = {}
    if plugin.get("deepspeed_config_file"):
        config = load_file(str(plugin["deepspeed_config_file"]))
    else:
        config = {}
        for key, path in PLUGIN_KEYS.items():
            if key in plugin and plugin[key] is not None:
                value = plugin[key]
                if key == "zero_stage" and isinstance(value, str) and value.strip().isdigit():
                    value = int(value)  # launch.py hands the plugin str(value); DeepSpeedPlugin casts it back
                _put(config, path, value)
                written[".".join(path)] = ("deepspeed_config", key)
    precision = str(data.get("mixed_precision") or "no")
    if precision in ("bf16", "fp16") and precision not in config:
        config[precision] = {"enabled": True}
        written[f"{precision}.enabled"] = ("mixed_precision",)
    return config, written


def world_size(data: dict[str, Any]) -> int | None:
    """num_processes: accelerate launch starts that many ranks over all machines."""
    value = data.get("num_processes")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _put(config: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = value
