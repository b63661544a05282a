"""Values Megatron derives from its flags (validate_args, TransformerConfig, the tokenizer), as pure functions."""

from __future__ import annotations

import math


def ffn_hidden_size(hidden: int, swiglu: bool) -> int:
    """validate_args: 4h, or for SwiGLU int(4h * 2/3 / 64) * 64 (keeps the parameter count close)."""
    return int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden


def kv_channels(hidden: int, heads: int) -> int:
    return hidden // heads


def padded_vocab_size(vocab: int, divisible_by: int, tp: int, null_tokenizer: bool = False) -> int:
    """megatron/training/tokenizer: pad to a multiple of divisible_by x TP (NullTokenizer adds one EOD)."""
    if null_tokenizer:
        vocab += 1
    multiple = divisible_by * tp
    return int(math.ceil(vocab / multiple) * multiple)


def data_parallel_size(world: int, tp: int, pp: int, cp: int = 1, extra: int = 1) -> int:
    return world // (tp * pp * cp * extra)


def num_microbatches(global_batch: int, micro_batch: int, dp: int) -> int:
    return global_batch // (micro_batch * dp)


def stage_layers(num_layers: int, pp: int, first: int | None, last: int | None,
                 account_embedding: bool = False, account_loss: bool = False) -> list[int] | None:
    """Transformer layers per pipeline stage as megatron-core assigns them (None: not buildable).

    Uneven: the first/last stage take the given counts, the middle stages share the rest evenly.
    Accounting flags count the embedding / loss as one layer of the first / last stage.
    """
    if pp < 1:
        return None
    if first is None and last is None:
        total = num_layers + int(account_embedding) + int(account_loss)
        if total % pp:
            return None
        per = total // pp
        stages = [per] * pp
        stages[0] -= int(account_embedding)
        stages[-1] -= int(account_loss)
        return stages
    middle_stages = pp - (first is not None) - (last is not None)
    remaining = num_layers - (first or 0) - (last or 0)
    if middle_stages < 0 or remaining < 0 or bool(remaining) != bool(middle_stages > 0):
        return None
    if middle_stages and remaining % middle_stages:
        return None
    per = remaining // middle_stages if middle_stages else 0
    stages = [per] * middle_stages
    if first is not None:
        stages.insert(0, first)
    if last is not None:
        stages.append(last)
    return stages
