"""What runs once a step besides the pipeline and the optimizer: the passes over gradients and parameters that
clipping and logging ask for, the gradient buffer's reset, and the host issuing every kernel.

Megatron-LM (training.py train_step, optimizer/clip_grads.py, core/optimizer/optimizer.py): with --clip-grad > 0
the optimizer takes the L2 norm of the gradients it owns (one read of its fp32 gradient shard) and all-reduces it
over the model-parallel and DP groups; --log-num-zeros-in-grad counts zeros in the same shard; --log-params-norm
takes the norm of every parameter the rank holds (calc_params_l2_norm, fp32 main parameters) and all-reduces it;
zero_grad_buffer resets the whole gradient buffer each step. Each scalar all-reduce costs what NCCL's smallest
measured message costs (its latency).
"""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import Inventory
from guard.plan.collectives import collective_seconds, spans_nodes
from guard.plan.hardware import Hardware
from guard.plan.kernels import table


def passes(job: TrainingJob, hw: Hardware, inv: Inventory) -> dict[str, float]:
    """Seconds of the per-step passes on one rank holding `inv` (its parameters)."""
    lay, step = job.layout, job.step
    sharded = job.distributed_optimizer or job.zero_stage >= 1
    owned = inv.total / ((lay.dp or 1) * lay.seq_shards) if sharded else inv.total
    grad_bytes = DTYPE_BYTES[job.grads_dtype]
    scalar = collective_seconds(hw, "all_reduce", 8, max(2, lay.world or 1), spans_nodes(lay, "dp", hw.nvlink_domain)) \
        if (lay.world or 1) > 1 else 0.0
    out: dict[str, float] = {}
    if step.clip_grad > 0:
        out["gradient norm (--clip-grad)"] = hw.memory_seconds(owned * grad_bytes) + scalar
    if step.log_num_zeros_in_grad:
        out["zeros in gradients (--log-num-zeros-in-grad)"] = hw.memory_seconds(owned * grad_bytes) + scalar
    if step.log_params_norm:
        out["parameter norm (--log-params-norm)"] = hw.memory_seconds(inv.total * 4) + scalar
    if job.framework != "deepspeed":
        out["gradient buffer reset"] = hw.memory_seconds(inv.total * grad_bytes)
    return {name: seconds for name, seconds in out.items() if seconds > 0}


def layer_kernels(job: TrainingJob, moe: bool) -> tuple[int, int]:
    """(forward, backward) kernels one layer of the kind issues for one microbatch."""
    counts = table()["host"]["kernels_per_layer"]
    if moe:
        row = counts["moe"]
        local = 1 if job.moe_grouped_gemm else max(1, (job.arch.num_experts or 1) // max(1, job.layout.ep or 1))
        forward = row["forward"] + local * row["per_expert"]["forward"]
        backward = row["backward"] + local * row["per_expert"]["backward"]
    else:
        row = counts["rmsnorm" if job.arch.norm == "rmsnorm" else "layernorm"]
        forward, backward = row["forward"], row["backward"]
    if job.arch.hidden_dropout > 0 or job.arch.attention_dropout > 0:
        forward += counts["dropout"]["forward"]
        backward += counts["dropout"]["backward"]
    return forward, backward


def outside_kernels() -> tuple[int, int]:
    """(forward, backward) kernels of the embedding, final norm, output layer and loss."""
    row = table()["host"]["kernels_per_layer"]["outside"]
    return row["forward"], row["backward"]


def recomputed_core_kernels(job: TrainingJob) -> int:
    """Kernels selective recompute issues again per layer: the attention core's forward."""
    return table()["host"]["kernels_per_layer"]["selective_recompute"][
        "unfused" if job.attention == "unfused" else "flash"]
