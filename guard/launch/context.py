"""What `guard launch` hands the processes it starts: the policy, the job's inputs, how to tell a rank from an
agent, and the predicted memory of each pipeline stage. It travels in the environment (GUARD_LAUNCH), so it
reaches every process the launcher's environment reaches, on every node, with no file to share."""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import asdict, dataclass, field

ENV = "GUARD_LAUNCH"  # the context itself; its absence leaves the hook inert
POLICY_ENV = "GUARD_LAUNCH_POLICY"  # the policy alone: known even when the context cannot be read
DIR_ENV = "GUARD_LAUNCH_DIR"  # the launching node's folder: the verdict guard launch reads, rewritten configs
DONE_ENV = "GUARD_LAUNCH_DONE"  # set by the hook in a rank: its children (workers) inherit it and skip
VARIABLES = (ENV, POLICY_ENV, DIR_ENV)  # what a launcher must hand its ranks (with PYTHONPATH)
# what a rewrite may change unless told otherwise; tp, pp, vpp, cp and ep are opt-in (they change checkpoints)
DEFAULT_ALLOW = ("micro_batch", "recompute", "sharding", "offload")
MAX_ENV_BYTES = 96 * 1024  # under Linux's 128 KiB limit on one environment string


@dataclass
class StagePrediction:
    """One pipeline stage's prediction; every rank of the stage shares it."""

    pp_rank: int
    peak: int  # predicted peak, runtime terms (CUDA context, NCCL, fragmentation) included
    lower: int  # what is certain when features are unmodelled: model states and buffers
    dominant: str
    cuda_context: int  # the CUDA context term of `peak` (a torch-sampled free already paid for it)


@dataclass
class Ranks:
    """How a process of this launch tells whether it is a rank, and which (guard/launchers records)."""

    launcher: str  # the launcher kind whose processes are the ranks ("python": one process, no variables)
    variables: list[list[str]]  # [rank, local rank, world, local world] names of each family it may set
    agents: list[str] = field(default_factory=list)  # entry points of the launchers' own Python processes


@dataclass
class LaunchContext:
    policy: str  # abort | warn | rewrite
    allow: list[str]
    headroom: list  # [bytes, share of the GPU's total]: guard.units.Headroom, validated before start
    argv: list[str]
    request: dict  # guard.intake.request.Request values the job was read with
    settings: dict  # the Settings fields that matter for reading the job
    world: int
    stages: list[StagePrediction]
    ranks: Ranks
    unmodelled: list[str] = field(default_factory=list)
    timeout_s: float = 120.0

    def prediction(self, rank: int) -> StagePrediction:
        """The stage of a global rank: Megatron's order puts the pipeline rank outermost."""
        per_stage = max(1, self.world // len(self.stages))
        return self.stages[min(rank // per_stage, len(self.stages) - 1)]

    def room(self, total: int) -> int:
        size, share = self.headroom
        return int(size) + int(total * share)

    def encode(self) -> str:
        text = json.dumps(asdict(self), separators=(",", ":"))
        packed = "z:" + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
        out = text if len(text) <= len(packed) else packed
        if len(out) > MAX_ENV_BYTES:
            raise ValueError(f"the launch context is {len(out)} bytes, more than an environment variable holds")
        return out

    @classmethod
    def decode(cls, text: str) -> "LaunchContext":
        if text.startswith("z:"):
            text = zlib.decompress(base64.b64decode(text[2:])).decode()
        data = json.loads(text)
        data["stages"] = [StagePrediction(**s) for s in data["stages"]]
        data["ranks"] = Ranks(**data["ranks"])
        return cls(**data)
