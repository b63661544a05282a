"""The job a launcher command line starts (`guard launch -- torchrun ... train.py ...`), with the launcher chain
guard's start-up hook has to reach; a launcher it cannot reach is refused before anything starts."""

from __future__ import annotations

import os
import shlex

from guard.errors import InputError
from guard.intake.deepspeed import config_subject
from guard.intake.read import checked, finish, load_config
from guard.intake.request import Request
from guard.job.subject import Subject
from guard.launchers import registry
from guard.launchers.record import Scope
from guard.settings import Settings

LABEL = "<guard launch>"
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepscale_config", "--deepspeed")


def read_launch(argv: list[str], request: Request, settings: Settings) -> Subject:
    """A Megatron command, a fine-tuning command (llamafactory-cli, axolotl, trl, an HF Trainer program), or a
    program given a DeepSpeed config whose model the request names."""
    from guard.intake.files import read_argv
    from guard.launchers.chain import find_launches
    from guard.shell.interpreter import interpret

    if not argv:
        raise InputError("give the launcher command after --, e.g. guard launch -- torchrun ... train.py")
    text = shlex.join(argv)
    # the variables of this environment the launchers read (LLaMA-Factory's NPROC_PER_NODE, ...), as the
    # command will see them: read as if written before it
    known = [f"{name}={shlex.quote(os.environ[name])}" for name in registry.environment() if name in os.environ]
    found = read_argv(" ".join([*known, text]), settings, request)
    if found.errors:
        path, err = found.errors[0]
        raise InputError(f"{path}:{err.span.line}:{err.span.col}: {err.message}")
    # a program that names its model in flags is Megatron's; `train.py --deepspeed_config ds.json` is not
    subject = next((s for s in found.subjects if s.kind == "finetune" or s.command.given("num_layers")
                    or s.command.given("hidden_size")), None)
    if subject is not None:
        subject = finish(checked(subject, request), settings)
    else:
        launches = find_launches(interpret(LABEL, text))
        if not launches:
            raise InputError(f"no launcher or Python program in: {text}")
        subject = _deepspeed_program(launches[0], request, settings)
    refuse_unreachable(subject)
    return subject


def _deepspeed_program(launch, request: Request, settings: Settings) -> Subject:
    config = config_path([a.text for a in launch.args])
    if config is None:
        raise InputError("the program is neither a Megatron command nor given a DeepSpeed config "
                         "(--deepspeed_config FILE / --deepspeed FILE): guard cannot read its job")
    subject = config_subject(load_config(config), settings, request, reading=launch.world)
    subject.launch = launch
    if subject.job.layout.world is None:
        raise InputError(f"the launcher does not say how many ranks it starts ({launch.why or 'unknown'}): "
                         "give --world-size N")
    return finish(subject, settings)


def refuse_unreachable(subject: Subject) -> None:
    """guard launch arms its hook through the environment of the processes the launchers start: a launcher
    that starts ranks elsewhere without it (pdsh, srun --export=NONE) cannot be checked from here."""
    launch = subject.launch
    if launch is None or (not launch.layers and launch.program is None):
        raise InputError(f"guard cannot arm its start-up hook in `{subject.path}`: start the training program "
                         "with a launcher guard knows (torchrun, deepspeed, accelerate, srun, mpirun, python)")
    scope = Scope(launch.command)
    for layer in launch.layers:
        record = registry.get(layer.kind)
        why = record.refusal(layer, scope) if record.refusal is not None else ""
        if why:
            raise InputError(f"guard launch cannot check this job: {why}; or use {record.plugin}")


def config_path(args: list[str]) -> str | None:
    """The DeepSpeed config a program is given (`--deepspeed ds.json`, `--deepspeed_config=ds.json`)."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in CONFIG_FLAGS:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value.endswith((".json", ".yaml", ".yml", ".hjson")):
                return value
    return None


def replace_config(argv: list[str], old: str, new: str) -> list[str]:
    """argv with the DeepSpeed config path `old` given as `new` (both spellings: separate and `=`)."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if eq and name in CONFIG_FLAGS and value == old:
            out.append(f"{name}={new}")
        else:
            out.append(new if arg == old else arg)
    return out
