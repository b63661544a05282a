"""Build the memory model's Setup from a Megatron-LM / Megatron-DeepSpeed job (flags, launcher, DS config)."""

from __future__ import annotations

import ast
from typing import Any

from guard.megatron import derived
from guard.megatron.job import MegatronJob
from guard.memory.architecture import Architecture, moe_layer_pattern
from guard.memory.layout import LayoutError, from_layout_string, megatron_chunks
from guard.memory.setup import Origin, Setup

# Vocabulary sizes of tokenizers that carry no vocab file argument guard could read.
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "BertWordPieceLowerCase": 30522, "BertWordPieceCase": 28996}

# Flags whose memory effect guard does not model: (dest, feature). Each one present becomes a diagnostic.
UNMODELLED_FLAGS = [
    ("fp8", "FP8 training (weight transpose caches, amax histories)"),
    ("fp8_param_gather", "FP8 parameter all-gather"),
    ("multi_latent_attention", "multi-latent attention (MLA)"),
    ("mtp_num_layers", "multi-token prediction layers"),
    ("optimizer_cpu_offload", "optimizer CPU offload"),
    ("cpu_offloading_num_layers", "activation CPU offloading"),
    ("rampup_batch_size", "batch-size ramp-up (priced at the final global batch)"),
    ("moe_expert_capacity_factor", "MoE token dropping / capacity factor (priced as balanced routing)"),
    ("hybrid_override_pattern", "hybrid Mamba layers"),
    ("num_microbatches_with_partial_activation_checkpoints", "partial activation checkpointing"),
]


class SetupError(ValueError):
    """The job lacks a value the estimate needs (message names the flag and how to give it)."""


def _origin(job: MegatronJob, dest: str) -> Origin:
    if job.given(dest):
        span = job.flag_span(dest)
        return Origin(job.option(dest), job.path_of(dest), span.line, span.col, job.option(dest))
    return Origin(f"default of {job.option(dest)}", job.path, job.anchor.line, job.anchor.col, job.option(dest))


def _value(job: MegatronJob, dest: str, base: Any = None) -> Any:
    if dest not in job.table.by_dest:
        return base
    if not job.known(dest):
        raise SetupError(f"{job.path}:{job.flag_span(dest).line}: {job.option(dest)} has a value guard "
                         f"cannot resolve; give it literally")
    if job.given(dest) or base is None:
        value = job.v(dest)
        return value[0] if isinstance(value, list) and len(value) == 1 and dest != "recompute_modules" else value
    return base


def _int(job: MegatronJob, dest: str, base: int | None = None, need: str = "") -> int | None:
    value = _value(job, dest, base)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if need:
        raise SetupError(f"{job.path}: {job.option(dest)} is not set: {need}")
    return None


def list_expression(text: str) -> int | list[int] | None:
    """Megatron's --moe-layer-freq strings such as "[0]*3+[1]*29", read without eval."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None

    def walk(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.List):
            return [walk(e) for e in n.elts]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mult)):
            left, right = walk(n.left), walk(n.right)
            if isinstance(n.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and right < 100000:
                return left * right
            if isinstance(n.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
        raise ValueError(text)

    try:
        value = walk(node)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (int, list)) else None


def architecture(job: MegatronJob, base: Architecture | None, vocab: int | None) -> Architecture:
    b = base
    need = "give it in the command, or --model / --hf-config"
    layers = _int(job, "num_layers", b and b.num_layers, need)
    hidden = _int(job, "hidden_size", b and b.hidden, need)
    heads = _int(job, "num_attention_heads", b and b.heads, need)
    if not heads or not hidden or heads < 1:
        raise SetupError(f"{job.path}: --hidden-size and --num-attention-heads must be positive integers")
    swiglu = bool(_value(job, "swiglu", b.gated_mlp if b and not job.given("swiglu") else None))
    groups = job.query_groups if (job.given("group_query_attention") or job.given("num_query_groups")
                                  or job.given("num_key_value_heads") or not b) else b.query_groups
    kv = _int(job, "kv_channels", b.kv_channels if b else None) or hidden // heads
    ffn = _int(job, "ffn_hidden_size", b.ffn_hidden if b and not job.given("hidden_size") else None) or \
        derived.ffn_hidden_size(hidden, swiglu)
    norm = _value(job, "normalization", None if not b else ("RMSNorm" if b.norm == "rmsnorm" else "LayerNorm"))
    untie = _value(job, "untie_embeddings_and_output_weights", None if not b else not b.tied_embeddings)
    pos = _value(job, "position_embedding_type", b.position_embedding if b else None)
    if job.flavour == "megatron-deepspeed" and job.given("use_rotary_position_embeddings"):
        pos = "rope"
    seq = _int(job, "seq_length", None) or (b.max_positions if b else 0)
    max_pos = _int(job, "max_position_embeddings", b.max_positions if b else None) or seq
    bias = _value(job, "add_bias_linear", b.linear_bias if b else None)
    experts = _int(job, "num_experts", b.num_experts if b else None)
    if experts is not None and experts <= 1:  # Megatron-DeepSpeed's default [1] means a dense model
        experts = None
    tokens = vocab or (b.vocab if b else None)
    tokenizer = _value(job, "tokenizer_type")
    if tokens is None and job.given("vocab_size"):
        tokens = _int(job, "vocab_size")
    if tokens is None:
        tokens = TOKENIZER_VOCAB.get(str(tokenizer))
    if tokens is None:
        which = f"--tokenizer-type {tokenizer} reads it from its files" if tokenizer else "no --tokenizer-type"
        raise SetupError(f"{job.path}: the vocabulary size is not in the command ({which}): "
                         "give --vocab-size N, --model or --hf-config")
    pattern = None
    if experts:
        freq = _value(job, "moe_layer_freq", None)
        if isinstance(freq, str):
            freq = list_expression(freq)
            if freq is None:
                raise SetupError(f"{job.path}: --moe-layer-freq is an expression guard cannot read; give an int "
                                 "or a list such as [0]*3+[1]*29")
        pattern = moe_layer_pattern(layers, freq) if freq is not None else (b.moe_layers if b else None)
    return Architecture(
        num_layers=layers, hidden=hidden, heads=heads, query_groups=groups or heads, kv_channels=kv,
        ffn_hidden=ffn, vocab=tokens, max_positions=max_pos, gated_mlp=swiglu,
        norm="rmsnorm" if str(norm).lower() == "rmsnorm" else "layernorm",
        tied_embeddings=not untie, position_embedding=str(pos), linear_bias=bool(bias),
        qkv_bias=bool(_value(job, "add_qkv_bias", b.qkv_bias if b else None)),
        qk_norm=bool(_value(job, "qk_layernorm", b.qk_norm if b else None)),
        num_experts=experts or None,
        moe_ffn_hidden=_int(job, "moe_ffn_hidden_size", b.moe_ffn_hidden if b else None) or (ffn if experts else None),
        moe_topk=_int(job, "moe_router_topk", b.moe_topk if b else None) or 2,
        shared_expert_ffn=_int(job, "moe_shared_expert_intermediate_size", b.shared_expert_ffn if b else None) or 0,
        moe_layers=pattern,
        hidden_dropout=float(_value(job, "hidden_dropout", None) or 0.0),
        attention_dropout=float(_value(job, "attention_dropout", None) or 0.0),
        name=(b.name if b else "") or f"GPT from the flags of {job.path}", source=job.path)


def _check_shape(job: MegatronJob, arch: Architecture) -> None:
    """Values the model divides by: refuse what Megatron itself refuses (guard check says why, in detail)."""
    for value, what in ((arch.num_layers, "--num-layers"), (arch.hidden, "--hidden-size"),
                        (arch.heads, "--num-attention-heads"), (arch.ffn_hidden, "--ffn-hidden-size"),
                        (arch.kv_channels, "--kv-channels"), (arch.query_groups, "--num-query-groups"),
                        (arch.vocab, "--vocab-size")):
        if value is None or value < 1:
            raise SetupError(f"{job.path}: {what} must be a positive integer, got {value} (see guard check)")
    if arch.heads % arch.query_groups:
        raise SetupError(f"{job.path}: --num-attention-heads {arch.heads} is not a multiple of "
                         f"--num-query-groups {arch.query_groups} (see guard check)")


def setup_from_job(job: MegatronJob, base: Architecture | None = None, vocab: int | None = None,
                   world_size: int | None = None) -> Setup:
    arch = architecture(job, base, vocab)
    _check_shape(job, arch)
    world = world_size or job.world_size
    if not world:
        raise SetupError(f"{job.path}: the world size is unknown ({job.world_size_why or 'no launcher'}): "
                         "give --world-size N")
    tp, pp, cp = job.tp or 1, job.pp or 1, job.cp or 1
    for value, what in ((tp, "--tensor-model-parallel-size"), (pp, "--pipeline-model-parallel-size"),
                        (cp, "--context-parallel-size")):
        if value < 1:
            raise SetupError(f"{job.path}: {what} must be at least 1, got {value}")
    if world % (tp * pp * cp):
        raise SetupError(f"{job.path}: world size {world} is not divisible by TP x PP x CP = {tp * pp * cp}")
    deepspeed = job.flavour == "megatron-deepspeed" and _value(job, "deepspeed") is True
    setup = Setup(arch=arch, framework="megatron-deepspeed" if deepspeed else "megatron", world_size=world,
                  tp=tp, pp=pp, cp=cp, vpp=job.vpp or 1, gpus_per_node=job.gpus_per_node or 8)
    setup.ep = max(1, _int(job, "expert_model_parallel_size") or 1)
    setup.etp = max(1, _int(job, "expert_tensor_parallel_size") or tp)
    if arch.num_experts and arch.num_experts % setup.ep:
        raise SetupError(f"{job.path}: --num-experts {arch.num_experts} is not divisible by "
                         f"--expert-model-parallel-size {setup.ep}")
    setup.sequence_parallel = bool(_value(job, "sequence_parallel")) and tp > 1
    seq = _int(job, "seq_length", None)
    if not seq:
        raise SetupError(f"{job.path}: --seq-length is not set: give it in the command or with --seq-length")
    setup.seq_length = seq
    setup.micro_batch = _int(job, "micro_batch_size", None, "give --micro-batch-size") or 1
    if setup.micro_batch < 1 or seq < 1:
        raise SetupError(f"{job.path}: --micro-batch-size and --seq-length must be positive")
    dp = setup.dp
    gbs = _int(job, "global_batch_size") or setup.micro_batch * dp
    if gbs % (setup.micro_batch * dp):
        raise SetupError(f"{job.path}: --global-batch-size {gbs} is not divisible by micro batch x DP = "
                         f"{setup.micro_batch * dp}")
    setup.num_microbatches = gbs // (setup.micro_batch * dp)
    setup.microbatch_group = _int(job, "microbatch_group_size_per_vp_stage")
    divisible = _int(job, "make_vocab_size_divisible_by") or 128
    null_tok = str(_value(job, "tokenizer_type")) == "NullTokenizer" and vocab is None and base is None
    setup.padded_vocab = derived.padded_vocab_size(arch.vocab, divisible, tp, null_tok)
    _precision(job, setup)
    _recompute(job, setup)
    _chunks(job, setup)
    impl = _value(job, "transformer_impl")
    backend = str(_value(job, "attention_backend") or "auto").split(".")[-1].lower()
    flash = _value(job, "use_flash_attn") is True
    if backend in ("unfused", "local") or (impl == "local" and not flash) or \
            (job.flavour == "megatron-deepspeed" and not flash):
        setup.attention = "unfused"
    setup.fused_cross_entropy = _value(job, "cross_entropy_loss_fusion") is True
    if deepspeed:
        _deepspeed(job, setup)
    for dest, feature in UNMODELLED_FLAGS:
        if job.given(dest) and _value(job, dest) not in (None, False, 0):
            setup.unmodelled.append((feature, job.option(dest)))
            setup.origins[f"unmodelled:{feature}"] = _origin(job, dest)
    if str(_value(job, "optimizer")) not in ("adam", "sgd", "adamw"):
        setup.unmodelled.append((f"optimizer {_value(job, 'optimizer')}", "--optimizer"))
    for key, dest in (("micro_batch", "micro_batch_size"), ("tp", "tensor_model_parallel_size"),
                      ("pp", "pipeline_model_parallel_size"), ("distributed_optimizer", "use_distributed_optimizer"),
                      ("recompute", "recompute_granularity"), ("seq_length", "seq_length"),
                      ("command", "num_layers")):
        setup.origins[key] = _origin(job, dest)
    return setup


def _precision(job: MegatronJob, setup: Setup) -> None:
    if _value(job, "bf16") is True:
        setup.params_dtype, setup.grads_dtype = "bf16", "fp32"  # validate_args forces fp32 accumulation for bf16
    elif _value(job, "fp16") is True:
        setup.params_dtype = "fp16"
        setup.grads_dtype = "fp32" if _value(job, "accumulate_allreduce_grads_in_fp32") is True else "fp16"
    else:
        setup.params_dtype, setup.grads_dtype = "fp32", "fp32"
    setup.distributed_optimizer = _value(job, "use_distributed_optimizer") is True
    setup.optimizer = "sgd" if _value(job, "optimizer") == "sgd" else "adam"
    setup.sgd_momentum = float(_value(job, "sgd_momentum") or 0) > 0
    if _value(job, "use_precision_aware_optimizer") is True:
        setup.main_params_dtype = str(_value(job, "main_params_dtype") or "fp32")
        setup.exp_avg_dtype = str(_value(job, "exp_avg_dtype") or "fp32")
        setup.exp_avg_sq_dtype = str(_value(job, "exp_avg_sq_dtype") or "fp32")
        if _value(job, "main_grads_dtype") == "bf16":
            setup.grads_dtype = "bf16"
    setup.overlap_param_gather = _value(job, "overlap_param_gather") is True


def _recompute(job: MegatronJob, setup: Setup) -> None:
    granularity = _value(job, "recompute_granularity")
    if job.flavour == "megatron-deepspeed" and (_value(job, "checkpoint_activations") is True or
                                                _value(job, "deepspeed_activation_checkpointing") is True):
        granularity = "full"
        setup.recompute_num_layers = _int(job, "checkpoint_num_layers") or 1
    if granularity in ("full", "selective"):
        setup.recompute = granularity
    if granularity == "full":
        setup.recompute_method = str(_value(job, "recompute_method") or "uniform")
        setup.recompute_num_layers = _int(job, "recompute_num_layers") or setup.recompute_num_layers
    modules = _value(job, "recompute_modules")
    if modules:
        setup.recompute_modules = tuple(modules if isinstance(modules, list) else str(modules).split())
        if "mla_up_proj" in setup.recompute_modules:
            setup.unmodelled.append(("recompute of MLA up-projections", "--recompute-modules"))
    setup.distribute_saved_activations = _value(job, "distribute_saved_activations") is True


def _chunks(job: MegatronJob, setup: Setup) -> None:
    layers = setup.arch.num_layers
    try:
        layout = _value(job, "pipeline_model_parallel_layout")
        if layout:
            setup.chunks = from_layout_string(str(layout), setup.pp, layers)
            setup.vpp = len(setup.chunks[0])
        else:
            setup.chunks = megatron_chunks(
                layers, setup.pp, setup.vpp, _int(job, "decoder_first_pipeline_num_layers"),
                _int(job, "decoder_last_pipeline_num_layers"),
                _value(job, "account_for_embedding_in_pipeline_split") is True,
                _value(job, "account_for_loss_in_pipeline_split") is True)
    except LayoutError as err:
        raise SetupError(f"{job.path}: {err}") from None
    if _value(job, "overlap_moe_expert_parallel_comm") is True:
        setup.notes.append("overlap_moe_expert_parallel_comm adds one warm-up microbatch (not modelled)")
        setup.unmodelled.append(("the extra warm-up microbatch of --overlap-moe-expert-parallel-comm",
                                 "--overlap-moe-expert-parallel-comm"))


def _deepspeed(job: MegatronJob, setup: Setup) -> None:
    from guard.memory.from_deepspeed import apply_config

    setup.ds_pipeline = setup.pp > 1 and _value(job, "no_pipeline_parallel") is not True
    stage = _int(job, "zero_stage")
    config = job.deepspeed_config.data if job.deepspeed_config else {}
    apply_config(setup, config, job.deepspeed_config.label if job.deepspeed_config else job.path)
    if stage is not None and not (config.get("zero_optimization") or {}).get("stage"):
        setup.zero_stage = stage
    setup.distributed_optimizer = False
