"""guard's pipeline stash against megatron-core's own 1F1B and interleaved schedules on CPU (gloo, one process
per pipeline rank; tests/fidelity/megatron_schedule.py): microbatches in flight exactly, stashed bytes within 2 %."""

from __future__ import annotations

import pytest

from tests.fidelity.megatron_schedule import CASES, collect
from tests.fidelity.rows import failures

pytest.importorskip("megatron.core")
pytest.importorskip("torch")
pytestmark = [pytest.mark.fidelity]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("schedule"))


@pytest.mark.parametrize("name", list(CASES))
def test_in_flight_and_stash_match_megatron_core(rows, name):
    chosen = [r for r in rows if r.case.startswith(f"{name} /")]
    assert len(chosen) == 2 * CASES[name]["pp"]  # every pipeline rank reported
    assert not failures(chosen), "\n".join(failures(chosen))


def test_the_schedule_itself_holds_p_minus_r(rows):
    """Hand check of the measurement: 1F1B with p = 4 and m = 8 keeps 4, 3, 2, 1 microbatches in flight
    (rank r runs p - r - 1 warm-up forwards, then one forward per backward)."""
    seen = [r.measured for r in rows if r.case.startswith("1f1b_p4_m8 /") and r.component == "microbatches in flight"]
    assert seen == [4, 3, 2, 1]
