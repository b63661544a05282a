"""Read a Hugging Face config.json (Llama, Mistral/Mixtral, Qwen2/3, GPT-2, GPT-NeoX, Falcon, DeepSeek MoE)."""

from __future__ import annotations

import json
from pathlib import Path

from guard.errors import InputError
from guard.job.architecture import Architecture

LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek", "gemma",
              "olmo", "granite"}
SUPPORTED = sorted(LLAMA_LIKE | {"gpt2", "gpt_neox", "falcon"})


class HfConfigError(InputError):
    """The config cannot be turned into an architecture (message names the key)."""


def load(path: str) -> Architecture:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise HfConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise HfConfigError(f"{path}: not JSON: {err}") from None
    if not isinstance(data, dict):
        raise HfConfigError(f"{path}: expected a JSON object")
    return from_dict(data, label=path)


def _need(data: dict, *keys: str, label: str) -> int:
    for key in keys:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise HfConfigError(f"{label}: needs a positive integer {' or '.join(repr(k) for k in keys)}")


def from_dict(data: dict, label: str = "config.json") -> Architecture:
    kind = str(data.get("model_type", "")).lower()
    if kind == "gpt2":
        return _gpt2(data, label)
    if kind == "gpt_neox":
        return _neox(data, label)
    if kind in ("falcon", "refinedweb", "refinedwebmodel"):
        return _falcon(data, label)
    if kind in LLAMA_LIKE or "intermediate_size" in data:
        return _llama_like(data, kind, label)
    raise HfConfigError(f"{label}: model_type {kind or '(missing)'!r} is not supported "
                        f"(supported: {', '.join(SUPPORTED)})")


def _meta(data: dict, label: str) -> dict:
    meta = data.get("_guard") or {}
    return {"name": meta.get("name") or data.get("_name_or_path") or Path(label).stem,
            "source": meta.get("source") or label}


def _llama_like(data: dict, kind: str, label: str) -> Architecture:
    hidden = _need(data, "hidden_size", label=label)
    heads = _need(data, "num_attention_heads", label=label)
    layers = _need(data, "num_hidden_layers", label=label)
    groups = data.get("num_key_value_heads") or heads
    head_dim = data.get("head_dim") or hidden // heads
    experts = data.get("num_local_experts") or data.get("num_experts") or data.get("n_routed_experts")
    moe_ffn = data.get("moe_intermediate_size") or (data.get("intermediate_size") if experts else None)
    shared = data.get("shared_expert_intermediate_size") or 0
    if data.get("n_shared_experts"):
        shared = data["n_shared_experts"] * (data.get("moe_intermediate_size") or 0)
    pattern = None
    unmodelled: list[str] = []
    if experts:
        first_dense = data.get("first_k_dense_replace", 0) or 0
        freq = data.get("moe_layer_freq", 1) or 1
        sparse_step = data.get("decoder_sparse_step", 1) or 1
        mlp_only = set(data.get("mlp_only_layers") or [])
        pattern = tuple(i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % sparse_step == 0
                        and i not in mlp_only for i in range(layers))
        if all(pattern):
            pattern = None
    if data.get("kv_lora_rank") or data.get("q_lora_rank"):
        unmodelled.append("multi-latent attention (MLA)")
    return Architecture(
        num_layers=layers, hidden=hidden, heads=heads, query_groups=groups, kv_channels=head_dim,
        ffn_hidden=_need(data, "intermediate_size", label=label), vocab=_need(data, "vocab_size", label=label),
        max_positions=data.get("max_position_embeddings") or 0, gated_mlp=True, norm="rmsnorm",
        tied_embeddings=bool(data.get("tie_word_embeddings", False)), position_embedding="rope",
        linear_bias=bool(data.get("mlp_bias", False)),
        qkv_bias=bool(data.get("attention_bias", kind in ("qwen2", "qwen2_moe"))),
        qk_norm=kind in ("qwen3", "qwen3_moe"), num_experts=experts or None, moe_ffn_hidden=moe_ffn,
        moe_topk=data.get("num_experts_per_tok") or 2, shared_expert_ffn=shared, moe_layers=pattern,
        attention_dropout=float(data.get("attention_dropout") or 0.0), unmodelled=tuple(unmodelled),
        # the per-tensor order ZeRO's flat layout needs is known for dense models without MLP biases
        module_order="" if experts or data.get("mlp_bias") else "llama", **_meta(data, label))


def _gpt2(data: dict, label: str) -> Architecture:
    hidden = _need(data, "n_embd", "hidden_size", label=label)
    heads = _need(data, "n_head", "num_attention_heads", label=label)
    act = str(data.get("activation_function", "gelu_new"))
    return Architecture(
        num_layers=_need(data, "n_layer", "num_hidden_layers", label=label), hidden=hidden, heads=heads,
        query_groups=heads, kv_channels=hidden // heads, ffn_hidden=data.get("n_inner") or 4 * hidden,
        vocab=_need(data, "vocab_size", label=label), max_positions=data.get("n_positions") or 1024,
        gated_mlp="glu" in act, norm="layernorm", tied_embeddings=bool(data.get("tie_word_embeddings", True)),
        position_embedding="learned_absolute", linear_bias=True,
        hidden_dropout=float(data.get("resid_pdrop", 0.1)), attention_dropout=float(data.get("attn_pdrop", 0.1)),
        module_order="gpt2", **_meta(data, label))


def _neox(data: dict, label: str) -> Architecture:
    hidden = _need(data, "hidden_size", label=label)
    heads = _need(data, "num_attention_heads", label=label)
    return Architecture(
        num_layers=_need(data, "num_hidden_layers", label=label), hidden=hidden, heads=heads,
        query_groups=heads, kv_channels=hidden // heads,
        ffn_hidden=data.get("intermediate_size") or 4 * hidden, vocab=_need(data, "vocab_size", label=label),
        max_positions=data.get("max_position_embeddings") or 0, norm="layernorm",
        tied_embeddings=bool(data.get("tie_word_embeddings", False)), position_embedding="rope",
        linear_bias=True, hidden_dropout=float(data.get("hidden_dropout", 0.0) or 0.0),
        attention_dropout=float(data.get("attention_dropout", 0.0) or 0.0), **_meta(data, label))


def _falcon(data: dict, label: str) -> Architecture:
    hidden = _need(data, "hidden_size", "n_embed", label=label)
    heads = _need(data, "num_attention_heads", "n_head", label=label)
    new_arch = bool(data.get("new_decoder_architecture", False))
    if new_arch:
        groups = data.get("num_kv_heads") or heads
    else:
        groups = 1 if data.get("multi_query", True) else heads
    return Architecture(
        num_layers=_need(data, "num_hidden_layers", "n_layer", label=label), hidden=hidden, heads=heads,
        query_groups=groups, kv_channels=hidden // heads, ffn_hidden=data.get("ffn_hidden_size") or 4 * hidden,
        vocab=_need(data, "vocab_size", label=label), max_positions=data.get("max_position_embeddings") or 0,
        norm="layernorm", norms_per_layer=2 if new_arch else 1,
        tied_embeddings=bool(data.get("tie_word_embeddings", True)), position_embedding="rope",
        linear_bias=bool(data.get("bias", False)), hidden_dropout=float(data.get("hidden_dropout", 0.0) or 0.0),
        attention_dropout=float(data.get("attention_dropout", 0.0) or 0.0), **_meta(data, label))
