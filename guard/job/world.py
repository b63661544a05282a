"""The world a job runs on, as decided (guard/intake/world.py) and handed to the readers."""

from __future__ import annotations

from dataclasses import dataclass

from guard.job.layout import DEFAULT_GPUS_PER_NODE
from guard.job.origin import Origin


@dataclass(frozen=True)
class World:
    size: int | None
    origin: Origin | None  # where the size comes from (None: unknown)
    why: str = ""  # how it was found, or why it is unknown
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    overruled: tuple[int, Origin] | None = None  # the user's count, where the launcher's wins
    per_node_origin: Origin | None = None  # where the GPUs per node come from (None: the default of 8)

    def missing(self, path: str) -> str:
        """The one-line reason an estimate gives when the size is unknown."""
        return f"the world size of {path} is unknown ({self.why or 'no launcher'}): give --world-size N"

    def put(self, job, path: str) -> None:
        """The world into the job: where it came from, or why it is unknown (the layout holds the size)."""
        if self.origin is not None:
            job.origins["layout.world"] = self.origin
        elif self.size is None:
            job.missing["world_size"] = self.missing(path)
        if self.overruled is not None:
            job.overruled["layout.world"] = self.overruled
            ours, given = self.overruled
            job.notes.append(f"{given.label} says {ours} ranks, the launcher starts {self.size} ({self.why}): the "
                             "launcher's world is used (--force-world-size to use yours)")
        if self.per_node_origin is not None:
            job.origins["layout.gpus_per_node"] = self.per_node_origin
