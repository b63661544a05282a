"""GitHub Actions workflow commands (`::error file=...,line=...::message`)."""

from __future__ import annotations

from typing import TextIO

from guard.check_result import CheckResult

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render(result: CheckResult, out: TextIO) -> None:
    for d in result.diagnostics:
        end_line, end_col = d.span.stop
        title = _escape(f"{d.code} {d.name or ''}".strip(), True)
        props = (f"file={_escape(d.path, True)},line={d.line},col={d.col},endLine={end_line},"
                 f"endColumn={end_col},title={title}")
        out.write(f"::{_LEVEL[d.severity.value]} {props}::{_escape(d.code + ' ' + d.message)}\n")
