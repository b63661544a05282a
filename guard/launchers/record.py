"""One launcher as one record: how it is named and spells its options, how many ranks it starts, the variables
those ranks get, how guard's start-up hook reaches them, and how a new world size is written back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from guard.shell.located import LText
from guard.shell.model import Command


@dataclass(frozen=True)
class RankVariables:
    """The environment variables one family of launchers gives every rank it starts."""

    family: str  # how a message names it: "torch.distributed", "Open MPI", ...
    rank: str
    local_rank: str
    world: str
    local_world: str | None = None


@dataclass(frozen=True)
class Spelling:
    """How a launcher's options are written: every option takes one value (`--x y` or `--x=y`) unless listed."""

    no_value: frozenset[str] = frozenset()
    two_values: frozenset[str] = frozenset()
    aliases: Mapping[str, str] = field(default_factory=dict)
    switches_before_program: bool = False  # srun: an unknown `--switch` followed by the program takes no value


@dataclass(frozen=True)
class WorldWriting:
    """The options a new world size is written to: processes per node and nodes, or one process count."""

    per_node: str | None = None
    nodes: str | None = None
    total: str | None = None
    total_alone: str | None = None  # the count is the world only when this option is absent (--num_machines)
    blocked_by: tuple[str, ...] = ()  # options that decide the world instead (deepspeed --include, --hostfile)


@dataclass
class Layer:
    """One launcher of a chain (srun -> torchrun -> program) and the options given to it."""

    kind: str
    name: LText
    options: dict[str, LText] = field(default_factory=dict)  # canonical option -> value ("" for switches)

    def get(self, *names: str) -> LText | None:
        for name in names:
            for spelling in (name, name.replace("-", "_"), name.replace("_", "-")):
                if spelling in self.options:
                    return self.options[spelling]
        return None


@dataclass
class WorldReading:
    """How many ranks a launcher starts, as read from what it is given (None: not known statically)."""

    size: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    why: str = ""  # how the size was found, or why it is not known
    where: LText | None = None  # the word that decides it
    spawns: bool = True  # its own process starts the ranks (so it is not one): the hook skips its agents


@dataclass
class Scope:
    """What a launcher's world may depend on beyond its options: the command, its environment, #SBATCH lines."""

    command: Command
    env: Mapping[str, LText] = field(default_factory=dict)
    sbatch: list[tuple[str, LText]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.command.path

    def sbatch_value(self, *names: str) -> LText | None:
        for key, value in self.sbatch:
            if key in names:
                return value
        return None


@dataclass(frozen=True)
class Launcher:
    """A launcher kind: everything guard knows about it, in one place (guard/launchers/registry.py lists them)."""

    kind: str
    title: str  # how messages name it
    executables: tuple[str, ...] = ()  # the basenames that start it
    modules: tuple[str, ...] = ()  # `python -m` names that start it
    subcommand: str = ""  # `accelerate launch`: the word after the executable
    spelling: Spelling = field(default_factory=Spelling)
    read_world: Callable[[Layer, Scope], WorldReading] | None = None  # None: it does not decide the world
    ranks: tuple[RankVariables, ...] = ()  # the variables of the processes it starts; () for a plain process
    agents: tuple[str, ...] = ()  # entry points (scripts, modules) of its own Python processes, which are no rank
    writing: WorldWriting | None = None  # None: guard cannot write a new world into its options
    refusal: Callable[[Layer, Scope], str] | None = None  # why guard's hook cannot reach its ranks ("" if it can)
    carries: Callable[[Layer, list[str]], list[str]] | None = None  # launcher words that carry guard's variables
    plugin: str = "guard.plugins.megatron or guard.plugins.deepspeed.install() in the training script"
    environment: tuple[str, ...] = ()  # variables of the caller's environment it reads (its world, its devices)

    def names(self, word: str) -> bool:
        return word in self.executables


def number(value: LText | None) -> int | None:
    """A positive count written literally (None: absent, unresolved or not a number)."""
    if value is None or not value.resolved or not value.text.strip().isdigit():
        return None
    return int(value.text) or None
