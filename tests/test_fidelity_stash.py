"""guard's pipeline schedule and activation stash per rank against megatron-core's own schedules on CPU
(tests/fidelity/megatron_stash.py): step order and microbatches in flight exactly, stashed bytes within 2 %."""

from __future__ import annotations

import pytest

from tests.fidelity.megatron_stash import CASES, collect
from tests.fidelity.rows import failures

pytestmark = [pytest.mark.fidelity]
pytest.importorskip("megatron.core")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("stash"))


def measured(rows, case: str, component: str) -> list[float]:
    """The measurement of one component on every pipeline rank of a case, rank order."""
    return [r.measured for r in rows if r.case.split(" / ")[0] == case and r.component == component]


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_and_stash_match_megatron_core(rows, name):
    chosen = [r for r in rows if r.case.split(" / ")[0] == name]
    assert len(chosen) == 5 * CASES[name]["pp"]  # five components on every pipeline rank
    assert not failures(chosen), "\n".join(failures(chosen))


def test_1f1b_holds_p_minus_r_microbatches(rows):
    """Rank r runs p - r - 1 warm-up forwards, then one forward per backward: p = 4, m = 8 gives 4, 3, 2, 1;
    with m = 2 < p the warm-up is cut at m: 2, 2, 2, 1."""
    assert measured(rows, "1f1b_p4_m8", "in-flight microbatches") == [4, 3, 2, 1]
    assert measured(rows, "1f1b_p4_m2", "in-flight microbatches") == [2, 2, 2, 1]


def test_interleaved_warm_up_is_two_per_later_rank_plus_a_group_per_extra_chunk(rows):
    """p = 4, v = 2, G = 4: warm-up 2(p - r - 1) + (v - 1)G, plus the forward before the first backward:
    11, 9, 7, 5; with m = 4 the 8 virtual microbatches cap it: 8, 8, 7, 5."""
    assert measured(rows, "interleaved_p4_v2_m8", "in-flight microbatches") == [11, 9, 7, 5]
    assert measured(rows, "interleaved_p4_v2_m4", "in-flight microbatches") == [8, 8, 7, 5]


def test_layer_stash_is_in_flight_times_one_microbatch(rows):
    """Measured against measured: the layers' peak is the in-flight count times what one microbatch of the
    rank's chunks saves (every chunk holds the same number of layers here), to the byte."""
    for name, case in CASES.items():
        per_chunk = [b / case.get("vpp", 1) for b in measured(rows, name, "one-microbatch layer bytes")]
        inflight = measured(rows, name, "in-flight microbatches")
        assert measured(rows, name, "stashed layer activation bytes") == \
            [n * b for n, b in zip(inflight, per_chunk)], name


def test_remainder_group_keeps_two_microbatches_of_loss_edges(rows):
    """With G > p the last group takes the remainder, and the last rank runs two forwards of its loss chunk
    before their backwards: twice what one 1F1B microbatch keeps outside the layers (final norm, output
    layer, loss) is alive at once. guard replays the loss edge with the schedule for this reason."""
    one = measured(rows, "1f1b_p2_m1", "stashed activation bytes")[-1] - \
        measured(rows, "1f1b_p2_m1", "stashed layer activation bytes")[-1]
    for name in ("interleaved_p2_v2_g3_m5", "interleaved_p4_v2_g5_m9"):
        edges = measured(rows, name, "stashed activation bytes")[-1] - \
            measured(rows, name, "stashed layer activation bytes")[-1]
        assert edges == 2 * one
