"""The trainer command lines that start their own processes: `llamafactory-cli train`, `axolotl train`, `trl sft`.

Each runs a launcher for the user (torchrun, accelerate launch, or one Python process); its world is that
launcher's, read from the environment variables or the launcher words the trainer hands on.
"""

from __future__ import annotations

from guard.launchers.accelerate import ACCELERATE
from guard.launchers.options import read_options
from guard.launchers.record import Launcher, Layer, Scope, WorldReading, number
from guard.launchers.torchrun import TORCH, TORCHRUN
from guard.shell.located import LText

ENABLED = {"true", "y", "1"}  # LLaMA-Factory extras/misc.py is_env_enabled


def _at(size: int, why: str, word: LText | None, spawns: bool = True) -> WorldReading:
    return WorldReading(size, why=why, where=word if word is not None and word.first is not None else None,
                        spawns=spawns)


def llamafactory_world(layer: Layer, scope: Scope) -> WorldReading:
    """launcher.py: `train` runs torchrun --nnodes NNODES --nproc_per_node NPROC_PER_NODE when FORCE_TORCHRUN is
    set or more than one device is visible; NPROC_PER_NODE defaults to the device count (CUDA_VISIBLE_DEVICES
    when set) and NNODES to 1. Otherwise it trains in its own process."""
    env = scope.env
    force = env.get("FORCE_TORCHRUN")
    forced = force is not None and force.resolved and force.text.lower() in ENABLED
    visible = env.get("CUDA_VISIBLE_DEVICES")
    devices = len([d for d in visible.text.split(",") if d.strip()]) if visible is not None and visible.resolved \
        else None
    nproc, nnodes = env.get("NPROC_PER_NODE"), env.get("NNODES")
    per_node = number(nproc) if nproc is not None else devices
    nodes = number(nnodes) if nnodes is not None else 1
    if not forced and (devices == 1 or (devices is None and nproc is None)):
        if devices == 1:
            return _at(1, "llamafactory-cli train: one visible device, one process", visible, spawns=False)
        return WorldReading(why="llamafactory-cli train starts one process per visible GPU (NPROC_PER_NODE is not "
                                "set)")
    if per_node is None or nodes is None:
        unknown = nproc if per_node is None else nnodes
        what = unknown.raw or unknown.text if unknown else "the device count"
        return WorldReading(why=f"llamafactory-cli train: {what} is not known statically")
    why = f"llamafactory-cli train runs torchrun: NNODES {nodes} x NPROC_PER_NODE {per_node}"
    reading = _at(nodes * per_node, why, nproc or visible or nnodes)
    reading.gpus_per_node, reading.nodes = per_node, nodes
    return reading


def inner_world(scope: Scope, launcher: Launcher, name: LText, words: list[LText]) -> WorldReading:
    """The world of the launcher a trainer runs with the launcher words it hands on."""
    options, _ = read_options(launcher, words, 0)
    return launcher.read_world(Layer(launcher.kind, name, options), scope)


def axolotl_world(scope: Scope, chosen: str | None, words: list[LText]) -> tuple[Launcher | None, WorldReading]:
    """cli/utils/train.py: `accelerate launch [WORDS] -m axolotl.cli.train`, `torchrun [WORDS] -m ...`, or one
    python process (`--launcher python`); WORDS are those after `--`. Returns the launcher it runs too."""
    kind = chosen or "accelerate"
    name = scope.command.words[0]
    if kind == "python":
        return None, _at(1, "axolotl train --launcher python: one process", None)
    launcher = TORCHRUN if kind == "torchrun" else ACCELERATE
    reading = inner_world(scope, launcher, name, words)
    if reading.size is None and kind == "accelerate":
        reading.why = "axolotl train runs accelerate launch: the world comes from accelerate's default config " \
                      "(give `-- --num_processes N`)"
    return launcher, reading


def trl_world(scope: Scope, words: list[LText]) -> WorldReading:
    reading = inner_world(scope, ACCELERATE, scope.command.words[0], words)
    if reading.size is None:
        reading.why = "trl runs accelerate launch: the world comes from accelerate's default config"
    return reading


LLAMAFACTORY = Launcher("llamafactory-cli", "llamafactory-cli train", executables=("llamafactory-cli", "lmf"),
                        subcommand="train", read_world=llamafactory_world, ranks=(TORCH,),
                        agents=("llamafactory-cli", "lmf", *TORCHRUN.agents),
                        plugin="guard.plugins.hf.GuardCallback() in the Trainer",
                        environment=("FORCE_TORCHRUN", "NNODES", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES"))
AXOLOTL = Launcher("axolotl", "axolotl train", executables=("axolotl",), subcommand="train",
                   agents=("axolotl", "axolotl.cli.main"), plugin="guard.plugins.hf.GuardCallback() in the Trainer")
TRL = Launcher("trl", "trl", executables=("trl",), agents=("trl", "trl.cli"),
               plugin="guard.plugins.hf.GuardCallback() in the Trainer")
