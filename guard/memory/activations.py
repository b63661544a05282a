"""Activations one transformer layer saves for backward, per microbatch (Korthikanti et al. 2022, generalised).

Accounting as in the paper: 16-bit activations, 1-byte dropout masks, every term a tensor autograd keeps.
Generalised to GQA (K/V at query_groups), SwiGLU (fc1 emits 2F), RMSNorm, flash attention (no s^2 term,
fp32 softmax statistics instead), sequence parallel (the "10" part / t), context parallel (s / cp), MoE
(dispatched tokens x expert FFN / expert-TP), dropout masks only when dropout > 0, and recompute.
"""

from __future__ import annotations

from guard.memory.setup import DTYPE_BYTES, Setup

SELECTIVE_MODULES = {"core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts", "mla_up_proj"}


def layer_terms(setup: Setup, index: int, recompute: bool = True) -> dict[str, float]:
    """Saved-for-backward bytes of layer `index` for one microbatch (selective recompute applied if asked)."""
    arch = setup.arch
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    s = setup.seq_length / setup.cp
    b, h, t = setup.micro_batch, arch.hidden, setup.tp
    rep = t if setup.sequence_parallel else 1  # sequence parallel shards the otherwise replicated part
    sb = s * b
    drop = set(setup.recompute_modules) if (recompute and setup.recompute == "selective") else set()
    terms: dict[str, float] = {}
    stats = 8 if arch.norm == "layernorm" else 4  # fp32 mean+rstd, or rstd alone
    terms["norm inputs"] = arch.norms_per_layer * act * sb * h / rep
    terms["norm statistics"] = arch.norms_per_layer * stats * sb / rep
    if setup.eager and arch.norm == "rmsnorm":  # transformers' RMSNorm upcasts: autograd keeps the fp32 input
        terms["norm fp32 copies (eager)"] = arch.norms_per_layer * 2 * act * sb * h
    if "layernorm" not in drop:
        terms["QKV input (norm output)"] = act * sb * h / rep
    q, kv = arch.query_size, arch.kv_size
    expanded_kv = setup.attention == "unfused" or setup.eager  # GQA K/V repeated to every head
    kv_saved = q if (expanded_kv and kv < q) else kv
    terms["Q"] = act * sb * q / t
    terms["K, V"] = 2 * act * sb * kv_saved / t
    heads = arch.heads / t
    if "core_attn" not in drop:
        if setup.attention == "unfused":
            terms["softmax output"] = (setup.softmax_bytes or act) * heads * s * s * b
            if arch.attention_dropout > 0:
                terms["attention dropout mask"] = setup.mask_bytes * heads * s * s * b
                terms["attention dropout output"] = act * heads * s * s * b
            elif (setup.softmax_bytes or act) != act:  # the probabilities cast back for the second matmul
                terms["softmax output, 16-bit copy"] = act * heads * s * s * b
        else:
            terms["softmax statistics (fp32)"] = 4 * heads * sb
    terms["attention output (projection input)"] = act * sb * q / t
    if arch.hidden_dropout > 0:
        terms["dropout masks"] = 2 * setup.mask_bytes * sb * h / rep
    if arch.norms_per_layer > 1 and "layernorm" not in drop:
        terms["MLP input (norm output)"] = act * sb * h / rep
    glu = 2 if arch.gated_mlp else 1
    if not arch.is_moe_layer(index):
        if "mlp" not in drop:
            terms.update(_mlp_terms(act, sb, arch.ffn_hidden, glu, t, setup.eager, "MLP"))
        return terms
    e = arch.num_experts or 1
    terms["router logits (fp32)"] = 4 * sb * e / rep
    if "moe" in drop:
        return terms
    tokens = sb / rep * arch.moe_topk * setup.etp  # dispatched tokens on this rank, balanced routing
    ffn = arch.moe_ffn_hidden or arch.ffn_hidden
    terms["permuted tokens (expert input)"] = act * tokens * h
    terms["expert fc1 output"] = act * tokens * ffn * glu / setup.etp
    if "moe_act" not in drop:
        terms["expert activation output"] = act * tokens * ffn / setup.etp
    terms["expert output (unpermute input)"] = act * tokens * h
    if arch.shared_expert_ffn and "shared_experts" not in drop:
        terms.update(_mlp_terms(act, sb, arch.shared_expert_ffn, glu, t, False, "shared expert"))
    return terms


def _mlp_terms(act: int, sb: float, ffn: int, glu: int, t: int, eager: bool, label: str) -> dict[str, float]:
    out = {f"{label} fc1 output": act * sb * ffn * glu / t, f"{label} activation output": act * sb * ffn / t}
    if eager and glu == 2:  # act_fn(gate) * up keeps the activation of the gate as a separate tensor
        out[f"{label} gate activation (eager)"] = act * sb * ffn / t
    return out


def checkpoint_bytes(setup: Setup) -> float:
    """What full recompute keeps per checkpoint: the layer-group input."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    size = act * setup.seq_length / setup.cp * setup.micro_batch * setup.arch.hidden
    if setup.sequence_parallel or setup.distribute_saved_activations or setup.checkpoint_partition:
        size /= setup.tp
    return 0.0 if setup.checkpoint_cpu else size


def chunk_stored(setup: Setup, layers: tuple[int, ...]) -> tuple[float, float]:
    """(stored bytes, backward recompute working set) of a model chunk for one microbatch."""
    if setup.recompute != "full":
        return sum(sum(layer_terms(setup, i).values()) for i in layers), 0.0
    n = max(1, setup.recompute_num_layers)
    if setup.recompute_method == "block":
        checkpointed, kept = layers[:n], layers[n:]
        stored = len(checkpointed) * checkpoint_bytes(setup) + sum(
            sum(layer_terms(setup, i).values()) for i in kept)
        working = max((sum(layer_terms(setup, i, False).values()) for i in checkpointed), default=0.0)
        return stored, working
    groups = [layers[k:k + n] for k in range(0, len(layers), n)]
    stored = len(groups) * checkpoint_bytes(setup)
    working = max((sum(sum(layer_terms(setup, i, False).values()) for i in g) for g in groups), default=0.0)
    return stored, working


def logits_bytes(setup: Setup) -> tuple[float, float]:
    """(stored, transient) bytes of the output layer and loss for one microbatch on the last stage.

    The final norm keeps its input and statistics; the output layer keeps its input (the norm's output).
    Megatron's vocab-parallel cross entropy upcasts the logits to fp32 and keeps the fp32 softmax for
    backward; the fused loss keeps 16-bit logits only. Eager transformers also keep the returned logits.
    """
    s = setup.seq_length / setup.cp
    rows = s * setup.micro_batch * setup.vocab / setup.tp
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    rep = setup.tp if setup.sequence_parallel else 1
    h_in = act * s * setup.micro_batch * setup.arch.hidden / rep
    # the final norm keeps its input and fp32 statistics, like a layer's norms (seen on megatron-core's last stage)
    h_in += act * s * setup.micro_batch * setup.arch.hidden / rep + \
        (8 if setup.arch.norm == "layernorm" else 4) * s * setup.micro_batch / rep
    if setup.fused_cross_entropy:
        return h_in + act * rows, 0.0
    stored = h_in + 4 * rows + (act * rows if setup.eager else 0)
    return stored, 4 * rows  # the fp32 upcast while the softmax is computed


def embedding_bytes(setup: Setup) -> float:
    """First stage, per microbatch: token ids (int64), position ids, and the embedding dropout mask."""
    s = setup.seq_length / setup.cp
    sb = s * setup.micro_batch
    out = 8 * sb * 2
    if setup.arch.hidden_dropout > 0:
        out += sb * setup.arch.hidden / (setup.tp if setup.sequence_parallel else 1)
    return out
