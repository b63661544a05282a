"""Whether a rank's memory rose over time before it ran out, from the readings its log printed in order:
Megatron's report_memory, DeepSpeed's see_memory_usage (the same message compared with itself), a trainer's
memory column, or the rank's own repeated OOM messages."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from guard.units import GIB

# a rise smaller than this is noise (the allocator's rounding, a larger batch now and then)
GROWTH_MIN = GIB // 2
GROWTH_SHARE = 0.10
LEAST = 3  # readings of one series before a trend is read from it
KEEP = 8  # the latest readings kept beside the first: a log that reports every step keeps 9, not millions


@dataclass(frozen=True)
class Point:
    source: str
    line: int
    value: int  # bytes


@dataclass
class Series:
    """One quantity of one rank over time (allocated after each iteration, a message's peak, ...)."""

    what: str
    rank: int | None
    first: Point | None = None
    latest: deque = field(default_factory=lambda: deque(maxlen=KEEP))
    count: int = 0

    def add(self, point: Point) -> None:
        if self.first is None:
            self.first = point
        self.latest.append(point)
        self.count += 1


@dataclass(frozen=True)
class Growth:
    why: str
    rank: int | None


def rose(series: Series) -> Growth | None:
    """The series' growth when it rose by more than noise from its first reading to its last, and its latest
    readings did not fall back (a rise followed by a fall is a phase, not growth)."""
    if series.count < LEAST or series.first is None:
        return None
    first, last = series.first, series.latest[-1]
    if last.value - first.value < max(GROWTH_MIN, GROWTH_SHARE * first.value):
        return None
    recent = list(series.latest)
    ups = sum(b.value > a.value for a, b in zip(recent, recent[1:]))
    downs = sum(b.value < a.value for a, b in zip(recent, recent[1:]))
    if downs > ups:
        return None
    who = f"rank {series.rank}'s" if series.rank is not None else "the log's"
    return Growth(f"{who} {series.what} rose from {first.value / GIB:.2f} GiB ({first.source}:{first.line}) to "
                  f"{last.value / GIB:.2f} GiB ({last.source}:{last.line}) over {series.count} readings",
                  series.rank)


class Trends:
    """Every series the scan saw, by (what, rank)."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, int | None], Series] = {}

    def add(self, what: str, rank: int | None, point: Point) -> None:
        key = (what, rank)
        if key not in self.series:
            self.series[key] = Series(what, rank)
        self.series[key].add(point)

    def growth(self, rank: int | None) -> Growth | None:
        """What the failing rank's own readings show; without any, a rank-less series'; without those, another
        rank's (the ranks of one job run the same steps). The series with most readings speaks first."""
        every = sorted(self.series.values(), key=lambda s: -s.count)
        for chosen in ([s for s in every if s.rank == rank], [s for s in every if s.rank is None], every):
            if chosen:
                return next((g for s in chosen if (g := rose(s)) is not None), None)
        return None
