"""`torch.cuda.memory_summary()` tables in a log, read row by row as the lines stream past (one open table per
rank; ../shared/research/lint_rules.md §6.2).

Every row is `|label|cur|peak|tot alloc|tot freed|`; sizes are floored integers in the unit that keeps the
current value under 768 of it (`B  `, KiB ... PiB; before 1.6 `B`, KB, MB, GB, also powers of 1024).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guard.diagnose.memory_lines import Reading

HEADER = re.compile(r"PyTorch CUDA memory summary, device ID (\d+)")
OOMS = re.compile(r"CUDA OOMs: (\d+)\s*\|\s*cudaMalloc retries: (\d+)")
CELL = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB|PiB|KB|MB|GB)\s*$")
UNIT = {"B": 1, "KiB": 2**10, "KB": 2**10, "MiB": 2**20, "MB": 2**20, "GiB": 2**30, "GB": 2**30, "TiB": 2**40,
        "PiB": 2**50}
ROWS = {"Allocated memory": "allocated", "GPU reserved memory": "reserved", "Active memory": "active",
        "Requested memory": "requested", "Non-releasable memory": "non_releasable"}


@dataclass
class Table:
    device: int
    source: str
    line: int
    rank: int | None
    ooms: int | None = None
    retries: int | None = None
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)  # row -> (current, peak) bytes

    def reading(self) -> Reading:
        cur = {k: v[0] for k, v in self.rows.items()}
        peak = {k: v[1] for k, v in self.rows.items()}
        return Reading("summary", f"memory_summary of device {self.device}" +
                       (f" ({self.ooms} OOMs, {self.retries} cudaMalloc retries)" if self.ooms is not None else ""),
                       self.rank, cur.get("allocated"), peak.get("allocated"), cur.get("reserved"),
                       peak.get("reserved"), source=self.source, line=self.line)


class Tables:
    """The open table of each rank; `feed` returns a finished table's reading when its last row has passed."""

    def __init__(self) -> None:
        self.open: dict[int | None, Table] = {}

    def feed(self, source: str, number: int, rank: int | None, text: str) -> Reading | None:
        head = HEADER.search(text)
        done = None
        if head:
            done = self.close(rank)
            self.open[rank] = Table(int(head.group(1)), source, number, rank)
            return done
        table = self.open.get(rank)
        if table is None:
            return None
        stripped = text.strip()
        if not stripped.startswith("|"):
            return self.close(rank)
        counts = OOMS.search(stripped)
        if counts:
            table.ooms, table.retries = int(counts.group(1)), int(counts.group(2))
            return None
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        name = ROWS.get(cells[0])
        if name and len(cells) >= 3:
            sizes = [CELL.match(c) for c in cells[1:3]]
            if all(sizes):
                table.rows[name] = tuple(int(m.group(1)) * UNIT[m.group(2)] for m in sizes)
        return None

    def close(self, rank: int | None) -> Reading | None:
        table = self.open.pop(rank, None)
        return table.reading() if table is not None and table.rows else None

    def close_all(self) -> list[Reading]:
        return [r for r in (self.close(rank) for rank in list(self.open)) if r is not None]
