"""A launch script's text around a value: its variable, that variable's uses, #SBATCH lines, word removal."""

from __future__ import annotations

import re

from guard.job.edits import Edit, line_starts
from guard.sources.document import split_lines

ASSIGNMENT = re.compile(r"(?:(?<=^)|(?<=[\s;&|(]))([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
# around a value that is the whole of an assignment: NAME=V, NAME="V", NAME=${NAME:-V}, NAME="${NAME:=V}"
AROUND_BEFORE = r"[\"']?(?:\$\{{{name}:?[-=][\"']?)?"
AROUND_AFTER = re.compile(r"[\"']?\}?[\"']?(?=[\s;)&|#]|$)")


def sbatch_line(text: str, line: int) -> bool:
    lines = split_lines(text)
    return 0 < line <= len(lines) and lines[line - 1].lstrip().startswith("#SBATCH")


def assigned_variable(text: str, line_no: int, col: int, stop: int) -> str | None:
    """NAME when the value is the whole right-hand side of `NAME=...` on its line (plain, quoted or a default)."""
    line = split_lines(text)[line_no - 1]
    index, stop = col - 1, stop - 1
    matches = [m for m in ASSIGNMENT.finditer(line) if m.end() <= index]
    if not matches or matches[-1].group(2):  # none, or `NAME+=`: an append is not one value
        return None
    name = matches[-1].group(1)
    before = line[matches[-1].end():index]
    if not re.fullmatch(AROUND_BEFORE.format(name=re.escape(name)), before) or \
            not AROUND_AFTER.match(line[stop:]):
        return None
    return name


def _code_lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(split_lines(text), 1) if not line.lstrip().startswith("#")]


def assignment_lines(text: str, variable: str) -> list[int]:
    pattern = re.compile(r"(?:(?<=^)|(?<=[\s;&|(]))" + re.escape(variable) + r"\+?=")
    return [n for n, line in _code_lines(text) if pattern.search(line)]


def reference_lines(text: str, variable: str, assigned_at: int) -> list[int]:
    """Lines that read the variable ($V, ${V...}, or V inside $((...))), one entry per reference; its own
    assignment line is not a use (`TP=${TP:-2}` reads TP only to default it)."""
    word = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(variable) + r"(?![A-Za-z0-9_])")
    out = []
    for n, line in _code_lines(text):
        if n == assigned_at:
            continue
        out.extend(n for m in word.finditer(line) if not line[m.end():].startswith(("=", "+=")))
    return out


def listed(lines: list[int]) -> str:
    return ", ".join(str(n) for n in lines) or "none"


def removal(text: str, path: str, line: int, col: int, end_col: int) -> Edit:
    """The edit deleting line[col:end_col) with the blanks beside it, or its whole line when nothing else is on it."""
    lines = split_lines(text)
    body = lines[line - 1]
    before, after = body[:col - 1], body[end_col - 1:]
    rest = (before + after).strip()
    if rest not in ("", "\\"):
        if before.strip():  # words before it: take the blanks before it
            return Edit(path, (line, len(before.rstrip(" \t")) + 1), (line, end_col), "")
        return Edit(path, (line, col), (line, end_col + len(after) - len(after.lstrip(" \t"))), "")
    previous = lines[line - 2] if line > 1 else ""
    if rest == "" and previous.rstrip().endswith("\\"):
        # the command's last line: the line before it must stop continuing into the next command
        cut = len(previous.rstrip()[:-1].rstrip())
        return Edit(path, (line - 1, cut + 1), (line, len(body) + 1), "")
    if line < len(line_starts(text)):
        return Edit(path, (line, 1), (line + 1, 1), "")
    return Edit(path, (line, 1), (line, len(body) + 1), "")
