"""A LoRA / QLoRA adapter on a transformers model: which linear layers it wraps and the tensors it adds."""

from __future__ import annotations

from dataclasses import dataclass

from guard.job.architecture import Architecture

# peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft 0.21.2): the modules peft
# wraps when a config names none (TRL's lora_target_modules: None)
PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")


@dataclass(frozen=True)
class Adapter:
    """method: "lora" or "qlora" (the frozen base stored quantized, `quant_bits` 4 or 8)."""

    method: str
    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]  # module names (q_proj, ...), resolved against the model
    quant_bits: int | None = None
    double_quant: bool = True  # bitsandbytes 4-bit: the absmax constants quantized again (8-bit, blocks of 256)
    quant_storage: str = "uint8"  # bnb_4bit_quant_storage: the dtype the packed 4-bit weights are stored as
    adapter_dtype: str = "fp32"  # the dtype the adapter weights are created in before any cast


def linear_modules(arch: Architecture) -> list[tuple[str, int, int]]:
    """(name, in_features, out_features) of each linear layer of one decoder layer of a Llama-like model, in
    registration order (modeling_llama.py: self_attn q, k, v, o; mlp gate, up, down)."""
    h, q, kv, ffn = arch.hidden, arch.query_size, arch.kv_size, arch.ffn_hidden
    mlp = [("gate_proj", h, ffn), ("up_proj", h, ffn), ("down_proj", ffn, h)] if arch.gated_mlp \
        else [("up_proj", h, ffn), ("down_proj", ffn, h)]
    return [("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h), *mlp]


def supports(arch: Architecture) -> bool:
    """guard prices adapters on the dense Llama-like models whose module tree it knows."""
    return arch.module_order == "llama" and not arch.is_moe


def resolve_targets(written, arch: Architecture) -> tuple[tuple[str, ...], list[str]]:
    """(targets in the model, names that match no linear layer). `written`: "all" / "all-linear" (every linear
    layer but the LM head, as LLaMA-Factory's find_all_linear_modules and peft's "all-linear"), a comma list,
    a list, or None (peft's default for the model type)."""
    names = [name for name, _, _ in linear_modules(arch)]
    if written is None:
        return tuple(n for n in names if n in PEFT_DEFAULT_TARGETS), []
    if isinstance(written, str):
        if written.strip().lower() in ("all", "all-linear", "all_linear"):
            return tuple(names), []
        written = [part.strip() for part in written.split(",") if part.strip()]
    asked = [str(w) for w in written]
    # peft matches a module when its name ends with a target (check_target_module_exists)
    chosen = tuple(n for n in names if any(n == a or n.endswith("." + a) or a.endswith("." + n) for a in asked))
    unknown = [a for a in asked if not any(n == a or a.endswith("." + n) for n in names)]
    return chosen, unknown


def adapter_tensors(adapter: Adapter, arch: Architecture) -> list[tuple[str, int]]:
    """(name, numel) of every adapter weight in registration order: per layer and wrapped module, lora_A
    [r, in] then lora_B [out, r] (peft/tuners/lora/layer.py update_layer)."""
    out = []
    wrapped = [(name, i, o) for name, i, o in linear_modules(arch) if name in adapter.targets]
    for layer in range(arch.num_layers):
        for name, fan_in, fan_out in wrapped:
            prefix = f"model.layers.{layer}.{'self_attn' if name[0] in 'qkvo' else 'mlp'}.{name}"
            out += [(f"{prefix}.lora_A.weight", adapter.rank * fan_in), (f"{prefix}.lora_B.weight",
                                                                         fan_out * adapter.rank)]
    return out


def trainable_count(adapter: Adapter, arch: Architecture) -> int:
    """What peft prints as "trainable params": r x (in + out) per wrapped module and layer."""
    return sum(n for _, n in adapter_tensors(adapter, arch))

