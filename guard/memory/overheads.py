"""Buffers and runtime terms: each named, with its default, where the default comes from, and an override."""

from __future__ import annotations

import math
from dataclasses import dataclass

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import megatron_fsdp, workspaces
from guard.memory.zero_layout import largest_tensor
from guard.memory.zero_paths import bucket_terms
from guard.units import MIB


@dataclass(frozen=True)
class Default:
    value: float
    unit: str  # "bytes" or "fraction"
    source: str


# Runtime terms sit outside torch's allocated bytes; `guard estimate --set NAME=VALUE` overrides them.
RUNTIME_DEFAULTS = {
    "cuda_context": Default(512 * MIB, "bytes",
                            "CUDA context + kernel images with lazy loading (CUDA >= 11.7): commonly 300-600 MiB "
                            "as nvidia-smi shows for a process that has only initialised torch.cuda; measure yours"),
    "nccl_per_group": Default(64 * MIB, "bytes",
                              "NCCL communicator buffers: NCCL_BUFFSIZE 4 MiB per channel and peer (NCCL docs), "
                              "a few channels per communicator; one per process group the rank is in"),
    "fragmentation": Default(0.05, "fraction",
                             "caching-allocator reserved-but-unallocated memory, as a fraction of the allocated "
                             "peak (Megatron's theoretical_memory_usage adds 5%); expandable_segments lowers it"),
}
BUFFER_DEFAULTS = {
    "cublas_workspace": Default(32 * MIB, "bytes", "one torch cuBLAS workspace (per thread and stream): 32 MiB on "
                                                   "sm_90, 8.125 MiB elsewhere, or CUBLAS_WORKSPACE_CONFIG "
                                                   "(workspaces.py)"),
}
# DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py, 0.19.8)
ZERO_DEFAULTS = {"reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
                 "stage3_max_live_parameters": 1e9, "stage3_param_persistence_threshold": 1e5,
                 "sub_group_size": 1e9}


def setting(setup: TrainingJob, name: str) -> float:
    if name in setup.overrides:
        return setup.overrides[name]
    default = RUNTIME_DEFAULTS.get(name) or BUFFER_DEFAULTS.get(name)
    return default.value


def zero_bucket(setup: TrainingJob, name: str) -> float:
    return float(setup.zero_buckets.get(name, ZERO_DEFAULTS[name]))


def process_groups(setup: TrainingJob) -> int:
    """Process groups with more than one member that a rank joins (each gets an NCCL communicator)."""
    sizes = [setup.layout.tp, setup.layout.pp, setup.layout.cp, setup.dp, setup.dp * setup.layout.cp]
    if setup.arch.is_moe:
        sizes += [setup.layout.ep, setup.layout.expert_tp, setup.layout.expert_dp]
    if setup.layout.pp > 1:
        sizes.append(2)  # embedding group (first + last stage)
    return sum(1 for size in sizes if size > 1)


def buffers(setup: TrainingJob, rank_params: int, largest_layer_params: int, replicated_params: int,
            pipe_buffers: int) -> tuple[dict[str, float], dict[str, float]]:
    """(persistent buffers, optimizer-step transients) on one rank, by name."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    p_b = DTYPE_BYTES[setup.params_dtype]
    out: dict[str, float] = dict(workspaces.gemm_workspaces(setup))
    shared = workspaces.global_memory_buffer(setup)
    if shared:
        out["Megatron global memory buffer"] = shared
    step: dict[str, float] = {}
    hidden_msg = act * setup.seq_length / setup.layout.seq_shards * setup.micro_batch * setup.arch.hidden
    if setup.layout.sequence_parallel:
        hidden_msg /= setup.layout.tp
    if setup.layout.pp > 1:
        count = pipe_buffers if setup.ds_pipeline else 2
        out["pipeline P2P buffers"] = 2 * count * hidden_msg if setup.ds_pipeline else count * hidden_msg
    if setup.framework == "megatron":
        bucket = max(4e7, 1e6 * setup.dp * setup.layout.cp)  # distributed_data_parallel.py's default bucket size
        if setup.distributed_optimizer:  # each bucket is padded to a multiple of lcm(DP x CP, 128) elements
            pad = math.lcm(max(1, setup.dp * setup.layout.cp // setup.optimizer_instances), 128)
            out["gradient-buffer padding"] = math.ceil(rank_params / bucket) * pad * (
                p_b + DTYPE_BYTES[setup.grads_dtype])
        out.update(megatron_fsdp.double_buffer(setup, largest_layer_params))
        return out, step
    stage = setup.zero_stage
    if stage in (1, 2):
        bucket = zero_bucket(setup, "reduce_bucket_size")
        largest = largest_tensor(setup)
        # the reduce bucket(s), or the gradients waiting in it, and a gradient larger than the bucket beside it:
        # which, and how many, follow contiguous_gradients / overlap_comm (zero_paths.py)
        out.update(bucket_terms(setup, bucket, largest, p_b))
        if setup.offload_optimizer != "none":  # temp_grad_buffer_for_gpu_offload: the largest tensor's gradient
            out["offload gradient staging (largest tensor)"] = largest * p_b
        step["ZeRO all-gather bucket"] = min(zero_bucket(setup, "allgather_bucket_size"), rank_params) * p_b
    if stage == 3:
        live = min(zero_bucket(setup, "stage3_max_live_parameters"),
                   largest_layer_params + zero_bucket(setup, "stage3_prefetch_bucket_size"))
        out["ZeRO-3 gathered parameters (live + prefetch)"] = min(live, rank_params) * p_b
        # with Ulysses the engine reduces in seq_parallel_communication_data_type (fp32 by default:
        # runtime/engine.py), and ZeRO-3's reduce bucket is allocated in it (zero/stage3.py ipg bucket)
        comm_b = 4 if (setup.layout.ulysses or 1) > 1 else p_b
        out["ZeRO-3 reduce bucket"] = zero_bucket(setup, "reduce_bucket_size") * comm_b
        out["ZeRO-3 persistent small parameters"] = replicated_params * p_b
    return out, step


def runtime(setup: TrainingJob, allocated_peak: float) -> dict[str, float]:
    return {"CUDA context": setting(setup, "cuda_context"),
            "NCCL communicators": setting(setup, "nccl_per_group") * process_groups(setup),
            "allocator fragmentation": setting(setup, "fragmentation") * allocated_peak}
