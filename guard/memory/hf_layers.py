"""What a transformers decoder layer saves beyond megatron's: SDPA's padded-mask path and a peft LoRA adapter.

Read from transformers 5.24 (integrations/sdpa_attention.py, masking_utils.py, models/llama/modeling_llama.py),
peft 0.21.2 (tuners/lora/layer.py Linear.forward) and torch 2.13 (scaled_dot_product_attention's
convert_boolean_attn_mask; at::dropout), and measured by saved-tensor census on CPU
(tests/fidelity/hf_activations_probe.py, docs/finetune.md):
- SDPA gets no mask when every sample of the batch is full (masking_utils' causal skip), and then attends
  over the K/V heads as they are (use_gqa_in_sdpa). A padded batch materialises a boolean [b, 1, s, s]
  mask: transformers repeats K and V to every query head (repeat_kv) and torch converts the mask to the
  query's dtype in each layer's call, a copy the kernel keeps for backward.
- A frozen linear layer keeps nothing (its input is needed only for its weight's gradient); a LoRA layer's
  lora_A keeps its input and lora_B keeps lora_A's [tokens, r] output. peft casts the input to the adapter's
  dtype and drops it out first, so lora_A shares the base layer's input only with dropout 0 and an adapter
  in the activations' dtype; otherwise each adapted layer keeps its own copy (and a dropout mask). Under
  autocast (the HF Trainer's bf16 without DeepSpeed, fp32 adapters) lora_A and lora_B run on 16-bit casts of
  their input and of their weights, which autograd keeps.
- A frozen norm weight needs no normalized copy (the eager RMSNorm's `weight * x.to(dtype)` input).
"""

from __future__ import annotations

from guard.job.adapter import linear_modules
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.adapter_states import trainable_dtype

# the linear layers that read one tensor (peft wraps each one separately)
READERS = {"qkv": ("q_proj", "k_proj", "v_proj"), "proj": ("o_proj",), "mlp": ("gate_proj", "up_proj"),
           "down": ("down_proj",)}


def repeats_kv(setup: TrainingJob) -> bool:
    """transformers' SDPA call repeats grouped K/V to every head with a mask, or past 256-wide heads
    (use_gqa_in_sdpa: `attention_mask is None and key.shape[-1] == value.shape[-1] <= 256`)."""
    return setup.padded_batches or setup.arch.kv_channels > 256


def mask_copy(setup: TrainingJob, act: int, s: float) -> float:
    """The padded batch's boolean mask, converted to the query dtype by each layer's SDPA call and kept."""
    return act * setup.rows * s * s if setup.padded_batches else 0.0


def autocast(setup: TrainingJob) -> bool:
    """The HF Trainer autocasts (accelerate's native AMP) only without DeepSpeed, for bf16/fp16."""
    return setup.hf_ddp and setup.params_dtype in ("bf16", "fp16")


def shares_input(setup: TrainingJob, act: int) -> bool:
    """lora_A reads the base layer's input storage itself (no dropout copy, no cast)."""
    adapter = setup.adapter
    return not adapter.dropout and not autocast(setup) and DTYPE_BYTES[trainable_dtype(setup)] == act


def keeps_input(setup: TrainingJob, reader: str, act: int) -> bool:
    """Whether the tensor the `reader` linear layers read is kept for backward by one of them."""
    adapter = setup.adapter
    if adapter is None or adapter.quant_bits == 8:  # bitsandbytes' MatMul8bitLt keeps its input (ctx.tensors)
        return True
    return shares_input(setup, act) and any(t in adapter.targets for t in READERS[reader])


def adapter_terms(setup: TrainingJob, act: int, tokens: float) -> dict[str, float]:
    """Per layer: each adapted layer's input copy (unless shared), dropout mask, lora_A output, autocast casts."""
    adapter, arch = setup.adapter, setup.arch
    targeted = [(n, i, o) for n, i, o in linear_modules(arch) if n in adapter.targets]
    cast = autocast(setup)
    compute = act if cast else DTYPE_BYTES[trainable_dtype(setup)]  # the dtype lora_A multiplies in
    own = not shares_input(setup, act)
    terms = {"LoRA: lora_A outputs (lora_B inputs)": sum(compute * tokens * adapter.rank for _ in targeted)}
    if own:
        terms["LoRA: lora_A input copies (cast / dropped out)"] = sum(compute * tokens * i for _, i, _ in targeted)
    if adapter.dropout:
        terms["LoRA: dropout masks"] = sum(dropout_mask(setup, tokens * i) for _, i, _ in targeted)
    if cast:  # autocast's 16-bit casts of lora_A and lora_B weights, cached per forward and kept
        terms["LoRA: 16-bit weight casts (autocast)"] = sum(act * adapter.rank * (i + o) for _, i, o in targeted)
    return terms


def dropout_mask(setup: TrainingJob, elements: float) -> float:
    """CUDA's fused dropout keeps a bool mask; the CPU path (mask_bytes set to the activations') keeps the scaled
    noise in its input's dtype, which peft has cast to the adapter's."""
    return elements * (setup.mask_bytes if setup.mask_bytes == 1 else DTYPE_BYTES[trainable_dtype(setup)])


def first_layer_untracked(setup: TrainingJob) -> float:
    """What the first layer's Q/K/V adapters keep only for an input gradient, which its untracked input (the
    frozen embedding's output) does not need: their dropout masks, and under autocast lora_A's weight casts."""
    adapter, arch = setup.adapter, setup.arch
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    read = [i for n, i, _ in linear_modules(arch) if n in adapter.targets and n in READERS["qkv"]]
    out = sum(dropout_mask(setup, tokens * i) for i in read) if adapter.dropout else 0.0
    return out + (sum(act * adapter.rank * i for i in read) if autocast(setup) else 0.0)
