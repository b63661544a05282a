"""Read a Megatron command's flag values into the job, each with the Origin that says where it came from."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from guard.job.origin import Origin
from guard.job.training_job import IncompleteJob, TrainingJob

if TYPE_CHECKING:  # a DeepSpeed lint reaches this module and must not load Megatron's command reading
    from guard.megatron.command import MegatronCommand


class FlagValues:
    """Values as Megatron's argparse leaves them; `field=` records the origin of the job field it fills."""

    def __init__(self, cmd: MegatronCommand, job: TrainingJob):
        self.cmd, self.job = cmd, job

    def origin(self, dest: str) -> Origin:
        cmd = self.cmd
        if cmd.given(dest):
            span = cmd.flag_span(dest)
            return Origin("flag", cmd.option(dest), cmd.path_of(dest), span.line, span.col, cmd.option(dest))
        return Origin("default", f"the default of {cmd.option(dest)}", cmd.path, cmd.anchor.line, cmd.anchor.col,
                      cmd.option(dest), reason=f"{cmd.table.ref} flag table")

    def value(self, dest: str, base: Any = None, field: str | None = None) -> Any:
        """The flag's value; `base` (a preset/HF config value) wins over the table default, not over a flag."""
        cmd = self.cmd
        if dest not in cmd.table.by_dest:
            return base
        if not cmd.known(dest):
            raise IncompleteJob(self._unresolved(dest))
        if field:
            self.job.origins[field] = self.origin(dest) if cmd.given(dest) or base is None else \
                Origin("cli", "--model / --hf-config")
        if cmd.given(dest) or base is None:
            value = cmd.v(dest)
            return value[0] if isinstance(value, list) and len(value) == 1 and dest != "recompute_modules" else value
        return base

    def _unresolved(self, dest: str) -> str:
        """One refusal naming every value the memory model reads that the script leaves unknown (a script driven
        by positional parameters leaves several), not the first one alone."""
        from guard.job.coverage import READ, megatron_class

        cmd = self.cmd
        names = [dest] + [d for d in cmd.table.by_dest if d != dest and cmd.given(d) and not cmd.known(d)
                          and (megatron_class(d) is not None and megatron_class(d).effect == READ)]
        where = ", ".join(f"{cmd.option(d)} {self._written(d)}(line {cmd.flag_span(d).line})" for d in names)
        return (f"{cmd.path}: {'values' if len(names) > 1 else 'a value'} guard cannot resolve: {where}; "
                f"give {'them' if len(names) > 1 else 'it'} literally (a script driven by its arguments: write them "
                "into a copy)")

    def _written(self, dest: str) -> str:
        """The unresolved value as the script writes it (`$bs `), or nothing."""
        occ = self.cmd.args.last(dest)
        values = [t.describe() for t in occ.values if not t.resolved] if occ is not None else []
        return f"{values[0]} " if values else ""

    def int(self, dest: str, base: int | None = None, need: str = "", field: str | None = None) -> int | None:
        value = self.value(dest, base, field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        if need:
            raise IncompleteJob(f"{self.cmd.path}: {self.cmd.option(dest)} is not set: {need}")
        return None

    def on(self, dest: str, field: str | None = None) -> bool:
        return self.value(dest, None, field) is True


def enum_name(value: Any, default: str) -> str:
    """A flag parsed into an enum (AttnBackend.auto), or its table default written as {"expr": ...}."""
    if isinstance(value, dict):
        value = value.get("expr")
    return str(value or default).split(".")[-1].lower()


def list_expression(text: str) -> int | list[int] | None:
    """Megatron's --moe-layer-freq strings such as "[0]*3+[1]*29", read without eval."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None

    def walk(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.List):
            return [walk(e) for e in n.elts]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mult)):
            left, right = walk(n.left), walk(n.right)
            if isinstance(n.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and right < 100000:
                return left * right
            if isinstance(n.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
        raise ValueError(text)

    try:
        value = walk(node)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (int, list)) else None
