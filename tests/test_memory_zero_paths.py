"""The ZeRO-1/2 gradient path the zero_optimization keys select (guard/memory/zero_paths.py), on small made-up
layouts whose bytes are worked out by hand from stage_1_and_2.py; the real engine is in
tests/test_fidelity_deepspeed_zero.py."""

from __future__ import annotations

import pytest

from guard.job.architecture import Architecture
from guard.job.training_job import new_job
from guard.memory import zero_paths
from guard.memory.overheads import buffers
from guard.memory.params import Inventory
from guard.memory.states import zero_states

ARCH = Architecture(num_layers=1, hidden=8, heads=1, query_groups=1, kv_channels=8, ffn_hidden=32, vocab=8)


def _job(stage: int, groups: list[list[int]], bucket: float = 50, offload: str = "none", **keys):
    return new_job(arch=ARCH, framework="deepspeed", world_size=2, params_dtype="bf16", zero_stage=stage,
                   param_groups=groups, zero_keys=keys, zero_buckets={"reduce_bucket_size": bucket},
                   offload_optimizer=offload)


def _states(job, rank=None):
    inv = Inventory()
    inv.add("tp_sharded", "all parameters", sum(map(sum, job.param_groups)))
    return zero_states(job, inv, dp_rank=rank)


def test_defaults_follow_deepspeed_config_py():
    assert not zero_paths.gradient_path(_job(2, [[4]])).overlap  # overlap_comm None -> stage == 3
    assert zero_paths.zero_key(_job(3, [[4]]), "overlap_comm")
    path = zero_paths.gradient_path(_job(2, [[4]]))
    assert path.contiguous and path.reduce_scatter and not path.round_robin
    # pydantic's lax bools, and offload forcing contiguous gradients (DeepSpeedZeroOptimizer.__init__)
    assert zero_paths.gradient_path(_job(1, [[4]], overlap_comm="true")).overlap
    assert zero_paths.gradient_path(_job(2, [[4]], offload="cpu", contiguous_gradients=False)).contiguous
    pipeline = _job(1, [[4]], overlap_comm=True)
    pipeline.ds_pipeline = True  # engine.py:_configure_zero_optimizer disables overlap_comm for a PipelineModule
    assert not zero_paths.gradient_path(pipeline).overlap


def test_round_robin_reorder_is_deepspeeds():
    """_round_robin_reorder: tensor i goes to list i % dp, the lists concatenated: 0, 2, 4, 1, 3."""
    assert zero_paths.round_robin([10, 11, 12, 13, 14], 2) == [10, 12, 14, 11, 13]


@pytest.mark.parametrize("stage,keys,expected", [
    (2, {}, {"ZeRO reduce bucket": 100}),
    (2, {"overlap_comm": True}, {"ZeRO reduce bucket": 100, "second reduce bucket (overlap_comm)": 100}),
    (2, {"contiguous_gradients": False}, {"gradients waiting in the reduce bucket": 100}),
    (2, {"contiguous_gradients": False, "overlap_comm": True},
     {"gradients waiting in the reduce bucket": 100, "other ranks' gradients kept to the next reduce": 100}),
    (1, {"contiguous_gradients": False, "overlap_comm": True}, {"gradients waiting in the reduce bucket": 100}),
])
def test_bucket_terms_per_path(stage, keys, expected):
    """50-element bucket, bf16, no tensor larger than the bucket (setup_buckets / bucket.grads)."""
    job = _job(stage, [[20, 20]], **keys)
    persistent, _ = buffers(job, 40, 0, 0, 2)
    assert {k: v for k, v in persistent.items() if "workspace" not in k} == expected


def test_stage1_holds_every_gradient_until_the_post_backward_reduce():
    """Stage 1 without overlap_comm: 100 bf16 elements = 200 B held, 120 of them (the 60-element tensor,
    larger than the 50-element bucket) already priced beside the bucket."""
    job = _job(1, [[60], [40]])
    assert _states(job).reduce_terms == {"every parameter's gradient, until the post-backward reduce": 80}
    assert buffers(job, 100, 0, 0, 2)[0]["gradient larger than the reduce bucket"] == 120
    assert _states(_job(2, [[60], [40]])).reduce_terms == {}


def test_stage1_overlap_keeps_the_other_ranks_oversized_gradients():
    """One group of 60, 4, 60 elements on 2 ranks: slices of 62; rank 0 never holds the last tensor, rank 1 the
    first; stage 1 reducing into the contiguous buffer leaves that 60-element (> bucket) gradient alone."""
    job = _job(1, [[60, 4, 60]], overlap_comm=True)
    assert _states(job, 0).reduce_terms == {"other ranks' gradients larger than the bucket": 120}
    assert _states(job, 1).reduce_terms == {"other ranks' gradients larger than the bucket": 120}
    assert _states(_job(1, [[60, 4, 60]], bucket=100, overlap_comm=True)).reduce_terms == {}


def test_non_contiguous_step_frees_each_group_before_the_next():
    """Groups of 4 and 40 elements, 2 ranks, bf16, fused Adam: partitions 2 and 20, each rank keeps both
    tensors whole (8 + 80 B). Copies per group: flatten 2 B + fp32 4 B per element: 12 and 120 B. Contiguous:
    the buffer lives to the end, so 120 B on top. Not contiguous: group 0's 8 B are freed before group 1's
    copies, so 120 - 8 = 112 B."""
    assert _states(_job(2, [[4], [40]])).step_transient == 120
    states = _states(_job(2, [[4], [40]], contiguous_gradients=False))
    assert states.step_transient == 112
    assert states.step_terms["gradients of the groups already stepped, freed"] == -8


def test_round_robin_moves_the_partition_boundary():
    """Tensors 10, 30, 10, 30 on 2 ranks (slices of 40): rank 0 holds 10 + 30 (80 B), rank 1 10 + 30.
    Reordered 10, 10, 30, 30 (offsets 0, 10, 20, 50): the first 30 now straddles the boundary at 40, so rank 0
    holds 10 + 10 + 30 (100 B) and rank 1 30 + 30 (120 B)."""
    assert [_states(_job(2, [[10, 30, 10, 30]]), r).grads for r in (0, 1)] == [80, 80]
    rr = _job(2, [[10, 30, 10, 30]], round_robin_gradients=True)
    assert [_states(rr, r).grads for r in (0, 1)] == [100, 120]


def test_explain_names_the_path():
    lines = _states(_job(1, [[60], [40]], contiguous_gradients=False)).explain
    assert any("contiguous_gradients=False" in line for line in lines)
    assert any("every gradient is held" in line for line in lines)
