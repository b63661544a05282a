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
