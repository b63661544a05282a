"""One word of a command line as the program receives it, and where the user wrote it."""

from __future__ import annotations

from dataclasses import dataclass

from guard.diagnostic import Span


@dataclass(frozen=True)
class ArgToken:
    """One word of the command line as the program receives it, and where it was written."""

    text: str
    span: Span
    path: str = ""
    resolved: bool = True  # False when a shell value could not be known statically
    raw: str = ""  # as written in the script, before expansion ("$TP", "${GBS:-8}")

    def describe(self) -> str:
        return self.raw or self.text
