"""Build the memory model's Setup from a DeepSpeed config and a model architecture (HF Trainer / plain DeepSpeed)."""

from __future__ import annotations

from typing import Any

from guard.memory.architecture import Architecture
from guard.memory.from_megatron import SetupError
from guard.memory.setup import Chunk, Setup
from guard.memory.zero_layout import hf_tensors, trainer_groups

BUCKET_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
               "stage3_max_live_parameters", "stage3_param_persistence_threshold", "sub_group_size")


def _auto_bucket(key: str, hidden: int) -> float:
    """The values transformers' HfTrainerDeepSpeedConfig writes for "auto" buckets (from hidden_size)."""
    return {"reduce_bucket_size": hidden * hidden, "stage3_prefetch_bucket_size": 0.9 * hidden * hidden,
            "stage3_param_persistence_threshold": 10 * hidden}.get(key, 0)


def _enabled(section: Any) -> Any:
    return section.get("enabled") if isinstance(section, dict) else None


def apply_config(setup: Setup, config: dict, label: str, precision: str | None = None) -> None:
    """Precision, ZeRO stage, offload, buckets, optimizer and activation checkpointing from the config."""
    bf16 = _enabled(config.get("bf16") or config.get("bfloat16"))
    fp16 = _enabled(config.get("fp16"))
    if precision:
        setup.params_dtype = precision
    elif bf16 == "auto" or fp16 == "auto":
        raise SetupError(f"{label}: bf16/fp16 \"enabled\" is \"auto\" (the Trainer decides): give --precision")
    else:
        setup.params_dtype = "bf16" if bf16 is True else "fp16" if fp16 is True else "fp32"
    setup.grads_dtype = setup.params_dtype
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        zero = {}
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise SetupError(f"{label}: zero_optimization.stage must be 0-3, got {stage!r}")
    setup.zero_stage = stage
    for section, attr in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_param")):
        device = (zero.get(section) or {}).get("device", "none") if isinstance(zero.get(section), dict) else "none"
        setattr(setup, attr, str(device or "none"))
    if zero.get("cpu_offload") is True:  # the pre-0.4 spelling
        setup.offload_optimizer = "cpu"
    for key in BUCKET_KEYS:
        if key in zero:
            value = zero[key]
            value = _auto_bucket(key, setup.arch.hidden) if value == "auto" else value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setup.zero_buckets[key] = float(value)
    opt = config.get("optimizer") or {}
    kind = str(opt.get("type", "adamw")).lower() if isinstance(opt, dict) else "adamw"
    params = (opt.get("params") or {}) if isinstance(opt, dict) else {}
    # no optimizer section: the HF Trainer hands DeepSpeed torch's AdamW; DeepSpeed's own Adam is FusedAdam
    # on CUDA unless "torch_adam": true
    setup.optimizer_impl = "torch" if (not opt or (isinstance(params, dict) and params.get("torch_adam") is True)) \
        else "fused"
    if kind in ("sgd",):
        setup.optimizer = "sgd"
        momentum = (opt.get("params") or {}).get("momentum", 0)
        setup.sgd_momentum = isinstance(momentum, (int, float)) and momentum > 0
    elif "adam" not in kind:
        setup.unmodelled.append((f"optimizer {opt.get('type')}", "/optimizer/type"))
    ckpt = config.get("activation_checkpointing") or {}
    if isinstance(ckpt, dict):
        setup.checkpoint_partition = ckpt.get("partition_activations") is True
        setup.checkpoint_cpu = ckpt.get("cpu_checkpointing") is True
    if setup.offload_optimizer == "nvme" or setup.offload_param == "nvme":
        setup.notes.append("NVMe offload: the offloaded states are priced as host RAM (they sit on NVMe instead)")


def setup_from_config(config: dict, label: str, arch: Architecture, world_size: int, seq_length: int | None,
                      micro_batch: int | None, precision: str | None, gradient_checkpointing: bool,
                      gpus_per_node: int) -> Setup:
    """An HF Trainer / plain DeepSpeed job: data parallel over every rank, eager transformers layers."""
    setup = Setup(arch=arch, framework="deepspeed", world_size=world_size, gpus_per_node=gpus_per_node,
                  eager=True)
    mbs = micro_batch or config.get("train_micro_batch_size_per_gpu")
    if not isinstance(mbs, int) or isinstance(mbs, bool) or mbs < 1:
        raise SetupError(f"{label}: train_micro_batch_size_per_gpu is {mbs!r}: give --micro-batch-size N")
    setup.micro_batch = mbs
    gas = config.get("gradient_accumulation_steps")
    setup.num_microbatches = gas if isinstance(gas, int) and not isinstance(gas, bool) and gas > 0 else 1
    seq = seq_length or None
    if not seq:
        raise SetupError(f"{label}: the sequence length is not in a DeepSpeed config: give --seq-length S")
    setup.seq_length = seq
    apply_config(setup, config, label, precision)
    setup.chunks = [[Chunk(tuple(range(arch.num_layers)), embedding=True, loss=True)]]
    tensors = hf_tensors(arch)
    if tensors:  # the HF Trainer's decay / no-decay groups give ZeRO's flat layout
        setup.param_groups = trainer_groups(tensors)
    if gradient_checkpointing:
        setup.recompute, setup.recompute_method, setup.recompute_num_layers = "full", "uniform", 1
    return setup
