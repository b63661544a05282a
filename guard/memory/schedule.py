"""How many microbatches (model chunks) each pipeline rank stashes at its peak, from the schedule code.

Megatron 1F1B (schedules.py, forward_backward_pipelining_without_interleaving): rank r runs
min(p - r - 1, m) warm-up forwards, then one forward per backward, so it holds min(p - r, m).
Interleaved (get_pp_rank_microbatches): warm-up 2(p - r - 1) + (v - 1)G virtual microbatches, capped at
m*v; the peak is min(m*v, warm-up + 1) chunks. Chunks are visited in groups of G microbatches (the last
group takes the remainder), so with unequal chunks the stash is replayed chunk by chunk, not multiplied.
Checked against megatron-core 0.16.1 run on CPU (tests/fidelity/megatron_stash.py).
DeepSpeed's pipeline engine (TrainSchedule): min(stages - id, m) microbatches in flight, in
max(2, min(stages - id, m)) pipe buffers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guard.job.training_job import TrainingJob


def warmup(p: int, r: int, m: int, v: int = 1, group: int | None = None) -> int:
    if v == 1:
        return min(p - r - 1, m)
    g = group or p
    return min(2 * (p - r - 1) + (v - 1) * g, m * v)


def in_flight(p: int, r: int, m: int, v: int = 1, group: int | None = None) -> int:
    """Peak number of (virtual) microbatches stashed on pipeline rank r."""
    return min(warmup(p, r, m, v, group) + 1, m * v)


def forward_chunk(k: int, m: int, v: int, group: int) -> int:
    """Model chunk of the k-th forward virtual microbatch (Megatron's get_schedule_table).

    Microbatches go through every chunk in groups of G; the last group takes the remainder (G to 2G - 1
    microbatches, megatron-core refuses a remainder smaller than p), so its chunks change every m - L steps.
    """
    last = group * max(0, -(-(m - group) // group))  # first microbatch of the last group
    if k < last * v:
        return (k % (group * v)) // group
    return (k - last * v) // (m - last)


@lru_cache(maxsize=256)  # the estimate replays one rank's order for each of its stash sizes
def order(p: int, r: int, m: int, v: int = 1, group: int | None = None) -> tuple[tuple[str, int], ...]:
    """("F" or "B", model chunk) of every forward and backward rank r runs, in order.

    Warm-up forwards, then one forward and one backward in turn, then the cool-down backwards; the k-th
    backward runs the chunks in reverse (chunk v - 1 - c of the k-th forward).
    """
    g = group or p
    total, n_warm = m * v, warmup(p, r, m, v, g)
    steps = [("F", k) for k in range(n_warm)]
    for i in range(total - n_warm):
        steps += [("F", n_warm + i), ("B", i)]
    steps += [("B", k) for k in range(total - n_warm, total)]
    return tuple((kind, forward_chunk(k, m, v, g) if kind == "F" else v - 1 - forward_chunk(k, m, v, g))
                 for kind, k in steps)


def peak_stash(chunk_sizes: list[float], p: int, r: int, m: int, group: int | None = None) -> tuple[float, int]:
    """(peak stashed bytes, virtual microbatches in flight at that peak) for rank r.

    chunk_sizes[c]: bytes one microbatch leaves stashed in chunk c; the schedule's order is replayed.
    """
    v = len(chunk_sizes)
    if v == 1 or all(size == chunk_sizes[0] for size in chunk_sizes):  # equal chunks: the count alone
        n = in_flight(p, r, m, v, group)
        return chunk_sizes[0] * n, n
    peak, peak_count = 0.0, 0
    for counts in _stash_counts(p, r, m, v, group):
        held = sum(n * size for n, size in zip(counts, chunk_sizes))
        if held > peak:
            peak, peak_count = held, sum(counts)
    return peak, peak_count


@lru_cache(maxsize=256)
def _stash_counts(p: int, r: int, m: int, v: int, group: int | None) -> tuple[tuple[int, ...], ...]:
    """Microbatches stashed per chunk after each forward of rank r's order, each distinct vector once, in order
    of first appearance (a peak follows a forward; the planner prices many chunk sizes on one schedule)."""
    counts, seen, out = [0] * v, set(), []
    for kind, chunk in order(p, r, m, v, group):
        counts[chunk] += 1 if kind == "F" else -1
        if kind == "F" and tuple(counts) not in seen:
            seen.add(tuple(counts))
            out.append(tuple(counts))
    return tuple(out)


def deepspeed_in_flight(stages: int, stage_id: int, m: int) -> tuple[int, int]:
    """(microbatches with stashed activations, pipe buffers) for DeepSpeed's TrainSchedule."""
    live = min(stages - stage_id, m)
    return live, max(2, live)


def stage_stash(setup: TrainingJob, r: int, sizes: list[float], with_embedding: list[float], with_edges: list[float]):
    """(layers, + embedding, + edges) stashed at the peak, the microbatches in flight then, and pipe buffers."""
    m, p = setup.num_microbatches, setup.layout.pp
    if setup.ds_pipeline and p > 1:
        live, pipe_buffers = deepspeed_in_flight(p, r, m)
        return sizes[0] * live, with_embedding[0] * live, with_edges[0] * live, live, pipe_buffers
    stash, inflight = peak_stash(sizes, p, r, m, setup.microbatch_group)
    stash_all, _ = peak_stash(with_embedding, p, r, m, setup.microbatch_group)
    stash_edges, _ = peak_stash(with_edges, p, r, m, setup.microbatch_group)
    return stash, stash_all, stash_edges, inflight, 2
