"""Read a Hugging Face config.json into an architecture: the families whose modules guard counts, and a refusal by
name for the rest (never a dense Llama by default)."""

from __future__ import annotations

import json
from pathlib import Path

from guard.errors import InputError
from guard.job.architecture import Architecture

# decoder-only transformers with Llama's module tree (q/k/v/o, gate/up/down; fused q/k/v or gate/up, as Phi-3,
# InternLM2 and Baichuan store them, hold the same parameters) and a per-layer norm count
LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek", "gemma",
              "olmo", "granite", "phi3", "phimoe", "internlm2", "internlm", "baichuan", "smollm3", "olmo2", "gemma2",
              "gemma3_text", "glm4", "yi"}
SUPPORTED = sorted(LLAMA_LIKE | {"gpt2", "gpt_neox", "falcon"})
# norms per decoder layer where Llama's two are not all (modeling_gemma2/3: pre and post each of attention and MLP;
# modeling_glm4: post_self_attn and post_mlp besides the two)
NORMS = {"gemma2": 4, "gemma3_text": 4, "glm4": 4}
# families whose config class ties the LM head to the embedding unless the file says otherwise (GemmaConfig,
# Gemma2Config, Gemma3TextConfig, SmolLM3Config: tie_word_embeddings=True; LlamaConfig and the rest: False)
TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "smollm3"}
# families whose modules guard does not count: named, never priced as something else
REFUSED = {
    "gpt_oss": "gpt-oss (MoE experts with biases, attention sinks, MXFP4 expert weights)",
    "deepseek_v2": "DeepSeek-V2 (multi-latent attention)", "deepseek_v3": "DeepSeek-V3/R1 (multi-latent attention)",
    "jamba": "Jamba (a Mamba/attention hybrid)", "mamba": "Mamba (state-space layers)", "mamba2": "Mamba-2",
    "falcon_h1": "Falcon-H1 (a Mamba hybrid)", "zamba": "Zamba (a Mamba hybrid)", "zamba2": "Zamba2 (a Mamba hybrid)",
    "llava": "LLaVA (multimodal: vision tower and projector)", "llava_next": "LLaVA-NeXT (multimodal)",
    "llava_onevision": "LLaVA-OneVision (multimodal)", "qwen2_vl": "Qwen2-VL (multimodal)",
    "qwen2_5_vl": "Qwen2.5-VL (multimodal)", "qwen3_vl": "Qwen3-VL (multimodal)",
    "qwen3_vl_moe": "Qwen3-VL (multimodal)",
    "internvl": "InternVL (multimodal)", "internvl_chat": "InternVL (multimodal)", "gemma3": "Gemma 3 4B/12B/27B "
    "(multimodal: a SigLIP vision tower beside the text model)", "phi3_v": "Phi-3-vision (multimodal)",
    "phi4_multimodal": "Phi-4-multimodal", "mllama": "Llama 3.2 Vision (multimodal)",
    "llama4": "Llama 4 (multimodal MoE)",
    "paligemma": "PaliGemma (multimodal)", "idefics2": "Idefics2 (multimodal)", "idefics3": "Idefics3 (multimodal)",
    "minicpmv": "MiniCPM-V (multimodal)", "qwen": "Qwen-VL / Qwen 1 (remote code)",
    "phi3small": "Phi-3-small (block-sparse attention, GeGELU)", "chatglm": "ChatGLM / GLM-4 (remote code)",
}


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
    if kind in REFUSED:
        raise HfConfigError(f"{label}: {REFUSED[kind]} is not priced by guard (model_type {kind!r}); "
                            f"guard prices {', '.join(SUPPORTED)}")
    if kind in LLAMA_LIKE or (not kind and "intermediate_size" in data):
        return _llama_like(data, kind, label)
    raise HfConfigError(f"{label}: model_type {kind or '(missing)'!r} is not supported "
                        f"(supported: {', '.join(SUPPORTED)})")


TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


def _meta(data: dict, label: str) -> dict:
    meta = data.get("_guard") or {}
    written = data.get("dtype") or data.get("torch_dtype")  # transformers 5 writes dtype, 4.x torch_dtype
    return {"name": meta.get("name") or data.get("_name_or_path") or Path(label).stem,
            "source": meta.get("source") or label,
            "checkpoint_dtype": TORCH_DTYPES.get(str(written).replace("torch.", ""), "") if written else ""}


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
        raise HfConfigError(f"{label}: multi-latent attention (kv_lora_rank, DeepSeek-V2/V3 style) is not priced by "
                            "guard")
    if data.get("attn_logit_softcapping"):  # sdpa and flash-attn-free kernels cannot cap: transformers runs eager
        unmodelled.append("attention logit soft-capping (transformers runs Gemma 2 attention eager)")
    if kind == "baichuan" and not data.get("max_position_embeddings"):  # Baichuan 13B: ALiBi, a bias per head
        unmodelled.append("ALiBi attention bias (Baichuan 13B)")
    return Architecture(
        num_layers=layers, hidden=hidden, heads=heads, query_groups=groups, kv_channels=head_dim,
        ffn_hidden=_need(data, "intermediate_size", label=label), vocab=_need(data, "vocab_size", label=label),
        max_positions=data.get("max_position_embeddings") or 0, gated_mlp=True,
        norm="layernorm" if kind == "phimoe" else "rmsnorm", norms_per_layer=NORMS.get(kind, 2),
        tied_embeddings=bool(data.get("tie_word_embeddings", kind in TIED_BY_DEFAULT)), position_embedding="rope",
        linear_bias=bool(data.get("mlp_bias", False)),
        qkv_bias=bool(data.get("attention_bias", kind in ("qwen2", "qwen2_moe"))),
        qk_norm=kind in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"), num_experts=experts or None,
        moe_ffn_hidden=moe_ffn,
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
