"""JSON and the hjson subset DeepSpeed accepts, parsed with the position of every key and value.

Python's json module gives no positions and keeps the last of two duplicate keys silently,
so guard parses configs itself. Strict JSON is the baseline (transformers, accelerate and
Megatron-DeepSpeed read configs with `json.load`); the extensions DeepSpeed's hjson reader
also takes (comments, trailing commas, unquoted keys, single quotes, newline-separated
members) are accepted and recorded as leniencies so a rule can warn about them.
"""

from __future__ import annotations

import bisect
import json.decoder
import re
from typing import Any

from guard.diagnostic import Span
from guard.sources.document import LINE_BREAK, Document, Duplicate, Leniency, Location, SourceError, join

MAX_DEPTH = 200  # deeper nesting is never a real config; refusing it keeps the parser safe
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_BAREWORD = re.compile(r"[A-Za-z_$][\w$\-.]*")
_WS = " \t\r\n"
_LITERALS = {"true": True, "false": False, "null": None}
_NONFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Parser:
    def __init__(self, text: str, path: str):
        self.s = text
        self.path = path
        self.i = 0
        self.line_starts = [0] + [m.end() for m in LINE_BREAK.finditer(text)]
        self.locations: dict[str, Location] = {}
        self.duplicates: list[Duplicate] = []
        self.leniencies: list[Leniency] = []
        self.comments: dict[int, str] = {}

    # -- positions -------------------------------------------------------------------------
    def pos(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def span(self, start: int, end: int) -> Span:
        (l1, c1), (l2, c2) = self.pos(start), self.pos(max(end, start + 1))
        return Span(l1, c1, l2, c2)

    def fail(self, message: str, offset: int | None = None) -> SourceError:
        offset = self.i if offset is None else offset
        return SourceError(message, self.span(offset, offset + 1))

    def lenient(self, kind: str, start: int, end: int) -> None:
        self.leniencies.append(Leniency(kind, self.span(start, end)))

    # -- whitespace and comments -------------------------------------------------------------
    def skip(self) -> bool:
        """Skip whitespace and comments; report whether a newline was crossed."""
        s, n, newline = self.s, len(self.s), False
        while self.i < n:
            c = s[self.i]
            if c in _WS:
                newline |= c in "\r\n"
                self.i += 1
            elif c == "#" or s.startswith("//", self.i):
                found = LINE_BREAK.search(s, self.i)
                end = found.start() if found else n
                self.comments[self.pos(self.i)[0]] = s[self.i:end]
                self.lenient("comment", self.i, end)
                self.i = end
            elif s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                if end < 0:
                    raise self.fail("unterminated /* comment")
                self.comments[self.pos(self.i)[0]] = s[self.i:end + 2]
                self.lenient("comment", self.i, end + 2)
                newline |= bool(LINE_BREAK.search(s, self.i, end))
                self.i = end + 2
            else:
                break
        return newline

    # -- values ------------------------------------------------------------------------------
    def value(self, pointer: str, key: Span | None, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels")
        self.skip()
        if self.i >= len(self.s):
            raise self.fail("unexpected end of file: a value is missing")
        start, c = self.i, self.s[self.i]
        if c == "{":
            result: Any = self.obj(pointer, depth)
        elif c == "[":
            result = self.arr(pointer, depth)
        elif c == '"' or c == "'":
            result = self.string()
        else:
            result = self.scalar()
        self.locations[pointer] = Location(key, self.span(start, self.i))
        return result

    def string(self) -> str:
        quote, start = self.s[self.i], self.i
        if quote == "'":
            end = self.s.find("'", self.i + 1)
            if end < 0 or "\n" in self.s[self.i:end]:
                raise self.fail("unterminated string")
            self.lenient("single-quoted string", start, end + 1)
            self.i = end + 1
            return self.s[start + 1:end]
        try:
            text, self.i = json.decoder.scanstring(self.s, self.i + 1, True)
        except json.JSONDecodeError as err:
            raise self.fail(err.msg, err.pos) from None
        return text

    def scalar(self) -> Any:
        m = _NUMBER.match(self.s, self.i)
        if m and not _BAREWORD.match(self.s, m.end()):
            self.i = m.end()
            text = m.group()
            if len(text) > 400:  # Python refuses to convert 4300+ digits; no setting is that long
                raise self.fail(f"number with {len(text)} characters is too long to be a setting", m.start())
            return float(text) if (m.group(1) or m.group(2)) else int(text)
        for word, val in {**_LITERALS, **_NONFINITE}.items():
            if self.s.startswith(word, self.i) and not _BAREWORD.match(self.s, self.i + len(word)):
                if word in _NONFINITE:
                    self.lenient("non-finite number", self.i, self.i + len(word))
                self.i += len(word)
                return val
        word = re.match(r"\$?\{?[A-Za-z_][\w]*\}?", self.s[self.i:self.i + 80])
        if word and (word.group().startswith("$") or word.group().isupper()):
            raise self.fail(f"expected a JSON value, found {word.group()!r}: this looks like a "
                            "template placeholder; check the rendered config instead")
        bad = self.s[self.i:self.i + 20].split("\n")[0]
        raise self.fail(f"expected a JSON value, found {bad!r}")

    def key(self) -> tuple[str, int]:
        start = self.i
        if self.s[self.i] in "\"'":
            return self.string(), start
        m = _BAREWORD.match(self.s, self.i)
        if not m:
            raise self.fail(f"expected a quoted key, found {self.s[self.i]!r}")
        self.lenient("unquoted key", start, m.end())
        self.i = m.end()
        return m.group(), start

    def members(self, close: str, item) -> None:
        """Parse comma-separated members up to `close`, noting hjson-only separators."""
        self.i += 1
        first = True
        while True:
            self.skip()
            if self.i >= len(self.s):
                raise self.fail(f"unexpected end of file: missing {close!r}")
            if self.s[self.i] == close:
                self.i += 1
                return
            if not first:
                raise self.fail(f"expected ',' or {close!r}")
            item()
            newline = self.skip()
            if self.i < len(self.s) and self.s[self.i] == ",":
                comma = self.i
                self.i += 1
                self.skip()
                if self.i < len(self.s) and self.s[self.i] == close:
                    self.lenient("trailing comma", comma, comma + 1)
            elif newline and self.i < len(self.s) and self.s[self.i] != close:
                self.lenient("missing comma", self.i, self.i + 1)
            else:
                first = False

    def obj(self, pointer: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: dict[str, Span] = {}

        def member() -> None:
            name, start = self.key()
            key_span = self.span(start, self.i)
            self.skip()
            if self.i >= len(self.s) or self.s[self.i] != ":":
                raise self.fail(f"expected ':' after key {name!r}")
            self.i += 1
            child = join(pointer, name)
            if name in seen:
                self.duplicates.append(Duplicate(child, seen[name], key_span))
            seen[name] = key_span
            out[name] = self.value(child, key_span, depth + 1)

        self.members("}", member)
        return out

    def arr(self, pointer: str, depth: int) -> list[Any]:
        out: list[Any] = []
        self.members("]", lambda: out.append(self.value(join(pointer, len(out)), None, depth + 1)))
        return out


def parse_json(text: str, path: str) -> Document:
    """Parse `text`; raise SourceError with the location of the first syntax error."""
    p = _Parser(text, path)
    data = p.value("", None, 0)
    p.skip()
    if p.i < len(text):
        raise p.fail("extra data after the top-level value")
    return Document(path, text, data, "json", p.locations, p.duplicates, p.leniencies,
                    comments=p.comments)
