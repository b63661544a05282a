"""Run the checks over files: load, find the DeepSpeed config, apply rules, filter, sort."""

from __future__ import annotations

import os

from guard import deepspeed_schema, deepspeed_target, selection
from guard.check_result import CheckResult
from guard.diagnostic import Diagnostic, Severity
from guard.inputs import CONFIG_SUFFIXES, expand, is_config
from guard.rules import load_all
from guard.rules.context import DsConfig
from guard.rules.general import NO_DEEPSPEED_KEYS, SYNTAX_ERROR, UNREADABLE
from guard.rules.registry import CHECKS, RULES
from guard.settings import Settings
from guard.sources.deepspeed import find_deepspeed
from guard.sources.document import Document, SourceError
from guard.sources.loader import load_document

ARGV_LABEL = "<--megatron-args>"


def shell_comments(text: str) -> dict[int, str]:
    """`# ...` comments by line, for inline suppressions in launch scripts."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        at = line.find("# guard:")
        if at >= 0:
            out[number] = line[at + 1:]
    return out


class Checker:
    def __init__(self, settings: Settings):
        load_all()
        self.settings = settings
        self.select = selection.normalise(settings.select + settings.extend_select)
        self.ignore = selection.normalise(settings.ignore)
        self.target = deepspeed_target.resolve(settings.deepspeed_version)  # flag, else installed, else newest
        self.version_text, self.version = self.target.version_text, self.target.version
        self.schema = deepspeed_schema.load(self.target.schema_version)
        self.top_level_keys = set(self.schema.known_keys(()))  # once, not per file
        self.jobs: list = []  # the TrainingJob of each Megatron command, handed to the result
        self.mds_configs: set[str] = set()  # config files (real paths) a Megatron-DeepSpeed script loads

    def run(self, paths: list[str], megatron_args: list[str] = ()) -> CheckResult:
        result = CheckResult(fail_on=Severity(self.settings.fail_on))
        self.skipped: list[tuple[str, str]] = []  # walked files read and found not to be ours, with why
        passed: list[tuple[str, str]] = []  # walked files not read at all
        # scripts first: a config file a Megatron-DeepSpeed script loads is then judged as one (its optimizer
        # section is never read), also when the walk reaches it on its own
        self.mds_configs = set()
        inputs = [(is_config(path), path, explicit) for path, explicit in expand(paths, passed)]
        for config, path, explicit in sorted(inputs, key=lambda item: item[0]):
            diags, unreadable = self.check_file(path, explicit, config)
            result.files += 1
            result.unreadable |= unreadable
            result.diagnostics.extend(diags)
        for text in megatron_args:
            result.files += 1
            self.argv_unreadable = False
            result.diagnostics.extend(self.check_argv(text))
            result.unreadable |= self.argv_unreadable
        result.diagnostics.sort(key=Diagnostic.sort_key)
        result.jobs, self.jobs = self.jobs, []
        result.files -= len(self.skipped)  # "N files" counts the files checked
        result.skipped = sorted(passed + self.skipped)
        return result

    def check_file(self, path: str, explicit: bool = True, config: bool | None = None) -> tuple[list[Diagnostic], bool]:
        """`config`: whether the file is a DeepSpeed config, when the caller has already sniffed it."""
        if not (is_config(path) if config is None else config):
            return self.check_script(path, explicit)
        try:
            doc = load_document(path)
        except SourceError as err:
            if not explicit and not path.lower().endswith(CONFIG_SUFFIXES):  # walked to for its content alone
                self.skipped.append((path, "looks like JSON or YAML but does not parse"))
                return [], False
            return self._unreadable(path, err)
        from guard.job.finetune_config import read as read_training_config

        training = read_training_config(doc)
        if training is not None:
            return self._check_training(training, self.settings.world_size)
        if not explicit and find_deepspeed(doc, self.top_level_keys) is None:
            self.skipped.append((path, "JSON/YAML without a DeepSpeed key"))
            return [], False
        framework = "megatron-deepspeed" if os.path.realpath(path) in self.mds_configs else None
        return self._filter(self._check_document(doc, explicit, framework=framework), doc.comments), False

    def _check_training(self, training, world: int | None, comments: dict[int, str] | None = None
                        ) -> tuple[list[Diagnostic], bool]:
        """A LLaMA-Factory / axolotl / TRL config: the pair rules, then the DeepSpeed file it names, judged as the
        HF Trainer hands it to DeepSpeed ("auto" filled from the training config); each file's findings filtered
        by its own suppression comments (`comments`: the script's, for values given on its command line). A
        DeepSpeed file that cannot be read or parsed leaves the job unjudged: exit 2."""
        from dataclasses import replace

        from guard.rules import finetune_context

        ctx = finetune_context.build(training, world, load_document)
        for registered in CHECKS:
            if registered.target == "finetune" and any(self._wanted(r.code) for r in registered.rules):
                registered.fn(ctx)
        found = ctx.diagnostics
        own = [d for d in found if d.path == training.path and training.doc.format != "argv"]
        diags = self._filter(own, training.doc.comments) + self._filter(
            [d for d in found if all(d is not o for o in own)], comments or {})
        if ctx.ds_doc is not None and ctx.ds_filled is not None:
            filled = replace(ctx.ds_doc, data=ctx.ds_filled)
            pinned_by_trainer = ctx.ds_doc.data.get("train_batch_size") == "auto"  # filled per launch (world)
            diags += self._filter(self._check_document(filled, explicit=True, framework="hf",
                                                       batch_filled=pinned_by_trainer), ctx.ds_doc.comments)
        elif ctx.ds_error is not None:
            return diags + self._unreadable(*ctx.ds_error)[0], True
        elif ctx.ds_doc is not None:  # parsed, but not an object
            err = SourceError("a DeepSpeed config must be an object")
            return diags + self._unreadable(ctx.ds_doc.path, err)[0], True
        return diags, False

    def _check_commands(self, commands, text: str) -> tuple[list[Diagnostic], bool]:
        """The fine-tuning commands of a script (guard.job.finetune_cli), each judged as a training config."""
        diags, unreadable = [], False
        for command in commands:
            if command.error is not None:
                diags, unreadable = diags + self._unreadable(*command.error)[0], True
                continue
            world = command.judged_world(self.settings.world_size, self.settings.force_world_size)
            found, bad = self._check_training(command.ft, world, shell_comments(text))
            diags, unreadable = diags + found, unreadable or bad
        return diags, unreadable

    def _unreadable(self, path: str, err: SourceError) -> tuple[list[Diagnostic], bool]:
        """GRD001 for a file that cannot be read (exit 2), GRD002 for one that cannot be parsed."""
        rule = UNREADABLE if err.code == "GRD001" else SYNTAX_ERROR
        return self._filter([rule.diagnostic(path, err.message, err.span)], {}), rule is UNREADABLE

    def _check_document(self, doc: Document, explicit: bool, world_size: bool = True,
                        framework: str | None = None, batch_filled: bool = False) -> list[Diagnostic]:
        """Every DeepSpeed rule over a loaded document (a config file, or a heredoc in a script); `framework`:
        the program that calls deepspeed.initialize when the caller knows it (else judged from the context)."""
        view = find_deepspeed(doc, self.top_level_keys)
        ctx = DsConfig(doc, view.data if view else {}, self.schema, kind=view.kind if view else "none",
                       version=self.version, version_text=self.version_text,
                       origin=view.origin if view else {})
        self._judge_context(ctx)
        if framework == "hf":  # named by a training config: the HF Trainer fills its "auto" values
            ctx.context, ctx.context_reason = "hf", "named by an HF fine-tuning config"
            ctx.batch_filled = batch_filled
        ctx.framework = framework or ("hf" if ctx.context == "hf" else "megatron-deepspeed"
                                      if self.settings.context == "megatron-deepspeed" else "deepspeed")
        if not world_size:  # a heredoc: its data-parallel size is the job's, not --world-size
            ctx.world_size, ctx.world_size_source = None, ""
        if view is None:
            if not explicit:
                return []  # found by walking a folder and not a DeepSpeed file: not ours
            why = ("no DeepSpeed key found" if isinstance(doc.data, dict)
                   else "the top-level value is not an object")
            ctx.report_at(NO_DEEPSPEED_KEYS, ctx.span(), "", f"nothing to check: {why}")
            targets = {"document"}
        else:
            targets = {"document", "accelerate" if view.kind == "accelerate" else "deepspeed"}
        for registered in CHECKS:
            if registered.target in targets and any(self._wanted(r.code) for r in registered.rules):
                registered.fn(ctx)
        return ctx.diagnostics

    # -- Megatron launch scripts, command-line files, --megatron-args -----------------------------
    def check_script(self, path: str, explicit: bool = True) -> tuple[list[Diagnostic], bool]:
        from guard.job.finetune_cli import finetune_commands
        from guard.megatron.from_script import analyse
        from guard.sources.loader import read_text

        try:
            text, _ = read_text(path)
        except SourceError as err:
            return self._unreadable(path, err)
        found = analyse(path, text, self.settings, explicit)
        training, found.jobs = finetune_commands(found, text)
        if training:  # read as fine-tuning jobs: not "no Megatron command"
            found.findings = [f for f in found.findings if f.kind != "no-command"]
        if not explicit and not found.jobs and not training:  # a walked script that launches no Megatron job
            broken = next((f for f in found.findings if f.kind == "syntax"), None)
            self.skipped.append((path, "launches no Megatron program" + (
                " before its bash syntax error" if broken else "")))
            return [], False
        from guard.rules.launch import SCRIPT_FINDINGS

        diags = [SCRIPT_FINDINGS[f.kind].diagnostic(f.path, f.message, f.span) for f in found.findings]
        for job in found.jobs:
            diags.extend(self._run_megatron(job))
            diags.extend(self._check_rendered(job))
            source = job.deepspeed_config
            if job.flavour == "megatron-deepspeed" and source and source.heredoc is None and source.rendered is None:
                self.mds_configs.add(os.path.realpath(source.label))  # a file beside the script
        loaded = [job.deepspeed_config.heredoc for job in found.jobs if job.deepspeed_config]  # MDS's configs
        for heredoc in found.script.heredocs if found.script else []:
            mds = any(heredoc is h for h in loaded)
            diags.extend(self._check_heredoc(heredoc, "megatron-deepspeed" if mds else None))
        tuned, unreadable = self._check_commands(training, text)
        return self._filter(diags, shell_comments(text)) + tuned, unreadable

    def check_argv(self, text: str) -> list[Diagnostic]:
        from guard.job.finetune_cli import read_script
        from guard.megatron.from_script import job_from_argv
        from guard.shell.interpreter import interpret

        tuned = read_script(interpret(ARGV_LABEL, text), text, load_document)  # `llamafactory-cli train x.yaml`
        if tuned:
            diags, self.argv_unreadable = self._check_commands(tuned, text)
            return diags
        job = job_from_argv(text, ARGV_LABEL, self.settings)
        return self._filter(self._run_megatron(job), {}) if job is not None else []

    def _run_megatron(self, cmd) -> list[Diagnostic]:
        from guard.job.from_megatron import read_megatron
        from guard.rules.megatron_context import MegatronCheck
        from guard.rules.unknown_program import soften

        check = MegatronCheck(cmd, read_megatron(cmd), self.settings.gpu, self.settings.gpu_memory)
        self.jobs.append(check.job)
        for registered in CHECKS:
            if registered.target == "megatron" and any(self._wanted(r.code) for r in registered.rules):
                registered.fn(check)
        return soften(cmd, check.diagnostics)

    def _check_heredoc(self, heredoc, framework: str | None = None) -> list[Diagnostic]:
        """A DeepSpeed config written by `cat <<EOF > ds_config.json`: lint it, located in the script."""
        from dataclasses import replace

        from guard.diagnostic import Span
        from guard.megatron.ds_config import heredoc_document, rendered_to_script

        if not heredoc.target.resolved or not is_config(heredoc.target.text):
            return []
        doc = heredoc_document(heredoc)
        if doc is None:
            return []
        out = []
        for diag in self._check_document(doc, explicit=False, world_size=False, framework=framework):
            start = rendered_to_script(heredoc.body, diag.span.line, diag.span.col)
            end = rendered_to_script(heredoc.body, *diag.span.stop)
            span = Span(start.line, start.col, end.line, end.col) if end.line == start.line and \
                end.col > start.col else Span(start.line, start.col)
            out.append(replace(diag, path=heredoc.path, span=span, related=[],
                               message=f"{diag.message} (in the DeepSpeed config written to "
                                       f"{heredoc.target.text})"))
        return out

    def _check_rendered(self, cmd) -> list[Diagnostic]:
        """A DeepSpeed config the script renders from a template: lint it, located in the template."""
        from dataclasses import replace

        from guard.diagnostic import Span
        from guard.sources.document import split as split_pointer

        source = cmd.deepspeed_config
        if source is None or source.rendered is None:
            return []
        out = []
        for diag in self._check_document(source.rendered, explicit=False, world_size=False,
                                         framework="megatron-deepspeed"):
            keys = split_pointer(diag.pointer or "")
            path, span = source.locate(*keys) if keys else (diag.path, Span(1, 1))
            out.append(replace(diag, path=path, span=Span(span.line, span.col), related=[],
                               message=f"{diag.message} (in {source.label})"))
        return out

    def _judge_context(self, ctx: DsConfig) -> None:
        settings = self.settings
        ctx.world_size = settings.world_size
        ctx.world_size_source = "--world-size" if settings.world_size else ""
        if settings.context == "megatron-deepspeed":  # its configs are plain DeepSpeed ones ("auto" unfilled)
            ctx.context, ctx.context_reason = "deepspeed", "--context megatron-deepspeed"
        elif settings.context != "auto":
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
