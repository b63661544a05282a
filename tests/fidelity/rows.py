"""One comparison of a guard prediction with a measurement from a real framework (fidelity tests and report)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    case: str  # what ran: framework, layout, settings, rank
    component: str  # what was compared: "params", "grads", "optimizer", "tp_sharded", "in-flight", ...
    predicted: float
    measured: float
    tolerance: float = 0.0  # relative; 0 means exact (bytes, counts)
    note: str = ""  # a named difference guard models (padding, bucket) or the kernel path assumed

    @property
    def error(self) -> float:
        """Relative error of the prediction; 0 when both are 0."""
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("inf")
        return (self.predicted - self.measured) / abs(self.measured)

    @property
    def ok(self) -> bool:
        return abs(self.predicted - self.measured) <= self.tolerance * abs(self.measured)


def failures(rows: list[Row]) -> list[str]:
    """One readable line per row outside its tolerance (for assertion messages)."""
    return [f"{r.case} / {r.component}: predicted {r.predicted:,.0f}, measured {r.measured:,.0f} ({r.error:+.3%})"
            for r in rows if not r.ok]
