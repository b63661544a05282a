"""Search the job's space: prune by memory, price the survivors' step time, confirm the best in full.

Memory prunes first, cheaply: for one structure the peak grows with the micro-batch (m x b stays the
global batch, the stash holds min(p - r, m) of b) and falls with each recompute level, so the search
takes the fastest level that fits and stops at the first micro-batch that fits at none. The quick check
prices the first and the last stage (the deepest stash; the logits); the best candidates are then
estimated on every stage and judged by `verify` (the rules, through the round-trip writer) before they
are shown, so a shown candidate fits every rank and passes every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from guard.job.stages import LayoutError
from guard.job.training_job import TrainingJob
from guard.memory.catalog import Gpu
from guard.memory.estimate import Estimate, estimate, estimate_stage
from guard.plan import engine_share, space
from guard.plan.hardware import Hardware, hardware
from guard.plan.rewrite import Written
from guard.plan.sensitivity import close_calls
from guard.plan.step_time import StepTime, replayed, step_time

MAX_CONFIRMATIONS = 200  # full checks before the search gives up looking further down the ranking
Verify = Callable[[TrainingJob], list[str]]  # the rules' errors and warnings for a changed job


@dataclass
class Candidate:
    knobs: space.Knobs
    job: TrainingJob
    time: StepTime | None = None
    estimate: Estimate | None = None
    quick_peak: int = 0
    reason: str = ""  # why it cannot run (the user's own layout)
    changes: Written | None = None  # the rewrite of the user's files (filled for the layouts shown)

    @property
    def peak_bytes(self) -> int:
        return self.estimate.peak_stage.peak_bytes if self.estimate else self.quick_peak

    @property
    def dominant(self) -> str:
        if not self.estimate:
            return ""
        comps = self.estimate.peak_stage.components
        return max(comps, key=comps.get)


@dataclass
class Plan:
    hardware: Hardware
    capacity: int
    current: Candidate
    candidates: list[Candidate]
    feasible: list[Candidate]  # every candidate that passed the quick memory check, priced
    searched: int = 0
    rejected: list[tuple[Candidate, str]] = field(default_factory=list)  # confirmed-out: (candidate, why)
    close_calls: list[str] = field(default_factory=list)  # speed changes of 15 % that would reorder the first
    measured: list[dict] = field(default_factory=list)  # a training log against the user's layout (measured_log)


def plan(job: TrainingJob, gpu: Gpu, *, top: int = 5, headroom: int = 0, verify: Verify | None = None,
         progress: Callable[[int, int], None] | None = None, allow: frozenset[str] | None = None) -> Plan:
    """The `top` fastest jobs that fit `gpu` with `headroom` bytes to spare, and the user's own.
    `allow`: the knobs (space.KNOBS) a candidate may change (None: all)."""
    hw = hardware(gpu, job.params_dtype)
    capacity = gpu.usable_bytes - headroom
    feasible: list[Candidate] = []
    current = space.knobs_of(job)
    allowed = frozenset(space.KNOBS) if allow is None else allow
    structures = _allowed_structures(job, current, allowed)
    searched = 0
    # a colocated vLLM engine holds its share whatever the layout (post_training.py): the quick check's room is
    # what it leaves; the full estimate of the shown layouts counts it as a term
    post = job.post_training
    engine = post.engine_bytes(gpu.memory_bytes) if post is not None else 0
    for done, (layout, extra) in enumerate(structures):
        searched += _search_structure(job, hw, capacity - engine, layout, extra, feasible, current, allowed)
        if progress:
            progress(done + 1, len(structures))
    lowered = engine_share.lowered(job, gpu) if not feasible else None
    if lowered is not None:  # no layout fits beside the written share: search beside the engine's least
        low_job, least = lowered
        for layout, extra in structures:
            searched += _search_structure(low_job, hw, capacity - round(least * gpu.memory_bytes), layout, extra,
                                          feasible, current, allowed)
        for cand in feasible:  # each layout's engine at the most its training peak leaves
            share = min(post.vllm_share, engine_share.largest(cand.quick_peak, capacity, gpu))
            cand.job = engine_share.with_share(cand.job, share)
    feasible.sort(key=lambda c: (-c.job.post_training.vllm_share, c.time.seconds) if lowered else c.time.seconds)
    result = Plan(hw, capacity, _current(job, hw, gpu, capacity, verify), [], feasible, searched)
    for tried, cand in enumerate(feasible):
        if len(result.candidates) >= top or tried >= MAX_CONFIRMATIONS:
            break
        why = _confirm(cand, gpu, capacity, verify)
        if why:
            result.rejected.append((cand, why))
            continue
        cand.time = replayed(cand.job, cand.time)
        result.candidates.append(cand)
    result.candidates.sort(key=lambda c: (-c.job.post_training.vllm_share, c.time.seconds) if lowered
                           else c.time.seconds)
    result.close_calls = close_calls(hw, result.candidates)
    return result


def _structures(job: TrainingJob):
    """(layout, fixed knobs) pairs; for DeepSpeed the layout is the job's and ZeRO/offload vary."""
    if job.framework == "deepspeed":
        for stage, opt, param in space.deepspeed_options(job):
            yield job.layout, {"zero_stage": stage, "offload_optimizer": opt, "offload_param": param}
        return
    for layout, distopt in space.megatron_layouts(job):
        yield layout, {"distributed_optimizer": distopt, "zero_stage": job.zero_stage,
                       "offload_optimizer": job.offload_optimizer, "offload_param": job.offload_param}


def _allowed_structures(job: TrainingJob, current: space.Knobs, allowed: frozenset[str]) -> list:
    """The structures whose changes `allowed` permits; a knob not allowed keeps the job's value (SP goes with
    TP, the distributed optimizer and ZeRO with sharding)."""
    out, seen = [], set()
    for layout, extra in _structures(job):
        if "tp" not in allowed:
            layout = replace(layout, sequence_parallel=current.layout.sequence_parallel)
        if "sharding" not in allowed:
            extra = {**extra, "distributed_optimizer": current.distributed_optimizer, "zero_stage": current.zero_stage}
        if "offload" not in allowed:
            extra = {**extra, "offload_optimizer": current.offload_optimizer, "offload_param": current.offload_param}
        knobs = space.Knobs(layout, current.micro_batch, current.recompute, current.recompute_method,
                            current.recompute_layers, **extra)
        if space.changed(knobs, current) <= allowed and knobs not in seen:
            seen.add(knobs)
            out.append((layout, extra))
    return out


def _smallest_chunk(job, layout) -> int:
    """Layers in the smallest model chunk of the one split (block recompute may not hold more than a chunk has)."""
    try:
        return max(1, min(len(chunk.layers) for stage in layout.split(job.arch.num_layers) for chunk in stage))
    except LayoutError:
        return 1  # a split megatron refuses: the candidate is dropped by the rules


def _search_structure(job, hw, capacity, layout, extra, feasible, current: space.Knobs, allowed) -> int:
    """Price every micro-batch of one structure at its fastest fitting recompute level; the number tried."""
    tried = 0
    chunk_layers = _smallest_chunk(job, layout)
    laid_out = job.with_layout(layout)
    dp = layout.dp or 1
    micros = space.micro_batches(job, dp) if "micro_batch" in allowed else \
        [b for b in [current.micro_batch] if not job.global_batch or job.global_batch % (b * dp) == 0]
    levels = space.recompute_levels(job, chunk_layers) if "recompute" in allowed else \
        [(current.recompute, current.recompute_method, current.recompute_layers)]
    # a rank's peak never falls as the micro-batch grows (its stash is min(in flight, microbatches) x micro-batch
    # activations), so a recompute level that did not fit a smaller micro-batch does not fit a larger one
    first = 0
    for micro in micros:
        fitted = False
        for level in range(first, len(levels)):
            recompute, method, layers = levels[level]
            knobs = space.Knobs(layout, micro, recompute, method, layers, **extra)
            cand = space.apply(job, knobs, laid_out)
            if layout.vpp > 1 and cand.num_microbatches % (layout.pp or 1):
                break  # the interleaved schedule needs whole microbatch groups; more micro-batch: fewer
            tried += 1
            peak = _quick_peak(cand)
            if peak <= capacity:
                feasible.append(Candidate(knobs, cand, step_time(cand, hw), quick_peak=peak))
                fitted, first = True, level
                break
        if not fitted:
            break
    return tried


def _quick_peak(job: TrainingJob) -> int:
    last = (job.layout.pp or 1) - 1
    return max(estimate_stage(job, r, detail=False).peak_bytes for r in {0, last})


def _confirm(cand: Candidate, gpu: Gpu, capacity: int, verify: Verify | None) -> str:
    """Why a quick-checked candidate cannot be shown ('' when it can): every stage, then the rules."""
    cand.estimate = estimate(cand.job, gpu)
    peak = cand.estimate.peak_stage
    if peak.peak_bytes > capacity:
        return f"stage {peak.pp_rank} needs {peak.peak_bytes / 2**30:.1f} GiB"
    problems = verify(cand.job) if verify else []
    return "; ".join(problems)


def _current(job: TrainingJob, hw: Hardware, gpu: Gpu, capacity: int, verify: Verify | None) -> Candidate:
    cand = Candidate(space.knobs_of(job), job)
    problems = [p for p in job.layout.problems(job.arch.num_experts) if p.code != "unknown"]
    if problems or len(job.chunks) != (job.layout.pp or 1):
        why = problems[0].message if problems else job.missing.get("stages", "its layers do not split over its "
                                                                             "pipeline stages")
        cand.reason = f"cannot run: {why}"
        return cand
    cand.estimate = estimate(job, gpu)
    cand.time = replayed(job, step_time(job, hw))
    peak = cand.estimate.peak_stage
    if peak.peak_bytes > capacity:
        cand.reason = (f"does not fit: pipeline stage {peak.pp_rank} needs {peak.peak_bytes / 2**30:.1f} GiB of "
                       f"{capacity / 2**30:.1f} GiB")
    return cand
