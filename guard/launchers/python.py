"""A plain Python process: `python train.py`, `python -m pkg`, or the script alone. One rank, no variables."""

from __future__ import annotations

import os

from guard.launchers.record import Launcher, Spelling

PYTHONS = frozenset({"python", "python3", "python3.8", "python3.9", "python3.10", "python3.11", "python3.12",
                     "python3.13", "python3.14"})
SPELLING = Spelling(no_value=frozenset({"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v",
                                        "-d", "-P"}))


def is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name in PYTHONS or name.startswith("python3")


# no read_world: a chain of only this layer is one process (guard/launchers/chain.py says so); the hook takes
# the first Python process of the job as rank 0 of 1
PYTHON = Launcher("python", "a single Python process", spelling=SPELLING)
