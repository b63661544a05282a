"""`guard check` over files: each read by the one intake (guard/intake/files.py), each job judged in memory
(guard/judge.py), the findings sorted into one result."""

from __future__ import annotations

from guard.check_result import CheckResult
from guard.diagnostic import Diagnostic, Severity
from guard.inputs import expand, is_config
from guard.intake.files import FileReading, read_argv, read_file
from guard.intake.request import Request
from guard.judge import Judge
from guard.rules.general import SYNTAX_ERROR, UNREADABLE
from guard.settings import Settings
from guard.sources.document import SourceError


class Checker:
    def __init__(self, settings: Settings, request: Request = Request()):
        self.settings, self.request = settings, request
        self.judge = Judge(settings)

    def run(self, paths: list[str], megatron_args: list[str] = ()) -> CheckResult:
        result = CheckResult(fail_on=Severity(self.settings.fail_on))
        skipped: list[tuple[str, str]] = []  # files of walked folders, read or not, that are not ours, with why
        # scripts first: a config file a Megatron-DeepSpeed script loads is then judged as one (its optimizer
        # section is never read), also when the walk reaches it on its own
        loaded: set[str] = set()
        inputs = [(is_config(path), path, explicit) for path, explicit in expand(paths, skipped)]
        for config, path, explicit in sorted(inputs, key=lambda item: item[0]):
            reading = read_file(path, self.settings, self.request, explicit=explicit, config=config,
                                loaded=frozenset(loaded))
            loaded |= reading.loads
            self._add(result, reading, skipped)
        for text in megatron_args:
            self._add(result, read_argv(text, self.settings, self.request), skipped)
        result.diagnostics.sort(key=Diagnostic.sort_key)
        result.skipped = sorted(skipped)
        return result

    def _add(self, result: CheckResult, reading: FileReading, skipped: list) -> None:
        if reading.skipped:
            skipped.append((reading.path, reading.skipped))
            return
        result.files += 1
        if reading.unreadable is not None:
            diag, blocking = self._unreadable(*reading.unreadable)
            result.diagnostics += self.judge.filter([diag], {})
            result.unreadable |= blocking
            return
        from guard.rules.launch import SCRIPT_FINDINGS

        found = [SCRIPT_FINDINGS[f.kind].diagnostic(f.path, f.message, f.span) for f in reading.findings]
        result.diagnostics += self.judge.filter(found, {reading.path: reading.comments})
        for subject in reading.subjects:
            result.diagnostics += self.judge.judge(subject)
            result.subjects.append(subject)
        for path, err in reading.errors:  # a file a job needs: the job is not judged whole (exit 2)
            result.diagnostics += self.judge.filter([self._unreadable(path, err)[0]], {})
            result.unreadable = True

    def _unreadable(self, path: str, err: SourceError) -> tuple[Diagnostic, bool]:
        """GRD001 for a file that cannot be read (exit 2), GRD002 for one that cannot be parsed."""
        rule = UNREADABLE if err.code == "GRD001" else SYNTAX_ERROR
        return rule.diagnostic(path, err.message, err.span), rule is UNREADABLE
