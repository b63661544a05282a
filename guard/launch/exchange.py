"""Every rank's sample to every rank, over the job's own rendezvous: never a port of guard's own.

Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent's store at MASTER_ADDR:MASTER_PORT is already
up: ranks join it as clients. Under other launchers (deepspeed, srun) rank 0 hosts a store on MASTER_PORT
for the exchange and closes it, after the last barrier, before the training code binds the port itself.
A rank that does not report within the timeout is named; nothing waits forever.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta


class ExchangeTimeout(RuntimeError):
    """Some ranks did not report (the message names them)."""


class Exchange:
    def __init__(self, rank: int, world: int, timeout: float):
        import torch.distributed as dist

        self.rank, self.world, self.timeout = rank, world, timeout
        self.deadline = time.monotonic() + timeout
        host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
        self.agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        self.store = dist.TCPStore(host, port, is_master=(rank == 0 and not self.agent),
                                   timeout=timedelta(seconds=timeout), wait_for_workers=False)
        # keys of this attempt only: a restarted job (torchrun --max-restarts) does not read the last one's
        self.prefix = (f"guard/launch/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")

    def _wait(self, keys: list[str]) -> list[int]:
        """Indices of the keys still missing at the deadline (polls: a store wait cannot name the missing)."""
        missing = list(range(len(keys)))
        while missing and time.monotonic() < self.deadline:
            missing = [i for i in missing if not self.store.check([keys[i]])]
            if missing:
                time.sleep(0.05)
        return missing

    def _all(self, tag: str, value: str) -> list[str]:
        self.store.set(f"{self.prefix}/{tag}/{self.rank}", value)
        keys = [f"{self.prefix}/{tag}/{r}" for r in range(self.world)]
        missing = self._wait(keys)
        if missing:
            raise ExchangeTimeout(f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
                                  f"{self.world} did not report within {self.timeout:.0f} s (crashed, or not "
                                  "started)")
        return [self.store.get(k).decode() for k in keys]

    def gather(self, sample: dict) -> list[dict]:
        """Every rank's sample, in rank order; ExchangeTimeout naming the ranks that never reported."""
        return [json.loads(text) for text in self._all("sample", json.dumps(sample))]

    def barrier(self, tag: str) -> None:
        self._all(tag, "1")

    def close(self) -> None:
        """Rank 0's own store goes only when every rank is past the last barrier (they said so)."""
        if not self.agent:
            self.store.set(f"{self.prefix}/closing/{self.rank}", "1")
            if self.rank == 0:
                self._wait([f"{self.prefix}/closing/{r}" for r in range(self.world)])
        del self.store


class GroupExchange:
    """The same over a process group the job already has (a check run inside the job, after its own init)."""

    def __init__(self):
        import torch.distributed as dist

        self.dist = dist

    def gather(self, sample: dict) -> list[dict]:
        out: list = [None] * self.dist.get_world_size()
        self.dist.all_gather_object(out, sample)
        return out

    def barrier(self, tag: str) -> None:
        self.dist.barrier()

    def close(self) -> None:
        pass


class Alone:
    """One rank: nothing to exchange."""

    def gather(self, sample: dict) -> list[dict]:
        return [sample]

    def barrier(self, tag: str) -> None:
        pass

    def close(self) -> None:
        pass


def connect(rank: int, world: int, timeout: float):
    """The job's process group if it is up, else its rendezvous store; nothing for a single rank."""
    if world <= 1:
        return Alone()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return GroupExchange()
    return Exchange(rank, world, timeout)
