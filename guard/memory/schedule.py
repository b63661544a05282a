"""How many microbatches (model chunks) each pipeline rank stashes at its peak, from the schedule code.

Megatron 1F1B (schedules.py, forward_backward_pipelining_without_interleaving): rank r runs
min(p - r - 1, m) warm-up forwards, then one forward per backward, so it holds min(p - r, m).
Interleaved (get_pp_rank_microbatches): warm-up 2(p - r - 1) + (v - 1)G virtual microbatches, capped at
m*v; the peak is min(m*v, warm-up + 1) chunks. Chunks are visited in groups of G microbatches, so with
unequal chunks the stash is simulated chunk by chunk rather than multiplied.
DeepSpeed's pipeline engine (TrainSchedule): min(stages - id, m) microbatches in flight, in
max(2, min(stages - id, m)) pipe buffers.
"""

from __future__ import annotations


def warmup(p: int, r: int, m: int, v: int = 1, group: int | None = None) -> int:
    if v == 1:
        return min(p - r - 1, m)
    g = group or p
    return min(2 * (p - r - 1) + (v - 1) * g, m * v)


def in_flight(p: int, r: int, m: int, v: int = 1, group: int | None = None) -> int:
    """Peak number of (virtual) microbatches stashed on pipeline rank r."""
    return min(warmup(p, r, m, v, group) + 1, m * v)


def forward_chunk(k: int, v: int, group: int) -> int:
    """Model chunk of the k-th forward virtual microbatch (Megatron's get_model_chunk_id)."""
    return (k % (group * v)) // group


def peak_stash(chunk_sizes: list[float], p: int, r: int, m: int, group: int | None = None) -> tuple[float, int]:
    """(peak stashed bytes, virtual microbatches in flight at that peak) for rank r.

    chunk_sizes[c]: bytes one microbatch leaves stashed in chunk c. Backward visits chunks in reverse.
    """
    v = len(chunk_sizes)
    g = group or p
    total = m * v
    if v == 1:
        n = in_flight(p, r, m)
        return chunk_sizes[0] * n, n
    n_warm = warmup(p, r, m, v, g)
    held, count, peak, peak_count = 0.0, 0, 0.0, 0
    fwd = bwd = 0
    while bwd < total:
        if fwd < total and (fwd < n_warm or fwd - bwd <= n_warm):
            held += chunk_sizes[forward_chunk(fwd, v, g)]
            count += 1
            fwd += 1
        else:
            held -= chunk_sizes[v - 1 - forward_chunk(bwd, v, g)]
            count -= 1
            bwd += 1
        if held > peak:
            peak, peak_count = held, count
    return peak, peak_count


def deepspeed_in_flight(stages: int, stage_id: int, m: int) -> tuple[int, int]:
    """(microbatches with stashed activations, pipe buffers) for DeepSpeed's TrainSchedule."""
    live = min(stages - stage_id, m)
    return live, max(2, live)
