"""What the static reading of a launch script produces: variables, commands, heredocs, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from guard.diagnostic import Span
from guard.shell.located import LText

Value = Union[LText, list[LText]]


@dataclass
class Var:
    value: Value
    span: Span | None  # where it was assigned (None: from the environment or #SBATCH)
    exported: bool = False
    note: str = ""  # why the value is unknown, when it is


@dataclass
class Command:
    words: list[LText]
    env: dict[str, LText]
    span: Span
    path: str
    condition: str = ""  # the `if` test it sits under, when guard could not decide it


@dataclass
class Heredoc:
    target: LText  # the file it writes (cat > FILE << EOF)
    body: LText
    span: Span
    path: str


@dataclass
class Render:
    """`sed ... TMPL > OUT`, `cat TMPL | sed ... > OUT`, `envsubst < TMPL > OUT` or `sed -i ... FILE`:
    kept so that a reader of OUT (a DeepSpeed config) can render it from its template."""

    stages: list[tuple[list[LText], LText | None]]  # each command's words and its `< FILE`
    target: LText | None  # `> FILE`; None for `sed -i`, which rewrites the files it reads
    span: Span
    path: str
    heredocs_before: int  # heredocs written before it: orders renders and heredocs
    environment: dict[str, LText]  # exported variables (and the command's own VAR=x) when it ran
    condition: str = ""


@dataclass
class Finding:
    """Something about the script itself: a syntax error, an unresolved `source`, an assumption."""

    kind: str  # "syntax", "source", "unresolved"
    message: str
    span: Span
    path: str


@dataclass
class Script:
    path: str
    commands: list[Command] = field(default_factory=list)
    heredocs: list[Heredoc] = field(default_factory=list)
    renders: list[Render] = field(default_factory=list)
    variables: dict[str, Var] = field(default_factory=dict)
    exports: dict[str, tuple[LText, Span, str]] = field(default_factory=dict)  # name -> value, where, file
    sbatch: list[tuple[str, LText]] = field(default_factory=list)  # (option, value or "")
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


class Unknown(Exception):
    """A value that cannot be known without running the script."""
