"""A Megatron / Megatron-DeepSpeed command read into its subject: the world decided, the job read once."""

from __future__ import annotations

from guard.intake.model import given_model
from guard.intake.request import Request
from guard.intake.world import decide
from guard.job.architecture import Architecture
from guard.job.from_megatron import read_megatron
from guard.job.subject import DeepSpeedDoc, Subject
from guard.job.world import World
from guard.launchers.record import WorldReading
from guard.megatron.command import MegatronCommand
from guard.settings import Settings


def command_world(cmd: MegatronCommand, settings: Settings):
    """A bare command line expects no launcher; a script's command without one starts a single process only if
    its program runs directly, which the world reading of its launch says."""
    launch = cmd.launch
    if launch is None:
        reading = None
    elif not launch.layers:
        reading = WorldReading(why="no launcher in the script")
    else:
        reading = launch.world
    return decide(reading, settings, cmd.path, (cmd.anchor.line, cmd.anchor.col))


def megatron_subject(cmd: MegatronCommand, settings: Settings, request: Request = Request(),
                     arch: Architecture | None = None, argv_text: str | None = None,
                     comments: dict[str, dict[int, str]] | None = None, world: World | None = None) -> Subject:
    """`world`: decided elsewhere (the printed arguments of a log, a rank's own variables)."""
    arch = arch or given_model(request)
    job = read_megatron(cmd, world or command_world(cmd, settings), arch, request.vocab_size)
    return Subject(job, "megatron", cmd.path, command=cmd, argv_text=argv_text, deepspeed=rendered_config(cmd),
                   launch=cmd.launch, comments=comments or {})


def rendered_config(cmd: MegatronCommand) -> DeepSpeedDoc | None:
    """The DeepSpeed config a Megatron-DeepSpeed script writes (heredoc) or renders from a template: judged with
    the command, each finding placed where the text is written (a file beside the script is judged as a file)."""
    source = cmd.deepspeed_config
    if source is None:
        return None
    if source.rendered is not None:
        return DeepSpeedDoc(source.rendered, source.rendered.data if isinstance(source.rendered.data, dict) else {},
                            framework="megatron-deepspeed", explicit=False, relocate=_in_template(source))
    return None


def _in_template(source):
    """A finding on the rendered text, placed at its key in the template (the rendering moved every column)."""
    from dataclasses import replace

    from guard.diagnostic import Span
    from guard.sources.document import split as split_pointer

    def relocate(diag):
        keys = split_pointer(diag.pointer or "")
        path, span = source.locate(*keys) if keys else (diag.path, Span(1, 1))
        return replace(diag, path=path, span=Span(span.line, span.col), related=[],
                       message=f"{diag.message} (in {source.label})")

    return relocate
