"""The gradient path DeepSpeed ZeRO-1/2 takes for the zero_optimization keys a job sets, and what that path holds.

From deepspeed/runtime/zero/stage_1_and_2.py (DeepSpeedZeroOptimizer, 0.19.8) and runtime/engine.py, checked on
CPU ranks by tests/fidelity/deepspeed_zero.py. Per combination, beside the gradient partition every path keeps
(`grads_in_partition` with contiguous gradients, else the partition's own `param.grad` tensors: the same bytes):

- contiguous_gradients (default true; offload_optimizer forces it, __init__): setup_buckets allocates an ipg
  bucket of reduce_bucket_size elements at the first gradient hook, and overlap_comm a second one (double
  buffering); reduce_independent_p_g_buckets_and_remove_grads copies each gradient into the bucket, except one
  larger than the bucket, which waits on its own (extra_large_param_to_reduce). The epilogue frees the buckets
  (_release_ipg_buffers).
- contiguous_gradients false: no bucket buffer; the gradients autograd made wait in `bucket.grads` (at most one
  bucket's worth, or the one larger tensor alone) and are reduced by buffered_reduce_fallback. Under stage 2
  with overlap_comm, reduce_ipg_grads keeps the other ranks' reduced gradients until the next reduction
  (previous_reduced_grads). The step frees each param group's gradients before the next group's copies
  (free_grad_in_param_list), where the contiguous buffer lives until the last group.
- Stage 2, and stage 1 with overlap_comm, reduce from the gradient hooks (process_gradients). Stage 1 without
  overlap_comm reduces nothing during backward: every parameter's gradient is held until the engine's
  post-backward allreduce_gradients -> reduce_gradients; stage 1 without contiguous gradients never clears the
  other ranks' gradients before the epilogue (_clear_param_grad_only), overlap_comm or not.
- reduce_scatter and use_multi_rank_bucket_allreduce change only the flatten copy each reduction makes
  (average_tensor -> allreduce_and_scatter -> allreduce_bucket; reduce_scatter false all-reduces the bucket in
  place, gradient_reduction_w_predivide). guard prices that copy for no path (see zero_path_notes).
- round_robin_gradients reorders each group's tensors (_round_robin_reorder) before flattening, which moves
  the partition boundaries and so which tensors each rank keeps whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard.job.training_job import TrainingJob

# deepspeed/runtime/zero/config.py (0.19.8), DeepSpeedZeroConfig; overlap_comm None means "stage == 3"
# (validator overlap_comm_valid). allgather_partitions and elastic_checkpoint are not read by stage_1_and_2.py.
PATH_DEFAULTS: dict[str, Any] = {"contiguous_gradients": True, "overlap_comm": None, "reduce_scatter": True,
                                 "round_robin_gradients": False, "use_multi_rank_bucket_allreduce": True,
                                 "allgather_partitions": True, "elastic_checkpoint": False}
_TRUE, _FALSE = {"1", "true", "t", "yes", "y", "on"}, {"0", "false", "f", "no", "n", "off"}


def _as_bool(value: Any, default: bool) -> bool:
    """pydantic's lax bool (what DeepSpeedConfigModel accepts): bools, 0/1, and the usual strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return default


def zero_key(job: TrainingJob, name: str) -> bool:
    """A path key as DeepSpeed reads it: the config's value, else config.py's default."""
    default = PATH_DEFAULTS[name]
    if default is None:  # overlap_comm
        default = job.zero_stage == 3
    return _as_bool(job.zero_keys.get(name, default), default)


@dataclass(frozen=True)
class GradientPath:
    """The stage 1-2 gradient path the keys select."""

    stage: int
    contiguous: bool
    overlap: bool
    reduce_scatter: bool
    round_robin: bool

    @property
    def reduces_in_hooks(self) -> bool:
        """process_gradients reduces during backward only under stage 2 or overlap_comm."""
        return self.stage == 2 or self.overlap

    @property
    def holds_every_gradient(self) -> bool:
        """Stage 1 holds every parameter's gradient until the epilogue unless it reduces in the hooks into the
        contiguous buffer (reduce_ipg_grads' stage 1 branch never clears the other ranks' gradients)."""
        return self.stage == 1 and not (self.overlap and self.contiguous)


def gradient_path(job: TrainingJob) -> GradientPath:
    offload = job.offload_optimizer != "none"  # __init__: contiguous_gradients or self.cpu_offload
    # engine.py:_configure_zero_optimizer: "Pipeline parallelism does not support overlapped communication,
    # will be disabled" (a PipelineModule: DeepSpeed's pipeline engine)
    overlap = zero_key(job, "overlap_comm") and not job.ds_pipeline
    return GradientPath(job.zero_stage, zero_key(job, "contiguous_gradients") or offload, overlap,
                        zero_key(job, "reduce_scatter"), zero_key(job, "round_robin_gradients"))


def round_robin(group: list[int], dp: int) -> list[int]:
    """stage_1_and_2.py:_round_robin_reorder: tensor i goes to list i % dp; the lists are concatenated."""
    return [n for j in range(dp) for n in group[j::dp]]


def ordered_groups(job: TrainingJob, groups: list[list[int]] | None, dp: int) -> list[list[int]] | None:
    """The tensor order DeepSpeed flattens each param group in (round_robin_gradients reorders it)."""
    if not groups or job.zero_stage not in (1, 2) or not gradient_path(job).round_robin:
        return groups
    return [round_robin(g, dp) for g in groups]


# bucket_terms that are gradients themselves (not bucket buffers)
WAITING = ("gradient larger than the reduce bucket", "gradients waiting in the reduce bucket",
           "other ranks' gradients kept to the next reduce")


def bucket_terms(job: TrainingJob, bucket: float, largest: int, grad_bytes: int) -> dict[str, float]:
    """Stage 1-2 gradient-path buffers alive during backward (beside the gradient partition), by name."""
    path = gradient_path(job)
    out: dict[str, float] = {}
    if path.contiguous:
        out["ZeRO reduce bucket"] = bucket * grad_bytes  # setup_buckets: buf_0
        if path.overlap:  # setup_buckets: buf_1, "double buffers to avoid data access conflict"
            out["second reduce bucket (overlap_comm)"] = bucket * grad_bytes
        if largest > bucket:  # extra_large_param_to_reduce: reduced on its own, beside the bucket
            out["gradient larger than the reduce bucket"] = largest * grad_bytes
        return out
    # bucket.grads: the waiting gradients stay autograd's own tensors, at most a bucket, or one larger tensor
    waiting = max(bucket, largest) * grad_bytes
    out["gradients waiting in the reduce bucket"] = waiting
    if path.stage == 2 and path.overlap:  # reduce_ipg_grads: previous_reduced_grads, cleared one reduction later
        out["other ranks' gradients kept to the next reduce"] = waiting
    return out


def tensors_elsewhere(groups: list[list[int]], dp: int, rank: int) -> list[int]:
    """numel of the tensors that touch none of `rank`'s slice of each flat group (the flat layout of
    zero_layout.py: groups padded to 2 x DP, equal slices)."""
    out = []
    for group in groups:
        part = -(-sum(group) // (2 * dp)) * 2
        start = 0
        for n in group:
            if n and not start // part <= rank <= (start + n - 1) // part:
                out.append(n)
            start += n
    return out


def reduce_terms(job: TrainingJob, psi: int, grad_bytes: int, bucket: float, largest: int,
                 groups: list[list[int]] | None, rank: int | None) -> dict[str, int]:
    """Stage 1 gradients held at the end of autograd's backward beyond the partition and the bucket terms,
    freed by the epilogue (_clear_param_grad_only), by name; `rank` None: the rank that holds the most.
    - reducing only after backward (engine.py: allreduce_gradients -> reduce_gradients): every parameter's
      gradient; the tensor larger than the bucket is already the buffer "gradient larger than the reduce bucket".
    - reducing in the hooks into the contiguous buffer: reduce_ipg_grads' stage 1 branch leaves the other ranks'
      gradients alone, and one larger than the bucket never moved into it (extra_large_param_to_reduce): kept.
    Stage 2 clears both as it goes: nothing."""
    path = gradient_path(job)
    if job.zero_stage != 1:
        return {}
    if path.holds_every_gradient:  # less what bucket_terms already prices as gradients waiting to be reduced
        beside = sum(v for k, v in bucket_terms(job, bucket, largest, grad_bytes).items() if k in WAITING)
        return {"every parameter's gradient, until the post-backward reduce": int(psi * grad_bytes - beside)}
    dp = job.layout.zero_shards(job.zero_stage) or 1
    if not groups or dp == 1:
        return {}
    ranks = range(dp) if rank is None else [rank]
    kept = max(sum(n for n in tensors_elsewhere(groups, dp, r) if n > bucket) for r in ranks)
    return {"other ranks' gradients larger than the bucket": kept * grad_bytes} if kept else {}


def step_release(grads_by_group: list[list[int]], copies_by_group: list[int], grad_bytes: int,
                 rank: int | None) -> tuple[int, int]:
    """Non-contiguous gradients: step() frees group i's gradients before group i + 1 copies its own, so the
    step peaks at max_i(copies_i - gradients of groups < i). Returns (index of that group, bytes freed by
    then) for `rank` (None: the rank whose peak is highest, grads included)."""
    ranks = range(len(grads_by_group[0])) if rank is None else [rank]
    best = None
    for r in ranks:
        freed = 0
        for i, copies in enumerate(copies_by_group):
            peak = sum(g[r] for g in grads_by_group) * grad_bytes + copies - freed
            if best is None or peak > best[0]:
                best = (peak, i, freed)
            freed += grads_by_group[i][r] * grad_bytes
    return best[1], best[2]


def path_explain(job: TrainingJob) -> list[str]:
    """The path in words, for --explain."""
    if job.zero_stage not in (1, 2):
        return []
    p = gradient_path(job)
    given = ", ".join(f"{k}={v}" for k, v in job.zero_keys.items()) or "all defaults"
    forced = " (forced by offload_optimizer)" if p.contiguous and job.offload_optimizer != "none" else ""
    head = (f"gradient path (zero_optimization: {given}): contiguous_gradients={p.contiguous}{forced}, "
            f"overlap_comm={p.overlap}, reduce_scatter={p.reduce_scatter}, round_robin_gradients={p.round_robin}")
    lines = [head]
    if not p.reduces_in_hooks:
        lines.append("  reduces after backward (engine.allreduce_gradients -> reduce_gradients): every gradient is "
                     "held until then")
    else:
        lines.append("  reduces during backward from the gradient hooks" + (
            "; stage 1 without contiguous gradients still keeps every gradient until the epilogue"
            if p.holds_every_gradient else ""))
    if not p.contiguous:
        lines.append("  no contiguous buffer: gradients wait as autograd's tensors; the step frees them group by group")
    lines.append("  each reduction flattens its bucket (a transient copy, not priced)" if p.reduce_scatter or
                 not p.contiguous else "  the bucket is all-reduced in place (reduce_scatter false)")
    return lines
