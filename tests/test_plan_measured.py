"""guard plan --measured: a Megatron-LM training log's iteration time and timers against the user's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_guard

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "examples/memory/llama2_13b_pp4_dp2.sh")


def _log(iterations: list[float], timers: dict[str, tuple[float, float]]) -> str:
    """Lines as Megatron-LM writes them: training.py's training_log and core/timers.py's min/max block."""
    lines = [f" [2026-11-20 10:00:0{i}] iteration {i + 1:8d}/    1000 | consumed samples: {64 * (i + 1):12d} | "
             f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 3.000E-04 |" for i, ms in enumerate(iterations)]
    block = ["(min, max) time across ranks (ms):"] + [
        "    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), lo, hi) for name, (lo, hi) in timers.items()]
    return "\n".join(lines[:2] + block + lines[2:]) + "\n"


def test_the_log_is_read_and_paired_with_guards_terms(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(_log([25000.0, 12700.0, 12600.0, 12800.0],
                        {"forward-backward": (11800.0, 11900.0), "forward-compute": (4000.0, 4100.0),
                         "all-grads-sync": (310.0, 330.0), "optimizer": (250.0, 260.0),
                         "batch-generator": (1.0, 3.0)}))
    code, out, err = run_guard("plan", SCRIPT, "--gpu", "A100-80GB", "--top", "1", "--format", "json",
                               "--measured", str(log))
    assert code == 0, err
    report = json.loads(out)
    rows = {row["what"]: row for row in report["measured"]}
    # the first logged iteration includes start-up: the median of the others
    assert rows["iteration"]["measured_s"] == pytest.approx(12.7)
    assert rows["iteration"]["predicted_s"] == pytest.approx(report["current"]["step_time_s"])
    # the slowest rank's time, in seconds
    assert rows["forward-backward"]["measured_s"] == pytest.approx(11.9)
    assert rows["all-grads-sync"]["measured_s"] == pytest.approx(0.33)
    # a timer inside forward-backward is not a separate row; the data loader is named unpriced
    assert "forward-compute" not in " ".join(rows)
    assert rows["not priced: batch-generator"]["measured_s"] == pytest.approx(0.003)


@pytest.mark.parametrize("text, message", [("no such log", "not a Megatron-LM training log")])
def test_a_file_that_is_not_a_training_log_is_refused_before_the_search(tmp_path, text, message):
    log = tmp_path / "other.txt"
    log.write_text(text)
    code, _out, err = run_guard("plan", SCRIPT, "--gpu", "A100-80GB", "--measured", str(log))
    assert code == 2 and message in err and "\n" not in err.strip()
