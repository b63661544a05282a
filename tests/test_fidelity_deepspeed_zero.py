"""guard's ZeRO model states, component by component and rank by rank, against DeepSpeed run on 1, 2 and 4 CPU
ranks (tests/fidelity/deepspeed_zero.py): stages 0-3 x bf16/fp32 x optimizer offload none/cpu, to the byte; on 2
ranks, stages 1-2 under the zero_optimization keys that change the gradient path; on 4 ranks, stages 1-3 under
Ulysses (DeepSpeed's device mesh, DP 2 x SP 2): ZeRO-1/2 partition over DP alone, ZeRO-3 over all 4 ranks, and
ZeRO-3's reduce bucket is fp32 (seq_parallel_communication_data_type). States split over DP alone at stage 3, or
over DP x SP at stages 1-2, fail here."""

from __future__ import annotations

import pytest

from tests.fidelity.deepspeed_zero import MODEL, WORLD_SIZES, cases, collect
from tests.fidelity.rows import failures

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("zero"))


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_every_case_and_rank_was_measured(rows, world):
    measured = {(r.case.split(" / ")[1], r.case.split(" / ")[2]) for r in rows if r.case.startswith(f"{world} rank")}
    assert measured == {(f"rank {rank}", name) for rank in range(world) for name in cases(world)}


@pytest.mark.parametrize("component", ["parameters (end of backward)", "gradients (end of backward)",
                                       "fp32 master weights", "optimizer moments", "buffers (end of backward)",
                                       "parameters (after step)", "optimizer moments (after step)",
                                       "gradient copies made for the step",
                                       "reduce buckets (end of autograd backward)",
                                       "gradients (end of autograd backward)"])
def test_each_component_matches_deepspeed_to_the_byte(rows, component):
    chosen = [r for r in rows if r.component == component]
    assert chosen and not failures(chosen), "\n".join(failures(chosen))


def test_gradients_waiting_at_the_end_of_autograd_stay_within_guards_terms(rows):
    """Stage 2, and stage 1 reducing in the hooks: which gradients still wait when autograd's backward ends
    depends on the order autograd made them; what DeepSpeed holds then never exceeds guard's partition + the
    named waiting gradients."""
    chosen = [r for r in rows if r.component == "gradients (end of autograd backward, at most)"]
    assert chosen and not failures(chosen), "\n".join(failures(chosen))


def test_the_keys_change_the_gradient_path(rows):
    """Hand check on the census itself (2 ranks, bf16, reduce bucket 50,000 elements): overlap_comm adds a
    second reduce bucket; contiguous_gradients false drops the bucket buffer; stage 1 holds every parameter's
    gradient (2 B x psi) until the post-backward reduce unless it reduces into the contiguous buffer during
    backward (overlap_comm). Then rank 0 holds its partition, the three rank-1 matrices larger than the bucket
    (h.0 mlp c_proj, h.1 c_fc, h.1 c_proj: 4h x h each), which stage 1 never clears, and the tied embedding's
    gradient, whose hook fires last (the embedding is the last op of backward), still waiting: more than
    every gradient."""
    h, v, p, layers = MODEL["n_embd"], MODEL["vocab_size"], MODEL["n_positions"], MODEL["n_layer"]
    psi = v * h + p * h + layers * (12 * h * h + 13 * h) + 2 * h

    def measured(component, case):
        return {r.measured for r in rows if r.component.startswith(component) and r.case.startswith("2 ranks")
                and r.case.endswith(case)}

    bucket = 50_000 * 2
    assert measured("reduce buckets", "zero2-bf16-offload_none") == {bucket}
    assert measured("reduce buckets", "zero2-bf16-offload_none-overlap_comm") == {2 * bucket}
    assert measured("reduce buckets", "zero1-bf16-offload_none-contiguous_gradients_false") == {0}
    for case in ("zero1-bf16-offload_none", "zero1-bf16-offload_none-contiguous_gradients_false",
                 "zero1-bf16-offload_none-contiguous_gradients_false-overlap_comm"):
        assert measured("gradients (end of autograd", case) == {2 * psi}
    partition = [r.measured for r in rows if r.component == "gradients (end of backward)"
                 and r.case == "2 ranks / rank 0 / zero1-bf16-offload_none-overlap_comm"]
    rank0 = [r.measured for r in rows if r.component.startswith("gradients (end of autograd")
             and r.case == "2 ranks / rank 0 / zero1-bf16-offload_none-overlap_comm"]
    assert rank0 == [partition[0] + 3 * 4 * h * h * 2 + v * h * 2] and rank0[0] > 2 * psi


def test_straddling_tensors_are_kept_whole_by_both_ranks(rows):
    """Hand check on the census itself: on 2 ranks under ZeRO-2 the two gradient buffers together hold more
    than the model, because a tensor that crosses the partition boundary is kept whole by both ranks."""
    h, v, p, layers = MODEL["n_embd"], MODEL["vocab_size"], MODEL["n_positions"], MODEL["n_layer"]
    psi = v * h + p * h + layers * (12 * h * h + 13 * h) + 2 * h  # GPT-2: wte, wpe, blocks, ln_f (tied head)
    grads = [r.measured for r in rows if r.component == "gradients (end of backward)"
             and r.case.startswith("2 ranks") and r.case.endswith("zero2-bf16-offload_none")]
    assert len(grads) == 2 and sum(grads) > 2 * psi
