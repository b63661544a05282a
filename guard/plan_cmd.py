"""`guard plan`: read the job like `guard estimate`, search its layouts, check the best with the rules, print."""

from __future__ import annotations

import argparse
import sys
import time

from guard.cli_options import positive_int
from guard.estimate_cmd import EstimateError, add_input_options, build_source
from guard.settings import Settings

PLAN_FORMATS = ("text", "json")


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="the layouts of a job that fit its GPUs, ranked by predicted step time")
    add_input_options(plan)
    plan.add_argument("--top", type=positive_int, default=5, metavar="K", help="how many layouts to show (5)")
    plan.add_argument("--headroom", default="0", metavar="SIZE|PCT",
                      help="memory to leave free on every GPU: a size (2GiB) or a share of it (10%%)")
    plan.add_argument("--allow", default=None, metavar="KNOBS",
                      help="comma-separated knobs the plan may change (default all): tp, pp, vpp, cp, ep, "
                           "micro_batch, recompute, sharding, offload")
    plan.add_argument("--format", choices=PLAN_FORMATS, default="text")
    plan.add_argument("--explain", action="store_true",
                      help="the step-time terms of each layout and every constant with its source")


def headroom_bytes(text: str, capacity: int) -> int:
    """--headroom: '10%' of the GPU's usable memory, or a size with a unit."""
    from guard.units import parse_size

    text = text.strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            raise EstimateError(f"--headroom: expected a size or a percentage, got {text!r}") from None
        if not 0 <= share < 100:
            raise EstimateError(f"--headroom: a percentage between 0 and 100, got {text!r}")
        return int(capacity * share / 100)
    if text in ("0", "0.0"):
        return 0
    try:
        return parse_size(text)
    except ValueError as err:
        raise EstimateError(f"--headroom: {err}") from None


def allowed_knobs(text: str | None) -> frozenset[str] | None:
    """--allow tp,pp,micro_batch: the knobs a plan may change (None: all)."""
    from guard.plan.space import KNOBS

    if text is None:
        return None
    names = frozenset(part.strip().replace("-", "_") for part in text.split(",") if part.strip())
    unknown = sorted(names - set(KNOBS))
    if unknown or not names:
        shown = ", ".join(unknown) or repr(text)
        raise EstimateError(f"--allow: unknown knob {shown} (known: {', '.join(KNOBS)})")
    return names


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.memory.gpu_choice import choose_gpu
    from guard.plan.hardware import NoSpeeds
    from guard.plan.search import plan
    from guard.report import plan_writer

    gpu = choose_gpu(settings.gpu, settings.gpu_memory)
    if gpu is None:
        raise EstimateError("give the GPU the job runs on: --gpu NAME (a catalog name, see guard estimate "
                            "--list-models)")
    source = build_source(args, settings, layout=False)  # a layout that cannot run is still planned for
    headroom = headroom_bytes(args.headroom, gpu.usable_bytes)
    allow = allowed_knobs(args.allow)
    try:
        with _Progress() as progress:
            result = plan(source.job, gpu, top=args.top, headroom=headroom, verify=rule_verifier(source, settings),
                          progress=progress.update, allow=allow)
    except NoSpeeds as err:
        raise EstimateError(str(err)) from None
    from guard.plan.rewrite import write_candidate

    for cand in result.candidates:
        cand.changes = write_candidate(source, cand.job)
    plan_writer(args.format)(result, sys.stdout, explain=args.explain)
    return 0 if result.candidates else 1


def rule_verifier(source, settings: Settings):
    """The rules' new errors and warnings on a candidate, read back from its rewritten files."""
    from guard.checker import Checker
    from guard.plan.rewrite import write_candidate

    checker = Checker(settings)
    baseline = _findings(checker, source, None)

    def verify(job) -> list[str]:
        written = write_candidate(source, job)
        if written.refused:  # not writable as a whole: nothing to read back (the refusal is shown)
            return []
        found = _findings(checker, source, written)
        return [f"{code}: {message}" for key, (code, message) in found.items() if key not in baseline]

    return verify


def _findings(checker, source, written) -> dict:
    """(code, where) -> (code, message) of the errors and warnings on the job's files as `written` leaves them."""
    from guard.sources.loader import overlay

    if source.command is not None and source.argv_text is not None:
        text = written.after.get(source.command.path, source.argv_text) if written else source.argv_text
        diags = checker.check_argv(text)
    else:
        path = source.command.path if source.command is not None else source.config.path
        with overlay(written.after if written else {}):
            diags = checker.run([path]).diagnostics
    return {(d.code, d.pointer): (d.code, d.message) for d in diags if d.severity.value in ("error", "warning")}


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
