"""A Megatron-LM training log's measured step against guard's prediction for the same layout, term by term.

Megatron-LM prints `elapsed time per iteration (ms): X` on each logged iteration (training.py training_log) and,
with --timing-log-level 1 or more, a block of its timers (core/timers.py): `(min, max) time across ranks (ms):`
or `max time across ranks (ms):`, then one `name ....: (min, max)` or `name ....: max` line each, in ms per
logged interval divided by the iterations in it. guard reads the last block and the median of the iteration
times after the first logged one (which includes start-up), and pairs the timers it prices with its terms.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from guard.errors import InputError

ITERATION = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
BLOCK = re.compile(r"^(?:\(min, max\)|max) time across ranks \(ms\):\s*$")
TIMER = re.compile(r"^\s+([A-Za-z0-9_-]+) \.*: (?:\(([0-9.]+), ([0-9.]+)\)|([0-9.]+))\s*$")
# Megatron's timer -> the prefixes of guard's terms it covers (the pipeline is the forward-backward timer)
PAIRS = {
    "forward-backward": ("compute", "TP ", "SP ", "EP ", "CP ", "Ulysses", "pipeline", "recompute", "host issue"),
    "all-grads-sync": ("DP gradient", "ZeRO gradient"),
    "params-all-gather": ("DP parameter", "ZeRO parameter"),
    "optimizer-clip-main-grad": ("gradient norm",),
    "optimizer-count-zeros": ("zeros in gradients",),
    "optimizer-inner-step": ("optimizer step", "CPU optimizer step"),
    "optimizer": ("optimizer step", "CPU optimizer step", "gradient norm", "zeros in gradients", "offload"),
}

# timers inside one of those (schedules.py's compute and p2p timers, the optimizer's own parts guard does not split)
INSIDE = {"forward-compute", "backward-compute", "forward-recv", "forward-send", "backward-recv", "backward-send",
          "forward-send-backward-recv", "backward-send-forward-recv", "layernorm-grads-all-reduce",
          "embedding-grads-all-reduce", "optimizer-copy-to-main-grad", "optimizer-copy-main-to-model-params",
          "optimizer-unscale-and-check-inf"}


@dataclass
class MeasuredStep:
    path: str
    iteration_s: float | None
    timers: dict[str, float] = field(default_factory=dict)  # the slowest rank's seconds per iteration


def read_log(path: str) -> MeasuredStep:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise InputError(f"{path}: cannot read the training log ({err.strerror})") from None
    times = [float(m.group(1)) / 1000 for m in ITERATION.finditer(text)]
    timers: dict[str, float] = {}
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if BLOCK.match(line.strip())]
    if starts:
        for line in lines[starts[-1] + 1:]:
            m = TIMER.match(line)
            if not m:
                break
            timers[m.group(1)] = float(m.group(3) or m.group(4)) / 1000
    if not times and not timers:
        raise InputError(f"{path}: no 'elapsed time per iteration' and no timers: not a Megatron-LM training log")
    steady = times[1:] or times
    return MeasuredStep(path, statistics.median(steady) if steady else None, timers)


def compare(measured: MeasuredStep, terms: dict[str, float], seconds: float, pipeline: float) -> list[dict]:
    """Rows of (what, measured s, predicted s): the iteration, then each timer guard prices."""
    rows = []
    if measured.iteration_s is not None:
        rows.append({"what": "iteration", "measured_s": measured.iteration_s, "predicted_s": seconds})
    for timer, prefixes in PAIRS.items():
        if timer not in measured.timers:
            continue
        predicted = pipeline if timer == "forward-backward" else \
            sum(v for k, v in terms.items() if k.startswith(prefixes))
        rows.append({"what": timer, "measured_s": measured.timers[timer], "predicted_s": predicted})
    unpriced = sorted(set(measured.timers) - set(PAIRS) - INSIDE)
    if unpriced:
        rows.append({"what": "not priced: " + ", ".join(unpriced), "measured_s": sum(measured.timers[t] for t in
                                                                                      unpriced), "predicted_s": None})
    return rows
