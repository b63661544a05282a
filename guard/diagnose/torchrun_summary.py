"""torchrun's failure summary (torch.distributed.elastic's ChildFailedError), read as one record per failed rank.

    Root Cause (first observed failure):
    [0]:
      time      : 2024-05-01_10:00:00
      host      : node-1
      rank      : 3 (local_rank: 3)
      exitcode  : -9 (pid: 4242)
      error_file: <N/A>
      traceback : Signal 9 (SIGKILL) received by PID 4242

The same block lists the other ranks under "Failures:". A rank killed by signal 9 is one event (the kernel's OOM
killer, most often), however many of its lines say -9; any other exit code is the Python exception printed above
it, so the record only names the rank and host that failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD = re.compile(r"^\s*(Root Cause \(first observed failure\)|Failures)\s*:\s*$")
ENTRY = re.compile(r"^\s*\[(\d+)\]\s*:\s*$")
FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
RANK = re.compile(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
EXIT = re.compile(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")


@dataclass(frozen=True)
class Failure:
    """One failed rank as torchrun reports it."""

    source: str
    line: int  # the record's first line
    root_cause: bool
    rank: int | None
    local_rank: int | None
    host: str | None
    exitcode: int | None
    pid: int | None

    @property
    def killed(self) -> bool:
        return self.exitcode == -9


class SummaryReader:
    """Fed every line; keeps the failures of the summary blocks it sees, one per record."""

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self._section: str | None = None
        self._fields: dict[str, str] | None = None
        self._start = (None, 0)

    def feed(self, source: str, number: int, text: str) -> bool:
        """Whether the line belongs to a summary block (its look-alike -9 lines are then this reader's)."""
        head = HEAD.match(text)
        if head:
            self._close()
            self._section = head.group(1)
            return True
        if self._section is None:
            return False
        entry = ENTRY.match(text)
        if entry:
            self._close()
            self._fields, self._start = {}, (source, number)
            return True
        field = FIELD.match(text)
        if field and self._fields is not None:
            self._fields[field.group(1)] = field.group(2)
            return True
        self._close()
        if text.strip().startswith(("---", "===")) or not text.strip():
            return True  # a separator: the next head or entry may follow
        self._section = None
        return False

    def finish(self) -> None:
        self._close()
        self._section = None

    def _close(self) -> None:
        if self._fields:
            rank = RANK.match(self._fields.get("rank", ""))
            code = EXIT.match(self._fields.get("exitcode", ""))
            self.failures.append(Failure(
                self._start[0], self._start[1], self._section is not None and self._section.startswith("Root"),
                int(rank.group(1)) if rank else None, int(rank.group(2)) if rank and rank.group(2) else None,
                self._fields.get("host") or None, int(code.group(1)) if code else None,
                int(code.group(2)) if code and code.group(2) else None))
        self._fields = None
