"""The rule registry: stable codes, kebab-case names, severities and one doc layout for all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from guard.diagnostic import FILE_START, Diagnostic, Related, Severity, Span


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str  # one line, shown by `guard rules`
    what: str  # What it does
    why: str  # Why is this bad?
    example: str  # a config fragment that triggers the rule
    use_instead: str  # the fixed fragment
    references: tuple[str, ...] = ()
    family: str = field(default="")

    def diagnostic(self, path: str, message: str, span: Span = FILE_START, pointer: str | None = None, *,
                   help: str | None = None, related: list[Related] | None = None,
                   data: dict[str, Any] | None = None) -> Diagnostic:
        """A finding of this rule, with its code, name and severity filled in."""
        return Diagnostic(code=self.code, severity=self.severity, message=message, path=path, span=span,
                          pointer=pointer, help=help, related=related or [], data=data or {}, name=self.name)

    def doc(self) -> str:
        """The rule's documentation, with the same headings for every rule."""
        parts = [
            f"# {self.code} {self.name} ({self.severity.value})",
            "",
            self.summary,
            "",
            "## What it does",
            self.what.strip(),
            "",
            "## Why is this bad?",
            self.why.strip(),
            "",
            "## Example",
            "```",
            self.example.strip("\n"),
            "```",
            "",
            "## Use instead",
            "```",
            self.use_instead.strip("\n"),
            "```",
        ]
        if self.references:
            parts += ["", "## References", *(f"- {ref}" for ref in self.references)]
        return "\n".join(parts) + "\n"


RULES: dict[str, Rule] = {}
_NAMES: dict[str, str] = {}


def rule(code: str, name: str, severity: str, summary: str, *, what: str, why: str,
         example: str, use_instead: str, references: Iterable[str] = ()) -> Rule:
    """Define and register a rule; codes and names are a public API and must stay unique."""
    if code in RULES or name in _NAMES:
        raise ValueError(f"rule {code} {name} registered twice")
    family = code.rstrip("0123456789")
    r = Rule(code, name, Severity(severity), summary, what, why, example, use_instead,
             tuple(references), family)
    RULES[code] = r
    _NAMES[name] = code
    return r


def lookup(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    return RULES.get(key.upper()) or RULES.get(_NAMES.get(key.lower(), ""))


Check = Callable[..., None]


@dataclass(frozen=True)
class RegisteredCheck:
    rules: tuple[Rule, ...]
    fn: Check
    target: str  # the context it reads: "document", "deepspeed", "accelerate", "megatron" or "finetune"
    family: str  # its module (guard/rules/<family>.py)


CHECKS: list[RegisteredCheck] = []


def check(*rules: Rule, target: str = "deepspeed") -> Callable[[Check], Check]:
    """Register a check that reports `rules` through its context's `report` method."""

    def wrap(fn: Check) -> Check:
        CHECKS.append(RegisteredCheck(rules, fn, target, fn.__module__.rsplit(".", 1)[-1]))
        return fn

    return wrap
