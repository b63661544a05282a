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
    diag.add_argument("--format", choices=("text", "json"), default="text")
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
    from guard.diagnose import report, snapshot
    from guard.diagnose.events import file_events

    found = []
    for path in args.logs:
        if not os.path.isfile(path):
            raise EstimateError(f"{path}: no such file")
        found.extend(file_events(path))
    summaries = {}
    for path in args.snapshot:
        if not os.path.isfile(path):
            raise EstimateError(f"{path}: no such file")
        try:
            summary = snapshot.summarise(snapshot.load(path))
        except snapshot.SnapshotError as err:
            raise EstimateError(str(err)) from None
        summaries[path] = {"reserved": summary.reserved, "allocated": summary.allocated,
                           "fragmentation": summary.fragmentation, "by_category": summary.by_category,
                           "largest": [{"bytes": b, "where": w} for b, w in summary.largest]}
    result = report.to_dict(found, summaries)
    source = _source(args)
    if source is not None and found:
        from guard.diagnose.with_job import layouts_that_fit, rank_rows
        from guard.plan_cmd import rule_verifier

        rows = rank_rows(source.job, found)
        for entry in result["ranks"]:
            entry.update(rows.get(entry["rank"], {}))
        verify = rule_verifier(source, source_settings(args))
        result["layouts_that_fit"] = layouts_that_fit(source.job, found, args.gpu, verify)
    (report.write_json if args.format == "json" else report.write_text)(result, sys.stdout)
    return 0 if found else 1


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
