"""What the start-up hook runs in each process a launch starts, before the training script: tell a rank from a
launcher's own process, sample the rank's GPU, send the sample to the decider (rank 0), and apply the one verdict
it publishes (run, abort, or the same rewrite on every rank)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import Callable

from guard.launch import exchange, probe
from guard.launch.context import DIR_ENV, DONE_ENV, ENV, LaunchContext
from guard.launch.decision import Verdict, decide, failed

ABORT = 3


class NotARank(Exception):
    """A process of the launch that is no rank and no known launcher process (fail closed: nothing guessed)."""


def entry_point(argv: list[str]) -> str:
    """The script (basename) or module a Python process runs, from sys.orig_argv ("" for -c code)."""
    args, i = argv[1:], 0
    while i < len(args):
        word = args[i]
        if word == "-m" or (word.startswith("-m") and len(word) > 2):
            return word[2:] or (args[i + 1] if i + 1 < len(args) else "")
        if word.startswith("-c"):
            return ""
        if not word.startswith("-") or word == "-":
            return os.path.basename(word)
        i += 2 if word in ("-W", "-X", "--check-hash-based-pycs") else 1
    return ""


def identify(ctx: LaunchContext, env, argv: list[str]) -> tuple[int, int, int] | None:
    """(rank, local rank, world) of this process; None for a launcher's own process (torchrun's agent, the
    deepspeed runner), which starts the ranks; NotARank for anything else when several ranks are expected."""
    for rank, local, world, _ in ctx.ranks.variables:
        if rank in env:
            return int(env[rank]), int(env.get(local, "0")), int(env.get(world, str(ctx.world)))
    if entry_point(argv) in ctx.ranks.agents:
        return None
    if ctx.world == 1:
        return 0, 0, 1  # one process, no launcher: it is rank 0 of 1
    names = ", ".join(v[0] for v in ctx.ranks.variables) or "none"
    raise NotARank(f"this process ({entry_point(argv) or 'python'}) has none of the rank variables of "
                   f"{ctx.ranks.launcher} ({names}), and {ctx.world} ranks are expected")


def main(env=os.environ) -> None:
    """The hook's entry: the context guard launch set, this process's place in the job, the verdict applied."""
    ctx = LaunchContext.decode(env[ENV])
    place = identify(ctx, env, getattr(sys, "orig_argv", sys.argv))
    if place is None:
        return  # a launcher's process: its children, the ranks, are checked
    rank, local, world = place
    env[DONE_ENV] = str(os.getpid())  # the rank's own children (data loaders, compile workers) skip the hook
    if world != ctx.world:
        raise RuntimeError(f"the launcher started {world} ranks, guard read {ctx.world} from the command")
    verdict = check(ctx, rank, local, lambda: _subject(ctx))
    _finish(ctx, verdict, rank)
    if verdict.change:
        from guard.launch.rewrite import apply_change

        sys.argv[:] = apply_change(verdict.change, sys.argv, rank, env.get(DIR_ENV))


def check(ctx: LaunchContext, rank: int, local: int, subject_of: Callable, talk=None) -> Verdict:
    """Sample, exchange, decide (rank 0), return the verdict every rank applies."""
    talk = talk or exchange.connect(rank, ctx.world, ctx.timeout_s)
    try:
        sample = probe.sample(rank, local)
    except probe.ProbeError as err:  # said to the decider, which stops every rank (or warns)
        sample = {"rank": rank, "error": str(err)}
    talk.publish(sample)
    if rank == exchange.DECIDER:
        verdict = _decide(ctx, talk, subject_of)
        _report(verdict)
        talk.announce(verdict.as_dict())
    else:
        data = talk.verdict()
        verdict = Verdict(data["action"], data["reason"], change=data.get("change"))
    talk.close()
    return verdict


def _decide(ctx: LaunchContext, talk, subject_of: Callable) -> Verdict:
    """The decider's verdict; a failure here is everyone's (abort, or under warn a run that says so)."""
    action = "run" if ctx.policy == "warn" else "abort"
    try:
        samples = talk.collect()
        broken = failed(samples)
        if broken:
            return Verdict(action, f"{len(broken)} of {ctx.world} ranks could not be checked", broken)
        return _with_change(ctx, decide(ctx, samples, _planner(ctx, samples, subject_of)), subject_of)
    except exchange.ExchangeTimeout as err:
        return Verdict(action, str(err))
    except Exception as err:  # noqa: BLE001 - whatever broke, the job must not run unchecked under abort
        return Verdict(action, f"the check failed: {type(err).__name__}: {err}")


def _planner(ctx: LaunchContext, samples: list[dict], subject_of: Callable):
    """The plan of the job on GPUs with `capacity` free, every candidate judged by the rules in memory."""
    def planner(capacity: int, allow):
        from guard.judge import Judge
        from guard.plan.search import plan

        subject = subject_of()
        return plan(subject.job, _gpu(ctx, samples, capacity), top=3, allow=allow,
                    verify=Judge(_settings(ctx), memory=False).verify(subject))
    return planner


def _with_change(ctx: LaunchContext, verdict: Verdict, subject_of: Callable) -> Verdict:
    if verdict.action != "rewrite":
        return verdict
    from guard.launch.rewrite import change_for

    try:
        change, notes = change_for(subject_of(), verdict.candidate.job)
    except ValueError as err:
        return Verdict("abort", f"cannot rewrite: {err}", verdict.report + [f"cannot rewrite: {err}"])
    return replace(verdict, report=verdict.report + notes, change=change)


def _settings(ctx: LaunchContext):
    from guard.settings import Settings

    settings = Settings()
    for name, value in ctx.settings.items():
        setattr(settings, name, value)
    return settings


def _subject(ctx: LaunchContext):
    """The job, read again here from what guard launch read it from (the decider plans with it)."""
    from guard.intake.launch import read_launch
    from guard.intake.request import Request

    return read_launch(ctx.argv, Request(**ctx.request), _settings(ctx))


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


def _report(verdict: Verdict) -> None:
    lines = [f"guard launch: {verdict.action}: {verdict.reason}"] + [f"  {line}" for line in verdict.report]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()


def _finish(ctx: LaunchContext, verdict: Verdict, rank: int) -> None:
    """Leave the verdict for this node's guard launch (when this node has its folder); an abort exits."""
    folder = os.environ.get(DIR_ENV)
    if folder and os.path.isdir(folder):
        leave_verdict(folder, verdict.action, verdict.reason, rank)
    if verdict.action == "abort":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(ABORT)  # a SystemExit raised in sitecustomize would be reported and ignored


def leave_verdict(folder: str, action: str, reason: str, rank: int | None) -> None:
    path = os.path.join(folder, "verdict.json")
    with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as handle:
        json.dump({"action": action, "reason": reason, "rank": rank}, handle)
    os.replace(f"{path}.{os.getpid()}", path)
