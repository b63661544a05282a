"""guard's ZeRO model states, component by component and rank by rank, against DeepSpeed run on 1, 2 and 4 CPU
ranks (tests/fidelity/deepspeed_zero.py): stages 0-3 x bf16/fp32 x optimizer offload none/cpu, to the byte."""

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
                                       "gradient copies made for the step"])
def test_each_component_matches_deepspeed_to_the_byte(rows, component):
    chosen = [r for r in rows if r.component == component]
    assert chosen and not failures(chosen), "\n".join(failures(chosen))


def test_straddling_tensors_are_kept_whole_by_both_ranks(rows):
    """Hand check on the census itself: on 2 ranks under ZeRO-2 the two gradient buffers together hold more
    than the model, because a tensor that crosses the partition boundary is kept whole by both ranks."""
    h, v, p, layers = MODEL["n_embd"], MODEL["vocab_size"], MODEL["n_positions"], MODEL["n_layer"]
    psi = v * h + p * h + layers * (12 * h * h + 13 * h) + 2 * h  # GPT-2: wte, wpe, blocks, ln_f (tied head)
    grads = [r.measured for r in rows if r.component == "gradients (end of backward)"
             and r.case.startswith("2 ranks") and r.case.endswith("zero2-bf16-offload_none")]
    assert len(grads) == 2 and sum(grads) > 2 * psi
