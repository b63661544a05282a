"""The share of each GPU a colocated vLLM engine (TRL GRPO/RLOO with vllm_mode colocate) can take beside a planned
layout. vLLM reserves vllm_gpu_memory_utilization x the GPU's total at start-up for its weights, activations and
KV cache (TRL grpo_trainer.py builds LLM(gpu_memory_utilization=...), tensor_parallel_size
vllm_tensor_parallel_size, 1 by default). The planner lowers a written share that leaves no layout room, never
below what the engine cannot start without: its 16-bit weights and the KV cache of one whole sequence (vLLM
refuses a max_model_len its KV cache cannot hold). Generation is not priced in the step time, so among the layouts
that fit it prefers the one leaving the engine the most (more sequences decode at once), then the fastest."""

from __future__ import annotations

from dataclasses import replace

STEP = 0.01  # shares are written with two decimals


def floor(job, gpu) -> float:
    """The share of one GPU the engine cannot start below: its whole 16-bit weights, and K and V of every layer
    for one sequence of the job's length."""
    from guard.memory.params import model_param_count
    from guard.memory.post_training import kv_bytes

    return (model_param_count(job.arch) * 2 + kv_bytes(job.arch, 2, job.seq_length)) / gpu.memory_bytes


def largest(training_peak: int, capacity: int, gpu) -> float:
    """The largest share, in steps of 0.01, that leaves `training_peak` room in `capacity`."""
    return int(max(0.0, (capacity - training_peak) / gpu.memory_bytes) / STEP) * STEP


def with_share(job, share: float):
    """The job with its colocated engine at `share`."""
    return replace(job, post_training=replace(job.post_training, vllm_share=round(share, 2)))


def lowered(job, gpu) -> tuple[object, float] | None:
    """(the job with its engine at the floor, rounded up; that share) when its written share is above it; None
    when there is nothing to lower."""
    post = job.post_training
    if post is None or post.vllm_share is None:
        return None
    least = -(-floor(job, gpu) // STEP) * STEP
    return (with_share(job, least), least) if least < post.vllm_share else None
