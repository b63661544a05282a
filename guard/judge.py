"""Every rule over one subject, in memory: the same judgement for `guard check`, the planner's candidates, the
OOM diagnosis and the launch rewrite (no text is written, nothing global is touched)."""

from __future__ import annotations

from typing import Callable

from guard import deepspeed_schema, deepspeed_target, selection
from guard.diagnostic import Diagnostic, Severity
from guard.job.subject import Subject
from guard.job.training_job import TrainingJob
from guard.rules import DOCUMENT_FAMILIES, load_all
from guard.rules.context import DsConfig
from guard.rules.finetune_context import FineTuneCheck
from guard.rules.general import NO_DEEPSPEED_KEYS
from guard.rules.megatron_context import MegatronCheck
from guard.rules.registry import CHECKS, RULES
from guard.rules.unknown_program import soften
from guard.settings import Settings

BLOCKING = (Severity.ERROR, Severity.WARNING)  # what a changed job must not newly have


class Judge:
    def __init__(self, settings: Settings, memory: bool = True):
        """`memory` False leaves out the memory rules (MEM0xx): for a caller that prices the job itself (guard
        estimate, the planner's candidates), so a prediction is not made twice."""
        load_all()
        self.settings, self.memory = settings, memory
        self.select = selection.normalise(settings.select + settings.extend_select)
        self.ignore = selection.normalise(settings.ignore)
        self.target = deepspeed_target.resolve(settings.deepspeed_version)  # flag, else installed, else newest
        self.schema = deepspeed_schema.load(self.target.schema_version)

    def judge(self, subject: Subject) -> list[Diagnostic]:
        """The subject's findings, selected and filtered by the suppressions of the files they point at."""
        found: list[Diagnostic] = []
        if subject.kind == "megatron":
            check = MegatronCheck(subject, self.settings.gpu, self.settings.gpu_memory)
            self._run("megatron", check)
            found += soften(subject.command, check.diagnostics)
        elif subject.kind == "finetune":
            check = FineTuneCheck(subject, self.settings.gpu, self.settings.gpu_memory)
            self._run("finetune", check)
            found += check.diagnostics
        if subject.deepspeed is not None:
            found += self._deepspeed(subject)
        return self.filter(found, subject.comments)

    def verify(self, subject: Subject, baseline: list[Diagnostic] | None = None) -> Callable[[TrainingJob], list[str]]:
        """A function that judges `subject` with another job (a candidate of the planner, the launch rewrite) and
        names the errors and warnings it adds to `baseline` (the subject's own findings)."""
        baseline = self.judge(subject) if baseline is None else baseline
        before = {(d.code, d.pointer) for d in baseline if d.severity in BLOCKING}

        def verify(job: TrainingJob) -> list[str]:
            found = self.judge(subject.with_job(job))
            return [f"{d.code}: {d.message}" for d in found
                    if d.severity in BLOCKING and (d.code, d.pointer) not in before]

        return verify

    # -- one kind of document ---------------------------------------------------------------------------
    def _run(self, target: str, ctx) -> None:
        for registered in CHECKS:
            if registered.target == target and self._runs(registered):
                registered.fn(ctx)

    def _runs(self, registered) -> bool:
        return (self.memory or not registered.family.startswith("memory")) and \
            any(self.wanted(r.code) for r in registered.rules)

    def _deepspeed(self, subject: Subject) -> list[Diagnostic]:
        """The DeepSpeed rules over the subject's config: the document as written, the job read from it."""
        ds = subject.deepspeed
        ctx = DsConfig(ds.doc, ds.data, self.schema, kind=ds.kind, version=self.target.version,
                       version_text=self.target.version_text, origin=ds.origin, job=subject.job)
        self._context(ctx)
        if ds.framework == "hf":  # named by a training config: the HF Trainer fills its "auto" values
            ctx.context, ctx.context_reason = "hf", "named by an HF fine-tuning config"
            ctx.batch_filled = ds.batch_filled
        ctx.framework = ds.framework or ("hf" if ctx.context == "hf" else "megatron-deepspeed"
                                         if self.settings.context == "megatron-deepspeed" else "deepspeed")
        if ds.kind == "none":
            if not ds.explicit:
                return []  # found by walking a folder and not a DeepSpeed file: not ours
            why = "no DeepSpeed key found" if isinstance(ds.doc.data, dict) else "the top-level value is not an object"
            ctx.report_at(NO_DEEPSPEED_KEYS, ctx.span(), "", f"nothing to check: {why}")
            targets = {"document"}
        else:
            targets = {"document", "accelerate" if ds.kind == "accelerate" else "deepspeed"}
        for registered in CHECKS:
            if registered.target in targets and self._runs(registered):
                ctx.strict = registered.family not in DOCUMENT_FAMILIES
                registered.fn(ctx)
        ctx.strict = False
        return [ds.relocate(d) for d in ctx.diagnostics] if ds.relocate else ctx.diagnostics

    def _context(self, ctx: DsConfig) -> None:
        """Who fills "auto": the HF Trainer and accelerate do; plain DeepSpeed refuses it."""
        context = self.settings.context
        if context == "megatron-deepspeed":  # its configs are plain DeepSpeed ones ("auto" unfilled)
            ctx.context, ctx.context_reason = "deepspeed", "--context megatron-deepspeed"
        elif context != "auto":
            ctx.context, ctx.context_reason = context, f"--context {context}"
        elif ctx.kind == "accelerate":
            ctx.context, ctx.context_reason = "hf", "an accelerate config"
        elif any(v == "auto" for _, v in ctx.walk()):
            ctx.context, ctx.context_reason = "hf", 'the config uses "auto", so it is read as an HF/accelerate config'
        else:
            ctx.context, ctx.context_reason = "deepspeed", "no \"auto\" values: judged as a plain DeepSpeed config"

    # -- selection --------------------------------------------------------------------------------------
    def wanted(self, code: str) -> bool:
        return selection.is_selected(code, self.select, self.ignore)

    def filter(self, diags: list[Diagnostic], comments: dict[str, dict[int, str]]) -> list[Diagnostic]:
        """Selected codes, less per-file ignores and each file's own inline suppressions."""
        out = []
        for diag in diags:
            if diag.code in RULES and not self.wanted(diag.code):
                continue
            if any(diag.code.startswith(c.upper()) for c in self.settings.ignores_for(diag.path)):
                continue
            per_line, file_wide = selection.inline_suppressions(comments.get(diag.path, {}))
            if selection.suppressed(diag.code, diag.line, per_line, file_wide):
                continue
            out.append(diag)
        return out
