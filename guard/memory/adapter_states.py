"""Model states of a LoRA / QLoRA job per rank: ZeRO (or DDP) over the adapter alone, the frozen base as stored.

- Only the adapter reaches the optimizer (the HF Trainer hands it the parameters that require grad), so
  gradients, fp32 masters and moments, and ZeRO-1/2's flat groups, cover the adapter tensors alone:
  states.zero_states prices them, as for any model, from their own tensor list.
- The adapter's dtype. peft creates it in fp32 (autocast_adapter_dtype; LLaMA-Factory's adapter.py upcasts
  trainable parameters too). DeepSpeed's engine then casts every floating parameter to the bf16/fp16 of its
  config (engine.py _cast_module_mixed_precision), except in a model built under zero.Init, which the HF
  Trainer does for ZeRO-3 (is_deepspeed_zero3_enabled): there the adapter stays fp32. Without DeepSpeed
  nothing casts it. ZeRO-3's gradient partitions are in the config's dtype all the same (grad_accum_dtype).
- The frozen base keeps its weights and nothing else: in the model's dtype, or as bitsandbytes stores them
  (quantized.py) for every decoder linear layer (transformers skips the LM head). ZeRO-3 partitions every
  parameter of the module, frozen or not (ceil(numel / DP) each); a 4-bit weight is a parameter of its
  quant_storage dtype, its statistics are not.
- torch DDP (world > 1) keeps its gradient buckets beside param.grad (reducer.cpp, gradient_as_bucket_view
  false, the HF Trainer's default): a second copy of every trainable gradient.
"""

from __future__ import annotations

import math
from dataclasses import replace

from guard.job.adapter import adapter_tensors, linear_modules
from guard.job.param_groups import hf_tensors
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import quantized
from guard.memory.params import REPLICATED, Inventory


def trainable_dtype(setup: TrainingJob) -> str:
    if setup.hf_ddp or setup.zero_stage == 3:
        return setup.adapter.adapter_dtype
    return setup.params_dtype


def adapter_job(setup: TrainingJob) -> tuple[TrainingJob, Inventory]:
    """The job as the optimizer sees it: the adapter tensors alone, in their training dtype."""
    tensors = adapter_tensors(setup.adapter, setup.arch)
    dtype = trainable_dtype(setup)
    # ZeRO keeps gradients in the config's dtype (grad_accum_dtype) whatever the parameters'; autograd (DDP) in theirs
    sub = replace(setup, adapter=None, params_dtype=dtype, grads_dtype=dtype if setup.hf_ddp else setup.params_dtype,
                  param_groups=[[n for _, n in tensors]], zero_stage=0 if setup.hf_ddp else setup.zero_stage)
    inv = Inventory()
    inv.add(REPLICATED, "LoRA adapters (trainable)", sum(n for _, n in tensors))
    return sub, inv


def frozen_bytes(setup: TrainingJob) -> dict[str, int]:
    """The frozen base's weights on one rank, by storage kind."""
    adapter, arch = setup.adapter, setup.arch
    shards = (setup.layout.zero_shards(setup.zero_stage) or 1) if setup.zero_stage == 3 and not setup.hf_ddp else 1
    p_b = DTYPE_BYTES[setup.params_dtype]
    linears = {f"{name}.weight": (fan_in, fan_out) for name, fan_in, fan_out in linear_modules(arch)}
    out = {"frozen base weights": 0}
    for name, numel in hf_tensors(arch):
        shape = linears.get(".".join(name.split(".")[-2:])) if ".layers." in name else None
        if adapter.quant_bits and shape:
            kind = f"frozen base, {adapter.quant_bits}-bit (bitsandbytes)"
            stored = quantized.weight_bytes(adapter.quant_bits, *shape, adapter.double_quant)
            if adapter.quant_bits == 4 and shards > 1:  # the packed weight is partitioned, the statistics stay
                packed = quantized.packed_bytes(numel)
                storage = DTYPE_BYTES.get(adapter.quant_storage, 1)
                stored += math.ceil(packed / storage / shards) * storage - packed
            out[kind] = out.get(kind, 0) + stored
        else:
            out["frozen base weights"] += math.ceil(numel / shards) * p_b
    return out


def ddp_buckets(setup: TrainingJob, trainable: int) -> int:
    """torch DDP's gradient buckets: a copy of every trainable gradient when more than one rank trains."""
    return trainable * DTYPE_BYTES[trainable_dtype(setup)] if setup.hf_ddp and setup.dp > 1 else 0
