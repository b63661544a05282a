"""How DeepSpeed ZeRO lays one rank's parameters out: flat groups, alignment padding, partitions, grad buffers.

From deepspeed/runtime/zero/stage_1_and_2.py and stage3.py (0.19.8), checked against a census of the real
engine (tests/fidelity/deepspeed_zero.py):
- Stages 1-2 flatten each optimizer param group, pad it to a multiple of 2 x DP elements (4-byte alignment
  of every 16-bit partition), and give each rank an equal slice. With contiguous gradients the rank's
  gradient buffer holds every parameter that touches its slice *whole*, so a tensor that straddles a
  partition boundary is kept in full by both ranks.
- Stage 3 partitions every tensor on its own: ceil(numel / DP) elements per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from guard.job.training_job import TrainingJob


@dataclass(frozen=True)
class ZeroLayout:
    """Elements each rank holds, summed over the optimizer's param groups."""

    flat: int  # stages 1-2: every padded flat group (the model's 16-bit weights live in it)
    partition: int  # a rank's slice of the optimizer states (equal on every rank)
    grad_buffers: list[int]  # per DP rank: stages 1-2 the whole tensors touching its slice; stage 3 its partition
    padding: int  # elements added for alignment (flat padding, or per-tensor rounding under stage 3)
    largest_group_partition: int  # stage 3 sizes its fp32 gradient buffer for the largest (sub) group


def zero_layout(groups: list[list[int]], dp: int, stage: int) -> ZeroLayout:
    """groups: numel of each parameter tensor, per optimizer param group, in order."""
    flat = part_total = padding = largest_part = 0
    grads = [0] * dp
    for group in groups:
        total = sum(group)
        if stage == 3:
            shard = sum(math.ceil(n / dp) for n in group)
            part_total += shard
            largest_part = max(largest_part, shard)
            grads = [g + shard for g in grads]
            padding += shard * dp - total
            continue
        alignment = 2 * dp  # nccl_start_alignment_factor x DP (stage_1_and_2.py)
        padded = math.ceil(total / alignment) * alignment
        part = padded // dp
        flat += padded
        part_total += part
        largest_part = max(largest_part, part)
        padding += padded - total
        start = 0
        for n in group:  # contiguous_gradients: every tensor touching a rank's slice is kept whole there
            if n:
                for rank in range(start // part, min(dp - 1, (start + n - 1) // part) + 1):
                    grads[rank] += n
            start += n
    return ZeroLayout(flat, part_total, grads, padding, largest_part)


def layout_for(groups: list[list[int]] | None, psi: int, dp: int, stage: int) -> ZeroLayout:
    """The per-tensor layout when the model's tensors are known, else the model as one aligned flat group
    whose partitions hold no straddling tensor (exact up to one tensor per rank)."""
    if groups and sum(map(sum, groups)) == psi:
        return zero_layout(groups, dp, stage)
    if stage == 3:
        shard = math.ceil(psi / dp)
        return ZeroLayout(0, shard, [shard] * dp, shard * dp - psi, shard)
    padded = math.ceil(psi / (2 * dp)) * 2 * dp
    return ZeroLayout(padded, padded // dp, [padded // dp] * dp, padded - psi, padded // dp)


def largest_tensor(setup: TrainingJob) -> int:
    """Elements of the model's largest parameter tensor (ZeRO sizes its staging buffers by it); without the
    per-tensor list, the word embedding, which is the largest tensor of every model guard knows."""
    return max((max(g) for g in setup.param_groups or [] if g), default=setup.vocab * setup.arch.hidden)
