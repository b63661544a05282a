"""What `guard check` found: the diagnostics, how many files, and the exit code they add up to under --fail-on."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.diagnostic import Diagnostic, Severity


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    unreadable: bool = False
    subjects: list = field(default_factory=list)  # every job judged (guard.job.subject.Subject), in order
    fail_on: Severity = Severity.WARNING  # findings of this severity or worse make the exit code 1
    # files of walked folders that were not checked: (path, why); a file named on the command line never is
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.unreadable:
            return 2
        return 1 if any(d.severity.rank >= self.fail_on.rank for d in self.diagnostics) else 0
