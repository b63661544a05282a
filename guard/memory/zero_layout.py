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

from guard.memory.architecture import Architecture
from guard.memory.setup import Setup


def hf_tensors(arch: Architecture) -> list[tuple[str, int]] | None:
    """(name, numel) of every parameter tensor in the registration order of the transformers model, or None
    when guard does not know that model's module order."""
    h, layers = arch.hidden, arch.num_layers
    norm = [("weight", h), ("bias", h)] if arch.norm == "layernorm" else [("weight", h)]
    out: list[tuple[str, int]] = []
    if arch.module_order == "gpt2":
        out += [("wte.weight", arch.vocab * h), ("wpe.weight", arch.max_positions * h)]
        for i in range(layers):
            p = f"h.{i}."
            out += [(p + "ln_1." + n, c) for n, c in norm]
            out += [(p + "attn.c_attn.weight", h * 3 * h), (p + "attn.c_attn.bias", 3 * h),
                    (p + "attn.c_proj.weight", h * h), (p + "attn.c_proj.bias", h)]
            out += [(p + "ln_2." + n, c) for n, c in norm]
            ffn = arch.ffn_hidden
            out += [(p + "mlp.c_fc.weight", h * ffn), (p + "mlp.c_fc.bias", ffn),
                    (p + "mlp.c_proj.weight", ffn * h), (p + "mlp.c_proj.bias", h)]
        out += [("ln_f." + n, c) for n, c in norm]
        return out + ([] if arch.tied_embeddings else [("lm_head.weight", arch.vocab * h)])
    if arch.module_order == "llama" and not arch.is_moe:
        q, kv, ffn = arch.query_size, arch.kv_size, arch.ffn_hidden
        bias = arch.qkv_bias or arch.linear_bias
        out.append(("model.embed_tokens.weight", arch.vocab * h))
        for i in range(layers):
            p = f"model.layers.{i}."
            for name, width in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                out.append((p + f"self_attn.{name}.weight", h * width))
                if bias:
                    out.append((p + f"self_attn.{name}.bias", width))
            out.append((p + "self_attn.o_proj.weight", q * h))
            if arch.linear_bias:
                out.append((p + "self_attn.o_proj.bias", h))
            if arch.qk_norm:
                out += [(p + "self_attn.q_norm.weight", arch.kv_channels), (p + "self_attn.k_norm.weight",
                                                                             arch.kv_channels)]
            mlp = [("gate_proj", h * ffn), ("up_proj", h * ffn), ("down_proj", ffn * h)] if arch.gated_mlp \
                else [("up_proj", h * ffn), ("down_proj", ffn * h)]
            out += [(p + f"mlp.{name}.weight", n) for name, n in mlp]
            out += [(p + "input_layernorm." + n, c) for n, c in norm]
            out += [(p + "post_attention_layernorm." + n, c) for n, c in norm]
        out += [("model.norm." + n, c) for n, c in norm]
        return out + ([] if arch.tied_embeddings else [("lm_head.weight", arch.vocab * h)])
    return None


def trainer_groups(tensors: list[tuple[str, int]]) -> list[list[int]]:
    """The HF Trainer's two optimizer groups, in model order: weight decay (matrices), then no decay (biases
    and norm weights: transformers' get_decay_parameter_names)."""
    def no_decay(name: str) -> bool:
        return name.endswith("bias") or any(k in name for k in ("ln_", "norm", "layernorm"))

    decay = [n for name, n in tensors if not no_decay(name)]
    rest = [n for name, n in tensors if no_decay(name)]
    return [g for g in (decay, rest) if g]


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


def largest_tensor(setup: Setup) -> int:
    """Elements of the model's largest parameter tensor (ZeRO sizes its staging buffers by it); without the
    per-tensor list, the word embedding, which is the largest tensor of every model guard knows."""
    return max((max(g) for g in setup.param_groups or [] if g), default=setup.vocab * setup.arch.hidden)
