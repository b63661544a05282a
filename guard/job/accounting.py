"""Every flag and config key accounted for: what the memory model does not price is named, never dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guard.job import coverage
from guard.job.origin import Origin, key_origin
from guard.job.training_job import TrainingJob

if TYPE_CHECKING:  # only Megatron jobs are accounted by flag; a DeepSpeed lint must not load their reader
    from guard.job.flag_values import FlagValues

UNKNOWN = "unknown effect on memory"


def account_flags(fv: FlagValues) -> None:
    """Flags whose class is unmodelled (and set away from their default) and flags guard does not know."""
    job, cmd = fv.job, fv.cmd
    for occ in cmd.args.occurrences:
        dest = occ.flag.dest
        if cmd.args.last(dest) is not occ:
            continue  # argparse keeps the last occurrence
        entry = coverage.megatron_class(dest)
        if entry is None:
            job.add_unmodelled(f"{cmd.option(dest)}: {UNKNOWN} (not in guard's flag coverage)",
                               cmd.option(dest), fv.origin(dest))
        elif entry.effect == coverage.UNMODELLED and _active(occ.value, cmd.table.default(dest)):
            job.add_unmodelled(entry.feature, cmd.option(dest), fv.origin(dest))
    for problem in cmd.args.problems:
        if problem.kind == "unknown":  # a flag no vendored table defines: a fork's, or a typo
            name = problem.token.text.split("=")[0]
            span = problem.token.span
            job.add_unmodelled(f"{name}: {UNKNOWN} (a flag {cmd.table.ref} does not define)", name,
                               Origin("flag", name, problem.token.path or cmd.path, span.line, span.col, name))


def account_keys(job: TrainingJob, config: dict[str, Any], label: str, locate) -> None:
    """DeepSpeed keys whose class is unmodelled and that are switched on; sections that are disabled are skipped."""
    for path, value in _leaves(config, ()):
        entry = coverage.deepspeed_class(path)
        if entry is None or entry.effect != coverage.UNMODELLED or not _active(value, None):
            continue
        section = _section(config, path)
        if isinstance(section, dict) and section.get("enabled") is False:
            continue
        job.add_unmodelled(entry.feature, ".".join(path), key_origin(label, locate, *path))


def _active(value: Any, default: Any) -> bool:
    """A setting that asks for the feature: not off, not empty, not the default."""
    if value in (None, False, 0, "", [], "none", "None") or value == default:
        return False
    return True


def _leaves(node: Any, path: tuple[str, ...]):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, str(key)))
    elif path:
        yield path, node


def _section(config: dict, path: tuple[str, ...]) -> Any:
    node: Any = config
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node
