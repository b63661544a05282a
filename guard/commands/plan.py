"""`guard plan`: the job read like `guard estimate`, its layouts searched, the best judged in memory by every rule
(guard/judge.py) and written back as a diff of the user's own files."""

from __future__ import annotations

import argparse
import sys
import time

from guard.errors import InputError
from guard.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.intake.read import read
    from guard.judge import Judge
    from guard.memory.gpu_choice import choose_gpu
    from guard.option_table import request_for
    from guard.plan.rewrite import write_candidate
    from guard.plan.search import plan
    from guard.report import plan_writer

    from guard.plan.measured_log import compare, read_log

    measured = read_log(args.measured) if args.measured else None  # a bad log is refused before the search
    gpu = choose_gpu(settings.gpu, settings.gpu_memory)
    if gpu is None:
        raise InputError("give the GPU the job runs on: --gpu NAME (a catalog name, see guard estimate --list-models)")
    subject = read(request_for(args, args.inputs), settings)
    subject.job.require(layout=False)  # a layout that cannot run is still planned for
    subject.job.step.moe_imbalance = args.moe_imbalance  # the one place the plan's stated routing enters the job
    verify = Judge(settings, memory=False).verify(subject)
    with _Progress() as progress:
        result = plan(subject.job, gpu, top=args.top, headroom=args.headroom.of(gpu.usable_bytes), verify=verify,
                      progress=progress.update, allow=args.allow)
    for cand in result.candidates:
        cand.changes = write_candidate(subject, cand.job)
    if measured is not None and result.current.time is not None:
        priced = result.current.time
        result.measured = compare(measured, priced.terms, priced.seconds, priced.pipeline)
    plan_writer(args.format)(result, sys.stdout, explain=args.explain)
    return 0 if result.candidates else 1


class _Progress:
    """A rich progress bar on stderr once a search has run for a second (and only on a terminal)."""

    def __init__(self):
        self.started, self.bar, self.task = time.monotonic(), None, None

    def __enter__(self):
        return self

    def update(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.started < 1.0 or not sys.stderr.isatty():
                return
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("guard plan: searching layouts", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
