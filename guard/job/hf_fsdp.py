"""The torch FSDP sharding an HF Trainer job asks for (TrainingArguments.fsdp, an accelerate config's fsdp_config,
axolotl's fsdp_config), read into a strategy guard prices (memory/torch_fsdp.py), or why it is refused.

transformers training_args.py FSDPOption: full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard,
offload, auto_wrap; accelerate's FSDP plugin (utils/dataclasses.py FullyShardedDataParallelPlugin): sharding
strategy FULL_SHARD by default (or its number 1-5), fsdp_offload_params, and for fsdp_version 2 reshard_after_forward
(True: FULL_SHARD's behaviour, False: SHARD_GRAD_OP's)."""

from __future__ import annotations

STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard")
OPTIONS = (*STRATEGIES, "offload", "auto_wrap")  # every FSDPOption
MARKERS = ("accelerate launch", "distributed_type")  # what a launcher's FSDP switch leaves in place of the option
NUMBERED = {"1": "full_shard", "2": "shard_grad_op", "3": "no_shard", "4": "hybrid_shard", "5": "hybrid_shard_zero2"}


def _strategy_of(config: dict) -> str:
    """An accelerate / axolotl fsdp_config's strategy (FULL_SHARD when it says none)."""
    if str(config.get("fsdp_version", config.get("version", 1))) == "2":
        reshard = config.get("fsdp_reshard_after_forward", config.get("reshard_after_forward", True))
        return "full_shard" if str(reshard).lower() not in ("false", "0", "shard_grad_op") else "shard_grad_op"
    raw = str(config.get("fsdp_sharding_strategy", config.get("sharding_strategy", "FULL_SHARD"))).lower()
    return NUMBERED.get(raw, raw if raw in STRATEGIES else "full_shard")


def read_fsdp(fsdp, config) -> tuple[str | None, str]:
    """(strategy, why it cannot be priced: "" when it can). `fsdp`: TrainingArguments.fsdp (a string or a list) or
    the marker a launcher left; `config`: the fsdp_config dict, when one is given."""
    config = config if isinstance(config, dict) else {}
    if isinstance(fsdp, str) and fsdp.startswith(MARKERS):
        fsdp = []
    words = fsdp.split() if isinstance(fsdp, str) else [str(w) for w in fsdp] if isinstance(fsdp, list) else []
    unknown = [w for w in words if w not in OPTIONS]
    if unknown:  # TrainingArguments builds FSDPOption(word) for each: an unknown one raises ValueError
        return None, f"{unknown[0]!r} is not an FSDP option (transformers FSDPOption: {', '.join(OPTIONS)})"
    offload = "offload" in words or str(config.get("fsdp_offload_params", config.get("offload_params", ""))).lower() \
        in ("true", "1")
    if offload:
        return None, "torch FSDP with CPU offload (offload_params): not priced"
    named = [w for w in words if w in STRATEGIES]
    return (named[0] if named else _strategy_of(config)), ""
