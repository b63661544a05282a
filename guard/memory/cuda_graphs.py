"""Megatron's per-layer CUDA graphs: the static buffers they keep, and what max_memory_allocated sees of the rest.

The caching allocator counts a graph's private pool only while capture allocates in it. After capture the graph's
inner tensors are freed into the pool and a replay allocates nothing, so a replayed step's allocated bytes leave
out what the captured parts save for backward; what stays allocated are the static inputs, the shared gradient
buffers and the eager parts. The peak since start is the largest of the eager warm-up steps (run before capture
unless --cuda-graph-warmup-steps 0), the capture itself (the graphed parts of every microbatch in flight, in the
schedule's order) and the replayed steps. The pool stays reserved beside a replayed step's allocations, so the
device holds both (estimate.py adds it as a runtime term: reserved, not allocated).
Sources, megatron-core 0.16.1: transformer/cuda_graphs.py (TECudaGraphHelper._get_sample_arguments: one static
input set per (layer, microbatch) in flight, reused once its backward has run; one microbatch without PP),
transformer/module.py and transformer_layer.py (get_layer_static_inputs: bf16 hidden states [s/cp(/tp), b, h] and,
with attention captured, a bool mask [b, 1, s/cp, s]); Transformer Engine 2.8 pytorch/graph.py
(_reuse_graph_input_output_buffers: one gradient-output set per output signature; static outputs and earlier
gradient inputs released after their backward capture).
"""

from __future__ import annotations

from guard.job.training_job import TrainingJob
from guard.memory import activations as acts
from guard.memory import schedule

ATTENTION = {"QKV input (norm output)", "Q", "K, V", "Q (rotated/copied)", "K (rotated/repeated)", "V (repeated)",
             "QKV output (kept by a view)", "RoPE cos/sin copies (unfused)", "softmax output", "attention dropout mask",
             "attention dropout output", "softmax output, 16-bit copy", "softmax statistics (fp32)",
             "attention mask (SDPA's converted copy)", "attention output (projection input)"}
MLP = {"MLP input (norm output)", "MLP fc1 output", "MLP activation output", "MLP gate activation (eager)"}
ROUTER = {"router scores (fp32, load-balancing loss)", "top-k indices (int64) and fp32 probabilities",
          "routing map (bool) and probabilities by expert"}
PREPROCESS = {"permutation indices (int64)"}  # permute() before the all-to-all (token_dispatcher.dispatch_preprocess)
EXPERTS = {"permuted tokens (expert input)", "permuted probabilities", "expert fc1 output", "expert activation output",
           "activation output kept by the probability multiply"}
SHARED = {"shared expert fc1 output", "shared expert activation output"}
NORMS = {"norm inputs", "norm statistics", "norm inputs (checkpointed)"}  # n norms; the first is the attention's
SPLIT = {"dropout masks"}  # one after attention, one after the MLP


def graphed_share(setup: TrainingJob, index: int, terms: dict[str, float]) -> float:
    """Bytes of layer `index`'s saved terms (one microbatch) that its graph saves inside the pool."""
    graphs, arch = setup.cuda_graphs, setup.arch
    moe = arch.is_moe_layer(index)
    attn = graphs.captures("attn")
    # the pre-MLP norm is captured with the dense MLP, or with a MoE layer's router (or the whole MoE)
    mlp_side = graphs.captures("moe_router") if moe else graphs.captures("mlp")
    whole_moe = moe and graphs.captures("moe")  # whole layers, or the drop-and-pad MoE captured whole
    n = max(1, arch.norms_per_layer)
    total = 0.0
    for label, size in terms.items():
        if label in NORMS:
            part = (1 / n if attn else 0.0) + ((n - 1) / n if mlp_side else 0.0)
        elif label in SPLIT:
            part = 0.5 * attn + 0.5 * mlp_side
        elif label in ATTENTION:
            part = float(attn)
        elif label in MLP or label in ROUTER:
            part = float(mlp_side)
        elif label in PREPROCESS:
            part = float(whole_moe or graphs.captures("moe_preprocess"))
        elif label in SHARED:
            part = float(whole_moe or (mlp_side and not _shared_overlap(setup)))
        else:  # the routed experts, and anything not named here, run eagerly: priced as seen
            part = float(whole_moe and label in EXPERTS)
        total += part * size
    return total


def _shared_overlap(setup: TrainingJob) -> bool:
    """--moe-shared-expert-overlap moves the shared experts out of the router's graph (named unmodelled)."""
    return any(setting == "--moe-shared-expert-overlap" for _, setting in setup.unmodelled)


def graphable(setup: TrainingJob, index: int) -> bool:
    """_layer_is_graphable: a layer gets a graph when any of its parts is captured."""
    graphs = setup.cuda_graphs
    if setup.arch.is_moe_layer(index):
        return any(graphs.captures(m) for m in ("attn", "moe", "moe_router", "moe_preprocess"))
    return graphs.captures("attn") or graphs.captures("mlp")


def _hidden(setup: TrainingJob) -> float:
    """One bf16 [s/cp(/tp with SP), b, h] tensor (GraphableMegatronModule.get_layer_static_inputs)."""
    s = setup.seq_length / setup.layout.seq_shards
    return 2 * s * setup.rows * setup.arch.hidden / (setup.layout.tp if setup.layout.sequence_parallel else 1)


def input_sets(setup: TrainingJob, r: int, chunks) -> int:
    """Static input sets TE's capture allocates on stage r: its order replayed, a set reused once the backward of
    the (layer, microbatch) holding it has run. Without pipeline parallelism one microbatch is captured."""
    per_chunk = [sum(graphable(setup, i) for i in c.layers) + setup.mtp_in(c) for c in chunks]
    p, m = setup.layout.pp, setup.num_microbatches
    if p == 1:
        return per_chunk[0] if per_chunk else 0
    free = allocated = 0
    queues: dict[int, list[int]] = {c: [] for c in range(len(chunks))}
    for kind, c in schedule.order(p, r, m, len(chunks), setup.microbatch_group):
        if kind == "F":
            taken = min(free, per_chunk[c])
            free, allocated = free - taken, allocated + per_chunk[c] - taken
            queues[c].append(per_chunk[c])
        else:
            free += queues[c].pop(0)
    return allocated


def static_bytes(setup: TrainingJob, r: int, chunks) -> dict[str, float]:
    """Named static buffers the graphs keep allocated from capture on."""
    graphs, hidden = setup.cuda_graphs, _hidden(setup)
    sets = input_sets(setup, r, chunks)
    s, b = setup.seq_length, setup.rows
    out = {"static inputs: hidden states (bf16)": sets * hidden}
    if graphs.impl == "transformer_engine" and graphs.captures("attn"):
        out["static inputs: attention masks (bool)"] = sets * b * s * s / setup.layout.cp
    if graphs.impl == "transformer_engine":
        kinds = {setup.arch.is_moe_layer(i) for c in chunks for i in c.layers if graphable(setup, i)}
        # one gradient-output set per output signature, and the last two gradient inputs (the chunk's, the
        # previous chunk's) that capture does not release
        outputs = sum(_outputs(setup, moe) for moe in kinds)
        out["shared gradient outputs, last gradient inputs"] = outputs + 2 * hidden
    return out


def _outputs(setup: TrainingJob, moe: bool) -> float:
    """Bytes of one graph's outputs: the layer output, or a router graph's residual, norm output, probabilities
    (fp32 [tokens, experts]) and the shared expert's output (TransformerLayer._forward_mlp_router)."""
    graphs, hidden = setup.cuda_graphs, _hidden(setup)
    if not moe or not graphs.modules or "moe" in graphs.modules or not graphs.captures("moe_router"):
        return hidden
    tokens = hidden / (2 * setup.arch.hidden)
    shared = hidden if setup.arch.shared_expert_ffn and not _shared_overlap(setup) else 0.0
    return 2 * hidden + 4 * tokens * (setup.arch.num_experts or 1) + shared


def chunk_graphed(setup: TrainingJob, chunk) -> tuple[float, float]:
    """(graphed bytes one microbatch saves in the chunk, + each graph's outputs held until its backward capture)."""
    if setup.recompute == "full":
        return 0.0, 0.0  # checkpointed layers keep their input only; priced as seen
    graphed = outputs = 0.0
    memo: dict[bool, float] = {}  # a layer's terms depend only on whether it is MoE
    for i in chunk.layers:
        moe = setup.arch.is_moe_layer(i)
        if graphable(setup, i):
            if moe not in memo:
                memo[moe] = graphed_share(setup, i, acts.layer_terms(setup, i))
            graphed += memo[moe]
            outputs += _outputs(setup, moe)
    return graphed, graphed + outputs


def _capture_held(setup: TrainingJob, r: int, graphed: list[tuple[float, float]]) -> float:
    """The capture's graphed bytes of every microbatch in flight (one microbatch without PP), from each chunk's
    chunk_graphed."""
    capture = [kept for _, kept in graphed]
    p, m = setup.layout.pp, setup.num_microbatches
    return capture[0] if p == 1 else schedule.peak_stash(capture, p, r, m, setup.microbatch_group)[0]


def phases(setup: TrainingJob, r: int, chunks, sizes, transient: float, grad_temps: float,
           at_loss) -> tuple[dict, float]:
    """({phase: ((stash, + embedding, + edges), transient)} the graphs add on stage r, the bytes their private pool
    reserves). sizes: per chunk, one microbatch's (layers, + embedding, + edges) as estimate.py prices them eagerly;
    at_loss(inflight): what the loss stage holds beside its edge for that many microbatches. The pool holds the
    capture's peak: its graphed bytes in flight and one layer's backward gradients."""
    graphed = [chunk_graphed(setup, c) for c in chunks]
    held = _capture_held(setup, r, graphed)
    out = {}
    if setup.cuda_graphs.impl == "transformer_engine":
        # capture runs only the graphed callables: one microbatch without PP, else the schedule's order
        out["CUDA graph capture"] = ((held, held, held), grad_temps)
    lighter = [[size - g for size, (g, _) in zip(column, graphed)] for column in sizes]
    stash, stash_all, stash_edges, inflight, _ = schedule.stage_stash(setup, r, *lighter)
    out["forward/backward (CUDA graphs replayed)"] = ((stash, stash_all, stash_edges + at_loss(inflight)), transient)
    return out, held + grad_temps
