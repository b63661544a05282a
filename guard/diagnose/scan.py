"""One pass over a log: its out-of-memory events, its memory reports and summary tables, and the arguments
Megatron printed, read in blocks so that a log of gigabytes is read at the speed of one regex search."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guard.diagnose.events import Event, events, mark_phase
from guard.diagnose.log_lines import LogLine, blocks, strip_prefix
from guard.diagnose.memory_lines import Reading, key, reading, says_more
from guard.intake.printed import ArgsReader, PrintedArgs
from guard.diagnose.summary_table import Tables

# A block holding none of these is skipped whole (nearly every block of a training log). Plain substrings:
# each `in` runs at memory speed, where one regex alternating over them all tries each at every position
# (measured 3x slower). They cover oom_text.ANY ("emory": out of memory, memory (MB), Theoretical memory,
# memory summary, CPU Virtual Memory; "umber of parameters": both parameter-count lines) and the rest.
MARKERS = ("emory", "ALLOC_FAILED", "calloc", "DefaultCPUAllocator", "-9", "SIGKILL", "oom_kill", "oom-kill",
           "umber of parameters", "Max_MA", "-- arguments --", "expandable_segments")
# the allocator's setting as a log shows it (an environment dump, a launcher line), not the OOM message's advice
EXPANDABLE = re.compile(r"expandable_segments:\s*True")
ADVICE = "try setting PYTORCH_CUDA_ALLOC_CONF"
PHASE_LOOKBACK = 64  # lines at the end of a skipped block searched for the phase marker


@dataclass
class LogScan:
    """What the logs fed to it say: OOM events, memory readings (the latest or highest of each kind and rank),
    the printed arguments."""

    events: list[Event] = field(default_factory=list)
    kept: dict[tuple, Reading] = field(default_factory=dict)  # one reading per kind and rank (memory_lines.key)
    phase: dict[int | None, str] = field(default_factory=dict)  # rank -> what it was doing (None: any rank)
    previous: dict[int | None, str] = field(default_factory=dict)  # rank -> its last line (DeepSpeed's message)
    tables: Tables = field(default_factory=Tables)
    args: ArgsReader = field(default_factory=ArgsReader)
    expandable: bool = False  # the log shows PYTORCH_CUDA_ALLOC_CONF with expandable_segments:True

    @property
    def busy(self) -> bool:
        """A table or the arguments block is open: the next lines belong to it."""
        return self.args.open or bool(self.tables.open)

    @property
    def readings(self) -> list[Reading]:
        """The reading that says most of each kind and rank, in the order first seen (a log that reports every
        iteration keeps one per rank, not millions)."""
        return list(self.kept.values())

    def keep(self, found: Reading) -> None:
        held = self.kept.get(key(found))
        if held is None or says_more(found, held):
            self.kept[key(found)] = found

    @property
    def printed_args(self) -> PrintedArgs | None:
        return self.args.result()

    def feed(self, line: LogLine) -> None:
        self.events += events([line], self.phase)
        self.args.feed(line.path, line.number, line.text)
        done = self.tables.feed(line.path, line.number, line.rank, line.text)
        if done is not None:
            self.keep(done)
        found = reading(line.text, self.previous.get(line.rank, ""))
        if found is not None:
            found.source, found.line = line.path, line.number
            found.rank = line.rank if found.rank is None else found.rank
            self.keep(found)
        self.previous[line.rank] = line.text
        if not self.expandable and EXPANDABLE.search(line.text) and ADVICE not in line.text:
            self.expandable = True

    def skim(self, path: str, first: int, texts: list[str]) -> None:
        """A block without markers: only what its last lines say about the phase and the previous line."""
        for text in texts[-PHASE_LOOKBACK:]:
            rank, text = strip_prefix(text)
            mark_phase(self.phase, rank, text)
            if text:
                self.previous[rank] = text

    def start(self, path: str) -> None:
        """A new file: its phases and tables are its own (one log per rank, or one run after another)."""
        for table in self.tables.close_all():
            self.keep(table)
        self.phase.clear()
        self.previous.clear()

    def finish(self) -> LogScan:
        for table in self.tables.close_all():
            self.keep(table)
        return self


def scan_file(path: str, scan: LogScan | None = None) -> LogScan:
    """Feed one log file to `scan` (a new one by default); blocks without markers are skipped whole."""
    scan = LogScan() if scan is None else scan
    scan.start(path)
    first = 1
    for block in blocks(path):
        texts = block.split("\n")
        if scan.busy or any(marker in block for marker in MARKERS):
            for i, text in enumerate(texts[:-1] if block.endswith("\n") else texts):
                scan.feed(LogLine(path, first + i, *strip_prefix(text)))
        else:
            scan.skim(path, first, texts)
        first += len(texts) - 1
    return scan


def file_events(path: str) -> list[Event]:
    return scan_file(path).finish().events
