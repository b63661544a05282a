"""The one-line memory reports training logs carry: Megatron's `report_memory`, its theoretical-memory and
parameter-count lines, and DeepSpeed's `see_memory_usage` (formats: ../shared/research/lint_rules.md §6.4-6.5).

Megatron's `report_memory` (megatron/training/utils.py) prints MB = 2**20 bytes, on the DP-rank 0 of each
model-parallel group, as `[Rank R] (after N iterations) memory (MB) | allocated: ...`; Megatron of 2020 printed
the same without the rank and the parentheses. DeepSpeed's `see_memory_usage` (deepspeed/runtime/utils.py)
prints `MA x GB  Max_MA x GB  CA x GB  Max_CA x GB` (GB = 2**30 bytes, two decimals; Max_CA rounded to an
integer) after a line holding its message, on global rank 0; it resets the peaks after printing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MB, GB = 2**20, 2**30
NUMBER = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
REPORT = re.compile(r"(?:\[Rank (\d+)\] )?\(?([^|]*?)\)? memory \(MB\) \| allocated: " + NUMBER +
                    r" \| max allocated: " + NUMBER + r" \| reserved: " + NUMBER + r" \| max reserved: " + NUMBER +
                    r"(?: \| total device memory used: " + NUMBER + ")?")
THEORETICAL = re.compile(r"Theoretical memory footprints: weight and optimizer=" + NUMBER + r" MB"
                         r"(?:, activation=" + NUMBER + r" MB, total=" + NUMBER + r" MB)?")
SHARD_PARAMS = re.compile(r"Number of parameters in (most loaded shard|other shards|transformer (?:block|layers)|"
                          r"embedding layers) in billions:\s*" + NUMBER)
RANK_PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\): (\d+)")
DEEPSPEED = re.compile(r"MA " + NUMBER + r" GB\s+Max_MA " + NUMBER + r" GB\s+CA " + NUMBER + r" GB\s+Max_CA " +
                       NUMBER + r" GB")
# a trainer's metrics dict (axolotl's callbacks log these each logging step, in GiB)
TRAINER = re.compile(r"'memory/(max_mem_allocated|max_mem_active|device_mem_reserved)\(gib\)'\s*:\s*" + NUMBER)
HOST = re.compile(r"CPU Virtual Memory:\s+used = " + NUMBER + r" GB, percent = " + NUMBER + "%")
LOGGER = re.compile(r"^\[[^\]]*\] \[[A-Z]+\] \[[^\]]*\] ")  # DeepSpeed's logger: [time] [INFO] [file:N:func]
# one cheap search before the others (these lines are rare in a log)
ANY = re.compile(r"memory \(MB\)|Theoretical memory|in billions|number of parameters on|Max_MA|CPU Virtual Memory|"
                 r"memory/")


@dataclass
class Reading:
    """One memory report of one rank (bytes; None where the line does not say)."""

    kind: str  # "megatron" | "megatron-theoretical" | "megatron-params" | "deepspeed" | "trainer" | "host" | "summary"
    label: str  # what the report was taken after ("after 10 iterations", DeepSpeed's message, ...)
    rank: int | None = None
    allocated: int | None = None
    max_allocated: int | None = None
    reserved: int | None = None
    max_reserved: int | None = None
    device_used: int | None = None
    weight_and_optimizer: int | None = None  # Megatron's theoretical model
    activation: int | None = None
    parameters: int | None = None  # on this rank (exact), or Megatron's most loaded shard (to 10**5)
    tp_rank: int | None = None
    pp_rank: int | None = None
    percent: float | None = None  # the host's memory in use, DeepSpeed's "CPU Virtual Memory" line
    source: str = ""
    line: int = 0


def key(r: Reading) -> tuple:
    """Readings with the same key report the same thing again (a later iteration, another print)."""
    return (r.kind, r.rank, r.tp_rank, r.pp_rank, r.label if r.kind.startswith("megatron-") else "")


def says_more(new: Reading, held: Reading) -> bool:
    """Whether `new` replaces `held` (same key): Megatron's peaks only grow, so its last report; DeepSpeed and
    the summary tables reset or restart theirs, so the highest peak."""
    return new.kind == "megatron" or (new.max_allocated or 0) > (held.max_allocated or 0)


def _mb(text: str | None) -> int | None:
    return None if text is None else round(float(text) * MB)


def reading(text: str, before: str = "") -> Reading | None:
    """The report in a line, if any; `before` is the rank's previous line (DeepSpeed's message)."""
    if not ANY.search(text):
        return None
    m = REPORT.search(text)
    if m:
        rank, label, *values = m.groups()
        a, ma, r, mr, used = (_mb(v) for v in values)
        return Reading("megatron", label.strip(), int(rank) if rank else None, a, ma, r, mr, used)
    m = THEORETICAL.search(text)
    if m:
        return Reading("megatron-theoretical", "theoretical", weight_and_optimizer=_mb(m.group(1)),
                       activation=_mb(m.group(2)), max_allocated=_mb(m.group(3)))
    m = RANK_PARAMS.search(text)
    if m:
        return Reading("megatron-params", "parameters on this rank", tp_rank=int(m.group(1)),
                       pp_rank=int(m.group(2)), parameters=int(m.group(3)))
    m = SHARD_PARAMS.search(text)
    if m and m.group(1) == "most loaded shard":
        return Reading("megatron-params", "most loaded shard", parameters=round(float(m.group(2)) * 1e9))
    m = DEEPSPEED.search(text)
    if m:
        a, ma, c, mc = (round(float(v) * GB) for v in m.groups())
        return Reading("deepspeed", LOGGER.sub("", before.strip()) or "see_memory_usage", None, a, ma, c, mc)
    m = TRAINER.search(text)
    if m:
        return Reading("trainer", m.group(1), max_allocated=round(float(m.group(2)) * GB))
    m = HOST.search(text)
    if m:
        return Reading("host", "CPU virtual memory", device_used=round(float(m.group(1)) * GB),
                       percent=float(m.group(2)))
    return None
