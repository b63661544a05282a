"""Strings a command hands to `bash -c` / `sh -c`: found in the command's words, parsed as scripts, positioned in the file."""

from __future__ import annotations

import bisect
import os

from guard.diagnostic import Span
from guard.shell.located import LText, Pos
from guard.shell.syntax import Source

SHELLS = {"bash", "sh", "dash"}  # shells whose `-c STRING` guard reads as a script

OPTIONS_WITH_VALUE = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}


def shell_string(words: list[LText]) -> tuple[int, LText] | None:
    """(index of the shell, the string) when the words run `[srun ...] bash [-l -x ...] -c STRING [name args]`
    (`-lc`, `-xec` too); None for any other command, `bash script.sh` included."""
    at = next((i for i, w in enumerate(words) if w.resolved and os.path.basename(w.text) in SHELLS), None)
    if at is None:
        return None
    j, string_option = at + 1, False
    while j < len(words) and words[j].resolved and words[j].text[:1] in "-+" and words[j].text not in ("-", "--"):
        option = words[j].text
        if option in OPTIONS_WITH_VALUE:
            j += 2
            continue
        # a cluster of one-letter options: `-c` anywhere in it makes the first operand the command string
        string_option |= not option.startswith("--") and "c" in option[1:]
        j += 1
    if j < len(words) and words[j].text == "--":
        j += 1
    return (at, words[j]) if string_option and j < len(words) else None


class EmbeddedSource(Source):
    """A `bash -c` string parsed as a script: each of its characters keeps the place in the file it came from
    (the string itself, or the assignment of a variable expanded into it)."""

    def __init__(self, value: LText, path: str):
        super().__init__(value.text, path)
        self.value = value
        # byte offset where each character starts: tree-sitter speaks bytes, LText characters
        self._starts = [i for i, byte in enumerate(self.data) if byte & 0xC0 != 0x80]
        self._mask = value.mask if value.mask is not None else (value.resolved,) * len(value.text)

    def _index(self, offset: int) -> int:
        return bisect.bisect_left(self._starts, offset)

    def _at(self, index: int) -> Pos:
        pos = self.value.pos
        for probe in range(min(index, len(pos) - 1), -1, -1):  # made-up characters borrow their left neighbour's
            if pos[probe] is not None:
                return pos[probe]
        return self.value.first or (1, 1)

    def _point(self, offset: int) -> Pos:
        index = self._index(offset)
        if index >= len(self.value.text) and index > 0:
            line, col = self._at(index - 1)
            return (line, col + 1)  # just past the last character
        return self._at(index)

    def span(self, node) -> Span:
        (line, col), (end_line, end_col) = self._point(node.start_byte), self._point(node.end_byte)
        if (end_line, end_col) <= (line, col):  # pieces written in different places: point at the start
            return Span(line, col)
        return Span(line, col, end_line, end_col)

    def literal_range(self, start: int, end: int) -> LText:
        first, last = self._index(start), self._index(end)
        text = self.value.text[first:last]
        pos = tuple(self._at(i) for i in range(first, last)) or (self._at(first),)
        mask = self._mask[first:last]
        if all(mask):
            return LText(text, pos, self.path)
        return LText(text, pos, self.path, resolved=False, raw=text, mask=tuple(mask))

    def prefix(self, chars: int) -> "EmbeddedSource":
        return EmbeddedSource(self.value.slice(0, chars), self.path)
