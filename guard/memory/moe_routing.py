"""How many token copies an expert-parallel rank's experts receive for one microbatch: balanced, under a stated
imbalance, or capped by a capacity factor (megatron-core 0.16.1 transformer/moe/moe_utils.py)."""

from __future__ import annotations

import math

from guard.job.training_job import TrainingJob


def routed_tokens(setup: TrainingJob, tokens: float) -> float:
    """Token copies the busiest expert-parallel rank's experts receive for one microbatch, from `tokens` routed on
    each rank. Dropless: tokens x top-k when balanced, times the stated imbalance (--moe-imbalance) with EP > 1.
    With --moe-expert-capacity-factor C, moe_utils.py apply_router_token_dropping keeps at most
    get_capacity(tokens x k, E, C) = ceil(tokens x k / E x C) per expert on each source rank (and never more than
    the tokens there), so the experts of one rank receive at most E x that over the EP group; with
    --moe-pad-expert-input-to-capacity every expert's map is the capacity mask itself: exactly that many."""
    e, k = setup.arch.num_experts or 1, setup.arch.moe_topk
    balanced = tokens * k
    if setup.moe_capacity_factor is None:
        return balanced * (setup.step.moe_imbalance if (setup.layout.ep or 1) > 1 else 1.0)
    per_expert = min(math.ceil(balanced / e * setup.moe_capacity_factor), tokens)
    return e * per_expert if setup.moe_pad_to_capacity else min(balanced, e * per_expert)
