"""How many ranks the job runs on: the one place that weighs the launcher against what the user says.

The launcher decides how many processes start, so its count wins; `--world-size` (or `[tool.guard]
world-size`) fills in where it does not say, and wins over it only with `--force-world-size`. A count the
user gave that the launcher overrules is kept, with where it was given, for LCH003 and the estimate's note.
"""

from __future__ import annotations

from guard.job.layout import DEFAULT_GPUS_PER_NODE
from guard.job.origin import Origin
from guard.job.world import World
from guard.launchers.record import WorldReading
from guard.settings import Settings


def user_origin(settings: Settings) -> Origin:
    return Origin(settings.world_size_source or "cli", settings.world_size_label or "--world-size")


def launcher_origin(reading: WorldReading, path: str, anchor: tuple[int, int] = (1, 1)) -> Origin:
    """The launcher's count, located at the word that decides it (else at the command)."""
    where = reading.where
    if where is not None and where.first is not None:
        span = where.span()
        return Origin("launcher", reading.why, where.path or path, span.line, span.col)
    return Origin("launcher", reading.why, path, *anchor)


def decide(reading: WorldReading | None, settings: Settings, path: str, anchor: tuple[int, int] = (1, 1),
           origin: Origin | None = None) -> World:
    """The job's world from what the launcher starts (`reading`; None where no launcher is expected, as for
    a bare command line) and the user's --world-size / [tool.guard] world-size; `origin` overrides where the
    launcher's count is said to come from (a key of a config file, the printed arguments)."""
    ours = settings.world_size
    per_node, per_node_origin = DEFAULT_GPUS_PER_NODE, None
    if settings.gpus_per_node:
        per_node, per_node_origin = settings.gpus_per_node, Origin("settings", "--gpus-per-node")
    elif reading is not None and reading.gpus_per_node:
        per_node, per_node_origin = reading.gpus_per_node, launcher_origin(reading, path, anchor)
    theirs = reading.size if reading is not None else None
    if theirs is not None and not (ours and settings.force_world_size):
        where = origin or launcher_origin(reading, path, anchor)
        overruled = (ours, user_origin(settings)) if ours and ours != theirs else None
        return World(theirs, where, reading.why, per_node, overruled, per_node_origin)
    if ours:
        return World(ours, user_origin(settings), settings.world_size_label or "--world-size", per_node,
                     per_node_origin=per_node_origin)
    return World(None, None, reading.why if reading is not None else "", per_node, per_node_origin=per_node_origin)
