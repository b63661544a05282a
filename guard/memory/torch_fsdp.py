"""torch FSDP states per rank, as torch 2.13's FSDP2 (`fully_shard`) allocates them: for Megatron-LM's
--use-torch-fsdp2 and the HF Trainer's FSDP (job/hf_fsdp.py).

torch/distributed/fsdp/_fully_shard/_fsdp_param.py FSDPParam._init_sharded_param: each parameter is chunked on
dim 0 over the mesh (torch.chunk: ceil(rows / n) a chunk) and every rank allocates the padded chunk (the 0th's size)
in the parameter's dtype; the reduce-scatter writes each rank's gradients into a padded flat buffer of the group
(_fsdp_collectives.py foreach_reduce), so they are padded too; an optimizer's states (torch AdamW: zeros_like of the
DTensor) take the rank's own rows, unpadded. tests/test_fidelity_torch_fsdp.py measures all three on 2 and 3 CPU
ranks to the byte.

Megatron-LM's --use-torch-fsdp2 (megatron/core/distributed/torch_fully_sharded_data_parallel.py; arguments.py
requires PP 1, EP 1, no distributed optimizer): Float16Module casts the model to bf16 before fully_shard shards it
over DP x CP; the mixed-precision optimizer (optimizer/optimizer.py Float16OptimizerWithFloat16Params) keeps an
fp32 main copy of each local shard and Adam's two fp32 moments, and copies the bf16 gradients to fp32 at the step,
held until the next step's zero_grad.
Guard prices Megatron's shards at numel / n: the rows padded to a multiple of n are at most n - 1 a tensor.
"""

from __future__ import annotations

import math


def rows_on(rows: int, n: int, rank: int) -> int:
    """Rows of a dim-0 of `rows` that torch.chunk gives `rank` of `n` (ceil-sized chunks, the last ones short)."""
    chunk = math.ceil(rows / n) if rows else 0
    return max(0, min(chunk, rows - rank * chunk))


def padded_bytes(shapes: list[tuple[int, ...]], n: int, nbytes: int) -> int:
    """Parameters (or gradients) of these shapes on any rank: the padded chunk."""
    return sum(math.ceil(s[0] / n) * math.prod(s[1:]) * nbytes for s in shapes if s)


def local_bytes(shapes: list[tuple[int, ...]], n: int, rank: int, nbytes: int) -> int:
    """An optimizer state of these shapes on `rank`: its own rows, unpadded."""
    return sum(rows_on(s[0], n, rank) * math.prod(s[1:]) * nbytes for s in shapes if s)


def megatron_states(setup, inv) -> dict[str, int]:
    """Megatron --use-torch-fsdp2, one rank: bf16 weights and gradients, fp32 main weights and two moments, all
    sharded over DP x CP; the fp32 gradient copies ("step") from the step until the next zero_grad."""
    from guard.job.training_job import DTYPE_BYTES

    n = max(1, setup.dp * setup.layout.cp)
    p_b = DTYPE_BYTES[setup.params_dtype]
    shard = math.ceil(inv.total / n)
    fp32_copies = 0 if setup.params_dtype == "fp32" else 1
    return {"params": shard * p_b, "grads": shard * p_b, "optimizer": shard * 4 * (2 + fp32_copies),
            "step": shard * 4 * fp32_copies}


def hf_shards(setup) -> int:
    """Ranks an HF Trainer's FSDP strategy shards over: the world, or the node for the hybrid strategies."""
    n = setup.dp
    if setup.hf_fsdp and setup.hf_fsdp.startswith("hybrid"):
        n = min(n, max(1, setup.layout.gpus_per_node))
    return max(1, n)


def hf_states(setup, terms: dict[str, int]) -> dict[str, int]:
    """The HF Trainer's states under torch FSDP, from torch DDP's (ddp_states.py: weights, gradients and torch's
    optimizer states in the dtype the weights were loaded in; no DDP gradient buckets): full_shard and hybrid_shard
    shard all three, shard_grad_op (and hybrid_shard_zero2) keeps the weights whole, no_shard shards nothing."""
    n = hf_shards(setup)
    strategy = setup.hf_fsdp
    out = {k: v for k, v in terms.items() if not k.startswith("DDP gradient buckets")}
    for key in out:
        whole = strategy == "no_shard" or (key == "parameters" and strategy in ("shard_grad_op", "hybrid_shard_zero2"))
        out[key] = out[key] if whole else math.ceil(out[key] / n)
    return out


def gathered(setup, inv, largest_layer: int) -> tuple[float, float]:
    """(at the loss, in backward) unsharded bytes: the embedding and output weights whole at the loss, and in
    backward a layer's unit re-gathered with the next one prefetched and its bf16 gradients whole until their
    reduce-scatter (reshard_after_forward, torch's default). The same shape as Megatron FSDP's units
    (megatron_fsdp.gathered); not measured on CPU: Megatron's wrapper builds its device mesh on CUDA."""
    from guard.job.training_job import DTYPE_BYTES
    from guard.memory.megatron_fsdp import edge_params

    p_b = DTYPE_BYTES[setup.params_dtype]
    if setup.hf_fsdp in ("no_shard", "shard_grad_op", "hybrid_shard_zero2"):
        # no_shard holds the weights whole; SHARD_GRAD_OP keeps every unit's gathered weights from its forward
        # to its backward (no reshard after forward): the whole model in the compute dtype
        whole = 0.0 if setup.hf_fsdp == "no_shard" else inv.total * p_b
        return whole, whole + largest_layer * p_b
    edge = edge_params(inv)
    return edge * p_b, (edge + 3 * largest_layer) * p_b
