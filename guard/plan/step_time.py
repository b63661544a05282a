"""Predicted seconds of one training step: the pipeline schedule, then gradient sync and the optimizer.

Each stage's forward and backward of one microbatch come from layer_time.py, plus the embedding, the LM
head and loss on the stages that hold them, recompute as the job asks, and the pipeline sends. The
schedule takes m x (the slowest stage) + (the other stages) / v: for equal stages (m + (p - 1)/v) x S,
the 1F1B/interleaved bubble of Narayanan et al. 2021; `pipeline_sim` replays the real warm-up and
cool-down. Gradient sync, parameter gathers and the optimizer follow (sharding.py), then the per-step passes
(per_step.py); each stage's microbatch takes no less than the host needs to issue its kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import rank_inventory
from guard.plan import per_step, sharding
from guard.plan.collectives import p2p_seconds, spans_nodes
from guard.plan.hardware import Hardware
from guard.plan.layer_time import BACKWARD_MEMORY, LayerTime, layer_time
from guard.plan.model_flops import step_model_flops
from guard.plan.pipeline_sim import simulate
from guard.plan.post_training_time import post_training_time


@dataclass
class StageTime:
    """One microbatch through one pipeline rank, by model chunk."""

    forward: list[float]
    backward: list[float]  # with recompute
    terms: dict[str, float]  # one microbatch's seconds by name (all chunks)
    host: float = 0.0  # seconds the host takes to issue one microbatch's kernels (forward and backward)
    synced: bool = False  # the host waits for the GPU inside each microbatch (MoE token counts to the host)

    @property
    def seconds(self) -> float:
        return sum(self.forward) + sum(self.backward)


@dataclass
class StepTime:
    seconds: float
    pipeline: float  # forward/backward of every microbatch, bubble included
    bubble: float  # the busiest stage's idle share of the pipeline time
    terms: dict[str, float]  # seconds of one step by name; they add up to `seconds`
    stages: list[StageTime]
    model_flops: float
    explain: list[str] = field(default_factory=list)

    def mfu(self, world: int, peak_flops: float) -> float:
        return self.model_flops / (self.seconds * world * peak_flops)


def step_time(job: TrainingJob, hw: Hardware) -> StepTime:
    """One training step; a preference trainer's (guard/job/post_training.py) with its rows and its reference's
    forward (post_training_time)."""
    if job.post_training is not None:
        return post_training_time(job, hw, _training_step)
    return _training_step(job, hw)


def _training_step(job: TrainingJob, hw: Hardware) -> StepTime:
    layers: dict[bool, LayerTime] = {}  # dense / MoE: every layer of a kind costs the same

    def cost(index: int) -> LayerTime:
        kind = job.arch.is_moe_layer(index)
        if kind not in layers:
            layers[kind] = layer_time(job, hw, index)
        return layers[kind]

    priced: dict[tuple, tuple[StageTime, dict[str, float]]] = {}  # stages alike are priced once
    stages, after = [], []
    for r in range(job.layout.pp or 1):
        key = _signature(job, r)
        if key not in priced:
            st = _stage(job, hw, r, cost)
            inventory = rank_inventory(job, job.chunks[r])
            priced[key] = st, {**sharding.after_backward(job, hw, inventory, st),
                               **per_step.passes(job, hw, inventory)}
        stages.append(priced[key][0])
        after.append(priced[key][1])
    for st in {id(st): st for st in stages}.values():
        _host_bound(st)
    m, v = job.num_microbatches, max(1, job.layout.vpp)
    busiest = max(stages, key=lambda st: st.seconds)
    pipeline = m * busiest.seconds + (sum(st.seconds for st in stages) - busiest.seconds) / v
    tail = max(after, key=lambda terms: sum(terms.values()))
    terms = {name: m * seconds for name, seconds in busiest.terms.items()}
    terms["pipeline bubble"] = pipeline - m * busiest.seconds
    terms.update(tail)
    seconds = pipeline + sum(tail.values())
    flops = step_model_flops(job.arch, job.seq_length, job.vocab, job.global_batch or
                             job.micro_batch * m * job.dp)
    return StepTime(seconds, pipeline, terms["pipeline bubble"] / pipeline if pipeline else 0.0, terms, stages,
                    flops)


def replayed(job: TrainingJob, priced: StepTime) -> StepTime:
    """The step with the pipeline replayed op by op (warm-up and cool-down as scheduled) instead of the
    closed form; the difference moves into the bubble."""
    if (job.layout.pp or 1) == 1:
        return priced
    pipeline = simulate([st.forward for st in priced.stages], [st.backward for st in priced.stages],
                        job.num_microbatches, 0.0, job.microbatch_group)
    delta = pipeline - priced.pipeline
    priced.terms["pipeline bubble"] += delta
    priced.seconds += delta
    priced.pipeline = pipeline
    priced.bubble = priced.terms["pipeline bubble"] / pipeline if pipeline else 0.0
    return priced


def _signature(job: TrainingJob, r: int) -> tuple:
    """What a stage's time depends on: its chunks' layers (MoE or dense), embedding and loss."""
    arch = job.arch
    return tuple((tuple(arch.is_moe_layer(i) for i in c.layers) if arch.moe_layers else len(c.layers),
                  c.embedding, c.loss) for c in job.chunks[r])


def _stage(job: TrainingJob, hw: Hardware, r: int, cost) -> StageTime:
    terms: dict[str, float] = {}
    forward, backward = [], []
    sends = _p2p(job, hw)

    def add(name: str, seconds: float) -> None:
        if seconds:
            terms[name] = terms.get(name, 0.0) + seconds

    layers_of: dict[bool, list[int]] = {}  # MoE or dense -> [a layer of the kind, how many the stage runs]
    kernels = 0  # what the host issues for one microbatch (forward, backward, recomputed forwards)
    for chunk in job.chunks[r]:
        f = b = 0.0
        issued = 0  # the chunk's layers' kernels
        for index, n, again in _layer_kinds(job, chunk.layers):
            lt = cost(index)
            extra = again * (lt.recompute_full if job.recompute == "full" else lt.attention_core)
            f += n * lt.forward.seconds
            b += n * lt.backward.seconds + extra
            moe = job.arch.is_moe_layer(index)
            layers_of.setdefault(moe, [index, 0])[1] += n
            kf, kb = per_step.layer_kernels(job, moe)
            # full recompute issues the layer's forward again, selective its attention core's
            again_kernels = kf if job.recompute == "full" else per_step.recomputed_core_kernels(job) \
                if job.recompute == "selective" else 0
            issued += n * (kf + kb) + again * again_kernels
            add("recompute", extra)
        # CUDA graphs: the captured chunk replays as one graph launch each way
        kernels += 2 if job.step.cuda_graphs and chunk.layers else issued
        if chunk.embedding or chunk.loss:
            kernels += sum(per_step.outside_kernels())
        if chunk.loss:
            fl, bl = _loss(job, hw)
            f, b = f + fl, b + bl
            add("compute: LM head and loss", fl + bl)
        if sends:
            f, b = f + sends, b + sends
            add("pipeline sends", 2 * sends)
        forward.append(f)
        backward.append(b)
    for index, n in layers_of.values():  # the named terms once per kind of layer, not per chunk
        for name, sec in cost(index).labelled():
            add(name, n * sec)
    host = kernels * hw.host_seconds_per_kernel
    # megatron-core's alltoall/flex dispatchers copy each MoE layer's token counts to the host and wait for them
    # (token_dispatcher.py, the "cuda_sync_point" of dropless routing)
    synced = job.moe_dispatcher in ("alltoall", "flex") and any(
        job.arch.is_moe_layer(i) for c in job.chunks[r] for i in c.layers)
    return StageTime(forward, backward, terms, host, synced)


def _host_bound(st: StageTime) -> None:
    """The GPU runs a microbatch no faster than the host issues its kernels: where the host is slower, each
    chunk's time stretches to the host's and the difference is named."""
    gpu = st.seconds
    if gpu <= 0 or (st.host <= gpu and not st.synced):
        return
    # a host sync inside the microbatch (dropless MoE's token counts) stops the host running ahead: serialised
    stretch = (st.host + gpu) / gpu if st.synced else st.host / gpu
    st.forward = [f * stretch for f in st.forward]
    st.backward = [b * stretch for b in st.backward]
    st.terms["host issue (the GPU waits for the host)"] = gpu * (stretch - 1)


def _layer_kinds(job: TrainingJob, layers: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(a layer of the kind, layers of that kind, how many of them recompute) for one chunk: layers of a kind
    (dense or MoE) cost the same."""
    if job.arch.moe_layers is None and layers:  # one kind: count, do not walk
        n = len(layers)
        again = n if job.recompute == "selective" or (job.recompute == "full" and job.recompute_method != "block") \
            else min(n, job.recompute_num_layers) if job.recompute == "full" else 0
        return [(layers[0], n, again)]
    kinds: dict[bool, list[int]] = {}
    for position, index in enumerate(layers):
        entry = kinds.setdefault(job.arch.is_moe_layer(index), [index, 0, 0])
        entry[1] += 1
        entry[2] += _recomputed(job, position)
    return [tuple(entry) for entry in kinds.values()]


def _recomputed(job: TrainingJob, position: int) -> int:
    """1 when the backward runs layer `position` of its chunk (or its attention core) again."""
    if job.recompute == "full":
        return int(job.recompute_method != "block" or position < job.recompute_num_layers)
    return int(job.recompute == "selective")


def _loss(job: TrainingJob, hw: Hardware) -> tuple[float, float]:
    """The LM head GEMM and the cross entropy over [tokens, V / t] logits (fp32 softmax)."""
    lay = job.layout
    t = lay.tp or 1
    act = DTYPE_BYTES["fp32" if job.params_dtype == "fp32" else "bf16"]
    tokens = job.micro_batch * job.seq_length / lay.seq_shards
    head = hw.gemm_seconds(tokens, job.vocab / t, job.arch.hidden)
    entropy = hw.memory_seconds((act + 4 + 4) * tokens * job.vocab / t)
    return head + entropy, 2 * head + BACKWARD_MEMORY * entropy


def _p2p(job: TrainingJob, hw: Hardware) -> float:
    """One activation (or its gradient) between pipeline stages; SP sends each rank's sequence shard."""
    lay = job.layout
    if (lay.pp or 1) == 1:
        return 0.0
    act = DTYPE_BYTES["fp32" if job.params_dtype == "fp32" else "bf16"]
    rep = (lay.tp or 1) if lay.sequence_parallel else 1
    nbytes = act * job.micro_batch * job.seq_length / lay.seq_shards * job.arch.hidden / rep
    return p2p_seconds(hw, nbytes, spans_nodes(lay, "pp", hw.nvlink_domain))
