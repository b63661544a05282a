"""`guard launch [options] -- LAUNCHER ...`: check the job, predict every rank, arm the start-up hook in the
ranks, run the launcher with signals forwarded; exit 3 when the ranks aborted, else the launcher's code."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile

from guard.estimate_cmd import EstimateError
from guard.launch.context import DEFAULT_ALLOW
from guard.settings import Settings

POLICIES = ("abort", "warn", "rewrite")
ABORTED = 3


def add_parser(sub) -> None:
    from guard.cli_options import add_job_options, positive_int

    launch = sub.add_parser("launch", help="check a job, then start it; abort or rewrite it before it runs out "
                                           "of GPU memory (guard launch [options] -- torchrun ...)")
    launch.add_argument("--policy", choices=POLICIES, default="abort")
    launch.add_argument("--allow", default=",".join(DEFAULT_ALLOW), metavar="KNOBS",
                        help=f"what rewrite may change (default {','.join(DEFAULT_ALLOW)}; also tp, pp, vpp, cp, ep)")
    launch.add_argument("--headroom", default="0", metavar="SIZE|PCT", help="memory to leave free on every GPU")
    launch.add_argument("--exchange-timeout", type=positive_int, default=120, metavar="S",
                        help="seconds the ranks wait for each other's GPU samples (default 120)")
    for name, meta, text in (("--hf-config", "FILE", "a Hugging Face config.json (a DeepSpeed program's model)"),
                             ("--model", "PRESET", "a model preset (a DeepSpeed program's model)")):
        launch.add_argument(name, default=None, metavar=meta, help=text)
    launch.add_argument("--seq-length", type=positive_int, default=None, metavar="S")
    launch.add_argument("--micro-batch-size", type=positive_int, default=None, metavar="B")
    launch.add_argument("--vocab-size", type=positive_int, default=None, metavar="V")
    launch.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None)
    launch.add_argument("--gradient-checkpointing", action="store_true")
    add_job_options(launch)
    launch.add_argument("launcher", nargs=argparse.REMAINDER, help="-- then the launcher command")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.job.from_inputs import InputError, JobInputs
    from guard.launch.command import read_launch
    from guard.plan_cmd import allowed_knobs

    command = args.launcher[1:] if args.launcher[:1] == ["--"] else args.launcher
    inputs = JobInputs(hf_config=args.hf_config, model=args.model, vocab_size=args.vocab_size,
                       seq_length=args.seq_length, micro_batch=args.micro_batch_size, precision=args.precision,
                       gradient_checkpointing=args.gradient_checkpointing)
    allow = allowed_knobs(args.allow)
    try:
        request = read_launch(command, inputs, settings)
    except InputError as err:
        raise EstimateError(str(err)) from None
    found = _rules(request, settings)
    if found:
        return found
    from guard.launch.preflight import context_for

    directory = tempfile.mkdtemp(prefix="guard-launch-")
    ctx = context_for(request, inputs, settings, args.policy, sorted(allow or ()), args.headroom,
                      args.exchange_timeout, directory)
    path = os.path.join(directory, "context.json")
    ctx.write(path)
    code = _run(command, _environment(path, request))
    aborted = _aborted(ctx)
    import shutil

    shutil.rmtree(directory, ignore_errors=True)  # the rewritten configs were read when the job started
    return ABORTED if aborted else code


def _rules(request, settings: Settings) -> int:
    """guard check's diagnostics on the job; an error stops the launch (exit 1)."""
    from guard.check_result import CheckResult
    from guard.checker import Checker
    from guard.report import get

    from dataclasses import replace

    # the launcher's world size is the one the job runs with (the batch triangle is judged with it)
    checker = Checker(replace(settings, world_size=request.world, world_size_source="launcher",
                              world_size_label=f"the launcher ({request.argv[0]})"))
    if request.source.command is not None:
        diags = checker.check_argv(request.text)
    else:
        diags = checker.run([request.config_path]).diagnostics
    errors = [d for d in diags if d.severity.value == "error"]
    if not errors:
        return 0
    get("concise")(CheckResult(diagnostics=errors, files=1), sys.stderr)
    sys.stderr.write("guard launch: not started: the job has errors (see guard check)\n")
    return 1


def _environment(path: str, request) -> dict[str, str]:
    from guard.launch.context import ENV

    hook = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch", "hook")
    env = dict(os.environ)
    env[ENV] = path
    env.pop("GUARD_LAUNCH_DONE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, env.get("PYTHONPATH", "")) if p)
    agents = ("torchrun", "torch.distributed.run", "deepspeed", "accelerate")
    if os.path.basename(request.argv[0]) == "srun" and not any(os.path.basename(a) in agents for a in request.argv):
        env["GUARD_LAUNCH_SLURM"] = "1"  # srun starts the ranks itself: they have SLURM_PROCID, not RANK
    return env


def _run(command: list[str], env: dict[str, str]) -> int:
    """The launcher as guard's child: SIGINT and SIGTERM go to it; its exit code is returned."""
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        raise EstimateError(f"cannot start {command[0]}: {err.strerror or err}") from None

    def forward(signum, _frame):
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _aborted(ctx) -> bool:
    import json

    try:
        with open(ctx.verdict_path(), encoding="utf-8") as handle:
            return json.load(handle).get("action") == "abort"
    except (OSError, ValueError):
        return False
