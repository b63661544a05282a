"""Run the checks over files: load, find the DeepSpeed config, apply rules, filter, sort."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from guard import deepspeed_schema, resources, selection
from guard.diagnostic import Diagnostic, Severity
from guard.rules import load_all
from guard.rules.context import DsConfig
from guard.rules.general import NO_DEEPSPEED_KEYS, SYNTAX_ERROR, UNREADABLE
from guard.rules.registry import CHECKS, RULES
from guard.settings import Settings
from guard.sources.deepspeed import find_deepspeed
from guard.sources.document import Document, SourceError
from guard.sources.loader import load_document

CONFIG_SUFFIXES = (".json", ".hjson", ".yaml", ".yml")
SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist"}


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    unreadable: bool = False

    @property
    def exit_code(self) -> int:
        if self.unreadable:
            return 2
        return 1 if any(d.severity is Severity.ERROR for d in self.diagnostics) else 0


def expand(paths: list[str]) -> list[tuple[str, bool]]:
    """Files to check, each with whether the user named it (directories are walked)."""
    out: list[tuple[str, bool]] = []
    for path in paths:
        if os.path.isdir(path):
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                out.extend((os.path.join(folder, f), False) for f in sorted(files)
                           if f.lower().endswith(CONFIG_SUFFIXES))
        else:
            out.append((path, True))
    return out


class Checker:
    def __init__(self, settings: Settings):
        load_all()
        self.settings = settings
        self.select = selection.normalise(settings.select + settings.extend_select)
        self.ignore = selection.normalise(settings.ignore)
        self.version_text = settings.deepspeed_version or resources.deepspeed_versions()[-1]
        self.version = resources.version_tuple(self.version_text)
        self.schema = deepspeed_schema.load(resources.nearest_deepspeed_version(self.version))
        self.top_level_keys = set(self.schema.known_keys(()))  # once, not per file

    def run(self, paths: list[str]) -> CheckResult:
        result = CheckResult()
        for path, explicit in expand(paths):
            diags, unreadable = self.check_file(path, explicit)
            result.files += 1
            result.unreadable |= unreadable
            result.diagnostics.extend(diags)
        result.diagnostics.sort(key=Diagnostic.sort_key)
        return result

    def check_file(self, path: str, explicit: bool = True) -> tuple[list[Diagnostic], bool]:
        try:
            doc = load_document(path)
        except SourceError as err:
            rule = UNREADABLE if err.code == "GRD001" else SYNTAX_ERROR
            empty = Document(path, "", None, "json")
            ctx = DsConfig(empty, {}, self.schema)
            ctx.report_at(rule, err.span, None, err.message)
            return self._filter(ctx.diagnostics, {}), rule is UNREADABLE
        view = find_deepspeed(doc, self.top_level_keys)
        ctx = DsConfig(doc, view.data if view else {}, self.schema, kind=view.kind if view else "none",
                       version=self.version, version_text=self.version_text,
                       origin=view.origin if view else {})
        self._judge_context(ctx)
        if view is None:
            if not explicit:
                return [], False  # found by walking a folder and not a DeepSpeed file: not ours
            why = ("no DeepSpeed key found" if isinstance(doc.data, dict)
                   else "the top-level value is not an object")
            ctx.report_at(NO_DEEPSPEED_KEYS, ctx.span(), "", f"nothing to check: {why}")
            targets = {"document"}
        else:
            targets = {"document", "accelerate" if view.kind == "accelerate" else "deepspeed"}
        for registered in CHECKS:
            if registered.target in targets and any(self._wanted(r.code) for r in registered.rules):
                registered.fn(ctx)
        return self._filter(ctx.diagnostics, doc.comments), False

    def _judge_context(self, ctx: DsConfig) -> None:
        settings = self.settings
        ctx.world_size = settings.world_size
        ctx.world_size_source = "--world-size" if settings.world_size else ""
        if settings.context != "auto":
            ctx.context, ctx.context_reason = settings.context, f"--context {settings.context}"
        elif ctx.kind == "accelerate":
            ctx.context, ctx.context_reason = "hf", "an accelerate config"
        elif any(v == "auto" for _, v in ctx.walk()):
            ctx.context, ctx.context_reason = "hf", 'the config uses "auto", so it is read as an HF/accelerate config'
        else:
            ctx.context, ctx.context_reason = "deepspeed", "no \"auto\" values: judged as a plain DeepSpeed config"

    def _wanted(self, code: str) -> bool:
        return selection.is_selected(code, self.select, self.ignore)

    def _filter(self, diags: list[Diagnostic], comments: dict[int, str]) -> list[Diagnostic]:
        per_line, file_wide = selection.inline_suppressions(comments)
        out = []
        for diag in diags:
            ignored = self.settings.ignores_for(diag.path)
            if diag.code in RULES and not self._wanted(diag.code):
                continue
            if any(diag.code.startswith(c.upper()) for c in ignored):
                continue
            if selection.suppressed(diag.code, diag.line, per_line, file_wide):
                continue
            out.append(diag)
        return out
