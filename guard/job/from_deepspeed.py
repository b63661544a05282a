"""Read a DeepSpeed config (and the model it trains) into a TrainingJob: HF Trainer / plain DeepSpeed jobs."""

from __future__ import annotations

from typing import Any

from guard.job.accounting import account_keys
from guard.job.architecture import Architecture
from guard.job.layout import ParallelLayout
from guard.job.origin import Origin, key_origin
from guard.job.param_groups import hf_tensors, trainer_groups
from guard.job.stages import Chunk
from guard.job.training_job import IncompleteJob, TrainingJob

# zero_optimization keys that choose DeepSpeed's gradient path (stage_1_and_2.py / stage3.py)
PATH_KEYS = ("contiguous_gradients", "overlap_comm", "reduce_scatter", "round_robin_gradients",
             "use_multi_rank_bucket_allreduce", "allgather_partitions", "elastic_checkpoint",
             "stage3_gather_16bit_weights_on_model_save")
BUCKET_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
               "stage3_max_live_parameters", "stage3_param_persistence_threshold", "sub_group_size")


def _auto_bucket(key: str, hidden: int) -> float:
    """The values transformers' HfTrainerDeepSpeedConfig writes for "auto" buckets (from hidden_size)."""
    return {"reduce_bucket_size": hidden * hidden, "stage3_prefetch_bucket_size": 0.9 * hidden * hidden,
            "stage3_param_persistence_threshold": 10 * hidden}.get(key, 0)


def _enabled(section: Any) -> Any:
    return section.get("enabled") if isinstance(section, dict) else None


def apply_config(setup: TrainingJob, config: dict, label: str, precision: str | None = None, locate=None) -> None:
    """Precision, ZeRO stage and its path keys, offload, buckets, optimizer, checkpointing from the config."""
    for section in ("bf16", "bfloat16", "fp16"):
        if isinstance(config.get(section), dict) and "enabled" in config[section]:
            setup.origins["params_dtype"] = key_origin(label, locate, section, "enabled")
    bf16 = _enabled(config.get("bf16") or config.get("bfloat16"))
    fp16 = _enabled(config.get("fp16"))
    if precision:
        setup.params_dtype = precision
    elif bf16 == "auto" or fp16 == "auto":
        raise IncompleteJob(f"{label}: bf16/fp16 \"enabled\" is \"auto\" (the Trainer decides): give --precision")
    else:
        setup.params_dtype = "bf16" if bf16 is True else "fp16" if fp16 is True else "fp32"
    setup.grads_dtype = setup.params_dtype
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        zero = {}
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise IncompleteJob(f"{label}: zero_optimization.stage must be 0-3, got {stage!r}")
    setup.zero_stage = stage
    if "stage" in zero:
        setup.origins["zero_stage"] = key_origin(label, locate, "zero_optimization", "stage")
    setup.zero_keys = {k: zero[k] for k in PATH_KEYS if k in zero}
    if "stage3_gather_fp16_weights_on_model_save" in zero:  # the pre-0.6 spelling DeepSpeed still reads
        setup.zero_keys.setdefault("stage3_gather_16bit_weights_on_model_save",
                                   zero["stage3_gather_fp16_weights_on_model_save"])
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
        setup.add_unmodelled(f"optimizer {opt.get('type')}", "/optimizer/type",
                             key_origin(label, locate, "optimizer", "type"))
    ckpt = config.get("activation_checkpointing") or {}
    if isinstance(ckpt, dict):
        setup.checkpoint_partition = ckpt.get("partition_activations") is True
        setup.checkpoint_cpu = ckpt.get("cpu_checkpointing") is True
    if setup.offload_optimizer == "nvme" or setup.offload_param == "nvme":
        setup.notes.append("NVMe offload: the offloaded states are priced as host RAM (they sit on NVMe instead)")


def read_deepspeed(config: dict, label: str, arch: Architecture, world: int, *, world_origin: Origin,
                   seq_length: int | None, micro_batch: int | None = None, precision: str | None = None,
                   gradient_checkpointing: bool = False, gpus_per_node: int = 8, locate=None) -> TrainingJob:
    """An HF Trainer / plain DeepSpeed job: data parallel over every rank (AutoTP aside), eager layers."""
    autotp = (config.get("tensor_parallel") or {}).get("autotp_size", 1) if isinstance(
        config.get("tensor_parallel"), dict) else 1
    layout = ParallelLayout(world=world, gpus_per_node=gpus_per_node, tp=autotp if isinstance(autotp, int) and
                            autotp > 0 else 1)
    job = TrainingJob(arch=arch, framework="deepspeed", layout=layout, eager=True)
    job.origins["layout.world"] = world_origin
    job.origins["command"] = Origin("key", "the DeepSpeed config", label)
    if autotp != 1:
        job.origins["layout.tp"] = key_origin(label, locate, "tensor_parallel", "autotp_size")
    _batch(job, config, label, micro_batch, locate)
    if not seq_length:
        raise IncompleteJob(f"{label}: the sequence length is not in a DeepSpeed config: give --seq-length S")
    job.seq_length = seq_length
    job.origins["seq_length"] = Origin("cli", "--seq-length")
    apply_config(job, config, label, precision, locate)
    job.chunks = [[Chunk(tuple(range(arch.num_layers)), embedding=True, loss=True)]]
    account_keys(job, config, label, locate)
    for feature in arch.unmodelled:
        job.add_unmodelled(feature, arch.source or "--model / --hf-config")
    tensors = hf_tensors(arch)
    if tensors:  # the HF Trainer's decay / no-decay groups give ZeRO's flat layout
        job.param_groups = trainer_groups(tensors)
    if gradient_checkpointing:
        job.recompute, job.recompute_method, job.recompute_num_layers = "full", "uniform", 1
        job.origins["recompute"] = Origin("cli", "--gradient-checkpointing")
    return job


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _batch(job: TrainingJob, config: dict, label: str, micro_batch: int | None, locate) -> None:
    """DeepSpeed's triangle: train_batch_size = micro x gradient_accumulation_steps x DP (two give the third)."""
    dp = job.layout.dp or 1
    mbs = micro_batch or _int(config.get("train_micro_batch_size_per_gpu"))
    tbs, gas = _int(config.get("train_batch_size")), _int(config.get("gradient_accumulation_steps"))
    if mbs is None and tbs and gas and tbs % (gas * dp) == 0:
        mbs = tbs // (gas * dp)
    if mbs is None:
        raise IncompleteJob(f"{label}: train_micro_batch_size_per_gpu is "
                            f"{config.get('train_micro_batch_size_per_gpu')!r}: give --micro-batch-size N")
    job.micro_batch = mbs
    job.padded_batches = mbs > 1  # a pad-to-longest collator pads only a batch of several samples
    job.origins["micro_batch"] = Origin("cli", "--micro-batch-size") if micro_batch else \
        key_origin(label, locate, "train_micro_batch_size_per_gpu")
    if gas is None and tbs and tbs % (mbs * dp) == 0:
        gas = tbs // (mbs * dp)
    job.num_microbatches = gas or 1
    job.global_batch = job.micro_batch * job.num_microbatches * dp
