"""A transformers model's parameter tensors in registration order, and the HF Trainer's optimizer groups."""

from __future__ import annotations

from guard.job.architecture import Architecture


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
