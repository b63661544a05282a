"""Reading a launcher's options from the words after its name, the way its own argument parser would."""

from __future__ import annotations

from typing import Callable

from guard.launchers.record import Launcher
from guard.shell.located import LText

# torchrun, deepspeed and accelerate take the program as a module after -m / --module
MODULE_SWITCHES = ("-m", "--module")


def read_options(launcher: Launcher, words: list[LText], i: int,
                 is_launcher: Callable[[list[LText], int], bool] = lambda w, i: False) -> tuple[dict[str, LText], int]:
    """The options in words[i:] and the index of the first other word (`is_launcher`: whether a word starts
    another launcher, which ends an srun switch)."""
    opts: dict[str, LText] = {}
    spelling, kind = launcher.spelling, launcher.kind
    while i < len(words):
        word = words[i]
        text = word.text
        if not text.startswith("-") or text == "-" or not word.resolved:
            break
        if text == "--":
            return opts, i + 1
        name, eq, value = text.partition("=")
        name = spelling.aliases.get(name, name)
        if kind == "python" and name in ("-m", "-c"):  # the rest belongs to the module, or is code
            opts[name] = words[i + 1] if i + 1 < len(words) else LText("", ())
            return opts, (i + 2 if name == "-m" else len(words))
        if eq:
            opts[name] = word.slice(len(text) - len(value), len(text))
            i += 1
        elif name in spelling.no_value:
            opts[name] = LText("", word.pos[:1], word.path)
            i += 1
            if name in MODULE_SWITCHES and kind != "python":
                return opts, i  # the module name is the program
        elif name in spelling.two_values:
            opts[name] = words[i + 2] if i + 2 < len(words) else LText("", ())
            i += 3
        elif spelling.switches_before_program and name.startswith("--") and i + 1 < len(words) and \
                is_launcher(words, i + 1):
            opts[name] = LText("", word.pos[:1], word.path)  # an unknown switch before the program
            i += 1
        else:
            opts[name] = words[i + 1] if i + 1 < len(words) else LText("", ())
            i += 2
    return opts, i
