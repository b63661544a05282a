"""Assemble the per-rank prediction: inventory, model states, stash, edges, buffers; peak = max over phases."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.job.adapter import trainable_count
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import activations as acts
from guard.memory import (
    cuda_graphs,
    megatron_fsdp,
    overheads,
    post_training,
    quantized,
    save_host,
    schedule,
    teacher,
    torch_fsdp,
)
from guard.memory.catalog import Gpu
from guard.memory.margin import Margin, stage_margin
from guard.memory.params import (
    REPLICATED,
    Inventory,
    add_layer,
    model_param_count,
    rank_inventory,
)
from guard.memory.stage_explain import stage_explain
from guard.memory.states import model_states

COMPONENTS = ("params", "grads", "optimizer", "activations", "embedding_activations", "logits", "buffers",
              "transient", "runtime")
# what a preference or RL trainer (guard/job/post_training.py) or a distillation teacher adds, present only in
# their estimates
EXTRA_COMPONENTS = ("reference", "vllm_engine", "generation", "teacher", "cuda_graph_buffers")


@dataclass
class StageEstimate:
    """One pipeline stage: every TP/CP/DP rank of it predicts the same."""

    pp_rank: int
    layers: int
    chunk_layers: list[int]
    inventory: Inventory
    inflight: float  # microbatches (virtual microbatches when interleaved) stashed at the peak
    components: dict[str, int]
    phase: str  # the peak phase: "forward/backward", "optimizer step", a CUDA graph or post-training phase
    phases: dict[str, int]  # allocated bytes of each phase
    host_bytes: int
    resident_bytes: int = 0  # allocated between steps: states, buffers and the CUDA graphs' static buffers
    terms: dict[str, dict[str, float]] = field(default_factory=dict)  # component -> named parts
    explain: list[str] = field(default_factory=list)
    margin: Margin | None = None  # the stated margin (margin.py), set by estimate()

    @property
    def peak_bytes(self) -> int:
        return sum(self.components.values())


@dataclass
class Estimate:
    setup: TrainingJob
    gpu: Gpu | None
    stages: list[StageEstimate]
    param_count: int
    # guard check's errors on the job (guard/judge.py): the job will not start, so it is never said to fit
    refusals: list = field(default_factory=list)

    @property
    def trainable_param_count(self) -> int:
        """What trains: the adapter under LoRA (peft's "trainable params"), else every parameter."""
        adapter = self.setup.adapter
        return trainable_count(adapter, self.setup.arch) if adapter else self.param_count

    @property
    def ranks_per_stage(self) -> int:
        return self.setup.layout.ranks_per_stage

    def stage_ranks(self, pp_rank: int) -> range:
        return self.setup.layout.stage_ranks(pp_rank)

    def coordinates(self, rank: int) -> dict[str, int]:
        return self.setup.layout.coordinates(rank)

    @property
    def peak_stage(self) -> StageEstimate:
        return max(self.stages, key=lambda st: st.peak_bytes)

    @property
    def capacity(self) -> int | None:
        return self.gpu.usable_bytes if self.gpu else None

    @property
    def fits(self) -> bool | None:
        """Whether every rank's predicted peak fits the GPU; None without a GPU, or when the job will not start."""
        if self.capacity is None or self.refusals:
            return None
        return self.peak_stage.peak_bytes <= self.capacity

    @property
    def verdict(self) -> str | None:
        """"fits" when every stage's upper bound fits, "does not fit" when a prediction does not, "may not fit"
        otherwise (margin.py); None without a GPU or when the job will not start."""
        if self.fits is None:
            return None
        if not self.fits:
            return "does not fit"
        verdicts = {st.margin.verdict(self.capacity) if st.margin else "may not fit" for st in self.stages}
        return "fits" if verdicts == {"fits"} else "may not fit"

    def host_bytes_per_node(self) -> int:
        """Offloaded states of the ranks on one node (the busiest node)."""
        per_rank = [st.host_bytes for st in self.stages for _ in self.stage_ranks(st.pp_rank)]
        g = max(1, self.setup.layout.gpus_per_node)
        return max((sum(per_rank[i:i + g]) for i in range(0, len(per_rank), g)), default=0)

    def host_bytes_at_save(self) -> int | None:
        """Host RAM the HF Trainer's model save holds on global rank 0's node (save_host.py); None: not an HF job."""
        return save_host.host_bytes_at_save_per_node(self.setup)


def estimate(setup: TrainingJob, gpu: Gpu | None = None) -> Estimate:
    stages = [estimate_stage(setup, r) for r in range(setup.layout.pp)]
    post = setup.post_training
    if post is not None and post.vllm_share is not None:
        # vLLM reserves its share of the GPU's total memory at start-up and holds it (no sleep mode)
        share = post.engine_bytes(gpu.memory_bytes) if gpu is not None else 0
        for st in stages:
            st.components["vllm_engine"] = share
        if gpu is None:
            setup.notes.append(f"the colocated vLLM engine's share ({post.vllm_share:g} of the GPU's total) is not "
                               "priced without --gpu")
    for st in stages:
        st.margin = stage_margin(setup, st, setup.chunks[st.pp_rank])
    return Estimate(setup, gpu, stages, model_param_count(setup.arch))


def _extra_terms(setup: TrainingJob, r: int, inv, states, generation: float) -> dict[str, int]:
    """Terms only some jobs have: a distillation teacher's weights, a preference or RL trainer's reference model,
    and its generation phase's when that is the peak."""
    out = {}
    if setup.teacher is not None:
        out["teacher"] = teacher.teacher_weights(setup, r)
    if setup.post_training is None:
        return out
    if setup.post_training.holds_reference:
        out["reference"] = post_training.reference_bytes(setup, inv, states)
    if generation:
        out["generation"] = round(generation)
    return out


def estimate_stage(setup: TrainingJob, r: int, detail: bool = True, dp_rank: int | None = None) -> StageEstimate:
    """One stage's prediction; `detail=False` leaves out the named terms and --explain text (the planner's
    quick check needs the peak alone); dp_rank: one data-parallel rank's states (None: the rank holding most)."""
    chunks = setup.chunks[r]
    inv = rank_inventory(setup, chunks)
    states = model_states(setup, inv, dp_rank, chunks)
    logits_stored, logits_transient = acts.logits_bytes(setup) if any(c.loss for c in chunks) else (0.0, 0.0)
    sizes, with_embedding, with_edges, working = _chunk_sizes(setup, chunks, logits_stored)
    stash, stash_all, stash_edges, inflight, pipe_buffers = schedule.stage_stash(setup, r, sizes, with_embedding,
                                                                                 with_edges)
    stash_edges += _held_at_loss(setup, chunks, inflight)
    all_layers = tuple(i for c in chunks for i in c.layers)
    full_terms = acts.layer_terms(setup, all_layers[0], False) if all_layers else {}
    grad_temps = 2 * max(full_terms.values(), default=0.0)  # gradients of the largest saved tensor and the input
    # a quantized base rebuilds one weight at a time for its matmul (quantized.py)
    dequant = quantized.working_set(setup) if setup.adapter is not None and setup.adapter.quant_bits else 0.0
    largest_layer = _largest_layer_params(setup, all_layers)
    buf, step_buf = overheads.buffers(setup, inv.total, largest_layer, inv.bucket(REPLICATED), pipe_buffers)
    static = states.params + states.grads + states.optimizer + sum(buf.values())
    fsdp_loss, fsdp_backward = _gathered(setup, inv, largest_layer, max((len(c.layers) for c in chunks), default=0))
    at_loss, in_backward = logits_transient + fsdp_loss, working + grad_temps + dequant + fsdp_backward
    held = {"forward/backward": ((stash, stash_all, stash_edges), max(at_loss, in_backward))}
    graph_buf, pool = _graphed(setup, r, chunks, (sizes, with_embedding, with_edges), held, grad_temps)
    resident = static + sum(graph_buf.values())  # what a step starts from (the graphs' buffers once captured)
    # ZeRO-1 reducing after backward holds gradients beyond its partition until the reduce (zero_paths.py);
    # the last microbatch's activations are gone by then
    transients = {name: work for name, (_, work) in held.items()}
    transients.update({"optimizer step": states.step_transient + states.step_held + sum(step_buf.values()),
                       "gradient reduction": sum(states.reduce_terms.values())})
    phases = {name: (static if name == "forward/backward" else resident) + kept[2] + work
              for name, (kept, work) in held.items()}
    phases.update({name: resident + work for name, work in transients.items() if name not in held})
    extra = post_training.phases(setup, inv, states, stash_edges, any(c.loss for c in chunks))
    phases.update({name: static + kept + work for name, (kept, work) in extra.items()})
    transients.update({name: work for name, (_, work) in extra.items()})
    phase = max(phases, key=phases.get)
    runtime = {**overheads.runtime(setup, phases[phase]), **_graph_pool(phases, phase, pool)}
    kept = held[phase][0] if phase in held else (stash, stash_all, stash_edges) if phase == "reference forward" \
        else (0.0, 0.0, 0.0)
    components = _components(states, kept, buf, transients[phase], runtime)
    if graph_buf:  # allocated at the capture, after the eager warm-up steps
        components["cuda_graph_buffers"] = 0 if phase == "forward/backward" else round(sum(graph_buf.values()))
    components.update(_extra_terms(setup, r, inv, states, extra[phase][1] if phase == "generation" else 0))
    stage = StageEstimate(r, len(all_layers), [len(c.layers) for c in chunks], inv, inflight, components, phase,
                          {name: round(value) for name, value in phases.items() if name != "gradient reduction"
                           or states.reduce_terms}, states.host, round(resident + states.step_held))
    if detail:
        stage.terms = {"buffers": buf, "runtime": runtime, "cuda graph buffers": graph_buf, "optimizer step": {
            **step_buf, "fp32 gradient partition / copies": states.step_transient,
            "fp32 gradient copies (held to the next zero_grad)": states.step_held},
            "transient": {"recompute working set / offloaded layers in flight": working,
                          "backward gradient temporaries": grad_temps, "loss fp32 upcast": logits_transient,
                          "quantized weight rebuilt for its matmul (bitsandbytes)": dequant,
                          "FSDP whole weights at the loss": fsdp_loss,
                          "FSDP whole units and gradients in backward": fsdp_backward},
            "gradient reduction": dict(states.reduce_terms),
            "layer activations (one microbatch)": acts.layer_terms(setup, all_layers[0]) if all_layers else {}}
        stage.explain = list(states.explain) + stage_explain(setup, inv, chunks, sizes, inflight, stash,
                                                             logits_stored, logits_transient)
    return stage


def _components(states, kept: tuple[float, float, float], buf: dict, transient: float, runtime: dict) -> dict:
    """The peak phase's bytes by component; kept: its (stash, + embedding, + edges)."""
    return {"params": states.params, "grads": states.grads, "optimizer": states.optimizer,
            "activations": round(kept[0]), "embedding_activations": round(kept[1] - kept[0]),
            "logits": round(kept[2] - kept[1]), "buffers": round(sum(buf.values())),
            "transient": round(transient), "runtime": round(sum(runtime.values()))}


def _graph_pool(phases: dict, phase: str, pool: float | None) -> dict:
    """The CUDA graphs' private pool (None: no per-layer graphs): reserved from the capture on, not allocated while
    replays run, so the device holds it beside a replayed step's allocations; what that adds beyond the peak."""
    if pool is None:
        return {}
    after = [v for name, v in phases.items() if name not in ("forward/backward", "CUDA graph capture")]
    return {"CUDA graph pool (reserved, beside replayed steps)": max(0.0, max(after, default=0.0) + pool
                                                                   - phases[phase])}


def _graphed(setup: TrainingJob, r: int, chunks, sizes, held: dict,
             grad_temps: float) -> tuple[dict[str, float], float | None]:
    """CUDA graphs: their static buffers and their pool's bytes (returned), their phases added to `held`
    (cuda_graphs.py); the eager forward/backward is dropped when no eager step runs before the capture."""
    graphs = setup.cuda_graphs
    if graphs is None or graphs.full_iteration:
        return {}, None
    added, pool = cuda_graphs.phases(setup, r, chunks, sizes, held["forward/backward"][1], grad_temps,
                                     lambda inflight: _held_at_loss(setup, chunks, inflight))
    held.update(added)
    if not graphs.eager_first:
        del held["forward/backward"]
    return cuda_graphs.static_bytes(setup, r, chunks), pool


def _gathered(setup: TrainingJob, inv, largest_layer: int, units: int) -> tuple[float, float]:
    """FSDP's whole parameters and gradients (at the loss, in backward): Megatron FSDP's or torch FSDP's. units:
    the layers of the stage's largest model chunk (each chunk is its own FSDP instance: training.py wraps them one
    by one, so a prefetch stays within its chunk)."""
    if setup.fsdp_sharding:
        return megatron_fsdp.gathered(setup, inv, largest_layer, units)
    if setup.torch_fsdp2 or setup.hf_fsdp:
        return torch_fsdp.gathered(setup, inv, largest_layer)
    return 0.0, 0.0


def _held_at_loss(setup: TrainingJob, chunks, inflight: float) -> float:
    """Beside the loss edge: the output layer's deferred weight-gradient inputs waiting for the flush, and a
    distillation teacher's logits for the KD loss, for each microbatch the loss stage holds."""
    if not any(c.loss for c in chunks):
        return 0.0
    held = acts.deferred_wgrad_bytes(setup)
    return held + (teacher.teacher_logits(setup) * inflight if setup.teacher is not None else 0.0)


def _chunk_sizes(setup: TrainingJob, chunks, logits_stored: float):
    """Per chunk, one microbatch: the layers (and MTP block); + the embedding edge; + the loss edge (final
    norm, head, loss), which the loss chunk keeps for every microbatch in flight there (interleaving can hold
    two); and the largest recompute working set."""
    sizes, with_embedding, with_edges, working = [], [], [], 0.0
    alike: dict[tuple[bool, ...], tuple[float, float]] = {}  # chunks whose layers are of the same kinds, in order
    for chunk in chunks:
        kinds = tuple(setup.arch.is_moe_layer(i) for i in chunk.layers)
        if kinds not in alike:
            alike[kinds] = acts.chunk_stored(setup, chunk.layers)
        stored, recompute_ws = alike[kinds]
        mtp = setup.mtp_in(chunk)
        stored += mtp * acts.mtp_bytes(setup) if mtp else 0.0
        sizes.append(stored)
        with_embedding.append(stored + (acts.embedding_bytes(setup) if chunk.embedding else 0.0))
        with_edges.append(with_embedding[-1] + (logits_stored if chunk.loss else 0.0))
        working = max(working, recompute_ws)
    return sizes, with_embedding, with_edges, working


def _largest_layer_params(setup: TrainingJob, layers: tuple[int, ...]) -> int:
    """ZeRO-3 gathers one layer at a time: the largest layer's parameters (untouched by TP here)."""
    best = 0
    kinds = {setup.arch.is_moe_layer(i): i for i in reversed(layers)}  # layers of a kind are alike: one of each
    for index in kinds.values():
        inv = Inventory()
        add_layer(inv, setup.arch, index, setup.layout.tp, setup.layout.ep, setup.layout.expert_tp)
        best = max(best, inv.total)
    return best
