"""Every option of guard's commands, declared once: its flag, the one validator its value passes (on the command
line and in `[tool.guard]` alike), the commands that take it, and its help. The parsers are built from here."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from guard.errors import InputError

JOB_COMMANDS = frozenset({"check", "estimate", "plan", "launch", "diagnose"})
FILE_COMMANDS = frozenset({"estimate", "plan", "diagnose"})  # one job from files (check takes many)
POLICIES = ("abort", "warn", "rewrite")
CONTEXTS = ("auto", "hf", "deepspeed", "megatron-deepspeed")
FAIL_ON = ("error", "warning", "info")


# -- validators: text (or a TOML value) -> value; ValueError('must ...') is read after the option's name -------------------------------
def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return number


def at_least_one(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number of at least 1, got {value!r}") from None
    if not number >= 1.0:  # NaN fails too
        raise ValueError(f"must be a number of at least 1, got {value!r}")
    return number


def release(value: Any) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"v?\d+(\.\d+){0,2}", text):
        raise ValueError(f"must be a release such as 0.19.8, got {value!r}")
    return text.lstrip("v")


def deepspeed_help() -> str:
    from guard.deepspeed_target import DEFAULT_HELP, resolve

    return f"{DEFAULT_HELP}; here: {resolve(None).describe()}"


def gpu(value: Any) -> str:
    """A catalog name (H100-SXM) or a size (80GiB): checked against the catalog once, here."""
    from guard.memory.gpu_choice import choose_gpu

    choose_gpu(str(value), None)
    return str(value)


def size(value: Any) -> str:
    from guard.units import parse_size

    parse_size(str(value))
    return str(value)


def megatron_version(value: Any) -> str:
    from guard.megatron.flag_table import resolve_version

    return resolve_version(str(value))


def megatron_source(value: Any) -> str:
    from pathlib import Path

    from guard.megatron.source_tables import checkout_root

    where = Path(str(value))
    if not where.is_dir() or checkout_root(where) != where.resolve():
        raise ValueError(f"{value}: not a Megatron checkout (no megatron/training/arguments.py or "
                         "megatron/arguments.py in it)")
    return str(where.resolve())


def headroom(value: Any):
    from guard.units import parse_headroom

    return parse_headroom(str(value))


def knobs(value: Any) -> frozenset[str]:
    """--allow tp,pp,micro_batch: the knobs a plan or a rewrite may change."""
    from guard.plan.space import KNOBS

    names = frozenset(part.strip().replace("-", "_") for part in str(value).split(",") if part.strip())
    unknown = sorted(names - set(KNOBS))
    if unknown or not names:
        raise ValueError(f"unknown knob {', '.join(unknown) or repr(value)} (known: {', '.join(KNOBS)})")
    return names


def codes(value: Any) -> Any:
    """Rule codes, prefixes or names (`DS1,MLM101`): one string from the command line, a list from [tool.guard];
    an unknown one is refused here, once."""
    from guard.rules import load_all
    from guard.selection import normalise

    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ValueError("must be a list of rule codes")
    load_all()
    normalise(items)
    return value


def override(value: Any) -> tuple[str, float]:
    """--set NAME=VALUE: a runtime or buffer term of the estimate (a size, or a fraction)."""
    from guard.memory.overheads import BUFFER_DEFAULTS, RUNTIME_DEFAULTS
    from guard.units import parse_size

    known = {**RUNTIME_DEFAULTS, **BUFFER_DEFAULTS}
    name, _, text = str(value).partition("=")
    if name not in known or not text:
        raise ValueError(f"must be NAME=VALUE with NAME one of {', '.join(known)}, got {value!r}")
    try:
        return name, float(text) if known[name].unit == "fraction" else parse_size(text)
    except ValueError as err:
        raise ValueError(f"{value}: {err}") from None


def one_of(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return value
    return check


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    commands: frozenset[str]
    help: Any = ""  # the text, or a function that gives it when the parser is built
    parse: Callable[[Any], Any] | None = None  # the validator; None: a switch, or free text
    metavar: str | None = None
    action: str | None = None  # "store_true", "append"
    default: Any = None
    toml: str | None = None  # its [tool.guard] key, when it can be set there
    defaults: dict[str, Any] = field(default_factory=dict)  # a command's own default (plan: every knob)
    setting: str | None = None  # the Settings field it fills (None: the command reads args itself)

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")


def _argparse_type(parse: Callable[[Any], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return convert


def add_options(parser: argparse.ArgumentParser, command: str, options: tuple[Option, ...]) -> None:
    """The options `command` takes, each with its validator (a bad value is an InputError, exit 2)."""
    for opt in options:
        if command not in opt.commands:
            continue
        text = opt.help() if callable(opt.help) else opt.help  # a help that says what this machine has
        kwargs: dict[str, Any] = {"help": text, "default": opt.defaults.get(command, opt.default)}
        if opt.action:
            kwargs["action"] = opt.action
        if opt.action == "append":
            kwargs["default"] = None
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
        if opt.parse is not None:
            kwargs["type"] = _argparse_type(opt.parse)
        parser.add_argument(*opt.flags, **kwargs)


def toml_value(opt: Option, value: Any, pyproject) -> Any:
    """A [tool.guard] value through the option's own validator."""
    try:
        return opt.parse(value) if opt.parse is not None else value
    except ValueError as err:
        raise InputError(f"{pyproject}: [tool.guard] {opt.toml} {err}") from None
