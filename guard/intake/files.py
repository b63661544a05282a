"""What `guard check` reads from one file: its subjects (each a job with its sources), the script's own findings
(syntax, placeholders, no command), and why a file is skipped or cannot be read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from guard.inputs import CONFIG_SUFFIXES, is_config
from guard.intake.deepspeed import config_subject, view_of
from guard.intake.finetune import finetune_subject
from guard.intake.request import Request
from guard.job.subject import Subject
from guard.settings import Settings
from guard.sources.document import SourceError
from guard.sources.loader import load_document, read_text

ARGV_LABEL = "<--megatron-args>"


@dataclass
class FileReading:
    path: str
    subjects: list[Subject] = field(default_factory=list)
    findings: list = field(default_factory=list)  # guard.megatron.from_script.ScriptFinding: about the script
    comments: dict[int, str] = field(default_factory=dict)  # the script's `# guard:` comments
    unreadable: tuple[str, SourceError] | None = None  # the file itself cannot be read or parsed
    errors: list[tuple[str, SourceError]] = field(default_factory=list)  # files its jobs need that cannot be read
    skipped: str = ""  # a walked file that is not ours: why
    loads: set[str] = field(default_factory=set)  # config files (real paths) its Megatron-DeepSpeed jobs load


def shell_comments(text: str) -> dict[int, str]:
    """`# guard: ...` comments by line, for inline suppressions in launch scripts."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        at = line.find("# guard:")
        if at >= 0:
            out[number] = line[at + 1:]
    return out


def read_file(path: str, settings: Settings, request: Request = Request(), *, explicit: bool = True,
              config: bool | None = None, loaded: frozenset[str] = frozenset()) -> FileReading:
    """`config`: whether it is a DeepSpeed or training config, when the caller sniffed it already; `loaded`: the
    config files a Megatron-DeepSpeed script read earlier loads (judged as that program's)."""
    if not (is_config(path) if config is None else config):
        return _script(path, settings, request, explicit)
    reading = FileReading(path)
    try:
        doc = load_document(path)
    except SourceError as err:
        if not explicit and not path.lower().endswith(CONFIG_SUFFIXES):  # walked to for its content alone
            reading.skipped = "looks like JSON or YAML but does not parse"
        else:
            reading.unreadable = (path, err)
        return reading
    from guard.job.finetune_config import read as read_training_config

    training = read_training_config(doc)
    if training is not None:
        subject = finetune_subject(training, settings, request, load=load_document)
        reading.errors += [subject.error] if subject.error else []
        reading.subjects.append(subject)
        return reading
    if not explicit and view_of(doc, settings) is None:
        reading.skipped = "JSON/YAML without a DeepSpeed key"
        return reading
    framework = "megatron-deepspeed" if os.path.realpath(path) in loaded else None
    reading.subjects.append(config_subject(doc, settings, request, explicit=explicit, framework=framework))
    return reading


def _script(path: str, settings: Settings, request: Request, explicit: bool) -> FileReading:
    # scripts and command lines alone load the shell and Megatron readers: a config's lint stays light
    from guard.intake.megatron import megatron_subject
    from guard.intake.trainer_commands import finetune_commands
    from guard.megatron.from_script import analyse

    reading = FileReading(path)
    try:
        text, _ = read_text(path)
    except SourceError as err:
        reading.unreadable = (path, err)
        return reading
    found = analyse(path, text, settings, explicit)
    training, found.commands = finetune_commands(found, text)
    if training:  # read as fine-tuning jobs: not "no Megatron command"
        found.findings = [f for f in found.findings if f.kind != "no-command"]
    if not explicit and not found.commands and not training:  # a walked script that launches no Megatron job
        broken = next((f for f in found.findings if f.kind == "syntax"), None)
        reading.skipped = "launches no Megatron program" + (" before its bash syntax error" if broken else "")
        return reading
    reading.findings, reading.comments = found.findings, shell_comments(text)
    for cmd in found.commands:
        reading.subjects.append(megatron_subject(cmd, settings, request, comments={path: reading.comments}))
        source = cmd.deepspeed_config
        if cmd.flavour == "megatron-deepspeed" and source and source.heredoc is None and source.rendered is None:
            reading.loads.add(os.path.realpath(source.label))  # a file beside the script
    loaded = [cmd.deepspeed_config.heredoc for cmd in found.commands if cmd.deepspeed_config]
    for heredoc in found.script.heredocs if found.script else []:
        subject = _heredoc(heredoc, settings, any(heredoc is h for h in loaded))
        if subject is not None:  # found and suppressed where the script writes it
            subject.comments = {path: reading.comments}
            reading.subjects.append(subject)
    _trainer_subjects(reading, training, settings, request)
    return reading


def read_argv(text: str, settings: Settings, request: Request = Request()) -> FileReading:
    """`--megatron-args "..."`: a Megatron command line, or a fine-tuning command (`llamafactory-cli train x.yaml`)."""
    from guard.intake.megatron import megatron_subject
    from guard.intake.trainer_commands import read_script
    from guard.megatron.from_script import command_from_argv
    from guard.shell.interpreter import interpret

    reading = FileReading(ARGV_LABEL)
    training = read_script(interpret(ARGV_LABEL, text), text, load_document)
    if training:
        _trainer_subjects(reading, training, settings, request)
        return reading
    cmd = command_from_argv(text, ARGV_LABEL, settings)
    if cmd is not None:
        reading.subjects.append(megatron_subject(cmd, settings, request, argv_text=text))
    return reading


def _trainer_subjects(reading: FileReading, training, settings: Settings, request: Request) -> None:
    for command in training:
        if command.error is not None:
            reading.errors.append(command.error)
            continue
        subject = finetune_subject(command.ft, settings, request, load=load_document, found=command)
        subject.comments[command.command.path] = reading.comments  # values written on its command line
        reading.errors += [subject.error] if subject.error else []
        reading.subjects.append(subject)


def _heredoc(heredoc, settings: Settings, mds: bool) -> Subject | None:
    """A DeepSpeed config written by `cat <<EOF > ds_config.json`: judged in place (its data-parallel size is its
    Megatron job's, so no --world-size), each finding placed in the script."""
    from guard.megatron.ds_config import heredoc_document

    if not heredoc.target.resolved or not is_config(heredoc.target.text):
        return None
    doc = heredoc_document(heredoc)
    if doc is None:
        return None
    return config_subject(doc, settings, explicit=False, framework="megatron-deepspeed" if mds else None,
                          world=False, relocate=_in_script(heredoc))


def _in_script(heredoc):
    from dataclasses import replace

    from guard.diagnostic import Span
    from guard.megatron.ds_config import rendered_to_script

    def relocate(diag):
        start = rendered_to_script(heredoc.body, diag.span.line, diag.span.col)
        end = rendered_to_script(heredoc.body, *diag.span.stop)
        span = Span(start.line, start.col, end.line, end.col) if end.line == start.line and end.col > start.col \
            else Span(start.line, start.col)
        return replace(diag, path=heredoc.path, span=span, related=[],
                       message=f"{diag.message} (in the DeepSpeed config written to {heredoc.target.text})")

    return relocate
