"""Text that remembers, character by character, where in which file it was written."""

from __future__ import annotations

from dataclasses import dataclass

from guard.diagnostic import Span
from guard.token import ArgToken

Pos = tuple[int, int]  # 1-based line, 1-based column (characters, not bytes)


@dataclass(frozen=True)
class LText:
    """A string plus the position of each character (None for characters made up by guard).

    `mask` marks, per character, whether it is known (None: all known). Text that came from an
    unresolved expansion keeps its raw spelling (`$TP`) and is marked unknown.
    """

    text: str
    pos: tuple[Pos | None, ...]
    path: str = ""
    resolved: bool = True
    raw: str = ""  # the script text that produced it, for messages about unresolved values
    mask: tuple[bool, ...] | None = None

    @staticmethod
    def at(text: str, line: int, col: int, path: str) -> "LText":
        """Literal text written on one line starting at (line, col)."""
        return LText(text, tuple((line, col + i) for i in range(len(text))), path)

    @staticmethod
    def unknown(raw: str, anchor: Pos | None, path: str) -> "LText":
        pos = (anchor,) * max(len(raw), 1)
        return LText(raw, pos, path, resolved=False, raw=raw, mask=(False,) * len(raw))

    @staticmethod
    def plain(text: str, anchor: Pos | None = None, path: str = "") -> "LText":
        return LText(text, (anchor,) * len(text), path)

    def _mask(self) -> tuple[bool, ...]:
        return self.mask if self.mask is not None else (self.resolved,) * len(self.text)

    def __add__(self, other: "LText") -> "LText":
        pos = self.pos[: len(self.text)] + other.pos[: len(other.text)]
        resolved = self.resolved and other.resolved
        mask = None if resolved else self._mask() + other._mask()
        return LText(self.text + other.text, pos or (self.first or other.first,),
                     self.path or other.path, resolved,
                     "" if resolved else (self.raw or self.text) + (other.raw or other.text), mask)

    @property
    def first(self) -> Pos | None:
        return next((p for p in self.pos if p is not None), None)

    def slice(self, start: int, stop: int) -> "LText":
        pos = self.pos[start:stop] or (self.pos[min(start, len(self.pos) - 1)] if self.pos else None,)
        if self.resolved:
            return LText(self.text[start:stop], pos, self.path)
        mask = self._mask()[start:stop]
        resolved = all(mask)
        return LText(self.text[start:stop], pos, self.path, resolved,
                     "" if resolved else self.text[start:stop], None if resolved else mask)

    def split(self) -> list["LText"]:
        """Word splitting on blanks (IFS default) of an unquoted expansion; unknown parts stay whole."""
        mask = self._mask()
        out, start = [], None
        for i, ch in enumerate(self.text + " "):
            blank = ch in " \t\n" and (i >= len(mask) or mask[i])
            if blank:
                if start is not None:
                    out.append(self.slice(start, i))
                    start = None
            elif start is None:
                start = i
        return out or ([] if self.resolved else [self])

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
