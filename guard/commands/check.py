"""`guard check PATH...`: lint configs, launch scripts and command lines; exit 1 at findings of --fail-on or worse."""

from __future__ import annotations

import argparse
import sys

from guard.errors import InputError
from guard.option_table import request_for
from guard.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard import report
    from guard.checker import Checker

    if not args.paths and not args.megatron_args:
        raise InputError("guard check: give at least one file or directory (or --megatron-args)")
    # argparse turns `--megatron-args=--` into an empty list instead of the string "--"
    megatron_args = [v if isinstance(v, str) else " ".join(["--", *v]) for v in args.megatron_args or []]
    request = request_for(args)
    result = Checker(settings, request).run(args.paths, megatron_args)
    report.get(args.format or "concise")(result, sys.stdout)
    if result.skipped and args.format in ("json", "github"):  # their stdout is for machines: the count goes aside
        from guard.report.concise import skipped

        print(f"guard: {skipped(result)}", file=sys.stderr)
    return 0 if args.exit_zero and result.exit_code == 1 else result.exit_code
