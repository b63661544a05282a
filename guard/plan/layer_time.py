"""Seconds one transformer layer takes on one rank for one microbatch: forward, backward, recompute.

GEMMs at the kernel table's achieved rate for their size (FP8 GEMMs at the FP8 rate and its fall with K) and
tile/wave quantization, or HBM time when memory-bound (hardware.gemm_seconds); flash attention at its backend's
published rate (hardware.attention_seconds); memory-bound kernels (norms, bias-dropout-add, the activation
function, RoPE, softmax, permutation, FP8 casts) from the bytes they read and write; TP/SP, CP and EP
communication from collectives.py, exposed unless --tp-comm-overlap hides TP/SP behind the layer's GEMMs
(Megatron otherwise runs them on the compute stream). The backward runs two GEMMs per forward GEMM (input and
weight gradients); its memory-bound kernels move 1.5x the forward's bytes (y = f(x) reads x and writes y; its
backward reads dy and x or y and writes dx); flash attention's backward runs at its own measured rate (2.5x
the forward's FLOPs); its collectives mirror the forward's, and under SP it gathers the input of each
column-parallel GEMM again for the weight gradient (megatron-core's
LinearWithGradAccumulationAndAsyncCommunication).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.plan.collectives import collective_seconds, p2p_seconds, spans_nodes
from guard.plan.hardware import Hardware

BACKWARD_MEMORY = 1.5
# FlashAttention-2's backward (Dao 2023, Algorithm 2) recomputes S = QK^T and runs dV, dP, dQ and dK: five
# matmuls of the forward's size against the forward's two
FLASH_BACKWARD = 5 / 2
# transformers' eager kernels, bytes read + written per element against the fused kernel's 2 + 2:
# LlamaRMSNorm: to(fp32) 2+4, pow 4+4, mean 4, x * rsqrt 4+4, to(dtype) 4+2, weight * 2+2 = 36;
# apply_rotary_pos_emb: q * cos, rotate_half (slice, neg, cat), * sin, + : about five read-write passes
EAGER_RMSNORM = 36 / 4
EAGER_ROPE = 5.0
# ACT2FN["silu"](gate) * up: silu reads 2 writes 2, the product reads 4 writes 2 = 10 bytes per FFN element
# against the fused SwiGLU's 6 (reads 4, writes 2)
EAGER_SWIGLU = 10 / 6


@dataclass
class Work:
    """Seconds by named term, GEMM, memory-bound and communication apart."""

    gemm: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    comm: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, name: str, seconds: float) -> None:
        if seconds:
            terms = getattr(self, kind)
            terms[name] = terms.get(name, 0.0) + seconds

    @property
    def seconds(self) -> float:
        return sum(self.gemm.values()) + sum(self.memory.values()) + sum(self.comm.values())


@dataclass
class LayerTime:
    forward: Work
    backward: Work
    attention_core: float  # the core's forward seconds: what selective recompute runs again

    @property
    def recompute_full(self) -> float:
        return self.forward.seconds

    def labelled(self) -> list[tuple[str, float]]:
        """(term name, seconds) of the forward and the backward, as the step's breakdown names them."""
        out = []
        for work in (self.forward, self.backward):
            out += [(f"compute: {name}", sec) for name, sec in (*work.gemm.items(), *work.memory.items())]
            out += list(work.comm.items())
        return out


@dataclass(frozen=True)
class _Shape:
    act: int  # activation bytes
    tokens: float  # this rank's tokens through the linear layers
    rep: int  # SP splits the norms, dropouts and the router over TP
    t: int
    h: int
    fp8: bool = False  # the linear layers' GEMMs run in FP8 (Transformer Engine, --fp8-format)


def layer_time(job: TrainingJob, hw: Hardware, index: int) -> LayerTime:
    arch, lay = job.arch, job.layout
    t = lay.tp or 1
    sh = _Shape(DTYPE_BYTES["fp32" if job.params_dtype == "fp32" else "bf16"],
                job.micro_batch * job.seq_length / lay.seq_shards, t if lay.sequence_parallel else 1, t, arch.hidden,
                job.step.fp8 is not None)
    q, kv = arch.query_size, arch.kv_size
    eager = job.eager
    w = Work()
    norm = EAGER_RMSNORM if eager and arch.norm == "rmsnorm" else 1.0
    w.add("memory", "norms", arch.norms_per_layer * hw.memory_seconds(norm * 2 * sh.act * sh.tokens * sh.h / sh.rep))
    w.add("gemm", "QKV projection", hw.gemm_seconds(sh.tokens, (q + 2 * kv) / t, sh.h, fp8=sh.fp8))
    if arch.position_embedding == "rope":
        rope = EAGER_ROPE if eager else 1.0
        w.add("memory", "RoPE", hw.memory_seconds(rope * 2 * sh.act * sh.tokens * (q + kv) / t))
    core = _attention(job, hw, w, sh)
    w.add("gemm", "attention projection", hw.gemm_seconds(sh.tokens, sh.h, q / t, fp8=sh.fp8))
    mask = job.mask_bytes if arch.hidden_dropout > 0 else 0
    w.add("memory", "bias-dropout-add", 2 * hw.memory_seconds((3 * sh.act + mask) * sh.tokens * sh.h / sh.rep))
    if arch.is_moe_layer(index):
        _moe(job, hw, w, sh)
    else:
        _mlp(hw, w, sh, arch.ffn_hidden, 2 if arch.gated_mlp else 1, t, "MLP",
             eager=EAGER_SWIGLU if eager and arch.gated_mlp else 1.0)
    tp_fwd, tp_bwd = _tp_comm(job, hw, sh.act * sh.tokens * sh.h)
    tp_name = "SP all-gather/reduce-scatter" if lay.sequence_parallel else "TP all-reduce"
    w.add("comm", tp_name, tp_fwd)
    back = Work({n: (FLASH_BACKWARD if n == "attention core (flash)" else 2) * x for n, x in w.gemm.items()},
                {n: BACKWARD_MEMORY * x for n, x in w.memory.items()},
                {**w.comm, **({tp_name: tp_bwd} if tp_bwd else {})})
    back.memory.pop("scores buffer copy (baddbmm)", None)  # the backward's bmm writes fresh outputs
    if "softmax" in back.memory:
        back.memory["softmax"] = _softmax_seconds(job, hw, sh, _probs(job, sh), "backward")
    flash_back = _flash_backward(job, hw, sh)
    if flash_back is not None:
        back.gemm["attention core (flash)"] = flash_back
    if job.step.fp8:
        _fp8_casts(job, hw, w, back, sh)
    if job.step.tp_comm_overlap and tp_fwd:
        _overlap_tp(w, back, tp_name)
    return LayerTime(w, back, core)


def attention_backend(job: TrainingJob) -> str:
    """The kernel table's backend for the job's flash attention: Transformer Engine's auto/fused backend runs
    cuDNN's fused attention where the table has it (Hopper on), --attention-backend flash and transformers'
    SDPA run FlashAttention-2."""
    chosen = job.step.attention_backend
    if job.linear_impl == "transformer_engine" and chosen in ("auto", "fused"):
        return "cudnn"
    return "flash2"


def _flash_backward(job: TrainingJob, hw: Hardware, sh: _Shape) -> float | None:
    """The flash core's backward at its own measured rate (FA2's published figures: one rate for both)."""
    if job.attention == "unfused":
        return None
    lay, arch = job.layout, job.arch
    s_q = job.seq_length / (lay.cp or 1)
    s_k = job.seq_length if (lay.cp or 1) > 1 else s_q
    batched = job.micro_batch * arch.heads / sh.t / (lay.ulysses or 1)
    return hw.attention_seconds(attention_backend(job), batched, s_q, s_k, arch.kv_channels, backward=True)


def _fp8_casts(job: TrainingJob, hw: Hardware, w: Work, back: Work, sh: _Shape) -> None:
    """Transformer Engine's FP8 linears: each GEMM input is cast to FP8 (read 2 bytes, write 1) in the forward;
    the backward casts the output gradient and transposes the FP8 input for the weight gradient (read 1,
    write 1). The weights are cast once per step (is_first_microbatch), priced with the optimizer."""
    arch, t = job.arch, sh.t
    glu = 2 if arch.gated_mlp else 1
    # inputs: QKV and fc1 read the whole hidden state, the projection and fc2 their TP shard
    inputs = sh.tokens * (2 * sh.h + (arch.query_size + arch.ffn_hidden) / t)
    # output gradients: QKV and fc1 their shard, the projection and fc2 the whole hidden state
    outputs = sh.tokens * ((arch.query_size + 2 * arch.kv_size + arch.ffn_hidden * glu) / t + 2 * sh.h)
    # current ("tensorwise") scaling takes each tensor's amax in a pass of its own before the cast; delayed scaling
    # uses the amax history, and block scaling (blockwise, MXFP8) computes its scales inside the cast kernel
    amax = 2 if job.step.fp8_recipe == "tensorwise" else 0
    w.add("memory", "FP8 casts", hw.memory_seconds((3 + amax) * inputs))
    back.add("memory", "FP8 casts and transposes", hw.memory_seconds((3 + amax) * outputs + 2 * inputs))


def _overlap_tp(w: Work, back: Work, name: str) -> None:
    """--tp-comm-overlap: Transformer Engine's userbuffers split the TP/SP collectives into chunks that run
    while the GEMMs they feed run; what the layer's linear GEMMs cannot cover stays exposed."""
    linear = ("QKV projection", "attention projection", "MLP fc1", "MLP fc2", "shared expert fc1", "shared expert fc2")
    for work in (w, back):
        if name in work.comm:
            behind = sum(work.gemm.get(n, 0.0) for n in linear)
            work.comm[name] = max(0.0, work.comm[name] - behind)


def _attention(job: TrainingJob, hw: Hardware, w: Work, sh: _Shape) -> float:
    """The core (QK^T, softmax, AV) and, with CP, the ring exchange of K and V it overlaps with."""
    arch, lay = job.arch, job.layout
    u = lay.ulysses or 1
    s_q = job.seq_length / (lay.cp or 1)  # Ulysses: heads / u over u times the local sequence
    s_k = job.seq_length if (lay.cp or 1) > 1 else s_q
    batched, d = job.micro_batch * arch.heads / sh.t / u, arch.kv_channels
    before = w.seconds
    if job.attention == "unfused":
        w.add("gemm", "attention core (QK^T, AV)", hw.gemm_seconds(s_q, s_k, d, batched)
              + hw.gemm_seconds(s_q, d, s_k, batched))
        probs = _probs(job, sh)
        if job.linear_impl == "megatron":  # DotProductAttention's baddbmm(buffer, ..., beta=0) copies the buffer
            nbytes, kind, _ = _eager()["baddbmm_copy"]
            w.add("memory", "scores buffer copy (baddbmm)", hw.memory_seconds(nbytes / 2 * sh.act * probs, kind))
        w.add("memory", "softmax", _softmax_seconds(job, hw, sh, probs, "forward"))
        if arch.attention_dropout > 0:
            w.add("memory", "attention dropout", hw.memory_seconds((2 * sh.act + job.mask_bytes) * probs))
    else:  # flash attention skips the masked half of a causal square
        backend = attention_backend(job)
        measured = hw.attention_seconds(backend, batched, s_q, s_k, d, backward=False)
        if measured is None:  # no kernel data for this GPU: its two GEMMs at the GEMM table's speed
            measured = hw.gemm_seconds(s_q, s_k / 2, d, batched) + hw.gemm_seconds(s_q, d, s_k / 2, batched)
        w.add("gemm", "attention core (flash)", measured)
    if u > 1:  # Ulysses: all-to-all of Q, K, V in and of the output back
        a2a = collective_seconds(hw, "all_to_all", sh.act * sh.tokens * (2 * arch.query_size + 2 * arch.kv_size)
                                 / sh.t, u, spans_nodes(lay, "cp", hw.nvlink_domain))
        w.add("comm", "Ulysses all-to-all", a2a)
    core = w.seconds - before
    if (lay.cp or 1) > 1:
        # ring attention: cp - 1 exchanges of this rank's K and V, overlapped with the core's blocks
        kv_bytes = 2 * sh.act * sh.tokens * arch.kv_size / sh.t
        ring = (lay.cp - 1) * p2p_seconds(hw, kv_bytes, spans_nodes(lay, "cp", hw.nvlink_domain))
        w.add("comm", "CP ring exchange (exposed)", max(0.0, ring - core))
    return core


def _eager() -> dict:
    from guard.plan.kernels import table

    return table()["hbm"]["eager_softmax"]


def _probs(job: TrainingJob, sh: _Shape) -> float:
    """Score elements of one layer's unfused core on this rank."""
    lay = job.layout
    s_q = job.seq_length / (lay.cp or 1)
    s_k = job.seq_length if (lay.cp or 1) > 1 else s_q
    return job.micro_batch * job.arch.heads / sh.t / (lay.ulysses or 1) * s_q * s_k


def _softmax_seconds(job: TrainingJob, hw: Hardware, sh: _Shape, probs: float, way: str) -> float:
    """The unfused core's mask and softmax. A fused kernel (megatron's or Transformer Engine's scaled masked
    softmax) reads the scores and writes the probabilities once each way (the backward reads two, writes one);
    megatron's torch path (step.torch_softmax) runs eager passes, each at its kernel kind's measured rate:
    with fp32 softmax (job.softmax_bytes 4) the casts and fp32 passes of hbm.eager_softmax, else the same passes
    on 16-bit scores without the casts."""
    if not job.step.torch_softmax:
        return (1.0 if way == "forward" else BACKWARD_MEMORY) * hw.memory_seconds(2 * sh.act * probs)
    fp32 = job.softmax_bytes == 4
    total = 0.0
    for nbytes, kind, _ in _eager()[way]:
        if kind.startswith("cast") and not fp32:
            continue
        total += hw.memory_seconds((nbytes if fp32 else nbytes * sh.act / 4) * probs, kind)
    return total


def _mlp(hw: Hardware, w: Work, sh: _Shape, ffn: int, glu: int, t: int, label: str, tokens: float = 0,
         eager: float = 1.0, experts: int = 1, grouped: bool = True) -> None:
    """fc1, the activation, fc2 over `tokens`; for `experts` local experts each GEMM is theirs: one grouped GEMM
    whose tiles share the waves, or one GEMM per expert after another (--moe-grouped-gemm off)."""
    n = tokens or sh.tokens
    each = n / experts

    def gemm(cols: float, k: float) -> float:
        if experts == 1 or grouped:
            return hw.gemm_seconds(each, cols, k, count=experts, fp8=sh.fp8)
        return experts * hw.gemm_seconds(each, cols, k, fp8=sh.fp8)

    w.add("gemm", f"{label} fc1", gemm(ffn * glu / t, sh.h))
    w.add("memory", f"{label} activation", hw.memory_seconds(eager * sh.act * n * ffn * (glu + 1) / t))
    w.add("gemm", f"{label} fc2", gemm(sh.h, ffn / t))


def _moe(job: TrainingJob, hw: Hardware, w: Work, sh: _Shape) -> None:
    """Router, token permutation, expert GEMMs and EP all-to-all (the backward's mirror them).

    Each rank's experts see tokens x top-k x expert-TP / TP of its tokens (as activations.py counts them), split
    evenly over its local experts, whose GEMMs run grouped (--moe-grouped-gemm) or one expert after another;
    dispatch and combine are one all-to-all each way. Routing is balanced unless a stated imbalance (guard plan
    --moe-imbalance X) says the busiest EP rank receives X times its share: every rank waits for it at the
    combine all-to-all, so its expert work, permutation and received bytes set the layer's time (with EP = 1
    every expert is local and the rank's total does not change).
    """
    arch, lay = job.arch, job.layout
    tokens = sh.tokens / sh.rep
    e, k = arch.num_experts, arch.moe_topk
    busiest = job.step.moe_imbalance if (lay.ep or 1) > 1 else 1.0
    w.add("gemm", "router", hw.gemm_seconds(tokens, e, sh.h))
    dispatched = tokens * k * (lay.expert_tp or 1) * busiest
    etp = lay.expert_tp or 1
    w.add("memory", "token permutation", 2 * hw.memory_seconds(2 * sh.act * dispatched * sh.h))
    local = max(1, e // max(1, lay.ep or 1))
    _mlp(hw, w, sh, arch.moe_ffn_hidden or arch.ffn_hidden, 2 if arch.gated_mlp else 1, etp, "experts",
         tokens=dispatched, experts=local, grouped=job.moe_grouped_gemm)
    if arch.shared_expert_ffn:
        _mlp(hw, w, sh, arch.shared_expert_ffn, 2 if arch.gated_mlp else 1, sh.t, "shared expert")
    a2a = 2 * collective_seconds(hw, "all_to_all", sh.act * tokens * k * busiest * sh.h, lay.ep,
                                 spans_nodes(lay, "ep", hw.nvlink_domain))
    w.add("comm", "EP all-to-all", a2a)


def _tp_comm(job: TrainingJob, hw: Hardware, nbytes: float) -> tuple[float, float]:
    """(forward, backward) seconds of the layer's TP collectives on its [s, b, h] activations."""
    lay = job.layout
    t = lay.tp or 1
    if t == 1:
        return 0.0, 0.0
    across = spans_nodes(lay, "tp", hw.nvlink_domain)
    two = 2 * collective_seconds(hw, "all_reduce", nbytes, t, across)  # an AR is an RS + an AG in time
    if not lay.sequence_parallel:
        return two, two
    regather = 2 * collective_seconds(hw, "all_gather", nbytes, t, across)
    return two, two + regather
