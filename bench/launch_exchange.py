"""guard launch's exchange at the scale it is for: N simulated ranks against one TCPStore on localhost, running
the protocol the ranks run (guard/launch/exchange.py: every sample to one decider, its one verdict to every rank,
the store closed once all have read it), beside the all-to-all it replaced (every rank polls for, then reads,
every other rank's key; twice: the samples and a barrier), measured in the same run.

A simulated rank is a thread with its own store client, as a rank is a process with its own; the threads are
spread over worker processes of at most 64 each (ranks are processes: one interpreter lock each, not one for
thousands). Each rank connects first; the time runs from the moment all are connected to the last rank done.
The all-to-all runs up to 512 ranks: it grows as N^2 (2 N^2 store operations).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# c10d warns once per client when localhost has no reverse DNS name; thousands of those hide the table
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import torch.distributed as dist  # noqa: E402

from guard.launch import exchange  # noqa: E402

SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
OLD_UP_TO = 512
PER_PROCESS = 64
GOAL_S = 2.0
SAMPLE = {"host": "node", "device": "0", "total": 85899345920, "free": 84825604096, "others": [], "source": "nvml"}


def decider(rank: int, world: int, store) -> None:
    """guard launch's protocol: O(N) store operations."""
    talk = exchange.Exchange(rank, world, timeout=120, store=store)
    talk.publish({**SAMPLE, "rank": rank})
    if rank == exchange.DECIDER:
        samples = talk.collect()
        talk.announce({"action": "run", "reason": f"{len(samples)} ranks fit", "report": [], "change": None})
    else:
        talk.verdict()
    talk.close()  # as under deepspeed, srun or mpirun: rank 0's store stays until every rank has read


def all_to_all(rank: int, world: int, store) -> None:
    """The exchange it replaced: each rank polls every rank's key, then reads them all; then a barrier the same way."""
    for tag, value in (("sample", json.dumps({**SAMPLE, "rank": rank})), ("reported", "1")):
        store.set(f"old/{tag}/{rank}", value)
        keys = [f"old/{tag}/{r}" for r in range(world)]
        missing = list(range(world))
        while missing:
            missing = [i for i in missing if not store.check([keys[i]])]
            if missing:
                time.sleep(0.05)
        [store.get(key) for key in keys]


def _worker(port: int, world: int, ranks: range, protocol: str, ready, go, done) -> None:
    """One process of simulated ranks: connect each, say ready, run the protocol when told, say when done."""
    threading.stack_size(256 * 1024)
    work = {"decider": decider, "all_to_all": all_to_all}[protocol]
    connected = threading.Barrier(len(ranks) + 1)
    start = threading.Event()

    def run(rank: int) -> None:
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=600),
                               wait_for_workers=False)
        connected.wait()
        start.wait()
        work(rank, world, client)

    threads = [threading.Thread(target=run, args=(r,)) for r in ranks]
    for thread in threads:
        thread.start()
    connected.wait()
    ready.put(1)
    go.wait()
    start.set()
    for thread in threads:
        thread.join()
    done.put(time.time())


def timed(world: int, protocol: str) -> float:
    """Seconds from every rank connected to the last rank done."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=600), wait_for_workers=False)
    ctx = mp.get_context("forkserver")  # not fork: a child forked beside the store's threads can inherit a held lock
    ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    groups = [range(lo, min(lo + PER_PROCESS, world)) for lo in range(0, world, PER_PROCESS)]
    workers = [ctx.Process(target=_worker, args=(server.port, world, group, protocol, ready, go, done))
               for group in groups]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get()
    began = time.time()
    go.set()
    ended = max(done.get() for _ in workers)
    for worker in workers:
        worker.join()
    del server
    return ended - began


def main() -> None:
    mp.set_forkserver_preload(["torch.distributed", "guard.launch.exchange"])
    print(f"guard launch's exchange: N simulated ranks on localhost (threads with their own store clients, "
          f"{PER_PROCESS} per process), one TCPStore\n")
    print(f"{'ranks':>6}  {'all-to-all (before)':>20}  {'one decider (now)':>18}  {'ratio':>7}")
    for world in SIZES:
        new = timed(world, "decider")
        old = timed(world, "all_to_all") if world <= OLD_UP_TO else None
        before = f"{old:17.2f} s" if old is not None else f"{'(not run)':>19}"
        ratio = f"{old / new:6.1f}x" if old is not None else ""
        print(f"{world:>6}  {before:>20}  {new:15.2f} s  {ratio:>7}", flush=True)
    print(f"\ngoal: under {GOAL_S} s at 4096 ranks")


if __name__ == "__main__":
    main()
