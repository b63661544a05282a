"""Does the ranking hold when a kernel table is off? Re-price the layouts shown with one kind of kernel speed
15 % slower or faster at a time, and name each change that would put another layout first."""

from __future__ import annotations

from dataclasses import replace

from guard.plan.hardware import Hardware
from guard.plan.step_time import step_time

SPREAD = 0.15
KINDS = {"gemm_scale": "GEMMs", "attention_scale": "attention kernels", "memory_scale": "memory-bound kernels",
         "comm_scale": "collectives", "host_scale": "the host's kernel issue"}
SHOWN = 3  # the layouts compared: the fastest few (the search keeps the rest far behind)


def close_calls(hw: Hardware, candidates: list) -> list[str]:
    """One sentence per speed change that would make another shown layout the fastest ([] when the order of the
    first holds under all of them). `candidates` are search.Candidate, fastest first."""
    shown = [c for c in candidates[:SHOWN] if c.time is not None]
    if len(shown) < 2:
        return []
    # the closed form the search ranks with (the op-by-op replay of a deep pipeline costs more than the search):
    # a change matters where it moves the first place of that ranking
    def fastest(speeds: Hardware) -> tuple[int, list[float]]:
        times = [step_time(c.job, speeds).seconds for c in shown]
        return min(range(len(shown)), key=times.__getitem__), times

    base, _ = fastest(hw)
    out = []
    for field, kind in KINDS.items():
        for factor in (1 - SPREAD, 1 + SPREAD):
            first, times = fastest(replace(hw, **{field: factor}))
            if first != base:
                out.append(f"with {kind} {SPREAD:.0%} {'slower' if factor < 1 else 'faster'}, #{first + 1} would be "
                           f"the fastest ({times[first]:.3f} s against #{base + 1}'s {times[base]:.3f} s)")
    return out
