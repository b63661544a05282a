"""Run a worker as one forked process per rank, one launch per world size, megatron-core imported once before."""

from __future__ import annotations

import json
import os
import socket
import tempfile


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_by_world(worker, cases: dict[str, dict], world_of) -> dict[str, list[dict]]:
    """worker(rank, world, port, cases, out_dir) writes out_dir/<rank>.json ({case name: record});
    returns case name -> records in rank order."""
    import megatron.core.models.gpt  # noqa: F401  imported once here, inherited by the forked ranks
    import torch.multiprocessing as mp

    by_world: dict[int, dict] = {}
    for name, case in cases.items():
        by_world.setdefault(world_of(case), {})[name] = case
    results: dict[str, list[dict]] = {}
    for world, group in sorted(by_world.items()):
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(worker, args=(world, free_port(), group, tmp), nprocs=world, join=True,
                               start_method="fork")
            per_rank = []
            for rank in range(world):
                with open(os.path.join(tmp, f"{rank}.json")) as handle:
                    per_rank.append(json.load(handle))
        for name in group:
            results[name] = [ranks[name] for ranks in per_rank]
    return results
