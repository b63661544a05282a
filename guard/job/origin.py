"""Where a value of the training job came from: a flag, a config key, the launcher, a setting, a default."""

from __future__ import annotations

from dataclasses import dataclass

from guard.sources.document import pointer_of

# The kinds of source, in the order a person would trust them.
KINDS = ("flag", "key", "launcher", "settings", "cli", "derived", "default", "assumed")


@dataclass(frozen=True)
class Origin:
    """One value's source; messages quote `describe()`, diagnostics locate with path/line/col/pointer."""

    kind: str  # one of KINDS
    label: str  # "--tensor-model-parallel-size", "zero_optimization.stage", "torchrun --nproc-per-node", ...
    path: str | None = None
    line: int = 1
    col: int = 1
    pointer: str | None = None  # the flag name or JSON pointer a diagnostic carries
    reason: str = ""  # for defaults and assumptions: why this value

    def describe(self) -> str:
        where = f" at {self.path}:{self.line}:{self.col}" if self.path and self.kind in ("flag", "key", "launcher") \
            else ""
        if self.kind in ("default", "assumed", "derived"):
            return f"{self.kind}: {self.label}" + (f" ({self.reason})" if self.reason else "") + where
        return self.label + where


def default(label: str, reason: str = "") -> Origin:
    return Origin("default", label, reason=reason)


def assumed(label: str, reason: str) -> Origin:
    return Origin("assumed", label, reason=reason)


def key_origin(label: str, locate, *path: str) -> Origin:
    """A config key's origin: located in its file when the config came with a locator."""
    dotted = ".".join(path)
    if locate is None:
        return Origin("key", dotted, label, pointer=pointer_of(path))
    where, span = locate(*path)
    return Origin("key", dotted, where, span.line, span.col, pointer_of(path))
