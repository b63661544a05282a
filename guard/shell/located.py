"""Text that remembers, character by character, where in which file it was written."""

from __future__ import annotations

from dataclasses import dataclass

from guard.diagnostic import Span
from guard.megatron.argv import ArgToken

Pos = tuple[int, int]  # 1-based line, 1-based column (characters, not bytes)


@dataclass(frozen=True)
class LText:
    """A string plus the position of each character (None for characters made up by guard)."""

    text: str
    pos: tuple[Pos | None, ...]
    path: str = ""
    resolved: bool = True
    raw: str = ""  # the script text that produced it, for messages about unresolved values

    @staticmethod
    def at(text: str, line: int, col: int, path: str) -> "LText":
        """Literal text written on one line starting at (line, col)."""
        return LText(text, tuple((line, col + i) for i in range(len(text))), path)

    @staticmethod
    def unknown(raw: str, anchor: Pos | None, path: str) -> "LText":
        return LText(raw, (anchor,) * max(len(raw), 1) if raw else (anchor,), path, resolved=False, raw=raw)

    @staticmethod
    def plain(text: str, anchor: Pos | None = None, path: str = "") -> "LText":
        return LText(text, (anchor,) * len(text), path)

    def __add__(self, other: "LText") -> "LText":
        pos = self.pos[: len(self.text)] + other.pos[: len(other.text)]
        return LText(self.text + other.text, pos or (self.first or other.first,),
                     self.path or other.path, self.resolved and other.resolved,
                     (self.raw or self.text) + (other.raw or other.text)
                     if not (self.resolved and other.resolved) else "")

    @property
    def first(self) -> Pos | None:
        return next((p for p in self.pos if p is not None), None)

    def slice(self, start: int, stop: int) -> "LText":
        pos = self.pos[start:stop] or (self.pos[min(start, len(self.pos) - 1)] if self.pos else None,)
        return LText(self.text[start:stop], pos, self.path, self.resolved, self.raw)

    def split(self) -> list["LText"]:
        """Word splitting on blanks (IFS default) of an unquoted expansion."""
        if not self.resolved:
            return [self]
        out, start = [], None
        for i, ch in enumerate(self.text + " "):
            if ch in " \t\n":
                if start is not None:
                    out.append(self.slice(start, i))
                    start = None
            elif start is None:
                start = i
        return out

    def span(self) -> Span:
        located = [p for p in self.pos[: max(len(self.text), 1)] if p is not None]
        if not located:
            return Span(1, 1)
        first, last = located[0], located[-1]
        if last[0] != first[0] or last[1] < first[1]:
            return Span(first[0], first[1])
        return Span(first[0], first[1], last[0], last[1] + 1)

    def token(self) -> ArgToken:
        return ArgToken(self.text, self.span(), self.path, self.resolved, self.raw)
