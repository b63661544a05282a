"""The transformer architecture the memory model prices, independent of where it was read from."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Architecture:
    num_layers: int
    hidden: int
    heads: int
    query_groups: int  # = heads for multi-head attention, 1 for multi-query
    kv_channels: int  # head dimension
    ffn_hidden: int
    vocab: int  # the tokenizer's size, before any padding
    max_positions: int = 0
    gated_mlp: bool = False  # SwiGLU/GeGLU: fc1 produces 2 x ffn_hidden
    norm: str = "layernorm"  # or "rmsnorm"
    norms_per_layer: int = 2  # Falcon-7B's parallel block has one
    tied_embeddings: bool = True
    position_embedding: str = "learned_absolute"  # or "rope", "none"
    linear_bias: bool = True  # biases on every linear layer (Megatron --add-bias-linear)
    qkv_bias: bool = False  # a bias on the QKV projection only (Qwen2)
    qk_norm: bool = False
    # mixture of experts (num_experts None: dense)
    num_experts: int | None = None
    moe_ffn_hidden: int | None = None
    moe_topk: int = 2
    shared_expert_ffn: int = 0
    moe_layers: tuple[bool, ...] | None = None  # per layer: True for an MoE layer (None: every layer)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    name: str = ""
    module_order: str = ""  # the transformers model's parameter order ("gpt2", "llama"), for ZeRO's flat layout
    source: str = ""  # where these numbers came from
    checkpoint_dtype: str = ""  # the config's torch_dtype / dtype ("bf16", "fp16", "fp32"; "" unstated): what
    # transformers 5 loads the weights in by default (from_pretrained dtype="auto")
    unmodelled: tuple[str, ...] = field(default=())  # architecture features the model does not price

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    def is_moe_layer(self, index: int) -> bool:
        if not self.is_moe:
            return False
        return True if self.moe_layers is None else self.moe_layers[index]

    @property
    def query_size(self) -> int:
        return self.heads * self.kv_channels

    @property
    def kv_size(self) -> int:
        return self.query_groups * self.kv_channels


MOE_PATTERN = "arch.moe_layers"  # a job's missing entry when --moe-layer-freq does not fit its layers


def moe_layer_pattern(num_layers: int, freq) -> tuple[bool, ...] | None:
    """Megatron's --moe-layer-freq: an int k (every k-th layer is MoE) or an explicit 0/1 list."""
    if isinstance(freq, int):
        return tuple(i % freq == 0 for i in range(num_layers)) if freq > 1 else None
    if isinstance(freq, (list, tuple)) and len(freq) == num_layers:
        return tuple(bool(x) for x in freq)
    raise ValueError(f"--moe-layer-freq {freq!r} does not describe {num_layers} layers")
