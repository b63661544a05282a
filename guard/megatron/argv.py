"""Parse a Megatron argv as Megatron's argparse parser does, keeping every token's position."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from guard.megatron.flag_table import SWITCH_ACTIONS, Flag, FlagTable
from guard.token import ArgToken

# argparse treats '-1' and '-.5' as values, not options, when no option looks like a negative number
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass
class Occurrence:
    """One appearance of a flag on the command line."""

    flag: Flag
    option: ArgToken
    values: list[ArgToken]
    value: Any  # converted as argparse would (None when the conversion failed or was unknown)
    known: bool = True  # False when a value depends on an unresolved shell variable


@dataclass
class Problem:
    kind: str  # unknown, missing-value, extra-value, bad-type, bad-choice, unresolved, stray
    token: ArgToken
    message: str
    flag: Flag | None = None
    suggestion: str | None = None


@dataclass
class ParsedArgs:
    table: FlagTable
    occurrences: list[Occurrence] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    tokens: list[ArgToken] = field(default_factory=list)

    def last(self, dest: str) -> Occurrence | None:
        for occ in reversed(self.occurrences):
            if occ.flag.dest == dest:
                return occ
        return None

    def given(self, dest: str) -> bool:
        return self.last(dest) is not None

    def value(self, dest: str, default: Any = "<table>") -> Any:
        """The value argparse leaves in args.<dest> (the last occurrence wins)."""
        occ = self.last(dest)
        if occ is None:
            return self.table.default(dest) if default == "<table>" else default
        return occ.value

    def known(self, dest: str) -> bool:
        occ = self.last(dest)
        return occ is None or occ.known

    def all(self, dest: str) -> list[Occurrence]:
        return [o for o in self.occurrences if o.flag.dest == dest]


class ConversionError(ValueError):
    pass


def convert(flag: Flag, text: str) -> Any:
    """The value argparse stores for `text`; ConversionError with argparse's wording otherwise."""
    kind = flag.type or "str"
    try:
        if kind == "int":
            value: Any = int(text)
        elif kind == "float":
            value = float(text)
        elif kind == "bool":
            value = bool(text)  # argparse's type=bool: any non-empty string is True
        elif kind == "tuple_type":
            value = tuple(int(i) for i in text.strip("()").split(","))
        elif kind.endswith("freq_type"):
            value = int(text) if re.fullmatch(r"\s*\d+\s*", text) else text
            if isinstance(value, str) and not value.strip().startswith(("[", "(")):
                raise ValueError(text)
        else:
            value = text
    except ValueError:
        raise ConversionError(f"argument {'/'.join(flag.option_strings)}: invalid {kind.split(':')[-1]} "
                              f"value: {text!r}") from None
    if flag.choices is not None and value not in flag.choices:
        choices = ", ".join(repr(c) for c in flag.choices)
        raise ConversionError(f"argument {'/'.join(flag.option_strings)}: invalid choice: {value!r} "
                              f"(choose from {choices})")
    return value


def _looks_like_option(text: str) -> bool:
    return text.startswith("-") and text != "-" and not NEGATIVE_NUMBER.match(text)


def parse(tokens: list[ArgToken], table: FlagTable) -> ParsedArgs:
    """Walk the tokens as argparse (allow_abbrev=False) would; problems are collected, not raised."""
    out = ParsedArgs(table, tokens=list(tokens))
    i = 0
    only_values = False
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.resolved and not _looks_like_option(tok.text):
            out.problems.append(Problem("unresolved", tok, f"{tok.describe()!r} could not be resolved"))
            continue
        if only_values or not _looks_like_option(tok.text):
            if tok.text == "--" and not only_values:
                only_values = True
                continue
            out.problems.append(Problem("stray", tok, f"unrecognized argument {tok.describe()!r}: Megatron "
                                                      "takes no positional arguments"))
            continue
        name, eq, inline = tok.text.partition("=")
        flag = table.get(name) if name.startswith("--") or len(name) == 2 else table.get(tok.text)
        if flag is None:
            if not tok.resolved:
                out.problems.append(Problem("unresolved", tok, f"{tok.describe()!r} could not be resolved"))
                continue
            out.problems.append(Problem("unknown", tok, f"unrecognized argument {name!r}",
                                        suggestion=table.suggest(name)))
            # its value(s) follow it; one report for the unknown flag is enough
            while not eq and i < len(tokens) and not _looks_like_option(tokens[i].text):
                i += 1
            continue
        values: list[ArgToken] = []
        no_value = flag.action in SWITCH_ACTIONS
        if eq:
            if no_value:
                out.problems.append(Problem("extra-value", tok, f"argument {name}: ignored explicit "
                                            f"argument {inline!r} ({name} takes no value)", flag))
                continue
            values = [ArgToken(inline, tok.span, tok.path, tok.resolved, tok.raw)]
        elif not no_value:
            want = flag.nargs
            while i < len(tokens) and not _looks_like_option(tokens[i].text):
                if want in (None, "?") and values:
                    break
                if isinstance(want, int) and len(values) >= want:
                    break
                values.append(tokens[i])
                i += 1
            short = (want is None and not values) or (want == "+" and not values) or (
                isinstance(want, int) and len(values) < want)
            if short:
                expected = {None: "one argument", "+": "at least one argument"}.get(
                    want, f"{want} arguments")
                out.problems.append(Problem("missing-value", tok, f"argument {name}: expected {expected}",
                                            flag))
                continue
        out.occurrences.append(_occurrence(flag, tok, values, out))
    return out


def _occurrence(flag: Flag, option: ArgToken, values: list[ArgToken], out: ParsedArgs) -> Occurrence:
    known = all(v.resolved for v in values)
    if flag.action in ("store_true",):
        return Occurrence(flag, option, [], True)
    if flag.action == "store_false":
        return Occurrence(flag, option, [], False)
    if flag.action.endswith("BooleanOptionalAction"):
        return Occurrence(flag, option, [], not option.text.startswith("--no-"))
    if flag.action in ("store_const", "append_const"):
        return Occurrence(flag, option, [], flag.const)
    if not known:
        return Occurrence(flag, option, values, None, known=False)
    converted = []
    for tok in values:
        try:
            converted.append(convert(flag, tok.text))
        except ConversionError as err:
            kind = "bad-choice" if "invalid choice" in str(err) else "bad-type"
            out.problems.append(Problem(kind, tok, str(err), flag))
            return Occurrence(flag, option, values, None, known=False)
    if flag.nargs is None:
        value: Any = converted[0] if converted else flag.const
    elif flag.nargs == "?" and not converted:
        value = flag.const
    else:
        value = converted
    return Occurrence(flag, option, values, value)
