"""Every launcher guard knows, one record each (guard/launchers/record.py): adding a launcher is a record here
and its tests."""

from __future__ import annotations

import os

from guard.launchers.accelerate import ACCELERATE
from guard.launchers.deepspeed import DEEPSPEED
from guard.launchers.mpi import MPIRUN
from guard.launchers.python import PYTHON, is_python
from guard.launchers.record import Launcher, RankVariables
from guard.launchers.slurm import SRUN
from guard.launchers.torchrun import LEGACY, TORCHRUN
from guard.launchers.trainers import AXOLOTL, LLAMAFACTORY, TRL
from guard.shell.located import LText

LAUNCHERS: tuple[Launcher, ...] = (TORCHRUN, LEGACY, DEEPSPEED, ACCELERATE, SRUN, MPIRUN, PYTHON, LLAMAFACTORY,
                                   AXOLOTL, TRL)
BY_KIND = {launcher.kind: launcher for launcher in LAUNCHERS}
# what a chain of launchers reads before the program (trainer CLIs are read by guard/intake/trainer_commands.py)
CHAINED = (TORCHRUN, DEEPSPEED, ACCELERATE, SRUN, MPIRUN)


def get(kind: str) -> Launcher:
    return BY_KIND[kind]


def by_module(module: str) -> Launcher | None:
    """The launcher `python -m MODULE` starts (torch.distributed.run is torchrun)."""
    return next((launcher for launcher in LAUNCHERS if module in launcher.modules), None)


def identify(words: list[LText], i: int) -> tuple[Launcher, int] | None:
    """The launcher words[i] starts and the index of its first option (after `accelerate launch`), or None."""
    name = os.path.basename(words[i].text)
    for launcher in CHAINED:
        if launcher.names(name):
            if launcher.subcommand:
                if i + 1 < len(words) and words[i + 1].text == launcher.subcommand:
                    return launcher, i + 2
                return None
            return launcher, i + 1
    return (PYTHON, i + 1) if is_python(name) else None


def rank_variables() -> tuple[RankVariables, ...]:
    """Every family of rank variables, each once."""
    out: list[RankVariables] = []
    for launcher in LAUNCHERS:
        out.extend(v for v in launcher.ranks if v not in out)
    return tuple(out)


def environment() -> tuple[str, ...]:
    """The variables of the caller's environment some launcher reads (guard launch reads them as it does)."""
    return tuple(sorted({name for launcher in LAUNCHERS for name in launcher.environment}))
