"""Launch probe ranks with no port to race for: forked ranks meet in a file, subprocesses die with their children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile


def file_rendezvous(directory: str) -> str:
    """A `file://` init_method in `directory` (a fresh temp dir): the ranks meet in a file there, so two
    launches at once never pick the same port (a free port found, closed, then taken by another run)."""
    return "file://" + os.path.join(directory, "rendezvous")


def run_bounded(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True) in a session of its own; on timeout the whole
    session is killed (torchrun's ranks, a compiler DeepSpeed started), not only `cmd`, so nothing of it is
    left running on the machine, then TimeoutExpired is raised with what it printed."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_by_world(worker, cases: dict[str, dict], world_of) -> dict[str, list[dict]]:
    """worker(rank, world, init_method, cases, out_dir) writes out_dir/<rank>.json ({case name: record});
    returns case name -> records in rank order. One forked process per rank, one launch per world size,
    megatron-core imported once before."""
    import megatron.core.models.gpt  # noqa: F401  imported once here, inherited by the forked ranks
    import torch.multiprocessing as mp

    by_world: dict[int, dict] = {}
    for name, case in cases.items():
        by_world.setdefault(world_of(case), {})[name] = case
    results: dict[str, list[dict]] = {}
    for world, group in sorted(by_world.items()):
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(worker, args=(world, file_rendezvous(tmp), group, tmp), nprocs=world, join=True,
                               start_method="fork")
            per_rank = []
            for rank in range(world):
                with open(os.path.join(tmp, f"{rank}.json")) as handle:
                    per_rank.append(json.load(handle))
        for name in group:
            results[name] = [ranks[name] for ranks in per_rank]
    return results


def run_json_probe(probe: str, timeout: float = 300) -> dict:
    """Run `python PROBE INIT_METHOD OUT.json` (one gloo rank meeting in a fresh temp dir) and read OUT.json."""
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "out.json")
        done = run_bounded([sys.executable, probe, file_rendezvous(work), out], timeout=timeout)
        assert done.returncode == 0, done.stderr[-2000:]
        with open(out) as handle:
            return json.load(handle)


def run_torchrun_probe(probe, world: int, spec: dict, out, timeout: float) -> list[dict]:
    """Write `spec` to out/cases.json and run `probe CASES OUT_DIR` on `world` CPU ranks under torchrun; returns
    each rank's out/<rank>.json. --standalone: the rendezvous and the ranks' store listen on ports the OS picks
    and torchrun holds, so two runs at once cannot collide (a fixed --master-port failed the second: EADDRINUSE)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "cases.json").write_text(json.dumps(spec))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = run_bounded([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
                        str(probe), str(out / "cases.json"), str(out)], timeout=timeout, env=env, cwd=out)
    if proc.returncode:
        raise RuntimeError(f"{os.path.basename(str(probe))} on {world} ranks failed:\n{proc.stderr[-3000:]}")
    return [json.loads((out / f"{rank}.json").read_text()) for rank in range(world)]
