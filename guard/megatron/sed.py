"""What `sed` writes for the s/// scripts launch scripts render templates with, character by character located."""

from __future__ import annotations

import re
from dataclasses import dataclass

from guard.shell.located import LText, Pos

POSIX_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
                 "space": r" \t\n\r\f\v", "blank": r" \t", "xdigit": "0-9A-Fa-f",
                 "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")}
BRACKET = re.compile(r"\[(\^?)(\]?(?:\[:\w+:\]|[^\]])*)\]")  # [^]a-z[:digit:]]
DIGITS = "0123456789"
SED_FLAGS_IGNORED = {"-s", "-u", "--posix", "--separate", "--unbuffered", "--sandbox", "--follow-symlinks"}


class RenderError(Exception):
    """A render guard cannot reproduce; the message (one line) says why."""


@dataclass
class SedCall:
    scripts: list[LText]
    files: list[LText]
    in_place: bool
    extended: bool  # -E / -r: extended regular expressions


def parse_sed(words: list[LText]) -> SedCall:
    """The scripts, files and options of `sed ...` (GNU option syntax)."""
    call, operands, i = SedCall([], [], False, False), [], 1
    while i < len(words):
        word, text = words[i], words[i].text
        if text == "--":
            operands.extend(words[i + 1:])
            break
        name, eq, _ = text.partition("=")
        if text.startswith("--") and name in ("--expression", "--in-place", "--regexp-extended"):
            call.in_place |= name == "--in-place"
            call.extended |= name == "--regexp-extended"
            if name == "--expression":
                i += 0 if eq else 1
                call.scripts.append(word.slice(len(name) + 1, len(text)) if eq else _operand(words, i))
        elif text in SED_FLAGS_IGNORED:
            pass
        elif text.startswith("-") and len(text) > 1 and not text.startswith("--"):
            for j, letter in enumerate(text[1:], 1):
                if letter in "Er":
                    call.extended = True
                elif letter == "i":
                    call.in_place = True
                    break  # the rest of the word is a backup suffix (`-i.bak`)
                elif letter == "e":
                    call.scripts.append(word.slice(j + 1, len(text)) if j + 1 < len(text) else _operand(words, i + 1))
                    i += 0 if j + 1 < len(text) else 1
                    break
                elif letter not in "su":
                    raise RenderError(f"sed option -{letter} is not supported")
        elif text.startswith("-") and len(text) > 1:
            raise RenderError(f"sed option {name} is not supported")
        else:
            operands.append(word)
        i += 1
    if not call.scripts:  # without -e, the first operand is the script (wherever the options are)
        if not operands:
            raise RenderError("sed without a script")
        call.scripts.append(operands.pop(0))
    call.files = operands
    return call


def _operand(words: list[LText], i: int) -> LText:
    if i >= len(words):
        raise RenderError("sed -e without an expression")
    return words[i]


def sed_output(words: list[LText], text: LText) -> LText:
    """What `sed SCRIPT...` writes when it reads `text`."""
    call = parse_sed(words)
    return _by_line(text, [sub for script in call.scripts for sub in _substitutions(script, call.extended)])


@dataclass
class _Sub:
    regex: re.Pattern
    replacement: list  # int (a group, 0 = the match) or (char, known)
    nth: int
    every: bool  # the g flag

    def apply(self, line: LText) -> LText:
        pieces, last, count = [], 0, 0
        previous_end = -1
        for match in self.regex.finditer(line.text):
            if match.start() == match.end() == previous_end:
                continue  # sed (unlike Python) finds no empty match right where a match ended
            previous_end = match.end()
            count += 1
            if count < self.nth:
                continue
            if not all(mask_of(line)[match.start():match.end()]):
                raise RenderError(f"sed pattern {self.regex.pattern!r} matches text whose value is unknown")
            anchor = line.pos[min(match.start(), len(line.pos) - 1)] if line.pos else None
            pieces += [line.slice(last, match.start()), self._expand(match, line, anchor)]
            last = match.end()
            if not self.every:
                break
        return concat(pieces + [line.slice(last, len(line.text))], line.path) if pieces else line

    def _expand(self, match: re.Match, line: LText, anchor: Pos | None) -> LText:
        # groups keep where their characters were written; new text sits where the match was
        parts = []
        for part in self.replacement:
            if isinstance(part, int):
                start, end = match.span(part) if match.group(part) is not None else (0, 0)
                parts.append(line.slice(start, end))
            else:
                char, known = part
                parts.append(LText(char, (anchor,), line.path, known, "" if known else char,
                                   None if known else (False,)))
        return concat(parts, line.path)


def _substitutions(script: LText, extended: bool) -> list[_Sub]:
    text, mask, i, out = script.text, mask_of(script), 0, []
    while i < len(text):
        if text[i] in " \t\n;":
            i += 1
            continue
        delim = text[i + 1] if i + 1 < len(text) else ""
        if not all(mask[i:i + 2]):
            raise RenderError(f"the sed script {text!r} depends on a value guard cannot know")
        if text[i] != "s" or not delim or delim.isalnum() or delim in "\\\n":
            raise RenderError(f"sed command {text[i:i + 30]!r} is not supported: guard applies s/PATTERN/TEXT/ only")
        pattern, i = _pattern(text, mask, i + 2, delim)
        replacement, i = _replacement(text, mask, i, delim)
        nth, every, icase = 1, False, False
        while i < len(text) and text[i] not in ";\n":
            letter = text[i]
            if letter in DIGITS:
                digits = re.match(r"[0-9]+", text[i:]).group()
                nth, i = int(digits), i + len(digits) - 1
            elif letter in "gIi ":
                every, icase = every or letter == "g", icase or letter in "Ii"
            else:
                raise RenderError(f"sed flag {letter!r} in {text!r} is not supported")
            i += 1
        try:
            regex = re.compile(_python_regex(pattern, extended), re.IGNORECASE if icase else 0)
        except re.error as err:
            raise RenderError(f"sed pattern {pattern!r} is not understood ({err})") from None
        if max([p for p in replacement if isinstance(p, int)], default=0) > regex.groups:
            raise RenderError(f"sed expression {text!r} refers to a group its pattern does not have")
        out.append(_Sub(regex, replacement, nth, every))
    return out


def _pattern(text: str, mask: tuple[bool, ...], i: int, delim: str) -> tuple[str, int]:
    out = []
    while i < len(text) and text[i] != delim:
        if not mask[i]:
            raise RenderError(f"the sed pattern in {text!r} depends on a value guard cannot know")
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
            out.append(("[" + delim + "]" if delim not in "]^" else "\\" + delim) if text[i] == delim
                       else "\\" + text[i])
        else:
            out.append(text[i])
        i += 1
    if i >= len(text):
        raise RenderError(f"unterminated sed expression {text!r}")
    return "".join(out), i + 1


def _replacement(text: str, mask: tuple[bool, ...], i: int, delim: str) -> tuple[list, int]:
    out: list = []
    escapes = {"n": "\n", "t": "\t"}
    while i < len(text) and (text[i] != delim or not mask[i]):  # unknown text is never syntax
        char = text[i]
        if not mask[i] or char not in "\\&":
            out.append((char, mask[i]))
        elif char == "&":
            out.append(0)
        elif i + 1 < len(text):
            i += 1
            escaped = text[i]
            if escaped in DIGITS:
                out.append(int(escaped))
            elif escaped in "LUluE":
                raise RenderError(f"sed case conversion \\{escaped} in {text!r} is not supported")
            else:
                out.append((escapes.get(escaped, escaped), True))
        i += 1
    if i >= len(text):
        raise RenderError(f"unterminated sed expression {text!r}: a value may hold the delimiter {delim!r}")
    return out, i + 1


def _python_regex(pattern: str, extended: bool) -> str:
    """A POSIX basic (or, with -E, extended) regular expression as Python's re spells it."""
    out: list[tuple[str, str]] = []  # (Python text, kind: atom, quant, open or anchor: what may follow it)
    i = 0
    while i < len(pattern):
        char, escaped = pattern[i], pattern[i] == "\\" and i + 1 < len(pattern)
        char = pattern[i + 1] if escaped else char
        i += 2 if escaped else 1
        operator = (char == "*" and not escaped) or (char in "+?{()|" and escaped != extended)
        follows = out[-1][1] if out else "open"
        if char == "[" and not escaped:
            match = BRACKET.match(pattern, i - 1)
            if not match:
                raise RenderError(f"unterminated [ in sed pattern {pattern!r}")
            out.append((_bracket(match.group(1), match.group(2)), "atom"))
            i = match.end()
        elif operator and char == "|":
            # POSIX takes the longest alternative, Python the first: guard does not guess
            raise RenderError(f"alternation in sed pattern {pattern!r} is not supported")
        elif operator and char == "*" and follows in ("open", "anchor") and not extended:
            out.append((r"\*", "atom"))  # a leading * is literal in a BRE
        elif operator and char in "*+?{":
            if follows != "atom":
                raise RenderError(f"sed pattern {pattern!r} repeats nothing or repeats a repetition")
            interval = re.match(r"(\d*)(,\d*)?" + (r"\}" if extended else r"\\\}"), pattern[i:]) \
                if char == "{" else None
            if char == "{" and (not interval or interval.group() in ("}", "\\}")):
                raise RenderError(f"invalid repetition {{...}} in sed pattern {pattern!r}")
            out.append(("{" + interval.group(1) + (interval.group(2) or "") + "}" if interval else char, "quant"))
            i += interval.end() if interval else 0
        elif operator:
            out.append((char, "open" if char == "(" else "atom"))
        elif char == "^" and not escaped and (extended or follows == "open"):
            out.append(("^", "anchor"))
        elif char == "$" and not escaped and (extended or i == len(pattern) or pattern.startswith(("\\)", "\\|"), i)):
            out.append(("$", "atom"))
        elif escaped and (char in DIGITS or char in "wWsSbBnt"):
            out.append(("\\" + char, "atom"))
        else:
            anchors = {"<": r"\b", ">": r"\b", "`": r"\A", "'": r"\Z"} if escaped else {".": "."}
            out.append((anchors.get(char, re.escape(char)), "atom"))
    return "".join(text for text, _ in out)


def _bracket(negate: str, body: str) -> str:
    """A POSIX bracket expression for Python: backslash and [ are plain in POSIX; classes are spelled out."""
    for char in "\\[&~|":  # & ~ | escaped too: Python warns of set operations on && ~~ ||
        body = body.replace(char, "\\" + char)
    body = re.sub(r"\\\[:(\w+):\]", lambda m: POSIX_CLASSES.get(m.group(1), ""), body)
    return "[" + negate + body + "]"


def _by_line(text: LText, subs: list[_Sub]) -> LText:
    pieces, start = [], 0
    while start < len(text.text):
        end = text.text.find("\n", start)
        end = len(text.text) if end < 0 else end
        line = text.slice(start, end)
        for sub in subs:
            line = sub.apply(line)
        pieces += [line, text.slice(end, min(end + 1, len(text.text)))]
        start = end + 1
    return concat(pieces, text.path)


# -- located text -------------------------------------------------------------------------------------
def mask_of(text: LText) -> tuple[bool, ...]:
    return text.mask if text.mask is not None else (text.resolved,) * len(text.text)


def concat(pieces: list[LText], path: str) -> LText:
    """Join located texts in one pass (LText + copies both sides each time)."""
    text = "".join(p.text for p in pieces)
    pos = tuple(x for p in pieces for x in p.pos[:len(p.text)])
    mask = tuple(known for p in pieces for known in mask_of(p))
    resolved = all(mask)
    return LText(text, pos, path, resolved, "" if resolved else text, None if resolved else mask)


def located(text: str, path: str) -> LText:
    """A file's text with the (line, column) of each character."""
    pos, line, col = [], 1, 1
    for ch in text:
        pos.append((line, col))
        line, col = (line + 1, 1) if ch == "\n" else (line, col + 1)
    return LText(text, tuple(pos), path)


def unknown_offsets(text: LText) -> list[int]:
    return [i for i, known in enumerate(mask_of(text)) if not known]
