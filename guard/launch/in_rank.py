"""What the start-up hook runs in each rank, before the training script: sample, exchange, decide, apply."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from guard.launch import exchange, probe
from guard.launch.context import ENV, LaunchContext
from guard.launch.decision import Verdict, decide

ABORT = 3


def rank_env() -> tuple[int, int, int]:
    """(rank, local rank, world size) as torchrun/deepspeed or Slurm give them."""
    env = os.environ
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", "1")))
    return rank, local, world


def main() -> None:
    """The start-up hook's entry: the context guard launch wrote, the job read again from it."""
    ctx = LaunchContext.load(os.environ[ENV])
    verdict = check(ctx, lambda: _request(ctx), None)
    if verdict.candidate is not None and verdict.argv:
        sys.argv[:] = verdict.argv


def check(ctx: LaunchContext, request_of, apply, exit_with=os._exit) -> Verdict:
    """Sample this rank, exchange, decide, report; an abort calls `exit_with(3)` on every rank. A rewrite is
    applied by `apply(verdict, request, rank)` (None: this process's argv, `verdict.argv`)."""
    rank, local, world = rank_env()
    try:
        talk = exchange.connect(rank, world, ctx.timeout_s)
        samples = talk.gather(probe.sample(rank, local))
    except (probe.ProbeError, exchange.ExchangeTimeout, RuntimeError) as err:
        return _finish(ctx, Verdict("abort", str(err), [f"rank {rank}: {err}"]), rank, None, exit_with, True)
    request = None

    def planner(capacity: int, allow):
        nonlocal request
        from guard.plan.search import plan

        request = request or request_of()
        return plan(request.source.job, _gpu(ctx, samples, capacity), top=3, allow=allow)

    verdict = decide(ctx, samples, planner)
    if verdict.action == "rewrite":
        verdict = (apply or _rewrite)(ctx, verdict, request, rank)
    return _finish(ctx, verdict, rank, talk, exit_with)


def _request(ctx: LaunchContext):
    from guard.job.from_inputs import JobInputs
    from guard.launch.command import read_launch
    from guard.settings import Settings

    settings = Settings()
    for name, value in ctx.settings.items():
        setattr(settings, name, value)
    return read_launch(ctx.argv, JobInputs(**ctx.inputs), settings)


def _gpu(ctx: LaunchContext, samples: list[dict], capacity: int):
    """The GPU the plan prices: the catalog entry of the device (or the one given), with `capacity` usable."""
    from guard.memory import catalog

    for name in (ctx.settings.get("gpu"), samples[0].get("name"), "H100-SXM"):
        try:
            gpu = catalog.lookup(name or "")
        except ValueError:
            continue
        return replace(gpu, usable_bytes=capacity, usable_note="free memory sampled at launch")
    raise AssertionError("H100-SXM is in the catalog")


def _rewrite(ctx: LaunchContext, verdict: Verdict, request, rank: int) -> Verdict:
    """The candidate as this process's argv (and a new DeepSpeed config file): the same on every rank."""
    from guard.launch.rewrite import rewritten_argv

    try:
        argv, notes = rewritten_argv(request, verdict.candidate.job, sys.argv, ctx.directory, rank)
    except ValueError as err:
        return Verdict("abort", f"cannot rewrite: {err}", verdict.report + [f"cannot rewrite: {err}"])
    return Verdict("rewrite", verdict.reason, verdict.report + notes, verdict.candidate, argv)


def _finish(ctx: LaunchContext, verdict: Verdict, rank: int, talk, exit_with, always: bool = False) -> Verdict:
    """Rank 0 reports; every rank leaves the verdict for its node's guard launch (whichever exits first) and
    waits until rank 0 has reported; then an abort exits every rank."""
    if rank == 0 or always:
        lines = [f"guard launch: {verdict.action}: {verdict.reason}"] + [f"  {line}" for line in verdict.report]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    if ctx.directory:
        path = ctx.verdict_path()
        with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as handle:
            json.dump({"action": verdict.action, "reason": verdict.reason, "rank": rank}, handle)
        os.replace(f"{path}.{os.getpid()}", path)
    if talk is not None:
        try:
            talk.barrier("reported")
            talk.close()
        except (exchange.ExchangeTimeout, RuntimeError) as err:
            sys.stderr.write(f"guard launch: rank {rank}: {err}\n")
            verdict = Verdict("abort", str(err))
    if verdict.action == "abort":
        sys.stdout.flush()
        sys.stderr.flush()
        exit_with(ABORT)  # the hook: os._exit (a SystemExit raised in sitecustomize is reported and ignored)
    return verdict
