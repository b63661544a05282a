"""Training logs, read line by line in a stream (a log of gigabytes never sits in memory), with the rank each
line comes from when its prefix says so.

Prefixes seen in real logs: torchrun's `[rank3]: ` and `--tee`'s `[host:3]: `/`[default3]:`, DeepSpeed's
`3: `, Slurm's `3: ` with `srun --label`, NCCL's `host:pid:tid [3] `, vLLM's `ERROR mm-dd hh:mm:ss file.py:N] `,
quotes (`> `), and a message inside an exception repr (`OutOfMemoryError('...')`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

RANK_PREFIXES = [
    re.compile(r"^\[rank(\d+)\]:\s?"),
    re.compile(r"^\[(?:[\w.-]+):(\d+)\]:\s?"),  # torchrun --tee: [host:rank]:
    re.compile(r"^\[default(\d+)\]:\s?"),
    re.compile(r"^(\d+):\s"),  # srun --label, deepspeed's per-rank prefix
    re.compile(r"^(?:\[[\d:. -]+\] )?[\w.-]+:\d+:\d+ \[(\d+)\] "),  # NCCL: [time] host:pid:tid [dev]
]
NOISE = [re.compile(r"^(?:> )+"), re.compile(r"^[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d [\w./-]+:\d+\] ")]
MAX_LINE = 1 << 20  # a line longer than this is read in pieces (a log without newlines)


@dataclass(frozen=True)
class LogLine:
    path: str
    number: int  # 1-based
    rank: int | None  # from the prefix, when there is one
    text: str  # without the prefix


def strip_prefix(raw: str) -> tuple[int | None, str]:
    text = raw.rstrip("\r\n")
    for noise in NOISE:
        text = noise.sub("", text)
    for prefix in RANK_PREFIXES:
        match = prefix.match(text)
        if match:
            return int(match.group(1)), text[match.end():]
    return None, text


def read_lines(path: str) -> Iterator[LogLine]:
    """Every line of a log file, decoded leniently, with its rank."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE)
            if not raw:
                return
            number += 1
            rank, text = strip_prefix(raw)
            yield LogLine(path, number, rank, text)


BLOCK = 8 << 20  # characters a block holds, cut after its last newline


def blocks(path: str) -> Iterator[str]:
    """The file in blocks of whole lines (the last may lack its newline); each block ends with "\\n" except the
    file's last, so `block.split("\\n")` has one empty string after the block's last line."""
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        carry = ""
        while True:
            chunk = handle.read(BLOCK)
            if not chunk:
                if carry:
                    yield carry
                return
            chunk = carry + chunk
            cut = chunk.rfind("\n")
            if cut < 0:
                carry = chunk
                if len(carry) > MAX_LINE:  # a log without newlines: read it in pieces
                    yield carry + "\n"
                    carry = ""
                continue
            carry = chunk[cut + 1:]
            yield chunk[:cut + 1]
