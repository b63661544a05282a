"""A parsed config file: plain data plus the position of every key and value, by JSON pointer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import FILE_START, Span


class SourceError(Exception):
    """A file that cannot be read or parsed; carries the location of the problem."""

    def __init__(self, message: str, span: Span = FILE_START, code: str = "GRD002"):
        super().__init__(message)
        self.message = message
        self.span = span
        self.code = code


@dataclass(frozen=True, slots=True)
class Location:
    key: Span | None  # where the member's key is written (None for the root and list items)
    value: Span


@dataclass(frozen=True, slots=True)
class Duplicate:
    pointer: str
    first: Span
    again: Span


@dataclass(frozen=True, slots=True)
class Leniency:
    """A syntax feature that DeepSpeed's hjson reader accepts but strict JSON readers refuse."""

    kind: str
    span: Span


@dataclass
class Document:
    path: str
    text: str
    data: Any
    format: str  # "json" or "yaml"
    locations: dict[str, Location] = field(default_factory=dict)
    duplicates: list[Duplicate] = field(default_factory=list)
    leniencies: list[Leniency] = field(default_factory=list)
    has_bom: bool = False
    # Comments by line, for inline suppressions (`# guard: ignore[CODE]`).
    comments: dict[int, str] = field(default_factory=dict)

    def span(self, pointer: str, *, key: bool = True) -> Span:
        """Where `pointer` is written; falls back to the nearest written ancestor."""
        probe = pointer
        while True:
            loc = self.locations.get(probe)
            if loc is not None:
                return (loc.key if key and loc.key else loc.value)
            if not probe:
                return FILE_START
            probe = probe.rsplit("/", 1)[0]

    def line_text(self, line: int) -> str:
        lines = split_lines(self.text)
        return lines[line - 1] if 0 < line <= len(lines) else ""


LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as JSON and YAML count them: str.splitlines would also break at U+2028, U+0085, ..."""
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # a final line break ends the last line; it does not start a new one
    return lines


def escape(token: str) -> str:
    """Escape one reference token of a JSON pointer (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer_of(path) -> str:
    """The JSON pointer of a key path ("" for the root)."""
    return "".join("/" + escape(str(token)) for token in path)


def join(pointer: str, token: str | int) -> str:
    return f"{pointer}/{escape(str(token))}"


def split(pointer: str) -> list[str]:
    if not pointer:
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
