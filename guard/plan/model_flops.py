"""Model FLOPs of one training step: what MFU divides by (no recompute, the full attention square).

The count of Narayanan et al. 2021 (eq. 3 without recomputation) generalised: per token and layer the
forward runs 2 x (QKV + projection + MLP weights) FLOPs and 2 x 2 x s x (heads x head dim) in attention;
the backward twice the forward; the LM head 2 x h x V forward. For GPT it is
72 B s L h^2 (1 + s/(6h) + V/(12 L h)).
"""

from __future__ import annotations

from functools import lru_cache

from guard.job.architecture import Architecture


@lru_cache(maxsize=64)  # the planner asks for the same model over and over
def forward_flops_per_token(arch: Architecture, seq_length: int, vocab: int) -> float:
    h, q, kv = arch.hidden, arch.query_size, arch.kv_size
    total = 0.0
    glu = 2 if arch.gated_mlp else 1
    for index in range(arch.num_layers):
        total += 2 * h * (q + 2 * kv) + 2 * q * h + 4 * seq_length * q
        if arch.is_moe_layer(index):
            ffn = arch.moe_ffn_hidden or arch.ffn_hidden
            total += 2 * h * arch.num_experts + arch.moe_topk * 2 * h * ffn * (glu + 1)
            total += 2 * h * arch.shared_expert_ffn * (glu + 1)
        else:
            total += 2 * h * arch.ffn_hidden * (glu + 1)
    return total + 2 * h * vocab


def step_model_flops(arch: Architecture, seq_length: int, vocab: int, sequences: int) -> float:
    """Forward and backward FLOPs of `sequences` sequences (the global batch)."""
    return 3 * forward_flops_per_token(arch, seq_length, vocab) * seq_length * sequences
