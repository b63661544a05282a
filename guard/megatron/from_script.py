"""A launch script, a command-line file or an argv string read into the Megatron commands it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import Span
from guard.megatron import flag_table
from guard.megatron.argv import parse
from guard.megatron.ds_config import attach_deepspeed_config
from guard.megatron.command import EnvVar, MegatronCommand
from guard.settings import Settings
from guard.shell.interpreter import interpret
from guard.launchers.chain import Launch, find_launches
from guard.launchers.record import WorldReading
from guard.shell.located import LText
from guard.shell.model import Heredoc, Script
from guard.shell.redirections import PLACEHOLDER

# Flags only Megatron-DeepSpeed defines: their presence selects its flag table.
DEEPSPEED_MARKERS = {"--deepspeed", "--deepspeed_config", "--deepscale", "--zero-stage", "--num-key-value-heads",
                     "--no-pipeline-parallel", "--ds-sequence-parallel-size", "--deepspeed-activation-checkpointing",
                     "--zero-reduce-bucket-size", "--cpu-optimizer", "--ds_fused_adam"}
MAX_SCRIPT_BYTES = 5_000_000


@dataclass(frozen=True)
class ScriptFinding:
    kind: str  # "syntax", "placeholder", "source" (a file it sources), "no-command"
    path: str
    message: str
    span: Span = Span(1, 1)


@dataclass
class ScriptResult:
    commands: list[MegatronCommand] = field(default_factory=list)
    script: Script | None = None
    heredoc_configs: list[tuple[Heredoc, Any]] = field(default_factory=list)  # (heredoc, Document)
    findings: list[ScriptFinding] = field(default_factory=list)  # about the script itself (data; rules name them)




def choose_table(words: list[str], settings: Settings, program: str = "", script: str = "",
                 pythonpath: str | None = None) -> tuple[flag_table.FlagTable, list[str]]:
    """--megatron-version; else the checkout the job runs (--megatron-source, or found from the program's path
    or PYTHONPATH); else the newest vendored table of the flavour the flags show, or a vendored fork's when
    flags only that fork defines show it (guard/megatron/fork_by_flags.py). With the flags that decided a fork."""
    if settings.megatron_version:
        return flag_table.for_program(settings.megatron_version, program), []
    from guard.megatron.source_tables import table_from_source

    source = table_from_source(settings.megatron_source, program, script, pythonpath)
    if source is not None:
        return source, []
    names = {w.split("=")[0] for w in words}
    if names & DEEPSPEED_MARKERS:
        table = flag_table.for_program(flag_table.DEFAULT_MEGATRON_DEEPSPEED, program)
    else:
        table = _upstream(program)
    from guard.megatron.fork_by_flags import fork_for

    return fork_for(table, names, program) or (table, [])


def _upstream(program: str) -> flag_table.FlagTable:
    newest = flag_table.for_program(flag_table.DEFAULT_MEGATRON_LM, program)
    if newest.knows_program(program):
        return newest
    # an upstream program the newest release dropped (pretrain_bert.py): the newest release that has it
    upstream = [flag_table.load(ref) for ref in flag_table.available()]
    having = [t for t in upstream if t.source["repo"] == newest.source["repo"] and t.knows_program(program)]
    return flag_table.for_program(having[0].ref, program) if having else newest


# flags only a Megatron training program takes: one of them is enough
_MEGATRON_SHAPE = frozenset({"--num-layers", "--hidden-size", "--num-attention-heads", "--tensor-model-parallel-size",
                             "--pipeline-model-parallel-size", "--micro-batch-size", "--global-batch-size",
                             "--seq-length", "--ffn-hidden-size", "--num-experts"})


def _megatron_like(words: list[LText]) -> bool:
    """A flag only a Megatron training program takes, or two flags some vendored Megatron version defines: a helper
    run before the launch (`python load_ratios.py --split train ...`) shares a generic flag or so, never more."""
    tables = [flag_table.load(ref) for ref in flag_table.available()]
    names = {w.text.split("=")[0] for w in words if w.text.startswith("--")}
    if {name.replace("_", "-") for name in names} & _MEGATRON_SHAPE:  # epfLLM's forks spell them with underscores
        return True
    return sum(1 for name in names if any(t.get(name) for t in tables)) >= 2


# Fields of transformers' TrainingArguments (training_args.py) that no Megatron parser defines: a command
# that passes one runs an HF Trainer script, whose `--deepspeed` takes the config's path, not Megatron.
# HfArgumentParser also accepts the dashed spelling of each field.
_HF_TRAINER_FIELDS = ("output_dir", "per_device_train_batch_size", "per_device_eval_batch_size",
                      "num_train_epochs", "overwrite_output_dir", "model_name_or_path", "do_train")
_HF_TRAINER_FLAGS = frozenset("--" + f for name in _HF_TRAINER_FIELDS for f in (name, name.replace("_", "-")))


def hf_trainer_like(words: list[LText]) -> bool:
    return any(w.text.split("=")[0] in _HF_TRAINER_FLAGS for w in words)


def _bare_launch(script: Script) -> list[Launch]:
    """Commands that are Megatron argv without a launcher: `--num-layers 2 ...` or `pretrain_gpt.py ...`."""
    out = []
    for command in script.commands:
        words = command.words
        if words and words[0].text.startswith("--"):
            out.append(Launch(command, [], None, list(words), WorldReading(why="a bare Megatron command line (no "
                                                                               "launcher)")))
        elif words and words[0].text.endswith(".py"):
            out.append(Launch(command, [], words[0], list(words[1:]),
                              WorldReading(why="the script runs the program directly (no launcher)")))
    return out


def _unset(width: int) -> str:
    """A reference to a variable no script sets, `width` characters wide: `${____}`, or `$___` / `$__` (never `$_`,
    which bash sets)."""
    return "${" + "_" * (width - 3) + "}" if width >= 5 else "$" + "_" * (width - 1)


def _as_filled(path: str, text: str) -> Script:
    """The script as bash reads it; where a template placeholder (`<Specify path>`) breaks it (a syntax error, or
    redirections), the script read as if each were filled in with a value guard does not know (an unset variable of
    the same width, so every position holds), keeping what the first reading found about the placeholders: the
    template's real errors are still found, and nothing is judged from the placeholder's text."""
    script = interpret(path, text)
    filled = PLACEHOLDER.sub(lambda m: _unset(len(m.group(0))), text)
    if filled == text or not any(f.kind in ("syntax", "placeholder") for f in script.findings):
        return script
    again = interpret(path, filled)
    again.findings = [f for f in script.findings if f.kind in ("syntax", "placeholder")] + \
        [f for f in again.findings if f.kind not in ("syntax", "placeholder")]
    return again


# post-training frameworks whose jobs hold several models and an engine: named when a script runs them
POST_TRAINING_PROGRAMS = {"openrlhf": "OpenRLHF: DeepSpeed, Ray and vLLM", "verl": "verl: FSDP or Megatron with a "
                          "rollout engine", "dschat": "DeepSpeed-Chat", "deepspeed_chat": "DeepSpeed-Chat"}


def _post_training_program(launch: Launch) -> str:
    """The post-training framework a launch runs ('' when none): by its module, or DeepSpeed-Chat's step 3 by the
    actor and critic it names (its main.py has no telling name)."""
    program = launch.program.text if launch.program is not None else ""
    if program.split(".")[0] in POST_TRAINING_PROGRAMS:
        return POST_TRAINING_PROGRAMS[program.split(".")[0]]
    flags = {w.text.split("=")[0] for w in launch.args}
    return "DeepSpeed-Chat step 3" if {"--actor_model_name_or_path", "--critic_model_name_or_path"} <= flags else ""


def analyse(path: str, text: str, settings: Settings, explicit: bool = True) -> ScriptResult:
    result = ScriptResult()
    script = _as_filled(path, text)
    result.script = script
    for finding in script.findings:
        kind = finding.kind if finding.kind in ("syntax", "placeholder") else "source"
        result.findings.append(ScriptFinding(kind, finding.path, finding.message, finding.span))
    found = find_launches(script)
    trainer = [one for one in found if hf_trainer_like(one.args)]
    launches = [one for one in found if all(one is not t for t in trainer) and _megatron_like(one.args)]
    known_commands = {id(one.command) for one in found}
    if not launches:
        launches = [one for one in _bare_launch(script) if id(one.command) not in known_commands
                    and _megatron_like(one.args) and not hf_trainer_like(one.args)]
    if not launches and explicit:
        broken = next((f for f in script.findings if f.kind == "syntax" and f.path == path), None)
        held = [str(f.span.line) for f in script.findings if f.kind == "placeholder" and f.path == path]
        why = [f"bash stops at the syntax error on line {broken.span.line}"] if broken else []
        why += [f"the command{'s' if len(held) > 1 else ''} with a placeholder on line{'s' if len(held) > 1 else ''} "
                f"{', '.join(held)} {'are' if len(held) > 1 else 'is'} not judged"] if held else []
        message = "no command of this script starts a Megatron program: nothing was checked"
        rlhf = next(((one, named) for one in found if (named := _post_training_program(one))), None)
        if rlhf is not None:
            name = rlhf[0].program.text if rlhf[0].program is not None else "the program"
            message = (f"{name} ({rlhf[1]}) is not priced yet: its actor, reference, reward and critic models and "
                       "its generation engines are not read; nothing was checked")
        elif trainer:
            program = trainer[0].program.text if trainer[0].program is not None else "the program"
            message = (f"{program} takes transformers' TrainingArguments (an HF Trainer script, not Megatron): "
                       "nothing was checked; check the DeepSpeed config it names on its own")
        result.findings.append(ScriptFinding("no-command", path, message + (f" ({'; '.join(why)})" if why else "")))
    env = {name: EnvVar(value.text if value.resolved else None, span, where)
           for name, (value, span, where) in script.exports.items()}
    for launch in launches:
        result.commands.append(_command(path, script, launch, env, settings))
    return result


def _command(path: str, script: Script, launch: Launch, env: dict[str, EnvVar], settings: Settings) -> MegatronCommand:
    tokens = [w.token() for w in launch.args]
    # `$MEGATRON/pretrain_gpt.py`: the literal tail names the program even when the folder is unknown
    program = launch.program.text if launch.program is not None else ""
    pythonpath = launch.command.env.get("PYTHONPATH") or script.exports.get("PYTHONPATH", (None,))[0]
    # a `$PYTHONPATH` part that is not known statically is dropped
    table, fork_flags = choose_table([t.text for t in tokens], settings, program, path,
                                     pythonpath.text if pythonpath is not None else None)
    args = parse(tokens, table)
    job_env = dict(env)
    for name, value in launch.command.env.items():  # `VAR=1 torchrun ...` applies to that command only
        job_env[name] = EnvVar(value.text if value.resolved else None, value.span(), path)
    cmd = MegatronCommand(path=path, args=args, table=table, launcher=launch.kind if launch.layers else "",
                          env=job_env, program=program,
                          anchor=Span(launch.command.span.line, launch.command.span.col), launch=launch)
    if not launch.layers and launch.program is None:
        cmd.env = None  # a bare command line: the environment it runs in is not in the file
    cmd.fork_flags = fork_flags
    cmd.deepspeed_config_problem = attach_deepspeed_config(cmd, script) or ""
    return cmd


def command_from_argv(text: str, label: str, settings: Settings) -> MegatronCommand | None:
    """`--megatron-args "..."`: a command line alone; the environment is unknown."""
    script = interpret(label, text)
    words = [w for c in script.commands for w in c.words]
    if words and not words[0].text.startswith("-"):
        launches = find_launches(script)
        if launches:
            cmd = _command(label, script, launches[0], {}, settings)
            cmd.env = None
            return cmd
        program = words[0].text if words[0].text.endswith(".py") else ""
        words = words[1:] if program else words
    else:
        program = ""
    tokens = [w.token() for w in words]
    table, fork_flags = choose_table([t.text for t in tokens], settings, program)
    cmd = MegatronCommand(path=label, args=parse(tokens, table), table=table, env=None, program=program)
    cmd.fork_flags = fork_flags
    cmd.deepspeed_config_problem = attach_deepspeed_config(cmd, script) or ""
    return cmd
