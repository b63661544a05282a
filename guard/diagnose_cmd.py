"""`guard diagnose LOG... [--snapshot FILE]`: the out-of-memory events of a job's logs, per rank, with the
cause and what to change. Exit 0 when it found some, 1 when the logs hold none, 2 for bad input."""

from __future__ import annotations

import argparse
import os
import sys

from guard.estimate_cmd import EstimateError


def add_parser(sub) -> None:
    diag = sub.add_parser("diagnose", help="why a job ran out of memory, from its logs (per rank, cause, fix)")
    diag.add_argument("logs", nargs="+", metavar="LOG", help="log files: one per rank, or combined output")
    diag.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                      help="a memory snapshot (torch.cuda.memory._dump_snapshot), read without running its code")
    diag.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    job = diag.add_argument_group("the job (optional: coordinates, prediction and layouts that fit)")
    job.add_argument("--script", action="append", default=[], metavar="FILE", help="its launch script")
    job.add_argument("--megatron-args", default=None, metavar="ARGS", help="its Megatron command line")
    job.add_argument("--deepspeed", default=None, metavar="FILE", help="its DeepSpeed config")
    job.add_argument("--hf-config", default=None, metavar="FILE")
    job.add_argument("--model", default=None, metavar="PRESET")
    job.add_argument("--seq-length", type=int, default=None, metavar="S")
    job.add_argument("--world-size", type=int, default=None, metavar="N")
    job.add_argument("--gpu", default=None, metavar="NAME", help="the GPU (for the step times of the layouts)")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from guard.diagnose import report
    from guard.diagnose.markdown import write_markdown
    from guard.diagnose.scan import LogScan, scan_file

    scan = LogScan()
    for path in args.logs:
        if not os.path.isfile(path):
            raise EstimateError(f"{path}: no such file")
        scan_file(path, scan)
    scan.finish()
    found = scan.events
    summaries = {path: _snapshot(path) for path in args.snapshot}
    source, job_from = _job(args, scan)
    compared = {}
    if source is not None and found:
        from guard.diagnose.compare import as_dict
        from guard.diagnose.with_job import comparisons

        compared = {c.rank: as_dict(c) for c in comparisons(source.job, found, scan.readings)}
    result = report.to_dict(found, summaries, compared, scan.expandable)
    result["memory_reports"] = [asdict(r) for r in scan.readings]
    if job_from:
        result["job_from"] = job_from
    if source is not None and found:
        from guard.diagnose.with_job import layouts_that_fit
        from guard.plan_cmd import rule_verifier

        verify = rule_verifier(source, source_settings(args))
        result["layouts_that_fit"] = layouts_that_fit(source, found, args.gpu, verify, diff=not job_from)
    writer = {"json": report.write_json, "markdown": write_markdown}.get(args.format, report.write_text)
    writer(result, sys.stdout)
    return 0 if found else 1


def _snapshot(path: str) -> dict:
    from guard.diagnose import snapshot

    if not os.path.isfile(path):
        raise EstimateError(f"{path}: no such file")
    try:
        summary = snapshot.summarise(snapshot.load(path))
    except snapshot.SnapshotError as err:
        raise EstimateError(str(err)) from None
    return {"reserved": summary.reserved, "allocated": summary.allocated, "fragmentation": summary.fragmentation,
            "by_category": summary.by_category, "largest": [{"bytes": b, "where": w} for b, w in summary.largest],
            "expandable_segments": summary.expandable_segments}


def _job(args: argparse.Namespace, scan):
    """The job from the inputs given, else from the arguments Megatron printed in the log; and where from."""
    source = _source(args)
    if source is not None:
        return source, None
    printed = scan.printed_args
    if printed is None:
        return None, None
    from guard.diagnose.with_job import LogJobError, source_from_printed

    try:
        source = source_from_printed(printed, source_settings(args))
    except LogJobError as err:  # the events are still diagnosed; the report says why there is no prediction
        return None, f"not priced: {err}"
    problem = getattr(source.command, "deepspeed_config_problem", "")
    return source, f"the arguments Megatron printed at {printed.source}:{printed.line}" + \
        (f"; {problem}: its ZeRO stage and the rest come from the printed flags alone" if problem else "")


def source_settings(args: argparse.Namespace):
    from guard.settings import Settings

    settings = Settings()
    settings.world_size = args.world_size
    return settings


def _source(args: argparse.Namespace):
    """The job (with what it was read from) from the inputs of guard estimate, when any is given."""
    from guard.job.from_inputs import InputError, JobInputs, read_source
    from guard.job.training_job import IncompleteJob

    if not (args.script or args.megatron_args or args.deepspeed):
        return None
    inputs = JobInputs(paths=list(args.script), megatron_args=args.megatron_args, deepspeed=args.deepspeed,
                       hf_config=args.hf_config, model=args.model, seq_length=args.seq_length)
    try:
        source = read_source(inputs, source_settings(args))
        source.job.require()
    except (InputError, IncompleteJob) as err:
        raise EstimateError(str(err)) from None
    return source
