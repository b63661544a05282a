"""The model a Megatron / Megatron-DeepSpeed command builds: shape, attention, MLP, MoE, vocabulary."""

from __future__ import annotations

from pathlib import Path

from guard.job.architecture import MOE_PATTERN, Architecture, moe_layer_pattern
from guard.job.flag_values import FlagValues, enum_name, list_expression
from guard.job.origin import Origin
from guard.job.training_job import IncompleteJob
from guard.job.vocab import TokenizerArgs, resolve_vocabulary
from guard.megatron import derived



def architecture(fv: FlagValues, base: Architecture | None, vocab: int | None) -> tuple[Architecture, str]:
    """The model's shape, and why its vocabulary is unknown ("" when known; the shape is kept for the rules)."""
    cmd, b = fv.cmd, base
    need = "give it in the command, or --model / --hf-config"
    layers = fv.int("num_layers", b and b.num_layers, need, field="arch.num_layers")
    hidden = fv.int("hidden_size", b and b.hidden, need, field="arch.hidden")
    heads = fv.int("num_attention_heads", b and b.heads, need, field="arch.heads")
    if not heads or not hidden or heads < 1:
        raise IncompleteJob(f"{cmd.path}: --hidden-size and --num-attention-heads must be positive integers")
    swiglu = bool(fv.value("swiglu", b.gated_mlp if b and not cmd.given("swiglu") else None))
    groups = query_groups(fv, heads) if (cmd.given("group_query_attention") or cmd.given("num_query_groups")
                                         or cmd.given("num_key_value_heads") or cmd.given("attention_head_type")
                                         or not b) else b.query_groups
    kv = fv.int("kv_channels", b.kv_channels if b else None) or hidden // heads
    ffn = fv.int("ffn_hidden_size", b.ffn_hidden if b and not cmd.given("hidden_size") else None) or \
        derived.ffn_hidden_size(hidden, swiglu)
    norm = fv.value("normalization", None if not b else ("RMSNorm" if b.norm == "rmsnorm" else "LayerNorm"))
    untie = fv.value("untie_embeddings_and_output_weights", None if not b else not b.tied_embeddings)
    pos = _position(fv.value("position_embedding_type", b.position_embedding if b else None))
    if cmd.flavour == "megatron-deepspeed" and cmd.given("use_rotary_position_embeddings"):
        pos = "rope"
    seq = fv.int("seq_length", None) or (b.max_positions if b else 0)
    max_pos = fv.int("max_position_embeddings", b.max_positions if b else None) or seq
    moe = _experts(fv, b, layers, ffn)
    try:
        vocab, unknown_vocab = vocab_size(fv, b, vocab), ""
    except IncompleteJob as err:
        vocab, unknown_vocab = 0, str(err)
    return Architecture(
        num_layers=layers, hidden=hidden, heads=heads, query_groups=groups or heads, kv_channels=kv,
        ffn_hidden=ffn, vocab=vocab, max_positions=max_pos, gated_mlp=swiglu,
        norm="rmsnorm" if str(norm).lower() == "rmsnorm" else "layernorm",
        tied_embeddings=not untie, position_embedding=str(pos),
        linear_bias=_linear_bias(fv, b),
        qkv_bias=bool(fv.value("add_qkv_bias", b.qkv_bias if b else None)),
        qk_norm=bool(fv.value("qk_layernorm", b.qk_norm if b else None)),
        hidden_dropout=float(fv.value("hidden_dropout", None) or 0.0),
        attention_dropout=float(fv.value("attention_dropout", None) or 0.0),
        name=(b.name if b else "") or f"GPT from the flags of {cmd.path}", source=cmd.path, **moe), unknown_vocab


def _position(value) -> str:
    """Megatron-LM's names for the position embedding; older forks parse PositionEmbeddingType (absolute, rotary,
    alibi), whose table default is the enum expression."""
    name = enum_name(value, "none")
    return {"absolute": "learned_absolute", "rotary": "rope", "alibi": "none"}.get(name, name)


def _linear_bias(fv: FlagValues, b: Architecture | None) -> bool:
    """Biases on the linear layers: --add-bias-linear / --disable-bias-linear, epfllm's --use_bias; a fork with
    neither flag (BigScience's Megatron-DeepSpeed) builds its ColumnParallelLinear/RowParallelLinear with bias."""
    table = fv.cmd.table.by_dest
    if "add_bias_linear" in table:
        return bool(fv.value("add_bias_linear", b.linear_bias if b else None))
    if "use_bias" in table:
        return bool(fv.value("use_bias", b.linear_bias if b else None))
    return b.linear_bias if b else True


def query_groups(fv: FlagValues, heads: int) -> int | None:
    """The KV groups Megatron builds: --num-query-groups counts only with --group-query-attention (Megatron-LM's
    core_transformer_config_from_args); Megatron-DeepSpeed's --num-key-value-heads always does."""
    cmd = fv.cmd
    if cmd.flavour == "megatron-deepspeed":
        return cmd.int_("num_key_value_heads") or heads
    if "attention_head_type" in cmd.table.by_dest and cmd.v("attention_head_type") == "multiquery":
        return 1  # bigcode's fork: one K/V head shared by every query head (megatron/model/transformer.py MQA)
    if cmd.v("group_query_attention") is True:
        return cmd.int_("num_query_groups")
    return heads


def _experts(fv: FlagValues, b: Architecture | None, layers: int, ffn: int) -> dict:
    """MoE fields: megatron-core's --num-experts/--moe-layer-freq, or Megatron-DeepSpeed's expert list."""
    if fv.cmd.flavour == "megatron-deepspeed":
        return _deepspeed_experts(fv, layers, ffn)
    experts = fv.int("num_experts", b.num_experts if b else None, field="arch.num_experts")
    if not experts or experts <= 1:
        return {}
    freq = fv.value("moe_layer_freq", None)
    if isinstance(freq, str):
        freq = list_expression(freq)
        if freq is None:
            raise IncompleteJob(f"{fv.cmd.path}: --moe-layer-freq is an expression guard cannot read; give an int "
                                "or a list such as [0]*3+[1]*29")
    try:
        pattern = moe_layer_pattern(layers, freq) if freq is not None else (b.moe_layers if b else None)
    except ValueError as err:  # megatron-core asserts one entry per layer: MLM114 says so, nothing is priced
        fv.job.missing[MOE_PATTERN] = f"{fv.cmd.path}: {err}"
        pattern = None
    return {"num_experts": experts,
            "moe_ffn_hidden": fv.int("moe_ffn_hidden_size", b.moe_ffn_hidden if b else None) or ffn,
            "moe_topk": fv.int("moe_router_topk", b.moe_topk if b else None) or 2,
            "shared_expert_ffn": fv.int("moe_shared_expert_intermediate_size",
                                        b.shared_expert_ffn if b else None) or 0,
            "moe_layers": pattern}


def _deepspeed_experts(fv: FlagValues, layers: int, ffn: int) -> dict:
    """Megatron-DeepSpeed (megatron/model/transformer.py get_num_experts_per_layer): layer i (1-based) is MoE
    when i % --expert-interval == 0; --mlp-type residual (PR-MoE) adds a dense MLP beside the experts."""
    counts = fv.cmd.v("num_experts")
    counts = counts if isinstance(counts, list) else [counts]
    if not all(isinstance(c, int) for c in counts) or max(counts, default=1) <= 1:
        return {}
    fv.job.origins["arch.num_experts"] = fv.origin("num_experts")
    interval = fv.int("expert_interval") or 2
    if len(set(counts)) > 1:
        fv.job.add_unmodelled("different expert counts per MoE layer (priced at the largest)",
                              fv.cmd.option("num_experts"), fv.origin("num_experts"))
    residual = fv.value("mlp_type") == "residual"
    fv.job.add_unmodelled("DeepSpeed MoE's capacity-based dispatch buffers (routing priced as megatron-core's)",
                          fv.cmd.option("num_experts"), fv.origin("num_experts"))
    if residual:
        fv.job.notes.append("--mlp-type residual: the dense MLP beside the experts is priced as a shared expert "
                            "(its 2-way coefficient layer, h x 2 weights, is left out)")
    return {"num_experts": max(counts), "moe_ffn_hidden": ffn, "moe_topk": fv.int("topk") or 1,
            "shared_expert_ffn": ffn if residual else 0,
            "moe_layers": tuple((i + 1) % interval == 0 for i in range(layers))}


def vocab_size(fv: FlagValues, b: Architecture | None, vocab: int | None) -> int:
    """The tokenizer's size before padding: guard's --vocab-size, the preset, or as Megatron's tokenizer builder
    gets it (the program's default tokenizer, the vocab/tokenizer files when they are on this machine)."""
    cmd = fv.cmd
    if vocab:
        fv.job.origins["arch.vocab"] = Origin("cli", "--vocab-size")
        return vocab
    if b is not None:
        return b.vocab
    given = cmd.given("tokenizer_type")
    files = any(cmd.given(d) for d in ("vocab_file", "tokenizer_model", "tokenizer_name_or_path")
                if d in cmd.table.by_dest)
    if not given and not files and cmd.given("vocab_size") and cmd.int_("vocab_size"):
        # no tokenizer named and no tokenizer file: the command's --vocab-size is all it says of the vocabulary
        fv.job.origins["arch.vocab"] = fv.origin("vocab_size")
        return cmd.int_("vocab_size")
    args = TokenizerArgs(cmd.v("tokenizer_type") if given else None, cmd.int_("vocab_size"),
                         _text(cmd, "vocab_file"),
                         _text(cmd, "tokenizer_model") or _text(cmd, "tokenizer_name_or_path"),
                         cmd.int_("vocab_extra_ids") or 0, tuple(cmd.v("special_tokens") or ()))
    found = resolve_vocabulary(args, builder=cmd.table.tokenizer_builder, program=cmd.program,
                               program_default=cmd.table.program_default(cmd.program, "tokenizer_type"),
                               search_dirs=[Path(cmd.path).parent, Path.cwd()])
    if found.size is None and cmd.given("vocab_size") and cmd.int_("vocab_size"):
        # the tokenizer's files are not on this machine: the command's own --vocab-size is the best guess left
        # (Megatron reads a file-based tokenizer's size from its files and ignores the flag), and it is said so
        fv.job.origins["arch.vocab"] = Origin("assumed", "--vocab-size", reason=found.reason)
        why = found.reason.split("; give guard")[0]
        fv.job.notes.append(f"vocabulary: assumed {cmd.int_('vocab_size')} from --vocab-size ({why})")
        return cmd.int_("vocab_size")
    if found.size is None:
        raise IncompleteJob(f"{cmd.path}: {found.reason}")
    fv.job.origins["arch.vocab"] = (fv.origin("tokenizer_type") if given else
                                    Origin("default", found.tokenizer_from, reason=found.source))
    if found.assumed:
        fv.job.notes.append(f"vocabulary: {found.sentence}")
    return found.size


def _text(cmd, dest: str) -> str | None:
    value = cmd.v(dest) if dest in cmd.table.by_dest and cmd.known(dest) else None
    return str(value) if value else None
