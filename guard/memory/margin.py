"""The stated margin of one stage's estimate: a lower bound (what is certain), the prediction, and an upper bound
(what the priced working sets and the unmodelled features could add, each bounded from the code that allocates it,
or named as unbounded). `fits` is said only when the upper bound fits; "may not fit" is its own verdict.

The certain part is everything held at the peak phase (states, buffers, the stash) and, in backward, the gradient
flowing into a layer and the one it passes on. The priced backward working set takes the gradients of the layer's
largest saved tensor and its input; at most, one layer's backward holds a gradient for each tensor it saved
(autograd frees a layer's saved tensors as its backward consumes them), which bounds it above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import activations as acts


@dataclass
class Margin:
    lower: int
    predicted: int
    upper: int | None  # None: a feature whose memory guard cannot bound
    added: list[tuple[str, int | None]] = field(default_factory=list)  # (what, bytes it may add; None: unbounded)

    def verdict(self, capacity: int | None) -> str | None:
        """"fits" (the upper bound fits), "may not fit" (the prediction fits, the upper bound does not or is
        unknown), "does not fit" (the prediction does not); None without a GPU."""
        if capacity is None:
            return None
        if self.predicted > capacity:
            return "does not fit"
        return "fits" if self.upper is not None and self.upper <= capacity else "may not fit"


def _hidden_gradient(setup: TrainingJob) -> float:
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    return act * tokens * setup.arch.hidden / ((setup.layout.tp or 1) if setup.layout.sequence_parallel else 1)


def _certain_transient(setup: TrainingJob, stage) -> float:
    """The part of the priced backward transient the code certainly allocates: the recomputed layers' activations,
    a rebuilt quantized weight and FSDP's whole units, with the two hidden-size gradients in flight. The loss's
    upcast copy is allocated for certain too (tensor_parallel/cross_entropy.py calculate_logits_max), but taking it
    as certain leaves the rest of the prediction's error uncovered: on the calibration runs it narrows the dense band
    to 2.9 % and puts the lower bound above eleven measured peaks that sit 0.4-1.3 % below guard's prediction."""
    named = stage.terms.get("transient", {})
    return (named.get("recompute working set / offloaded layers in flight", 0.0)
            + named.get("quantized weight rebuilt for its matmul (bitsandbytes)", 0.0)
            + named.get("FSDP whole units and gradients in backward", 0.0) + 2 * _hidden_gradient(setup))


def _layer_terms(setup: TrainingJob, chunks) -> dict[str, float]:
    layers = [i for c in chunks for i in c.layers]
    return acts.layer_terms(setup, layers[0], False) if layers else {}


def stage_margin(setup: TrainingJob, stage, chunks) -> Margin:
    """The margin of `stage` (a StageEstimate of `chunks`)."""
    predicted = stage.peak_bytes
    added: list[tuple[str, int | None]] = []
    lower = upper = predicted
    if stage.phase.startswith("forward/backward") or stage.phase == "CUDA graph capture":
        terms = _layer_terms(setup, chunks)
        priced = 2 * max(terms.values(), default=0.0)  # estimate.py's backward gradient temporaries
        transient = stage.components["transient"]
        lower = predicted - transient + min(transient, _certain_transient(setup, stage))
        most = sum(terms.values()) + 2 * _hidden_gradient(setup)
        if most > priced:
            added.append(("one layer's backward holding a gradient for every tensor it saved", round(most - priced)))
    for feature, _setting in setup.unmodelled:
        added.append((feature, feature_bound(setup, stage, feature)))
    if any(bound is None for _, bound in added):
        upper = None
    else:
        upper = predicted + sum(bound for _, bound in added)
    return Margin(round(lower), predicted, upper, added)


def feature_bound(setup: TrainingJob, stage, feature: str) -> int | None:
    """What an unmodelled feature could add to this stage's peak, from the code that allocates it; None when
    nothing bounds it statically."""
    for prefix, bound in BOUNDS.items():
        if feature.startswith(prefix):
            found = bound(setup, stage)
            return None if found is None else round(found)
    return None


def _deterministic(setup: TrainingJob, stage) -> float:
    """Deterministic attention backward accumulates dQ in fp32 (flash-attn's and cuDNN's deterministic paths keep an
    fp32 dQ accumulator of the query's shape) for the layer in backward: one fp32 [s, b, heads x head dim / t]."""
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    return 4 * tokens * setup.arch.heads * setup.arch.kv_channels / (setup.layout.tp or 1)


def _async_save(setup: TrainingJob, stage) -> float:
    """megatron/core/dist_checkpointing/strategies/filesystem_async.py preload_tensors: the state dict is copied to
    host memory (`tensor.to("cpu")`, synchronised) before training goes on: nothing stays on the GPU."""
    return 0.0


def _overlapped_p2p(setup: TrainingJob, stage) -> float:
    """--overlap-p2p-communication-warmup-flush: the warm-up and flush post the next receive before the current
    one is consumed: one more activation (and one more gradient) message in flight."""
    return 2 * _hidden_gradient(setup)


def _router_fp32(setup: TrainingJob, stage) -> float:
    """Router logits and probabilities kept in fp32 (or fp64) rather than the activation dtype: at most 8 bytes
    for each of the router's [tokens, experts] tensors of each layer in the stash (router scores, routing map
    probabilities, the load-balancing scores: three)."""
    if not setup.arch.num_experts:
        return 0.0
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows / (
        (setup.layout.tp or 1) if setup.layout.sequence_parallel else 1)
    layers = sum(1 for i in range(setup.arch.num_layers) if setup.arch.is_moe_layer(i)) / max(1, setup.layout.pp)
    return 3 * 8 * tokens * setup.arch.num_experts * layers * max(1.0, stage.inflight)


def _routing_balance(setup: TrainingJob, stage) -> float | None:
    """Dropless routing: the busiest expert-parallel rank's experts can receive every routed token of the EP group
    (ep x the balanced share); with EP 1 the rank holds every expert and routing moves nothing between ranks."""
    if setup.moe_capacity_factor is not None or (setup.layout.ep or 1) == 1:
        return 0.0
    return None  # no static bound short of all tokens on one rank: stated with --moe-imbalance


def _fp8(setup: TrainingJob, stage) -> float:
    """Transformer Engine's FP8 linears keep, beside the 16-bit weights guard prices, an FP8 copy of each weight and
    of its transpose across the microbatches of a step (transformer_engine/pytorch/module/linear.py: the cached
    weight workspace for is_first_microbatch, and the columnwise copy for backward): 2 bytes a linear weight
    element; amax histories and scales are per tensor or per 128-element block (at most 2 x 4 bytes / 128). FP8
    also saves linear inputs in 1 byte where guard prices 2, which only lowers the peak."""
    weights = sum(n for (_, item), n in stage.inventory.items.items() if item.endswith("weight")
                  and "norm" not in item and "embedding" not in item)
    return weights * (2 + 8 / 128)


BOUNDS = {
    "FP8 training": _fp8,
    "FP8 (E4M3) training": _fp8,
    "FP8 (hybrid) training": _fp8,
    "FP8 scaling recipe": lambda setup, stage: 0.0,  # its copies are _fp8's; counted once
    "FP8 recipe with the first/last layers in BF16": lambda setup, stage: 0.0,  # fewer FP8 copies, not more
    "FP8 amax history length": lambda setup, stage: 0.0,  # within _fp8's per-tensor allowance
    "deterministic kernels": _deterministic,
    "asynchronous checkpoint save (GPU tensors": _async_save,
    "overlapped P2P communication": _overlapped_p2p,
    "router logits and probabilities in fp32": _router_fp32,
    "router load balancing": _routing_balance,
}
