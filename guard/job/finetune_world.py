"""How many processes a fine-tuning command starts: its launcher, LLaMA-Factory's environment variables,
axolotl's and TRL's launcher arguments, or the accelerate config file it names."""

from __future__ import annotations

from dataclasses import dataclass

from guard.inputs import find_near
from guard.job.finetune_config import Where
from guard.job.origin import Origin
from guard.shell.launcher import Launch, launch_with
from guard.shell.located import LText
from guard.shell.model import Command
from guard.sources.document import SourceError

ENABLED = {"true", "y", "1"}  # LLaMA-Factory extras/misc.py is_env_enabled


@dataclass
class World:
    size: int | None = None
    origin: Origin | None = None
    why: str = ""  # how the size was found, or why it is not known

    @staticmethod
    def of_launch(launch: Launch | None, path: str) -> "World":
        if launch is None:
            return World(why="no launcher")
        if launch.world_size is None:
            return World(why=launch.why)
        where = launch.where.span() if launch.where is not None else launch.command.span
        return World(launch.world_size, Origin("launcher", launch.why, path, where.line, where.col), launch.why)


def _int(value: LText | None) -> int | None:
    if value is None or not value.resolved or not value.text.strip().isdigit():
        return None
    return int(value.text)


def llamafactory_world(command: Command, env: dict[str, LText]) -> World:
    """launcher.py: `train` runs torchrun --nnodes NNODES --nproc_per_node NPROC_PER_NODE when FORCE_TORCHRUN is
    set or more than one device is visible; NPROC_PER_NODE defaults to the device count (CUDA_VISIBLE_DEVICES
    when set) and NNODES to 1. Otherwise one process."""
    force = env.get("FORCE_TORCHRUN")
    forced = force is not None and force.resolved and force.text.lower() in ENABLED
    visible = env.get("CUDA_VISIBLE_DEVICES")
    devices = len([d for d in visible.text.split(",") if d.strip()]) if visible is not None and visible.resolved \
        else None
    nproc, nnodes = env.get("NPROC_PER_NODE"), env.get("NNODES")
    per_node = _int(nproc) if nproc is not None else devices
    nodes = _int(nnodes) if nnodes is not None else 1
    where = nproc or visible or nnodes
    if not forced and (devices == 1 or (devices is None and nproc is None)):
        if devices == 1:
            return _at(1, "llamafactory-cli train: one visible device, one process", visible, command)
        return World(why="llamafactory-cli train starts one process per visible GPU (NPROC_PER_NODE is not set)")
    if per_node is None or nodes is None:
        unknown = nproc if per_node is None else nnodes
        return World(why=f"llamafactory-cli train: {unknown.raw or unknown.text if unknown else 'the device count'} "
                         "is not known statically")
    why = f"llamafactory-cli train runs torchrun: NNODES {nodes} x NPROC_PER_NODE {per_node}"
    return _at(nodes * per_node, why, where, command)


def _at(size: int, why: str, word: LText | None, command: Command) -> World:
    span = word.span() if word is not None and word.first is not None else command.span
    return World(size, Origin("launcher", why, (word.path if word is not None else "") or command.path,
                              span.line, span.col), why)


def axolotl_world(command: Command, launcher, launcher_args: list[LText]) -> World:
    """cli/utils/train.py: `accelerate launch [ARGS] -m axolotl.cli.train`, `torchrun [ARGS] -m ...`, or one
    python process; ARGS are the words after `--`."""
    kind = str(launcher.value) if launcher is not None else "accelerate"
    if kind == "python":
        return _at(1, "axolotl train --launcher python: one process", None, command)
    name = command.words[0]
    launch = launch_with(command, "torchrun" if kind == "torchrun" else "accelerate", name, launcher_args)
    world = World.of_launch(launch, command.path)
    if world.size is None and kind == "accelerate":
        world.why = "axolotl train runs accelerate launch: the world comes from accelerate's default config " \
                    "(give `-- --num_processes N`)"
    return world


def trl_world(command: Command, launcher_args: list[LText]) -> World:
    launch = launch_with(command, "accelerate", command.words[0], launcher_args)
    world = World.of_launch(launch, command.path)
    if world.size is None:
        world.why = "trl runs accelerate launch: the world comes from accelerate's default config"
    return world


def accelerate_file(found, layer, load, words: list[LText] | None = None) -> None:
    """An accelerate config named with --config_file (or trl's --accelerate_config FILE): its num_processes is
    the world when no --num_processes is given, and its DeepSpeed plugin the DeepSpeed config when no
    --deepspeed is; accelerate's own options win over the file's."""
    from guard.job import from_accelerate
    from guard.shell.launcher_options import read_options
    from guard.sources.deepspeed import is_accelerate

    opts = dict(layer.options) if layer is not None else read_options("accelerate", words or [], 0)[0]
    named = opts.get("--config_file") or opts.get("--accelerate_config")
    if named is None or not named.resolved or found.ft is None:
        return
    path = find_near(named.text, found.command.path)
    if path is None:
        return  # a name accelerate or trl resolves itself (trl's zero3, ...): guard does not guess it
    try:
        doc = load(path)
    except SourceError as err:
        found.error = (path, err)
        return
    if not is_accelerate(doc):
        return
    size = from_accelerate.world_size(doc.data)
    if size and "--num_processes" not in opts:
        span = doc.span("/num_processes")
        found.world = World(size, Origin("key", "num_processes (accelerate)", path, span.line, span.col,
                                         "/num_processes"), f"num_processes {size} in {path}")
    plugin = doc.data.get("deepspeed_config")
    if isinstance(plugin, dict) and "deepspeed" not in found.ft.written:
        pointer = "/deepspeed_config/deepspeed_config_file" if plugin.get("deepspeed_config_file") \
            else "/deepspeed_config"
        where = Where(path, doc.span(pointer), doc.span(pointer, key=False), pointer)
        if plugin.get("deepspeed_config_file"):
            found.ft.put("deepspeed", str(plugin["deepspeed_config_file"]), where)
        else:
            config, _written = from_accelerate.deepspeed_config(doc.data, lambda f: load(f).data)
            found.ft.put("deepspeed", config, where)
