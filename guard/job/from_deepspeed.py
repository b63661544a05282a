"""Read a DeepSpeed config (and the model it trains) into a TrainingJob: HF Trainer / plain DeepSpeed jobs."""

from __future__ import annotations

from typing import Any

from guard.job import deepspeed_values
from guard.job.accounting import account_keys
from guard.job.architecture import Architecture
from guard.job.layout import ParallelLayout
from guard.job.origin import Origin, key_origin
from guard.job.param_groups import hf_tensors, trainer_groups
from guard.job.stages import Chunk
from guard.job.training_job import TrainingJob
from guard.job.world import World

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
    """Precision, ZeRO stage and its path keys, offload, buckets, optimizer, checkpointing from the config. Never
    raises: what DeepSpeed would not run, or guard cannot know, goes to setup.missing."""
    _precision(setup, config, label, precision, locate)
    stage, problem = deepspeed_values.zero_stage(config)
    if problem:
        setup.missing["zero_stage"] = f"{label}: {problem}"
    setup.zero_stage = stage
    if "zero_optimization" in config:
        where = ("zero_optimization", "stage") if isinstance(config["zero_optimization"], dict) and \
            "stage" in config["zero_optimization"] else ("zero_optimization",)
        setup.origins["zero_stage"] = key_origin(label, locate, *where)
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        zero = {}
    setup.zero_keys = {k: zero[k] for k in PATH_KEYS if k in zero}
    if "stage3_gather_fp16_weights_on_model_save" in zero:  # the pre-0.6 spelling DeepSpeed still reads
        setup.zero_keys.setdefault("stage3_gather_16bit_weights_on_model_save",
                                   zero["stage3_gather_fp16_weights_on_model_save"])
    for section, attr in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_param")):
        device = zero[section].get("device", "none") if isinstance(zero.get(section), dict) else "none"
        setattr(setup, attr, str(device or "none"))
    if zero.get("cpu_offload") is True:  # the pre-0.4 spelling
        setup.offload_optimizer = "cpu"
    for key in BUCKET_KEYS:
        if key in zero:
            value = zero[key]
            if value == "auto" and setup.arch is None:
                continue  # transformers derives it from the model's hidden size
            value = _auto_bucket(key, setup.arch.hidden) if value == "auto" else value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setup.zero_buckets[key] = float(value)
    opt = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    kind = str(opt.get("type", "adamw")).lower()
    params = opt.get("params") if isinstance(opt.get("params"), dict) else {}
    # no optimizer section: the HF Trainer hands DeepSpeed torch's AdamW; DeepSpeed's own Adam is FusedAdam
    # on CUDA unless "torch_adam": true
    setup.optimizer_impl = "torch" if not opt or params.get("torch_adam") is True else "fused"
    if kind in ("sgd",):
        setup.optimizer = "sgd"
        momentum = params.get("momentum", 0)
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


def _precision(setup: TrainingJob, config: dict, label: str, precision: str | None, locate) -> None:
    for section in ("bf16", "bfloat16", "fp16"):
        if isinstance(config.get(section), dict) and "enabled" in config[section]:
            setup.origins["params_dtype"] = key_origin(label, locate, section, "enabled")
    bf16 = _enabled(config.get("bf16") or config.get("bfloat16"))
    fp16 = _enabled(config.get("fp16"))
    if precision:
        setup.params_dtype = precision
    elif bf16 == "auto" or fp16 == "auto":
        setup.missing["precision"] = f'{label}: bf16/fp16 "enabled" is "auto" (the Trainer decides): give --precision'
    else:
        setup.params_dtype = "bf16" if bf16 is True else "fp16" if fp16 is True else "fp32"
    setup.grads_dtype = setup.params_dtype


def read_deepspeed(config: dict, label: str, arch: Architecture | None, world: World, *, seq_length: int | None,
                   micro_batch: int | None = None, precision: str | None = None, gradient_checkpointing: bool = False,
                   locate=None, origin: Origin | None = None) -> TrainingJob:
    """An HF Trainer / plain DeepSpeed job: data parallel over every rank (AutoTP aside), eager layers. Never
    raises: a value it cannot know (no model, no world, an "auto" DeepSpeed leaves to the Trainer) goes to
    job.missing with the reason, and the rules judge the rest."""
    tensor_parallel = config.get("tensor_parallel")
    autotp = tensor_parallel.get("autotp_size", 1) if isinstance(tensor_parallel, dict) else 1
    # Ulysses sequence parallelism: each sequence is split over `sequence_parallel_size` ranks. With
    # data_parallel_size beside it DeepSpeed builds its device mesh and ZeRO-1/2 partition over its DP axis alone;
    # alone, it is an mpu's (ALST through accelerate) and ZeRO partitions over DP x SP (layout.zero_shards)
    sp = config.get("sequence_parallel_size", 1)
    sp = sp if isinstance(sp, int) and not isinstance(sp, bool) and sp > 1 else 1
    layout = ParallelLayout(world=world.size, gpus_per_node=world.gpus_per_node,
                            tp=autotp if isinstance(autotp, int) and autotp > 0 else 1, ulysses=sp,
                            ulysses_in_zero="data_parallel_size" not in config)
    job = TrainingJob(arch=arch, framework="deepspeed", layout=layout, eager=True)
    if arch is None:
        job.missing["model"] = "a DeepSpeed config does not describe the model: give --hf-config or --model"
    world.put(job, label)
    job.origins["command"] = origin or Origin("key", "the DeepSpeed config", label)
    if autotp != 1:
        job.origins["layout.tp"] = key_origin(label, locate, "tensor_parallel", "autotp_size")
    if sp > 1:
        job.origins["layout.ulysses"] = key_origin(label, locate, "sequence_parallel_size")
    _batch(job, config, label, micro_batch, locate)
    if seq_length:
        job.seq_length = seq_length
        job.origins["seq_length"] = Origin("cli", "--seq-length")
    else:
        job.missing["seq_length"] = f"{label}: the sequence length is not in a DeepSpeed config: give --seq-length S"
    apply_config(job, config, label, precision, locate)
    account_keys(job, config, label, locate)
    if sp > 1 and job.zero_stage in (1, 2) and job.params_dtype != "fp32":  # stage_1_and_2.py: tensor.to(comm dtype)
        job.add_unmodelled("Ulysses: the fp32 copy of each reduce bucket as ZeRO-1/2 reduces it "
                           "(seq_parallel_communication_data_type)", "sequence_parallel_size",
                           key_origin(label, locate, "sequence_parallel_size"))
    if gradient_checkpointing:
        job.recompute, job.recompute_method, job.recompute_num_layers = "full", "uniform", 1
        job.origins["recompute"] = Origin("cli", "--gradient-checkpointing")
    if arch is None:
        return job
    job.chunks = [[Chunk(tuple(range(arch.num_layers)), embedding=True, loss=True)]]
    for feature in arch.unmodelled:
        job.add_unmodelled(feature, arch.source or "--model / --hf-config")
    tensors = hf_tensors(arch)
    if tensors:  # the HF Trainer's decay / no-decay groups give ZeRO's flat layout
        job.param_groups = trainer_groups(tensors)
    return job


def _batch(job: TrainingJob, config: dict, label: str, micro_batch: int | None, locate) -> None:
    """DeepSpeed's triangle, train_batch_size = micro x gradient_accumulation_steps x DP, derived as DeepSpeed
    derives it (guard/job/deepspeed_values.py); an "auto" key is the Trainer's to fill."""
    train, micro, accumulation = (deepspeed_values.count(config.get(k)) for k in deepspeed_values.BATCH_KEYS)
    for field, key, value in (("global_batch", "train_batch_size", train),
                              ("micro_batch", "train_micro_batch_size_per_gpu", micro),
                              ("num_microbatches", "gradient_accumulation_steps", accumulation)):
        if value is not None:
            job.origins[field] = key_origin(label, locate, key)
    if micro_batch:  # the user's what-if: the train batch follows it unless only it can give the accumulation
        micro = micro_batch
        job.origins["micro_batch"] = Origin("cli", "--micro-batch-size")
        train = None if accumulation else train
    auto = any(config.get(k) == "auto" for k in deepspeed_values.BATCH_KEYS)
    dp = job.layout.dp
    if dp is None or auto or job.origin("layout.world").kind == "default":
        # not derivable here: no world, one only assumed (a training config run without a launcher), or "auto"
        # the Trainer fills for whatever world it starts with
        job.micro_batch, job.num_microbatches = micro or 1, accumulation or 1
        job.global_batch = train if dp is None or train else job.micro_batch * job.num_microbatches * dp
        if micro is None:
            job.missing["batch"] = (f"{label}: train_micro_batch_size_per_gpu is "
                                    f"{config.get('train_micro_batch_size_per_gpu')!r}: give --micro-batch-size N")
        job.padded_batches = job.micro_batch > 1
        return
    batch = deepspeed_values.derive(train, micro, accumulation, dp)
    # a derived 0 is kept: DeepSpeed refuses it (job.missing says so, DS302 reports it)
    job.global_batch = batch.train
    job.micro_batch = batch.micro if batch.micro is not None else 1
    job.num_microbatches = batch.accumulation if batch.accumulation is not None else 1
    if batch.derived:
        field = {"train_batch_size": "global_batch", "train_micro_batch_size_per_gpu": "micro_batch",
                 "gradient_accumulation_steps": "num_microbatches"}[batch.derived]
        job.origins[field] = Origin("derived", batch.derived, reason="DeepSpeed derives it from the other batch keys")
    if batch.problem:
        job.missing["batch"] = f"{label}: DeepSpeed refuses the batch: {batch.problem}"
    job.padded_batches = job.micro_batch > 1  # a pad-to-longest collator pads only a batch of several samples
