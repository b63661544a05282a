"""`guard launch [options] -- LAUNCHER ...`: every option validated and the job read, judged and predicted before
anything starts; the launcher then runs as guard's child with the start-up hook armed in every process it starts
(signals forwarded). Exit 3 when the ranks aborted, else the launcher's code; 2 for input guard cannot check."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile

from guard.errors import InputError
from guard.settings import Settings

ABORTED = 3
HOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch", "hook")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.intake.launch import read_launch
    from guard.launch.context import DIR_ENV, ENV, POLICY_ENV
    from guard.launch.preflight import context_for
    from guard.option_table import request_for

    command = args.launcher[1:] if args.launcher[:1] == ["--"] else args.launcher
    request = request_for(args)
    subject = read_launch(command, request, settings)  # a launcher the hook cannot reach is refused here
    if _has_errors(subject, settings):
        return 1
    subject.job.require()
    ctx = context_for(subject, request, settings, args.policy, args.allow, args.headroom, args.exchange_timeout,
                      command)
    try:
        encoded = ctx.encode()
    except ValueError as err:
        raise InputError(f"guard launch: {err}") from None
    folder = tempfile.mkdtemp(prefix="guard-launch-")
    env = _environment({ENV: encoded, POLICY_ENV: args.policy, DIR_ENV: folder})
    code = _run(_carried(subject, command, env), env)
    aborted = _aborted(folder)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)  # the rewritten configs were read when the job started
    return ABORTED if aborted else code


def _has_errors(subject, settings: Settings) -> bool:
    """guard check's errors on the job stop the launch (exit 1), judged on the world the launcher starts."""
    from guard.check_result import CheckResult
    from guard.judge import Judge
    from guard.report import get

    errors = [d for d in Judge(settings).judge(subject) if d.severity.value == "error"]
    if errors:
        get("concise")(CheckResult(diagnostics=errors, files=1), sys.stderr)
        sys.stderr.write("guard launch: not started: the job has errors (see guard check)\n")
    return bool(errors)


def _environment(ours: dict[str, str]) -> dict[str, str]:
    from guard.launch.context import DONE_ENV

    env = dict(os.environ)
    env.update(ours)
    env.pop(DONE_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK, env.get("PYTHONPATH", "")) if p)
    return env


def _carried(subject, command: list[str], env: dict[str, str]) -> list[str]:
    """The launcher command with whatever its records need to hand guard's variables to every rank (Open MPI's
    `-x NAME`), inserted after the launcher's own name."""
    from guard.launch.context import VARIABLES
    from guard.launchers import registry

    launch = subject.launch
    out = list(command)
    for layer in reversed(launch.layers if launch else []):
        record = registry.get(layer.kind)
        words = record.carries(layer, [*VARIABLES, "PYTHONPATH"]) if record.carries else []
        if words:
            at = next((i for i, word in enumerate(out) if word == layer.name.text), None)
            if at is not None:
                out[at + 1:at + 1] = words
    return out


def _run(command: list[str], env: dict[str, str]) -> int:
    """The launcher as guard's child: SIGINT and SIGTERM go to it; its exit code is returned."""
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        raise InputError(f"cannot start {command[0]}: {err.strerror or err}") from None

    def forward(signum, _frame):
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _aborted(folder: str) -> bool:
    import json

    try:
        with open(os.path.join(folder, "verdict.json"), encoding="utf-8") as handle:
            return json.load(handle).get("action") == "abort"
    except (OSError, ValueError):
        return False
