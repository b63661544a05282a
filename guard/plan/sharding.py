"""After the last backward: gradient sync, parameter gathers, the optimizer step, offload; seconds by name.

Megatron (distributed/distributed_data_parallel.py, param_and_grad_buffer.py): gradients are reduced over
DP x CP in buckets of max(40M, 1M x DP) parameters, all-reduce, or reduce-scatter with the distributed
optimizer, which then all-gathers the updated 16-bit parameters. With --overlap-grad-reduce the buckets
are reduced during the last microbatch's backward (earlier microbatches run under no_sync), so what stays
exposed is the larger of the last bucket and what the backward cannot hide; --overlap-param-gather hides
the gather behind the next forward the same way. Expert parameters reduce over the expert-DP group.
DeepSpeed (runtime/zero/stage_1_and_2.py, stage3.py): stage 0 all-reduces after the backward; stage 1
reduces at the accumulation boundary and stage 2 after every microbatch, both hidden behind that
backward with overlap_comm; stage 3 gathers every layer's parameters for the forward and again for the
backward and reduce-scatters the gradients, each microbatch, prefetched behind compute. Offloaded
optimizer states step on the CPU (DeepSpeedCPUAdam reads parameter, gradient and both moments in fp32 and
writes three back: 28 bytes a parameter, bound by the node's memory bandwidth shared by its GPUs), with
the gradients down and the 16-bit parameters up the host link.
"""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import EXPERT, Inventory
from guard.plan.collectives import collective_seconds, spans_nodes
from guard.plan.hardware import Hardware

BUCKET_MIN_PARAMS = 40_000_000  # megatron-core DistributedDataParallelConfig.bucket_size default
ADAM_BYTES = 4 * 4 + 3 * 4 + 2  # fused Adam: read param, grad, m, v (fp32); write param, m, v and the 16-bit copy
SGD_BYTES = 3 * 4 + 2 * 4 + 2
CPU_ADAM_BYTES = 4 * 4 + 3 * 4


def after_backward(job: TrainingJob, hw: Hardware, inv: Inventory, stage) -> dict[str, float]:
    lay = job.layout
    expert = inv.bucket(EXPERT)
    dense = inv.total - expert
    groups = [(dense, (lay.dp or 1) * lay.seq_shards, spans_nodes(lay, "dp", hw.nvlink_domain)),
              (expert, lay.expert_dp or 1, spans_nodes(lay, "expert_dp", hw.nvlink_domain))]
    out: dict[str, float] = {}
    deepspeed = job.framework == "deepspeed" or (job.zero_stage > 0 and not job.distributed_optimizer)
    for params, ranks, across in groups:
        if params and deepspeed:
            _deepspeed(job, hw, params, ranks, across, stage, out)
        elif params:
            _megatron(job, hw, params, ranks, across, stage, out)
    sharded = job.distributed_optimizer or job.zero_stage >= 1
    shard = dense / ((lay.dp or 1) * lay.seq_shards if sharded else 1) + expert / (lay.expert_dp or 1 if sharded
                                                                                     else 1)
    if job.offload_optimizer != "none":
        per_node = hw.host_memory_bytes_per_s / max(1, min(lay.gpus_per_node, lay.world or 1))
        _add(out, "CPU optimizer step (offload)", shard * CPU_ADAM_BYTES / per_node)
        _add(out, "offload transfers (gradients down, parameters up)", hw.host_link_seconds(shard * (4 + 2)))
    else:
        per_param = SGD_BYTES if job.optimizer == "sgd" else ADAM_BYTES
        _add(out, "optimizer step", hw.memory_seconds(shard * per_param))
    return out


def _add(out: dict[str, float], name: str, seconds: float) -> None:
    if seconds > 0:
        out[name] = out.get(name, 0.0) + seconds


def _hidden(comm: float, behind: float, pieces: int) -> float:
    """Exposed seconds of `comm` overlapped with `behind` in `pieces` buckets: the last bucket waits."""
    return max(comm / max(1, pieces), comm - behind)


def _megatron(job: TrainingJob, hw: Hardware, params: int, ranks: int, across: bool, stage, out) -> None:
    grad = params * DTYPE_BYTES[job.grads_dtype]
    buckets = max(1, params // max(BUCKET_MIN_PARAMS, 1_000_000 * ranks))
    last_backward = stage.backward[-1] if stage.backward else 0.0
    first_forward = stage.forward[0] if stage.forward else 0.0
    if job.distributed_optimizer:
        reduce = collective_seconds(hw, "reduce_scatter", grad, ranks, across)
        gather = collective_seconds(hw, "all_gather", params * 2, ranks, across)
        _add(out, "DP gradient reduce-scatter", _hidden(reduce, last_backward, buckets)
             if job.overlap_grad_reduce else reduce)
        _add(out, "DP parameter all-gather", _hidden(gather, first_forward, buckets)
             if job.overlap_param_gather else gather)
    else:
        reduce = collective_seconds(hw, "all_reduce", grad, ranks, across)
        _add(out, "DP gradient all-reduce", _hidden(reduce, last_backward, buckets)
             if job.overlap_grad_reduce else reduce)


def _deepspeed(job: TrainingJob, hw: Hardware, params: int, ranks: int, across: bool, stage, out) -> None:
    m, stage_id = job.num_microbatches, job.zero_stage
    grad = params * DTYPE_BYTES[job.grads_dtype if job.grads_dtype != "fp32" else job.params_dtype]
    overlap = bool(job.zero_keys.get("overlap_comm", stage_id == 3))
    backward, forward = sum(stage.backward), sum(stage.forward)
    gather = collective_seconds(hw, "all_gather", params * 2, ranks, across)
    if stage_id == 0:
        _add(out, "DP gradient all-reduce", collective_seconds(hw, "all_reduce", grad, ranks, across))
        return
    reduce = collective_seconds(hw, "reduce_scatter", grad, ranks, across)
    if stage_id == 1:
        _add(out, "ZeRO gradient reduce", _hidden(reduce, backward, 4) if overlap else reduce)
    elif stage_id == 2:
        _add(out, "ZeRO gradient reduce (every microbatch)", m * (_hidden(reduce, backward, 4) if overlap
                                                                  else reduce))
    if stage_id <= 2:
        _add(out, "ZeRO parameter all-gather", gather)
        return
    per_micro = 2 * gather + reduce  # forward gather, backward gather, gradient reduce-scatter
    if job.offload_param != "none":
        per_micro += 2 * hw.host_link_seconds(params * 2 / ranks)
    _add(out, "ZeRO-3 gathers and reduce (exposed)", m * max(per_micro / max(1, job.arch.num_layers),
                                                             per_micro - forward - backward))
