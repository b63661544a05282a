"""Bytes of a linear weight stored by bitsandbytes (QLoRA's frozen base): 4-bit NF4/FP4 or 8-bit LLM.int8.

From bitsandbytes 0.50.2, measured on CPU in tests/test_lora_memory.py:
- 4-bit (functional.quantize_4bit, Params4bit): two weights per byte; one absmax per block of 64 weights
  (blocksize None -> 64), fp32, and the 16-entry fp32 code table of the quant type, one per tensor. With
  compress_statistics (bnb_4bit_use_double_quant) the absmax values less their mean (an fp32 offset) are
  quantized again by quantize_blockwise(blocksize=256): one uint8 per block of 64 weights, one fp32 absmax per
  256 of those, and the 256-entry fp32 dynamic code.
- 8-bit (Int8Params, has_fp16_weights False): one int8 per weight and one fp32 scale (SCB) per output row.
"""

from __future__ import annotations

import math

BLOCK_4BIT = 64
NESTED_BLOCK = 256
CODE_4BIT = 16 * 4
DYNAMIC_CODE = 256 * 4


def four_bit_bytes(numel: int, double_quant: bool) -> int:
    packed = math.ceil(numel / 2)
    blocks = math.ceil(numel / BLOCK_4BIT)
    if not double_quant:
        return packed + 4 * blocks + CODE_4BIT
    return packed + blocks + 4 * math.ceil(blocks / NESTED_BLOCK) + DYNAMIC_CODE + 4 + CODE_4BIT


def packed_bytes(numel: int) -> int:
    """The 4-bit weight itself, the part that is an nn.Parameter (ZeRO-3 partitions it; the statistics stay)."""
    return math.ceil(numel / 2)


def eight_bit_bytes(fan_in: int, fan_out: int) -> int:
    return fan_in * fan_out + 4 * fan_out


def weight_bytes(bits: int, fan_in: int, fan_out: int, double_quant: bool) -> int:
    return four_bit_bytes(fan_in * fan_out, double_quant) if bits == 4 else eight_bit_bytes(fan_in, fan_out)
