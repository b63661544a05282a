"""One pass over a log: its out-of-memory events, its memory reports and summary tables, and the arguments
Megatron printed, read in blocks so that a log of gigabytes is read at the speed of one regex search."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guard.diagnose.events import Event, events, mark_phase
from guard.diagnose.growth import Point, Trends
from guard.diagnose.oom_text import OomText, messages
from guard.diagnose.prefilter import Hits, byte_blocks, read_block
from guard.diagnose.torchrun_summary import SummaryReader
from guard.diagnose.log_lines import LogLine, strip_prefix
from guard.diagnose.memory_lines import Reading, key, reading, says_more
from guard.intake.printed import ArgsReader, PrintedArgs
from guard.diagnose.summary_table import Tables

# A block holding none of these is skipped whole (nearly every block of a training log). Each is a plain substring
# that every line the scan reads holds one of: "emory" stands for out of memory, memory (MB), Theoretical memory,
# memory/ columns, CPU Virtual Memory, MemoryError, shared memory, Free memory on device; "umber of parameters"
# for both parameter-count lines.
MARKERS = ("emory", "ALLOC_FAILED", "calloc", "exitcode", "code = -9", "SIGKILL", "oom_kill", "oom-kill",
           "umber of parameters", "Max_MA", "-- arguments --", "expandable_segments", "/dev/shm", "Root Cause",
           "CUDA_VISIBLE_DEVICES", "KV cache")
BYTE_MARKERS = tuple(m.encode() for m in MARKERS)
TAIL_BYTES = 64 << 10  # the end of a skipped block read for the phase its last lines show
PHASE_LOOKBACK = 64  # the last lines of a skipped block read for the phase
# the allocator's setting as a log shows it (an environment dump, a launcher line), not the OOM message's advice
EXPANDABLE = re.compile(r"expandable_segments:\s*True")
ADVICE = "try setting PYTORCH_CUDA_ALLOC_CONF"
FOLLOW_LINES = 8  # lines after an event that may finish its message or name NCCL's transport
SHM_TRANSPORT = "transport/shm.cc"
HOST_FULL = 95.0  # percent of the host's memory in use that counts as full
REPEAT_LINES = 20  # lines within which the same rank's same failure said again is one event
VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES\s*[=:]\s*['\"]?(\d+(?:\s*,\s*\d+)*)")


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
    trends: Trends = field(default_factory=Trends)  # each rank's memory over time (growth.py)
    summary: SummaryReader = field(default_factory=SummaryReader)  # torchrun's failure summaries
    visible_devices: list[int] | None = None  # CUDA_VISIBLE_DEVICES as the log shows it
    host_full: Reading | None = None  # a host memory reading at HOST_FULL or more
    # an event whose message goes on in the next lines: (event, its text so far, lines still to look at)
    _open: tuple[Event, str, int] | None = None

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
        if self.summary.feed(line.path, line.number, line.text):
            return  # torchrun's summary: one record per failed rank, read when the block ends
        self._follow(line)
        visible = VISIBLE.search(line.text)
        if visible:
            self.visible_devices = [int(d) for d in visible.group(1).split(",") if d.strip().isdigit()]
        found_events = [e for e in events([line], self.phase) if not self._repeats(e)]
        for event in found_events:
            if event.oom.allocated is not None:
                self.trends.add("allocated at each out-of-memory message", event.rank,
                                Point(line.path, line.number, event.oom.allocated))
        self.events += found_events
        if found_events and (found_events[-1].oom.kind == "nccl" or
                             found_events[-1].oom.kind == "cuda-oom" and found_events[-1].oom.total is None):
            self._open = (found_events[-1], line.text[found_events[-1].oom.start:], FOLLOW_LINES)
        self.args.feed(line.path, line.number, line.text)
        done = self.tables.feed(line.path, line.number, line.rank, line.text)
        if done is not None:
            self.keep(done)
        found = reading(line.text, self.previous.get(line.rank, ""))
        if found is not None:
            found.source, found.line = line.path, line.number
            found.rank = line.rank if found.rank is None else found.rank
            self.keep(found)
            self._trend(found)
        self.previous[line.rank] = line.text
        if not self.expandable and EXPANDABLE.search(line.text) and ADVICE not in line.text:
            self.expandable = True

    def _follow(self, line: LogLine) -> None:
        """The lines after an open event: a CUDA OOM message that a paste wrapped at a fixed width is joined
        back (its words were cut anywhere, so the pieces join without a space); an NCCL allocation failure that
        NCCL's shared-memory transport reports next (transport/shm.cc) is that transport's (pinned host memory
        for /dev/shm buffers, WSL2 and small containers)."""
        if self._open is None:
            return
        event, text, left = self._open
        if event.oom.kind == "nccl":
            if SHM_TRANSPORT in line.text:
                event.oom.kind, event.oom.note = "shm", f"NCCL's shm transport follows at line {line.number}"
                left = 0
        else:
            text += line.text
            joined = messages(text)
            if joined and joined[0].kind == "cuda-oom" and joined[0].total is not None:
                joined[0].start = event.oom.start
                event.oom = joined[0]
                if joined[0].reserved is not None:  # the message's last figure: it is whole
                    left = 0
        self._open = (event, text, left - 1) if left > 1 else None

    def _repeats(self, event: Event) -> bool:
        """A line that says again what the last event said, a few lines on: a signal-9 kill of the same rank (exit
        code, then the signal), or the same message of the same rank (NCCL's WARN per thread, a traceback
        printed twice)."""
        last = self.events[-1] if self.events else None
        if last is None or last.rank != event.rank or last.source != event.source or \
                event.line - last.line > REPEAT_LINES:
            return False
        if event.oom.kind == "host-killed":
            return last.oom.kind == "host-killed"
        if event.oom.kind == last.oom.kind == "nccl" and last.oom.requested is None:
            last.oom.requested = event.oom.requested  # "Cuda failure 'out of memory'", then the size it asked
            return True
        return last.oom == event.oom

    def _trend(self, r: Reading) -> None:
        """A reading that can be compared with the same report later: allocated memory over time."""
        where = Point(r.source, r.line, 0)
        if r.kind == "megatron":
            for what, value in (("allocated between iterations (report_memory)", r.allocated),
                                ("peak allocated (report_memory)", r.max_allocated)):
                if value is not None:
                    self.trends.add(what, r.rank, Point(where.source, where.line, value))
        elif r.kind == "deepspeed" and r.allocated is not None:
            self.trends.add(f"allocated at '{r.label}' (see_memory_usage)", r.rank,
                            Point(where.source, where.line, r.allocated))
        elif r.kind == "host" and (r.percent or 0) >= HOST_FULL:
            self.host_full = r
        elif r.kind == "trainer" and r.max_allocated is not None:
            self.trends.add(f"{r.label} (the trainer's memory column)", r.rank,
                            Point(where.source, where.line, r.max_allocated))

    def start(self, path: str) -> None:
        """A new file: its phases and tables are its own (one log per rank, or one run after another)."""
        for table in self.tables.close_all():
            self.keep(table)
        self.phase.clear()
        self.previous.clear()

    def finish(self) -> LogScan:
        for table in self.tables.close_all():
            self.keep(table)
        self._failures()
        self._host_full()
        return self

    def _host_full(self) -> None:
        """A log with no failure message whose host memory reading was nearly full: the host ran out (the OOM
        killer leaves no message of its own in the process's output)."""
        r = self.host_full
        if r is None or self.events:
            return
        self.events.append(Event(r.source, r.line, r.rank, self.phase.get(r.rank, self.phase.get(None))
                                 or "start-up or first step",
                                 OomText("host", 0, note=f"the host's memory was {r.percent:g} % used "
                                                         f"({r.label}, line {r.line}) and the log ends")))

    def _failures(self) -> None:
        """torchrun's records: a rank killed by signal 9 is one host-memory event (unless a line of its own said
        so already); the root cause's rank and host name the events that carry no rank."""
        self.summary.finish()
        killed = {e.rank for e in self.events if e.oom.kind == "host-killed"}
        for f in self.summary.failures:
            if f.killed and f.rank not in killed:
                killed.add(f.rank)
                self.events.append(Event(f.source, f.line, f.rank, self.phase.get(f.rank, self.phase.get(None))
                                         or "start-up or first step", OomText("host-killed", 0), f.host,
                                         "torchrun's failure summary"))
        roots = {(f.rank, f.host) for f in self.summary.failures if f.root_cause and f.rank is not None}
        if len(roots) == 1:
            rank, host = roots.pop()
            for event in self.events:
                if event.rank is None:
                    event.rank, event.host, event.rank_from = rank, host, "torchrun's root cause"


def scan_file(path: str, scan: LogScan | None = None) -> LogScan:
    """Feed one log file to `scan` (a new one by default). Blocks without markers are skipped whole, keeping what
    their last lines say of the phase; grep finds the markers in one pass while the blocks' lines are counted
    (where grep is on the PATH), else each block is searched here marker by marker."""
    scan = LogScan() if scan is None else scan
    scan.start(path)
    hits = Hits(path, MARKERS)
    plan = []  # per block: offset, size, lines, marked (searched here) and what its last lines say
    for offset, chunk, end in byte_blocks(path):
        lines = chunk.count(b"\n", 0, end) + (0 if chunk[end - 1:end] == b"\n" else 1)
        marked = not hits.running and any(chunk.find(marker, 0, end) >= 0 for marker in BYTE_MARKERS)
        plan.append((offset, end, lines, marked, _tail(chunk[max(0, end - TAIL_BYTES):end], end > TAIL_BYTES)))
    hits.wait()
    first = 1
    for offset, size, lines, marked, tail in plan:
        raw = None
        if hits.running and not hits.known:  # grep failed: this block is searched here, read once
            raw = read_block(path, offset, size)
            marked = any(marker in raw for marker in BYTE_MARKERS)
        if scan.busy or marked or (hits.known and hits.within(offset, offset + size)):
            raw = raw if raw is not None else read_block(path, offset, size)
            texts = raw.decode("utf-8", errors="replace").split("\n")
            for i, text in enumerate(texts[:-1] if raw.endswith(b"\n") else texts):
                scan.feed(LogLine(path, first + i, *strip_prefix(text)))
        else:
            scan.phase.update(tail[0])
            scan.previous.update(tail[1])
        first += lines
    return scan


def _tail(raw: bytes, cut: bool) -> tuple[dict, dict]:
    """What a block's last lines (`raw`, its end; `cut`: not from a line's start) say: the phase of each rank,
    and each rank's last line (DeepSpeed's message)."""
    texts = raw.decode("utf-8", errors="replace").split("\n")
    texts = texts[1:] if cut else texts  # the first piece is a line's end
    phase: dict = {}
    previous: dict = {}
    for text in texts[-PHASE_LOOKBACK:]:
        rank, text = strip_prefix(text)
        mark_phase(phase, rank, text)
        if text:
            previous[rank] = text
    return phase, previous


def file_events(path: str) -> list[Event]:
    return scan_file(path).finish().events
