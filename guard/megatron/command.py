"""A Megatron command as written: its parsed flags, the launcher that starts it, the exported environment and
the DeepSpeed config it names. What the job runs with (its world above all) is decided by the intake."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import Related, Span
from guard.megatron.argv import ParsedArgs
from guard.megatron.ds_config import DsConfigSource
from guard.megatron.flag_table import FlagTable


@dataclass
class EnvVar:
    value: str | None  # None: assigned from something guard cannot resolve
    span: Span
    path: str


@dataclass
class MegatronCommand:
    path: str
    args: ParsedArgs
    table: FlagTable
    launcher: str = ""
    env: dict[str, EnvVar] | None = None  # None: not a script (a bare argv), so the env is unknown
    deepspeed_config: DsConfigSource | None = None
    deepspeed_config_problem: str = ""  # why the config --deepspeed_config names could not be read
    program: str = ""
    fork_flags: list[str] = field(default_factory=list)  # flags only the fork table judging it defines
    launch: Any = None  # guard.launchers.chain.Launch, when a launcher was found
    anchor: Span = field(default_factory=lambda: Span(1, 1))  # where the command starts

    # -- values ----------------------------------------------------------------------------------
    @property
    def flavour(self) -> str:
        return self.table.flavour

    def v(self, dest: str, default: Any = "<table>") -> Any:
        return self.args.value(dest, default)

    def given(self, dest: str) -> bool:
        return self.args.given(dest)

    def known(self, *dests: str) -> bool:
        """True when every named value is known (given and resolved, or defaulted)."""
        return all(self.args.known(d) for d in dests)

    def int_(self, dest: str, default: int | None = None) -> int | None:
        value = self.v(dest)
        if isinstance(value, list):
            value = value[0] if len(value) == 1 else None
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return default if value is None and self.known(dest) else None
        return int(value)

    def flag_span(self, dest: str) -> Span:
        occ = self.args.last(dest)
        return occ.option.span if occ else self.anchor

    def value_span(self, dest: str) -> Span:
        occ = self.args.last(dest)
        if occ is None:
            return self.anchor
        return occ.values[0].span if occ.values else occ.option.span

    def option(self, dest: str) -> str:
        occ = self.args.last(dest)
        if occ is not None:
            return occ.option.text.split("=")[0]
        flags = self.table.by_dest.get(dest)
        return flags[0].name if flags else "--" + dest.replace("_", "-")

    def env_value(self, name: str) -> EnvVar | None:
        return (self.env or {}).get(name)

    def path_of(self, dest: str, at_value: bool = False) -> str:
        """The file a flag (or its value) was written in: a sourced file or the script itself."""
        occ = self.args.last(dest)
        if occ is None:
            return self.path
        tok = occ.values[0] if at_value and occ.values else occ.option
        return tok.path or self.path

    def related(self, dest: str, note: str) -> Related:
        return Related(note, self.path_of(dest), self.flag_span(dest))
