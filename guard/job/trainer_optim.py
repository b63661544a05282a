"""The optimizer a Trainer's `optim` (axolotl: `optimizer`) names, and the states it keeps per parameter tensor.

transformers 5.24 trainer_optimizer.py maps each name to a class: torch's AdamW (adamw_torch: foreach,
adamw_torch_fused: fused), bitsandbytes' 8-bit and 32-bit optimizers (adamw_bnb_8bit / adamw_8bit /
paged_adamw_8bit, paged_adamw_32bit, lion_8bit, lion_32bit and the paged ones), torch's SGD (momentum 0 unless
optim_args say otherwise). bitsandbytes 0.50 (optim/optimizer.py Optimizer2State/Optimizer1State.init_state, seen on
CPU: tests/test_trainer_optim.py): a tensor of at least min_8bit_size (4096) elements keeps each state as uint8 plus
an fp32 absmax per block of 256 and a 256-entry fp32 quantile map; a smaller one keeps fp32 states; the 32-bit
optimizers keep fp32 states. Paged ones allocate the same bytes in CUDA unified memory (resident while it steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TORCH_ADAMW = {"adamw_torch": "torch", "adamw_hf": "torch", "adamw_torch_fused": "fused",
               "adamw_apex_fused": "fused", "adamw_torch_npu_fused": "fused"}
BNB = {"adamw_bnb_8bit": ("adam", 8), "adamw_8bit": ("adam", 8), "paged_adamw_8bit": ("adam", 8),
       "paged_adamw_32bit": ("adam", 32), "lion_8bit": ("lion", 8), "paged_lion_8bit": ("lion", 8),
       "lion_32bit": ("lion", 32), "paged_lion_32bit": ("lion", 32)}
MIN_8BIT_SIZE, BLOCK, QMAP = 4096, 256, 256  # bitsandbytes defaults (min_8bit_size, blocksize, quantile map)


@dataclass(frozen=True)
class TrainerOptimizer:
    name: str
    family: str  # "adam", "lion", "sgd", or "" (not priced: adafactor, galore_*, ...)
    bits: int = 32  # 8: bitsandbytes' blockwise 8-bit states
    impl: str = "fused"  # torch's AdamW: fused or foreach ("torch")
    paged: bool = False


def named(optim: str) -> TrainerOptimizer:
    key = str(optim).strip().lower()
    if key in TORCH_ADAMW:
        return TrainerOptimizer(key, "adam", impl=TORCH_ADAMW[key])
    if key in BNB:
        family, bits = BNB[key]
        return TrainerOptimizer(key, family, bits, paged=key.startswith("paged_"))
    if key == "sgd":
        return TrainerOptimizer(key, "sgd")
    return TrainerOptimizer(key, "")


def state_bytes(opt: TrainerOptimizer, tensors: list[int], weights_dtype_bytes: int) -> int:
    """Bytes of the optimizer states over parameter tensors of these sizes (torch's: in the weights' dtype)."""
    states = {"adam": 2, "lion": 1, "sgd": 0}[opt.family]
    if opt.name in TORCH_ADAMW or opt.family == "sgd":
        return states * sum(tensors) * weights_dtype_bytes
    if opt.bits == 32:
        return states * sum(tensors) * 4
    total = 0
    for n in tensors:
        if n < MIN_8BIT_SIZE:
            total += states * n * 4
        else:
            total += states * (n + 4 * math.ceil(n / BLOCK) + 4 * QMAP)
    return total
