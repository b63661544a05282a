"""Every rank's sample to one decider (rank 0), and its one verdict to every rank, over the job's own rendezvous:
never a port of guard's own, and O(N) store operations for N ranks (each rank sets its sample, reads the verdict
under its own key and counts itself done; the decider waits on all samples in one request, reads them in one and
writes every rank's verdict in one), so thousands of ranks exchange in seconds (bench/launch_exchange.py).

Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent's store at MASTER_ADDR:MASTER_PORT is already up:
ranks join it as clients. Under other launchers (deepspeed, srun, mpirun) rank 0 hosts a store on MASTER_PORT
and closes it, once every rank has read the verdict, before the training code binds the port itself. A rank
that does not report within the timeout is named; nothing waits forever.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

DECIDER = 0
GRACE_S = 60.0  # how much longer than the decider the others wait for its verdict (it may plan a rewrite)


class ExchangeTimeout(RuntimeError):
    """Some ranks did not report, or the decider did not decide (the message names them)."""


class Exchange:
    def __init__(self, rank: int, world: int, timeout: float, store=None):
        self.rank, self.world, self.timeout = rank, world, timeout
        self.deadline = time.monotonic() + timeout
        self.agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        if store is None:
            import torch.distributed as dist

            host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
            store = dist.TCPStore(host, port, is_master=(rank == DECIDER and not self.agent),
                                  timeout=timedelta(seconds=timeout + GRACE_S), wait_for_workers=False)
        self.store = store
        # keys of this attempt only: a restarted job (torchrun --max-restarts) does not read the last one's
        self.prefix = (f"guard/launch/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")

    def _key(self, tag: str, rank: int | None = None) -> str:
        return f"{self.prefix}/{tag}" + ("" if rank is None else f"/{rank}")

    def publish(self, sample: dict) -> None:
        """This rank's sample (or the reason it has none), for the decider."""
        self.store.set(self._key("sample", self.rank), json.dumps(sample))

    def collect(self) -> list[dict]:
        """The decider: every rank's sample in rank order; ExchangeTimeout naming the ranks that never came."""
        keys = [self._key("sample", r) for r in range(self.world)]
        try:
            self.store.wait(keys, timedelta(seconds=max(0.0, self.deadline - time.monotonic())))
        except RuntimeError:  # torch raises DistStoreError (a RuntimeError) at the deadline
            missing = [r for r, key in enumerate(keys) if not self.store.check([key])]
            if missing:
                shown = ", ".join(map(str, missing[:16])) + (f" and {len(missing) - 16} more" if len(missing) > 16
                                                             else "")
                raise ExchangeTimeout(f"rank{'s' if len(missing) > 1 else ''} {shown} of {self.world} did not "
                                      f"report within {self.timeout:.0f} s (crashed, not started, or started "
                                      "without guard's hook)") from None
        return [json.loads(value) for value in self.store.multi_get(keys)]

    def announce(self, verdict: dict) -> None:
        """The verdict, in one request, under a key of each rank's own: a store wakes one waiter per key at once,
        where thousands waiting on one key are woken one after another."""
        text = json.dumps({k: v for k, v in verdict.items() if k != "report"})  # the decider reports; ranks act
        others = [r for r in range(self.world) if r != self.rank]
        self.store.multi_set([self._key("verdict", r) for r in others], [text] * len(others))

    def verdict(self) -> dict:
        """The decider's verdict (every rank but the decider waits for it: one blocking read of its own key)."""
        try:  # a get waits for its key, to the store's timeout (the exchange's, plus the decider's grace)
            return json.loads(self.store.get(self._key("verdict", self.rank)))
        except RuntimeError:
            raise ExchangeTimeout(f"rank {DECIDER}, which decides, published no verdict within "
                                  f"{self.timeout + GRACE_S:.0f} s") from None

    def close(self) -> None:
        """The decider's own store goes only when every rank has read the verdict: each counts itself, the last
        one says so (one operation per rank, one wait for the decider)."""
        if self.agent:
            return
        if self.store.add(self._key("read"), 1) == self.world:
            self.store.set(self._key("all read"), "1")
        if self.rank == DECIDER:
            try:
                self.store.wait([self._key("all read")], timedelta(seconds=GRACE_S))
            except RuntimeError:
                pass  # a rank that died after the verdict: nothing left to wait for
        del self.store


class GroupExchange:
    """The same over a process group the job already has (a plugin's check, after the job's own init)."""

    def __init__(self):
        import torch.distributed as dist

        self.dist, self.rank = dist, dist.get_rank()

    def publish(self, sample: dict) -> None:
        self._sample = sample

    def collect(self) -> list[dict]:
        out: list = [None] * self.dist.get_world_size()
        self.dist.gather_object(self._sample, out, dst=DECIDER)
        return out

    def announce(self, verdict: dict) -> None:
        self.dist.broadcast_object_list([verdict], src=DECIDER)

    def verdict(self) -> dict:
        if self.rank != DECIDER:
            self.dist.gather_object(self._sample, None, dst=DECIDER)
        box: list = [None]
        self.dist.broadcast_object_list(box, src=DECIDER)
        return box[0]

    def close(self) -> None:
        pass


class Alone:
    """One rank: nothing to exchange."""

    def __init__(self):
        self.sample: dict = {}

    def publish(self, sample: dict) -> None:
        self.sample = sample

    def collect(self) -> list[dict]:
        return [self.sample]

    def announce(self, verdict: dict) -> None:
        pass

    def verdict(self) -> dict:
        raise AssertionError("one rank decides itself")

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
