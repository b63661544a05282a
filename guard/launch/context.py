"""What `guard launch` hands the ranks it starts: the job's inputs and the predicted memory of every rank.

Written once per node by the parent (`GUARD_LAUNCH` names the file), read by the start-up hook in each rank.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

ENV = "GUARD_LAUNCH"  # the context file; its absence leaves the hook inert
DONE_ENV = "GUARD_LAUNCH_DONE"  # set by the hook in a rank: its children (workers) inherit it and skip
# what a rewrite may change unless told otherwise; tp, pp, vpp, cp and ep are opt-in (they change checkpoints)
DEFAULT_ALLOW = ("micro_batch", "recompute", "sharding", "offload")


@dataclass
class RankPrediction:
    rank: int
    pp_rank: int
    peak: int  # predicted peak, runtime terms (CUDA context, NCCL, fragmentation) included
    lower: int  # what is certain when features are unmodelled: model states and buffers
    dominant: str
    cuda_context: int  # the CUDA context term of `peak` (a torch-sampled free already paid for it)


@dataclass
class LaunchContext:
    policy: str  # abort | warn | rewrite
    allow: list[str]
    headroom: str  # as given: a size or a percentage
    argv: list[str]
    inputs: dict  # JobInputs fields the job was read with
    settings: dict  # the Settings fields that matter for reading the job
    ranks: list[RankPrediction]
    unmodelled: list[str] = field(default_factory=list)
    timeout_s: float = 120.0
    directory: str = ""  # node-local: rewritten configs and the verdict go here

    def write(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(asdict(self), handle)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "LaunchContext":
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        data["ranks"] = [RankPrediction(**r) for r in data["ranks"]]
        return cls(**data)

    def verdict_path(self) -> str:
        return os.path.join(self.directory, "verdict.json")
