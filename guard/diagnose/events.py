"""The out-of-memory events of a set of logs: which rank, where, in which phase, and what the message says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from guard.diagnose.log_lines import LogLine
from guard.diagnose.oom_text import OomText, messages

# what the log was doing before the OOM (the latest marker seen on that rank, or on any rank)
PHASES = [
    ("checkpoint save", re.compile(r"sav(?:ing|e)[_ ]checkpoint|saving model|save_checkpoint", re.I)),
    ("evaluation", re.compile(r"\bevaluat|validation loss|\beval[_ ]", re.I)),
    ("step", re.compile(r"\biteration\s+(\d+)\s*/|\bstep[ =:]+(\d+)|global_step[ =:]+(\d+)", re.I)),
]
PHASE_WORDS = re.compile(r"sav|evaluat|validation|eval|iteration|step", re.I)  # before the three searches
RANK_IN_TEXT = re.compile(r"\brank[ =:]*(\d+)\b", re.I)


@dataclass
class Event:
    source: str  # path
    line: int
    rank: int | None
    phase: str  # start-up | first step | step N | checkpoint save | evaluation
    oom: OomText
    host: str | None = None  # the node, where the log names it (torchrun's failure summary)
    rank_from: str = ""  # where the rank came from when not the line's own prefix


def events(lines: Iterable[LogLine], phase: dict[int | None, str] | None = None) -> list[Event]:
    """Every OOM message and look-alike, in order; one per message (glued messages are split). `phase`: what
    each rank was doing before these lines (updated as they are read)."""
    out: list[Event] = []
    phase = {} if phase is None else phase
    for line in lines:
        mark_phase(phase, line.rank, line.text)
        for oom in messages(line.text):
            rank = line.rank
            if rank is None:  # a rank named in the text just before the message ("[Rank 3] ...")
                named = RANK_IN_TEXT.search(line.text[:oom.start])
                rank = int(named.group(1)) if named else None
            seen = phase.get(rank, phase.get(None))
            out.append(Event(line.path, line.number, rank, seen or "start-up or first step", oom))
    return out


def mark_phase(phase: dict[int | None, str], rank: int | None, text: str) -> None:
    if not PHASE_WORDS.search(text):
        return
    for marker, pattern in PHASES:
        match = pattern.search(text)
        if match:
            step = next((g for g in match.groups() if g), None) if match.groups() else None
            phase[rank] = phase[None] = f"step {step}" if step else marker
            return
