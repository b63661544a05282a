"""Activations one transformer layer saves for backward, per microbatch (Korthikanti et al. 2022, generalised).

Accounting as in the paper: 16-bit activations, 1-byte dropout masks, every term a tensor autograd keeps.
Generalised to GQA (K/V at query_groups), SwiGLU (fc1 emits 2F), RMSNorm, flash attention (no s^2 term,
fp32 softmax statistics instead), sequence parallel (the "10" part / t), context parallel (s / cp), MoE
(dispatched tokens x expert FFN / expert-TP), dropout masks only when dropout > 0, and recompute.
The kernel path is a TrainingJob choice, not a constant: unfused attention (megatron's local
DotProductAttention: Q, K, V are views of one QKV output), the softmax and mask dtypes, the norm kernels
(fused, or torch's CPU kernels) and RoPE (fused, or megatron's unfused cos/sin copies). Measured against
megatron-core 0.16.1 on CPU in tests/fidelity/megatron_activations.py (docs/fidelity_activations.md).
"""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import hf_layers, offload
from guard.memory.chunked_head import chunked_head_bytes
from guard.memory.moe_routing import routed_tokens

SELECTIVE_MODULES = {"core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts", "mla_up_proj"}


def layer_terms(setup: TrainingJob, index: int, recompute: bool = True) -> dict[str, float]:
    """Saved-for-backward bytes of layer `index` for one microbatch (selective recompute applied if asked)."""
    arch = setup.arch
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    s = setup.seq_length / setup.layout.seq_shards
    b, h, t = setup.rows, arch.hidden, setup.layout.tp
    rep = t if setup.layout.sequence_parallel else 1  # sequence parallel shards the otherwise replicated part
    sb = s * b
    drop = set(setup.recompute_modules) if (recompute and setup.recompute == "selective") else set()
    terms = _norm_terms(setup, act, sb / rep, "layernorm" in drop, arch.norms_per_layer)
    if "layernorm" not in drop and hf_layers.keeps_input(setup, "qkv", act):
        terms["QKV input (norm output)"] = act * sb * h / rep
    terms.update(_qkv_terms(setup, act, sb, "core_attn" in drop))
    if arch.position_embedding == "rope" and setup.rope_kernel == "unfused":
        # megatron's _apply_rotary_pos_emb_bshd: cos(freqs) and sin(freqs) cast to the activation dtype,
        # [s, 1, 1, d], kept by the multiplies, once for Q and once for K
        terms["RoPE cos/sin copies (unfused)"] = 4 * act * s * arch.kv_channels
    heads = arch.heads / t
    if "core_attn" not in drop:
        if setup.attention == "unfused":
            # Ulysses SP: after the all-to-all a rank holds heads/u over the whole sequence, u times the
            # (heads, s/u) square the local sequence alone would give
            heads *= setup.layout.ulysses
            terms["softmax output"] = (setup.softmax_bytes or act) * heads * s * s * b
            if arch.attention_dropout > 0:
                terms["attention dropout mask"] = setup.mask_bytes * heads * s * s * b
                terms["attention dropout output"] = act * heads * s * s * b
            elif (setup.softmax_bytes or act) != act:  # the probabilities cast back for the second matmul
                terms["softmax output, 16-bit copy"] = act * heads * s * s * b
        else:
            terms["softmax statistics (fp32)"] = 4 * heads * sb
            mask = hf_layers.mask_copy(setup, act, s) if setup.eager else 0.0
            if mask:
                terms["attention mask (SDPA's converted copy)"] = mask
    # a fused kernel keeps its output, which is the projection's input; eager matmuls leave it to the projection
    if setup.attention != "unfused" or not setup.eager or hf_layers.keeps_input(setup, "proj", act):
        terms["attention output (projection input)"] = act * sb * arch.query_size / t
    if arch.hidden_dropout > 0:
        terms["dropout masks"] = 2 * setup.mask_bytes * sb * h / rep
    if arch.norms_per_layer > 1 and "layernorm" not in drop and hf_layers.keeps_input(setup, "mlp", act):
        terms["MLP input (norm output)"] = act * sb * h / rep
    glu = 2 if arch.gated_mlp else 1
    if not arch.is_moe_layer(index):
        if "mlp" not in drop:
            terms.update(_mlp_terms(act, sb, arch.ffn_hidden, glu, t, setup.eager, "MLP",
                                    hf_layers.keeps_input(setup, "down", act)))
        if setup.adapter is not None:
            terms.update(hf_layers.adapter_terms(setup, act, sb))
        return terms
    if "moe" not in drop:  # the MoE checkpoint keeps only its input (the MLP input above)
        terms.update(_moe_terms(setup, act, sb, rep, glu, drop))
    return terms


def _norm_terms(setup: TrainingJob, act: int, tokens: float, recomputed: bool, n: int) -> dict[str, float]:
    """What n norms keep: the input and statistics, by kernel path."""
    arch = setup.arch
    h = arch.hidden
    if recomputed:  # "layernorm" recompute: the checkpoint keeps the input; the norm runs again in backward
        return {"norm inputs (checkpointed)": n * act * tokens * h}
    if setup.eager and arch.norm == "rmsnorm":
        # transformers' RMSNorm upcasts (autograd keeps the fp32 input and rstd); `weight * x.to(dtype)` keeps the
        # normalized 16-bit x for the weight's gradient, which a frozen norm (LoRA) does not need
        out = {"norm statistics": n * 4 * tokens, "norm fp32 copies (eager)": n * 2 * act * tokens * h}
        if setup.adapter is None:
            out["norm outputs, 16-bit (eager weight multiply)"] = n * act * tokens * h
        return out
    if setup.norm_kernel == "torch_cpu" and arch.norm == "rmsnorm":
        # torch's composite rms_norm: x.float() * rsqrt(mean(x^2) + eps) * weight, all in fp32
        return {"norm input, fp32 upcast (composite RMSNorm)": n * 4 * tokens * h,
                "norm statistics (fp32 rstd)": n * 4 * tokens,
                "normalized fp32 (weight multiply input)": n * 4 * tokens * h}
    if setup.norm_kernel == "torch_cpu":  # torch's CPU layer_norm keeps mean and rstd in the input dtype
        return {"norm inputs": n * act * tokens * h, "norm statistics": n * 2 * act * tokens}
    stats = 8 if arch.norm == "layernorm" else 4  # fp32 mean+rstd, or rstd alone
    return {"norm inputs": n * act * tokens * h, "norm statistics": n * stats * tokens}


def _qkv_terms(setup: TrainingJob, act: int, sb: float, core_recomputed: bool) -> dict[str, float]:
    """Q, K and V as the attention core (or its checkpoint) keeps them."""
    arch, t = setup.arch, setup.layout.tp
    q, kv = arch.query_size, arch.kv_size
    # GQA K/V repeated to every head: by megatron's unfused core, by transformers before a masked SDPA call
    expanded_kv = setup.attention == "unfused" or (setup.eager and hf_layers.repeats_kv(setup))
    if setup.attention != "unfused" or setup.eager:
        # flash/fused kernels take contiguous Q, K, V; transformers projects them separately
        kv_saved = q if (expanded_kv and kv < q) else kv
        return {"Q": act * sb * q / t, "K, V": 2 * act * sb * kv_saved / t}
    # megatron's local attention: Q, K, V are views of one QKV output. RoPE makes new Q and K; with grouped
    # heads the core repeats K and V to every head and its reshape copies Q (the QKV layout interleaves K
    # and V between query groups); a core_attn checkpoint keeps them as they came. Any tensor still a view
    # keeps the whole QKV output alive.
    rotated = arch.position_embedding == "rope"
    grouped = kv < q and not core_recomputed
    terms: dict[str, float] = {}
    if rotated or grouped:
        terms["Q (rotated/copied)"] = act * sb * q / t
        terms["K (rotated/repeated)"] = act * sb * (q if grouped else kv) / t
    if grouped:
        terms["V (repeated)"] = act * sb * q / t
    else:
        terms["QKV output (kept by a view)"] = act * sb * (q + 2 * kv) / t
    return terms


def _moe_terms(setup: TrainingJob, act: int, sb: float, rep: int, glu: int, drop: set[str]) -> dict[str, float]:
    """The router and the routed experts, megatron-core 0.16.1's unfused permute.

    The experts apply the routing probabilities inside their activation (weighted SwiGLU), so unpermute
    keeps nothing; the router keeps fp32 scores for the load-balancing loss, the top-k indices and their
    fp32 softmax, the routing map (bool) and probabilities by expert, and the permutation's indices.
    """
    arch = setup.arch
    e, k, h = arch.num_experts or 1, arch.moe_topk, arch.hidden
    tokens = sb / rep  # the router sees this rank's (sequence-parallel) tokens
    terms = {"router scores (fp32, load-balancing loss)": 4 * tokens * e,
             "top-k indices (int64) and fp32 probabilities": (8 + 4) * tokens * k,
             "routing map (bool) and probabilities by expert": (1 + act) * tokens * e,
             "permutation indices (int64)": 8 * tokens * k}
    dispatched = routed_tokens(setup, tokens) * setup.layout.expert_tp  # dispatched tokens on this rank
    ffn = arch.moe_ffn_hidden or arch.ffn_hidden
    terms["permuted tokens (expert input)"] = act * dispatched * h
    terms["permuted probabilities"] = act * dispatched
    terms["expert fc1 output"] = act * dispatched * ffn * glu / setup.layout.expert_tp
    if "moe_act" not in drop:
        terms["expert activation output"] = act * dispatched * ffn / setup.layout.expert_tp
        if not setup.moe_weighted_act_fused:
            # unfused bias_act_func: `act(x) * probs` keeps act(x); a gated unit's glu() also keeps act(x_glu)
            # and the new `x_linear + glu_linear_offset` for its product (megatron/core/transformer/moe/
            # experts.py, mlp.py): one ffn-wide tensor, or three
            terms["activation output kept by the probability multiply"] = \
                act * dispatched * ffn * (3 if glu == 2 else 1) / setup.layout.expert_tp
    if arch.shared_expert_ffn and "shared_experts" not in drop:
        terms.update(_mlp_terms(act, sb, arch.shared_expert_ffn, glu, setup.layout.tp, False, "shared expert"))
    return terms


def _mlp_terms(act: int, sb: float, ffn: int, glu: int, t: int, eager: bool, label: str,
               fc2_input: bool = True) -> dict[str, float]:
    """fc1's output (kept by the activation) and the activation's output (kept by fc2 when fc2 trains)."""
    out = {f"{label} fc1 output": act * sb * ffn * glu / t}
    if fc2_input:
        out[f"{label} activation output"] = act * sb * ffn / t
    if eager and glu == 2:  # act_fn(gate) * up keeps the activation of the gate as a separate tensor
        out[f"{label} gate activation (eager)"] = act * sb * ffn / t
    return out


def checkpoint_bytes(setup: TrainingJob) -> float:
    """What full recompute keeps per checkpoint: the layer-group input."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    size = act * setup.seq_length / setup.layout.seq_shards * setup.rows * setup.arch.hidden
    if setup.layout.sequence_parallel or setup.distribute_saved_activations or setup.checkpoint_partition:
        size /= setup.layout.tp
    return 0.0 if setup.checkpoint_cpu else size


def chunk_stored(setup: TrainingJob, layers: tuple[int, ...]) -> tuple[float, float]:
    """(stored bytes, backward recompute working set) of a model chunk for one microbatch."""
    memo: dict[tuple[bool, bool], tuple[float, float]] = {}  # a layer's terms depend only on whether it is MoE

    def kept_and_away(i: int, recompute: bool = True) -> tuple[float, float]:
        key = (setup.arch.is_moe_layer(i), recompute)
        if key not in memo:
            memo[key] = offload.split(setup, layer_terms(setup, i, recompute))
        return memo[key]

    def saved(i: int, recompute: bool = True) -> float:
        return kept_and_away(i, recompute)[0]

    if setup.recompute != "full":
        # offloaded activations: the layers in flight to or from the host (offload.py)
        in_flight = offload.KEPT_LAYERS * max((kept_and_away(i)[1] for i in layers), default=0.0)
        return sum(saved(i) for i in layers), in_flight
    n = max(1, setup.recompute_num_layers)
    if setup.recompute_method == "block":
        checkpointed, kept = layers[:n], layers[n:]
        stored = len(checkpointed) * checkpoint_bytes(setup) + sum(saved(i) for i in kept)
        working = max((saved(i, False) for i in checkpointed), default=0.0)
        return stored, working
    groups = [layers[k:k + n] for k in range(0, len(layers), n)]
    stored = len(groups) * checkpoint_bytes(setup)
    working = max((sum(saved(i, False) for i in g) for g in groups), default=0.0)
    return stored, working


def logits_bytes(setup: TrainingJob) -> tuple[float, float]:
    """(stored, transient) bytes of the output layer and loss for one microbatch on the last stage.

    The final norm keeps its input and statistics; the output layer keeps its input (the norm's output).
    Megatron's vocab-parallel cross entropy upcasts the logits to fp32 and keeps the fp32 softmax for
    backward; the fused loss keeps 16-bit logits only. Eager transformers also keep the returned logits.
    """
    s = setup.seq_length / setup.layout.seq_shards
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = s * setup.rows / (setup.layout.tp if setup.layout.sequence_parallel else 1)
    # the final norm keeps what a layer's norm keeps (seen on megatron-core's last stage), then its output
    h_in = sum(_norm_terms(setup, act, tokens, False, 1).values())
    if setup.scored_tokens:  # TRL's fused head keeps its own copy of the scored hidden states (chunked_head.py)
        kept, transient = chunked_head_bytes(setup)
        return h_in + kept, transient
    if setup.adapter is None:  # a frozen LM head needs only its weight for the input's gradient
        h_in += act * tokens * setup.arch.hidden
    kept, transient = loss_bytes(setup)
    return h_in + kept, transient


def loss_bytes(setup: TrainingJob) -> tuple[float, float]:
    """(kept for backward, alive only while the loss is computed) of one microbatch's logits and loss.

    megatron-core's vocab-parallel cross entropy (tensor_parallel/cross_entropy.py, calculate_logits_max)
    takes `logits.float()` and computes the softmax in place in it, saving it for backward: 16-bit logits
    leave an fp32 copy kept and are themselves alive only until the loss returns; fp32 logits are modified
    in place, so nothing more is allocated. Its native fusion does the same (tests/test_fidelity_loss.py
    measures all three on CPU); Transformer Engine's fused loss keeps the 16-bit logits alone.
    Eager transformers keep the 16-bit logits they return beside the fp32 log-softmax, and the fp32 copy
    it is computed from lives while it is.
    """
    rows = setup.seq_length / setup.layout.seq_shards * setup.rows * setup.vocab / setup.layout.tp
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    if setup.fused_cross_entropy:
        return act * rows, 0.0
    if setup.eager:  # transformers keep the returned logits; their loss upcasts a copy for log_softmax
        return 4 * rows + act * rows, 4 * rows
    return 4 * rows, (act * rows if act != 4 else 0.0)


def deferred_wgrad_bytes(setup: TrainingJob) -> float:
    """--defer-embedding-wgrad-compute, on the loss stage: the output layer skips its weight gradient and keeps, for
    each deferred microbatch, its input (appended in forward to embedding_activation_buffer, [s / t with SP, b, h])
    and its grad_output (appended in backward to grad_output_buffer: the logits gradient [s, b, V / t] in the
    activation dtype) until finish_embedding_wgrad_compute drains them after the flush
    (tensor_parallel/layers.py, pipeline_parallel/schedules.py). By the last one's backward all n gradients are
    held, and n - 1 inputs beyond the one its own stash keeps."""
    n = setup.deferred_wgrad
    if not n:
        return 0.0
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    t = setup.layout.tp or 1
    grad = act * tokens * setup.vocab / t
    kept_input = act * tokens * setup.arch.hidden / (t if setup.layout.sequence_parallel else 1)
    return n * grad + (n - 1) * kept_input


def mtp_bytes(setup: TrainingJob) -> float:
    """One multi-token prediction layer, one microbatch (transformer/multi_token_prediction.py, gpt_model.py):
    a transformer layer of the last layer's kind; enorm and hnorm keep their inputs; eh_proj keeps the
    [s, b, 2h] concatenation; its own final norm, output layer and loss keep what the main head keeps; and
    per token the rolled ids, labels and loss mask (int64), the loss's target (int64), mask (bool) and the
    masked fp32 loss. Measured on CPU (tests/test_fidelity_megatron_activations.py)."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    s = setup.seq_length / setup.layout.seq_shards
    tokens = s * setup.rows
    rep = setup.layout.tp if setup.layout.sequence_parallel else 1
    layer = sum(layer_terms(setup, setup.arch.num_layers - 1).values())
    norms = sum(_norm_terms(setup, act, tokens / rep, False, 2).values())
    concat = 2 * act * tokens / rep * setup.arch.hidden
    head = logits_bytes(setup)[0]
    return layer + norms + concat + head + (3 * 8 + 8 + 1 + 4) * tokens + 8


def embedding_bytes(setup: TrainingJob) -> float:
    """First stage, per microbatch: token ids (int64), position ids, and the embedding dropout mask."""
    s = setup.seq_length / setup.layout.seq_shards
    sb = s * setup.rows
    out = 8 * sb * 2
    if setup.arch.hidden_dropout > 0:
        out += sb * setup.arch.hidden / (setup.layout.tp if setup.layout.sequence_parallel else 1)
    if setup.adapter is not None and setup.recompute == "none":
        # the frozen embedding's output needs no gradient (no enable_input_require_grads without checkpointing):
        # the first layer's input norm saves nothing, nor what its Q/K/V adapters keep for an input gradient
        act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
        out -= sum(_norm_terms(setup, act, sb, False, 1).values()) + hf_layers.first_layer_untracked(setup)
    return out
