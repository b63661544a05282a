"""Megatron FSDP (--use-megatron-fsdp): which states its buffers shard, and the units it gathers during the step.

megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py (megatron-core 0.16.1),
ParamAndGradBuffer._init_each_parameter_group_buffers: per parameter group, a model-weight buffer (the
parameter dtype), a main-weight buffer (fp32: preserve_fp32_weights) and a main-grad buffer (fp32 when
gradients reduce in fp32, which --bf16 implies); the strategy decides which are sharded over the group's
data-parallel ranks (DP x CP, or the expert data-parallel group for experts):

    strategy             model weights  main weights + optimizer  main grads
    no_shard             full           full                      full
    optim                full           sharded                   full
    optim_grads          full           sharded                   sharded
    optim_grads_params   sharded        sharded                   sharded

Sharded weights are all-gathered into temporary buckets for each FSDP unit (mcore_fsdp_adapter.py: every
TransformerLayer under optim_grads_params) while it runs, the next unit prefetched; the parameters outside the
units (embeddings, output layer, final norm) are gathered for the whole forward and backward; a unit's
gradients are whole until they are reduce-scattered.
"""

from __future__ import annotations

import math

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import Inventory

STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
COMM_UNIT_FLOOR = 1_000_000_000
EDGE_ITEMS = ("word embeddings", "position embeddings", "final norm", "output layer (LM head)",
              "output layer (tied copy of the word embeddings)")


def sharded(setup: TrainingJob) -> tuple[bool, bool, bool]:
    """(model weights, main weights and optimizer, main grads) sharded under the job's strategy."""
    index = STRATEGIES.index(setup.fsdp_sharding)
    return index >= 3, index >= 1, index >= 2


def groups(setup: TrainingJob) -> tuple[int, int]:
    """The data-parallel sizes the dense and the expert buffers shard over."""
    return max(1, setup.dp * setup.layout.cp), max(1, setup.layout.expert_dp or 1)


def per_rank(setup: TrainingJob, inv: Inventory, nbytes: float, shard: bool) -> int:
    if not shard:
        return math.ceil(inv.total * nbytes)
    dense_dp, expert_dp = groups(setup)
    expert = inv.total - inv.dense
    return math.ceil(inv.dense * nbytes / dense_dp) + math.ceil(expert * nbytes / expert_dp)


def edge_params(inv: Inventory) -> int:
    """The rank's parameters outside the layers' units: embeddings, final norm, output layer."""
    return sum(n for (_, item), n in inv.items.items() if item in EDGE_ITEMS)


def gathered(setup: TrainingJob, inv: Inventory, largest_layer: int, units: int = 1) -> tuple[float, float]:
    """Unsharded buckets alive (at the loss, during backward); nothing when the weights are whole.

    At the loss the last unit has been released (its forward post-hook) and only the parameters outside the
    units are whole. In backward a unit is re-gathered with the next ones prefetched (prefetch_window); its
    gradient is whole beside the output layer's bucket, which waits in the reduce-scatter queue (up to the
    communication unit's elements, megatron_fsdp.py's suggested_RS_queue_capacity)."""
    weights, _, grads_sharded = sharded(setup)
    if not weights:
        return 0.0, 0.0
    p_b, g_b = DTYPE_BYTES[setup.params_dtype], DTYPE_BYTES[setup.grads_dtype]
    edge = edge_params(inv)
    if setup.fsdp_double_buffer:  # the units' weights and gradients live in the persistent pools (double_buffer)
        return edge * p_b, edge * p_b + (output_bucket(setup, inv) * g_b if grads_sharded else 0.0)
    window = prefetch_window(setup, inv, largest_layer, units)
    grad_whole = (output_bucket(setup, inv) + largest_layer) * g_b if grads_sharded else 0.0
    return edge * p_b, (edge + window * largest_layer) * p_b + grad_whole


def double_buffer(setup: TrainingJob, largest_layer: int) -> dict[str, float]:
    """--fsdp-double-buffer: FixedPoolAllocator pools of two units for the gathered weights and for the whole
    gradients (param_and_grad_buffer.py, size UB_BUFFER_NUM = 2), allocated at first use and kept for good."""
    if not (setup.fsdp_double_buffer and setup.fsdp_sharding == "optim_grads_params"):
        return {}
    p_b, g_b = DTYPE_BYTES[setup.params_dtype], DTYPE_BYTES[setup.grads_dtype]
    return {"Megatron FSDP double buffer (two units' weights and gradients)": 2 * largest_layer * (p_b + g_b)}


def comm_unit(setup: TrainingJob, inv: Inventory, units: int) -> int:
    """megatron_fsdp.py: --suggested-communication-unit-size, else twice the mean unit's elements, at least 1e9
    (the code's max(): a floor, though its comment says cap)."""
    if setup.fsdp_comm_unit:
        return setup.fsdp_comm_unit
    return max(COMM_UNIT_FLOOR, (inv.total - edge_params(inv)) // max(1, units) * 2)


def prefetch_window(setup: TrainingJob, inv: Inventory, largest_layer: int, units: int) -> int:
    """Units gathered at once in backward: the current one and those the all-gather prefetches until they reach
    half the communication unit (AllGatherPipeline.all_gather_params, suggested_AG_prefetch_size), no more than
    the rank has; --fsdp-double-buffer holds two (need_skip_prefetch), in its pools."""
    if largest_layer <= 0 or units <= 1:
        return min(units, 1)
    prefetched = min(units - 1, math.ceil(comm_unit(setup, inv, units) // 2 / largest_layer))
    return 1 + (min(prefetched, 1) if setup.fsdp_double_buffer else prefetched)


def output_bucket(setup: TrainingJob, inv: Inventory) -> int:
    """Elements of the gradient bucket that holds the output layer (the tied word embeddings without one): the
    parameters outside the units, in registration order, close a bucket once it reaches the bucket size
    (_get_parameter_groups; training.py's default max(4e7, 1e6 x DP x CP), none without --overlap-grad-reduce);
    a weight shared between stages gets a bucket of its own."""
    sizes = [(item, n) for item in EDGE_ITEMS for (_, name), n in inv.items.items() if name == item]
    limit = max(40_000_000, 1_000_000 * setup.dp * setup.layout.cp) if setup.overlap_grad_reduce else None
    shared = setup.layout.pp > 1 and setup.arch.tied_embeddings
    target = next((item for item, _ in reversed(sizes) if item.startswith("output layer")), "word embeddings")
    bucket = 0
    for item, n in sizes:
        if shared and item in ("word embeddings", "output layer (tied copy of the word embeddings)"):
            if item == target:
                return n
            continue
        bucket += n
        if item == target:
            return bucket
        if limit and bucket >= limit:
            bucket = 0
    return 0
