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

from guard.job.adapter import linear_modules
from guard.job.training_job import DTYPE_BYTES, TrainingJob

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


def working_set(setup: TrainingJob) -> float:
    """The largest transient of a quantized base layer's matmul (bitsandbytes 0.50.2 autograd/_functions.py).

    4-bit (MatMul4Bit): backward dequantizes the whole weight, `F.dequantize_4bit(B, state)`, to the compute
    dtype (bf16: LLaMA-Factory, axolotl and TRL set bnb_4bit_compute_dtype to the training dtype), after the
    nested absmax is dequantized to fp32; forward does the same on CUDA beyond 1,536 tokens (backends/cuda/ops.py
    _dequant_linear_fallback). 8-bit (MatMul8bitLt): forward quantizes the input (an fp16 copy, int8 values, an
    fp32 scale per row); backward rebuilds the weight in the input's dtype (`state.CB.to(dtype, copy=True)`).
    """
    adapter = setup.adapter
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    out = 0.0
    for _, fan_in, fan_out in linear_modules(setup.arch):
        weight = act * fan_in * fan_out
        if adapter.quant_bits == 4:
            nested = 4 * math.ceil(fan_in * fan_out / BLOCK_4BIT) if adapter.double_quant else 0
            out = max(out, weight + nested)
        else:
            out = max(out, weight, (2 + 1) * tokens * fan_in + 4 * tokens)
    return out
