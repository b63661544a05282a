"""`path:line:col: CODE message`, one line per diagnostic, then a count."""

from __future__ import annotations

from typing import TextIO

from guard.check_result import CheckResult


def summary(result: CheckResult) -> str:
    counts = {"error": 0, "warning": 0, "info": 0}
    for diag in result.diagnostics:
        counts[diag.severity.value] += 1
    files = f"{result.files} file{'s' if result.files != 1 else ''}"
    if not result.diagnostics:
        return f"All checks passed ({files})."
    parts = [f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items() if n]
    return f"Found {', '.join(parts)} in {files}."


def render(result: CheckResult, out: TextIO) -> None:
    for d in result.diagnostics:
        out.write(f"{d.path}:{d.line}:{d.col}: {d.code} [{d.severity.value}] {d.message}\n")
    out.write(summary(result) + "\n")
