"""`guard diagnose LOG... [--snapshot FILE]`: the out-of-memory events of a job's logs, per rank, with the cause and
what to change. Exit 0 when it found some, 1 when the logs hold none, 2 for bad input."""

from __future__ import annotations

import argparse
import os
import sys

from guard.errors import InputError
from guard.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from guard.diagnose import report
    from guard.diagnose.markdown import write_markdown
    from guard.diagnose.scan import LogScan, scan_file

    scan = LogScan()
    for path in args.logs:
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        scan_file(path, scan)
    scan.finish()
    found = scan.events
    summaries = {path: _snapshot(path) for path in args.snapshot or []}
    subject, job_from = _job(args, settings, scan)
    compared = {}
    if subject is not None and found:
        from guard.diagnose.compare import as_dict
        from guard.diagnose.with_job import comparisons

        compared = {c.rank: as_dict(c) for c in comparisons(subject.job, found, scan.readings)}
    result = report.to_dict(found, summaries, compared, scan)
    result["memory_reports"] = [asdict(r) for r in scan.readings]
    if job_from:
        result["job_from"] = job_from
    if subject is not None and found:
        from guard.diagnose.with_job import layouts_that_fit
        from guard.judge import Judge

        verify = Judge(settings, memory=False).verify(subject)
        result["layouts_that_fit"] = layouts_that_fit(subject, found, settings.gpu, verify, diff=not job_from)
    writer = {"json": report.write_json, "markdown": write_markdown}.get(args.format, report.write_text)
    writer(result, sys.stdout)
    return 0 if found else 1


def _snapshot(path: str) -> dict:
    from guard.diagnose import snapshot

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    summary = snapshot.summarise(snapshot.load(path))
    return {"reserved": summary.reserved, "allocated": summary.allocated, "fragmentation": summary.fragmentation,
            "by_category": summary.by_category, "largest": [{"bytes": b, "where": w} for b, w in summary.largest],
            "expandable_segments": summary.expandable_segments}


def _job(args: argparse.Namespace, settings: Settings, scan):
    """The job from the inputs given (as guard estimate reads them), else from the arguments Megatron printed in
    the log; and where it came from."""
    from guard.intake.read import read
    from guard.option_table import request_for

    request = request_for(args)
    if request.paths or request.megatron_args or request.deepspeed:
        subject = read(request, settings)
        subject.job.require()
        return subject, None
    printed = scan.printed_args
    if printed is None:
        return None, None
    from guard.intake.printed import read_printed

    try:
        subject = read_printed(printed, settings, request)
        subject.job.require()
    except InputError as err:  # the events are still diagnosed; the report says why there is no prediction
        return None, f"not priced: {err}"
    problem = subject.command.deepspeed_config_problem
    return subject, f"the arguments Megatron printed at {printed.source}:{printed.line}" + \
        (f"; {problem}: its ZeRO stage and the rest come from the printed flags alone" if problem else "")
