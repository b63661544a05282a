"""The training job a launcher command carries, read with guard's readers (Megatron, or a DeepSpeed config)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from guard.job.from_inputs import InputError, JobInputs, JobSource, read_source
from guard.settings import Settings

LABEL = "<guard launch>"
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepscale_config", "--deepspeed")


@dataclass
class LaunchRequest:
    argv: list[str]  # the launcher command as given
    source: JobSource  # the job and what it was read from
    world: int
    config_path: str | None = None  # a DeepSpeed program's config (HF Trainer / deepspeed.initialize)

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


def read_launch(argv: list[str], inputs: JobInputs, settings: Settings) -> LaunchRequest:
    """The job in `argv`: a Megatron command, or a program given a DeepSpeed config (the model from `inputs`)."""
    from guard.megatron.from_script import analyse
    from guard.shell.launcher import find_launches

    if not argv:
        raise InputError("give the launcher command after --, e.g. guard launch -- torchrun ... train.py")
    text = shlex.join(argv)
    result = analyse(LABEL, text, settings, explicit=False)
    # a program that names its model in flags is Megatron's; `train.py --deepspeed_config ds.json` is not
    if any(job.given("num_layers") or job.given("hidden_size") for job in result.jobs):
        source = read_source(replace(inputs, megatron_args=text), settings)
        return LaunchRequest(list(argv), source, source.job.layout.world or 0)
    launches = find_launches(result.script) if result.script else []
    if not launches:
        raise InputError(f"no launcher or Python program in: {text}")
    launch = launches[0]
    config = _config_path([a.text for a in launch.args])
    if config is None:
        raise InputError("the program is neither a Megatron command nor given a DeepSpeed config "
                         "(--deepspeed_config FILE / --deepspeed FILE): guard cannot read its job")
    world = launch.world_size or settings.world_size
    if not world:
        raise InputError(f"the launcher does not say how many ranks it starts ({launch.why or 'unknown'}): "
                         "give --world-size N")
    ours = replace(settings, world_size=world, world_size_source="launcher", world_size_label=launch.kind)
    ours.gpus_per_node = settings.gpus_per_node or launch.gpus_per_node
    source = read_source(replace(inputs, deepspeed=config, paths=[]), ours)
    return LaunchRequest(list(argv), source, world, config)


def _config_path(args: list[str]) -> str | None:
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
