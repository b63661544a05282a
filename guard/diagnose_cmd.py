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


def run(args: argparse.Namespace) -> int:
    from guard.diagnose import report, snapshot
    from guard.diagnose.events import events
    from guard.diagnose.log_lines import read_lines

    found = []
    for path in args.logs:
        if not os.path.isfile(path):
            raise EstimateError(f"{path}: no such file")
        found.extend(events(read_lines(path)))
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
    (report.write_json if args.format == "json" else report.write_text)(result, sys.stdout)
    return 0 if found else 1
