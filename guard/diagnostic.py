"""The one Diagnostic record that every checker, the launcher and the OOM diagnosis print through."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclass(frozen=True, slots=True)
class Span:
    """A 1-based, inclusive-start / exclusive-end region of a file (end defaults to start)."""

    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    @property
    def stop(self) -> tuple[int, int]:
        return (self.end_line or self.line, self.end_col or self.col + 1)


FILE_START = Span(1, 1)


@dataclass(frozen=True, slots=True)
class Related:
    """Another place that explains a diagnostic (the first of two duplicate keys, say)."""

    message: str
    path: str
    span: Span


@dataclass(slots=True)
class Diagnostic:
    code: str
    severity: Severity
    message: str
    path: str
    span: Span = FILE_START
    pointer: str | None = None  # JSON pointer for configs, a flag name for arguments
    help: str | None = None
    related: list[Related] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    name: str | None = None  # the rule's kebab-case name

    @property
    def line(self) -> int:
        return self.span.line

    @property
    def col(self) -> int:
        return self.span.col

    def sort_key(self) -> tuple:
        return (self.path, self.span.line, self.span.col, self.code)

    def to_json(self) -> dict[str, Any]:
        end_line, end_col = self.span.stop
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "path": self.path,
            "line": self.span.line,
            "col": self.span.col,
            "end_line": end_line,
            "end_col": end_col,
            "pointer": self.pointer,
            "message": self.message,
            "help": self.help,
            "related": [
                {"message": r.message, "path": r.path, "line": r.span.line, "col": r.span.col}
                for r in self.related
            ],
            "data": self.data,
        }
