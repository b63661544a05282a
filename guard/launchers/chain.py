"""The launcher chain of a command (srun -> torchrun -> program) and the world it starts, read with the records."""

from __future__ import annotations

import os
from dataclasses import dataclass

from guard.launchers import registry
from guard.launchers.options import MODULE_SWITCHES, read_options
from guard.launchers.record import Launcher, Layer, Scope, WorldReading, number
from guard.shell.located import LText
from guard.shell.model import Command, Script

SHELL_PROGRAMS = ("bash", "sh")


@dataclass
class Launch:
    """One command that starts a Python program, outermost launcher first."""

    command: Command
    layers: list[Layer]
    program: LText | None  # pretrain_gpt.py (or the module after -m)
    args: list[LText]  # what the program receives
    world: WorldReading

    # the world as read (guard/intake/world.py decides what the job runs with)
    @property
    def world_size(self) -> int | None:
        return self.world.size

    @property
    def gpus_per_node(self) -> int | None:
        return self.world.gpus_per_node

    @property
    def nodes(self) -> int | None:
        return self.world.nodes

    @property
    def why(self) -> str:
        return self.world.why

    @property
    def where(self) -> LText | None:
        return self.world.where

    @property
    def kind(self) -> str:
        outer = [layer.kind for layer in self.layers if layer.kind != "python"]
        return "+".join(outer) or "python"

    def layer(self, kind: str) -> Layer | None:
        return next((layer for layer in self.layers if layer.kind == kind), None)

    @property
    def records(self) -> list[Launcher]:
        return [registry.get(layer.kind) for layer in self.layers]

    @property
    def starter(self) -> Launcher:
        """The launcher whose processes are the ranks: the innermost that decides the world (else one Python)."""
        return next((r for r in reversed(self.records) if r.read_world is not None), registry.get("python"))


def _is_launcher(words: list[LText], i: int) -> bool:
    return registry.identify(words, i) is not None


def parse_launch(command: Command, sbatch: list | None = None, env=None) -> Launch | None:
    """The launcher chain of a command, or None when the command launches no Python program."""
    words = command.words
    layers: list[Layer] = []
    i = 0
    scope = Scope(command, env if env is not None else command.env, sbatch or [])
    while i < len(words):
        found = registry.identify(words, i)
        if found is None:
            break
        launcher, start = found
        opts, i = read_options(launcher, words, start, _is_launcher)
        name = words[start - 1]
        if launcher.kind == "python" and "-m" in opts:
            inner = registry.by_module(opts["-m"].text)
            if inner is not None:  # python -m torch.distributed.run ...
                layers.append(Layer("python", name, {k: v for k, v in opts.items() if k != "-m"}))
                sub, i = read_options(inner, words, i, _is_launcher)
                layers.append(Layer(inner.kind, opts["-m"], sub))
                continue
            layers.append(Layer("python", name, opts))
            return finish(Launch(command, layers, opts["-m"], words[i:], WorldReading()), scope)
        layers.append(Layer(launcher.kind, name, opts))
        if launcher.kind != "python" and any(s in opts for s in MODULE_SWITCHES):
            return finish(Launch(command, layers, words[i] if i < len(words) else None, words[i + 1:],
                                 WorldReading()), scope)
    if not layers or i >= len(words):
        return None
    program = words[i]
    if os.path.basename(program.text) in SHELL_PROGRAMS or program.text.endswith(".sh"):
        return None
    return finish(Launch(command, layers, program, words[i + 1:], WorldReading()), scope)


def finish(launch: Launch, scope: Scope) -> Launch:
    """The world from the innermost launcher that decides how many processes run; else one process."""
    for layer in reversed(launch.layers):
        launcher = registry.get(layer.kind)
        if launcher.read_world is not None:
            launch.world = launcher.read_world(layer, scope)
            break
    else:
        env_ws = launch.command.env.get("WORLD_SIZE")
        if number(env_ws):
            launch.world = WorldReading(number(env_ws), why="WORLD_SIZE set on the command", where=env_ws,
                                        spawns=False)
        else:
            launch.world = WorldReading(1, why="a single python process (no launcher)",
                                        where=launch.layers[0].name if launch.layers else None, spawns=False)
    if launch.world.gpus_per_node is None:
        launch.world.gpus_per_node = number(scope.sbatch_value("--gpus-per-node"))
    return launch


def launch_with(command: Command, launcher: Launcher, name: LText, words: list[LText], env=None) -> Launch:
    """A launcher a tool runs for the user (`axolotl train ... -- --num_processes 4`) with the words it is given."""
    opts, _ = read_options(launcher, words, 0)
    return finish(Launch(command, [Layer(launcher.kind, name, opts)], None, [], WorldReading()),
                  Scope(command, env if env is not None else command.env))


def find_launches(script: Script) -> list[Launch]:
    """Every command of the script that starts a Python program, outermost launcher first."""
    out = []
    for command in script.commands:
        launch = parse_launch(command, script.sbatch)
        if launch is not None:
            out.append(launch)
    return out
