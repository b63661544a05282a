"""Text edits as data (a range and its replacement, ruff's Fix style), applied to the user's own text."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

Pos = tuple[int, int]  # 1-based line, 1-based column in characters (guard's Span)
# Line breaks as guard's JSON/YAML readers count them; the shell reader counts only "\n", which gives the same
# lines for "\n" and "\r\n" files (a lone "\r" line break in a launch script is the one case they differ).
LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Edit:
    """Replace path[start:end) (end exclusive) with `replacement`; start == end inserts."""

    path: str
    start: Pos
    end: Pos
    replacement: str


@dataclass(frozen=True)
class Refusal:
    """A change the writer would not make, and why (shown to the user; never raised)."""

    field: str  # the job field ("layout.tp", "micro_batch", ...) or the key/flag it concerns
    reason: str
    path: str | None = None
    line: int = 1
    col: int = 1

    def describe(self) -> str:
        where = f"{self.path}:{self.line}:{self.col}: " if self.path else ""
        return f"{where}{self.field}: {self.reason}"


class Rewrite(list):
    """The edits of one rewrite (a list of Edit), with the changes it refused and notes on what it left alone.

    `refused`: changes that were asked for and not written (the job read back differs there);
    `notes`: values left as written on purpose (an HF "auto" the Trainer fills in, for instance).
    """

    def __init__(self, edits=(), refused=(), notes=()):
        super().__init__(edits)
        self.refused: list[Refusal] = list(refused)
        self.notes: list[Refusal] = list(notes)

    @property
    def complete(self) -> bool:
        return not self.refused

    def extend_from(self, other: Rewrite) -> None:
        self.extend(other)
        self.refused.extend(other.refused)
        self.notes.extend(other.notes)

    def for_path(self, path: str) -> list[Edit]:
        return [e for e in self if e.path == path]


def change_of(field: str) -> str:
    """The change a job field belongs to: a layout or a batch is written whole or not at all."""
    if field.startswith("layout."):
        return "layout"
    return "batch" if field in ("micro_batch", "global_batch", "num_microbatches") else field


def whole_changes(items: list[tuple[str, Any]], refused: list[Refusal]) -> tuple[list[Any], list[Refusal]]:
    """The items (field, edit or words) of changes with no refused part; the fields dropped with a refused part
    are refused too, so that the job read back is the old one there (never half a layout, or --bf16 with --fp16)."""
    bad = {change_of(part) for r in refused for part in r.field.split(", ")}
    named = {part for r in refused for part in r.field.split(", ")}
    kept, dropped = [], []
    for name, item in items:
        parts = name.split(", ")
        if any(change_of(p) in bad for p in parts):
            dropped.extend(p for p in parts if p not in named and p not in dropped)
        else:
            kept.append(item)
    more = [Refusal(p, "not written: another part of the same change was refused") for p in dropped]
    return kept, more


def line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in LINE_BREAK.finditer(text)]


def offset(starts: list[int], text: str, pos: Pos) -> int:
    """The string index of (line, col); ValueError when the position is not in the text."""
    line, col = pos
    if not 1 <= line <= len(starts) or col < 1:
        raise ValueError(f"position {line}:{col} is outside the text")
    index = starts[line - 1] + col - 1
    end = starts[line] if line < len(starts) else len(text)
    if index > end:
        raise ValueError(f"position {line}:{col} is past the end of line {line}")
    return index


def text_at(text: str, start: Pos, end: Pos) -> str | None:
    """The text between two positions (None when they are not in the text)."""
    starts = line_starts(text)
    try:
        a, b = offset(starts, text, start), offset(starts, text, end)
    except ValueError:
        return None
    return text[a:b] if a <= b else None


def position(text: str, index: int) -> Pos:
    """The (line, col) of a string index."""
    starts = line_starts(text)
    line = max(i for i, s in enumerate(starts) if s <= index) + 1
    return line, index - starts[line - 1] + 1


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits of one file, from the end so earlier positions stay valid.

    Two insertions at the same place keep their order. ValueError when edits overlap or fall outside the text.
    """
    starts = line_starts(text)
    spans = []
    for order, edit in enumerate(edits):
        a, b = offset(starts, text, edit.start), offset(starts, text, edit.end)
        if b < a:
            raise ValueError(f"edit ends before it starts: {edit}")
        spans.append((a, b, order, edit.replacement))
    spans.sort()
    for (a1, b1, _, _), (a2, b2, _, _) in itertools.pairwise(spans):
        if a2 < b1 or (a2 == a1 and b1 > a1 and b2 > a2):
            raise ValueError(f"overlapping edits at string indexes {a1}-{b1} and {a2}-{b2}")
    for a, b, _, replacement in reversed(spans):
        text = text[:a] + replacement + text[b:]
    return text


@dataclass
class Texts:
    """The text of each file a rewrite touches: given by the caller, else read from disk once."""

    given: dict[str, str] = field(default_factory=dict)

    def get(self, path: str | None) -> str | None:
        if not path:
            return None
        if path not in self.given:
            try:
                from guard.sources.loader import read_text

                self.given[path] = read_text(path)[0]
            except Exception:  # noqa: BLE001 - an unreadable file only means "cannot edit it", said by the caller
                return None
        return self.given[path]
