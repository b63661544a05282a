"""The arguments Megatron prints at start-up, read back into the command line that gave them, and into its
subject: a full job description when the user hands guard diagnose nothing but the log.

`_print_args` (megatron/training/arguments.py, also Megatron-DeepSpeed) prints, on rank 0, between
`---- arguments ----` and `---- end of arguments ----`, one `  {dest} {'.' * (48 - len(dest))} {value}` line
per attribute of the parsed namespace, values as `str()` gives them (lists as reprs, enums as `Class.member`).
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

BEGIN = re.compile(r"^-{3,} arguments -{3,}\s*$")
END = re.compile(r"^-{3,} end of arguments -{3,}\s*$")
ARG = re.compile(r"^\s+(\w+) \.* ?(.*?)\s*$")
ENUM = re.compile(r"^[A-Z]\w*\.(\w+)$")
# set by the launcher, not the command line (the world size is taken apart, for the layout)
NOT_FLAGS = frozenset({"rank", "local_rank", "world_size"})


@dataclass
class PrintedArgs:
    source: str
    line: int  # where the block begins
    values: dict[str, str] = field(default_factory=dict)  # dest -> the printed text
    closed: bool = False

    @property
    def world_size(self) -> int | None:
        text = self.values.get("world_size", "")
        return int(text) if text.isdigit() else None

    @property
    def padded_vocab_size(self) -> int | None:
        text = self.values.get("padded_vocab_size", "")
        return int(text) if text.isdigit() else None


class ArgsReader:
    """The first complete block of printed arguments in the lines fed to it (every rank prints the same)."""

    def __init__(self) -> None:
        self.block: PrintedArgs | None = None

    @property
    def open(self) -> bool:
        return self.block is not None and not self.block.closed

    def feed(self, source: str, number: int, text: str) -> None:
        if self.block is not None and self.block.closed:
            return
        if self.block is None:
            if BEGIN.match(text.strip()):
                self.block = PrintedArgs(source, number)
            return
        if END.match(text.strip()):
            self.block.closed = True
            return
        match = ARG.match(text)
        if match:
            self.block.values[match.group(1)] = match.group(2)

    def result(self) -> PrintedArgs | None:
        return self.block if self.block is not None and self.block.values else None


def _value(text: str) -> Any:
    enum = ENUM.match(text)
    if enum:
        return enum.group(1)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def command_line(printed: PrintedArgs) -> str:
    """The Megatron command line that parses to the printed values (defaults left out), for the flag table of
    the flavour whose flags name most of the printed attributes."""
    from guard.megatron import flag_table

    tables = [flag_table.load(ref) for ref in flag_table.available()]
    table = max(tables, key=lambda t: (len(set(printed.values) & set(t.by_dest)),
                                       t.ref == flag_table.DEFAULT_MEGATRON_LM))
    words: list[str] = []
    for dest, text in printed.values.items():
        flags = [f for f in table.by_dest.get(dest, []) if f.name.startswith("--")]
        if dest in NOT_FLAGS or not flags:
            continue
        words += _words(flags[0], _value(text))
    return " ".join(shlex.quote(w) for w in words)


def _words(flag, value: Any) -> list[str]:
    if value is None or value == flag.default:
        return []
    action = flag.action
    if action.endswith("BooleanOptionalAction"):
        return [flag.name if value else "--no-" + flag.name[2:]] if isinstance(value, bool) else []
    if action == "store_true":
        return [flag.name] if value is True else []
    if action == "store_false":
        return [flag.name] if value is False else []
    if action == "store_const":
        return [flag.name] if value == flag.const else []
    if not flag.takes_value:
        return []
    if isinstance(value, (list, tuple)):
        if action == "append":
            return [w for item in value for w in (flag.name, str(item))]
        return [flag.name, *map(str, value)] if value else []
    return [flag.name, str(value)]


def read_printed(printed: PrintedArgs, settings, request=None):
    """The job the printed arguments describe, read as the command line that gave them; the printed world_size
    is what the job ran with (it wins over --world-size unless forced, as a launcher's does)."""
    from guard.errors import InputError
    from guard.intake.megatron import megatron_subject
    from guard.intake.request import Request
    from guard.intake.world import decide
    from guard.job.origin import Origin
    from guard.launchers.record import WorldReading
    from guard.megatron.from_script import command_from_argv

    request = request or Request()
    text = command_line(printed)
    label = f"{printed.source}:{printed.line} (the arguments Megatron printed)"
    cmd = command_from_argv(text, label, settings)
    if cmd is None:
        raise InputError(f"{label}: no Megatron command line in them")
    size = printed.world_size
    reading = WorldReading(size, why=f"world_size {size} printed by Megatron") if size else None
    world = decide(reading, settings, label, origin=Origin("key", "world_size (printed by Megatron)",
                                                               printed.source, printed.line, 1))
    vocab = request.vocab_size or printed.padded_vocab_size
    from dataclasses import replace

    return megatron_subject(cmd, settings, replace(request, vocab_size=vocab), argv_text=text, world=world)
