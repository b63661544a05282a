"""`guard rule CODE`, `guard rules`, and `guard schema megatron`: the rule documentation and the flag tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guard.errors import InputError


def run_rule(args: argparse.Namespace) -> int:
    from guard.rules import load_all
    from guard.rules.registry import lookup

    load_all()
    found = lookup(args.code)
    if found is None:
        raise InputError(f"guard rule: unknown rule {args.code!r} (see `guard rules`)")
    sys.stdout.write(found.doc())
    return 0


def run_rules(args: argparse.Namespace) -> int:
    import json

    from guard.rules import load_all
    from guard.rules.registry import RULES

    load_all()
    rows = sorted(RULES.values(), key=lambda r: r.code)
    if args.format == "json":
        json.dump([{"code": r.code, "name": r.name, "severity": r.severity.value, "summary": r.summary}
                   for r in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for r in rows:
        sys.stdout.write(f"{r.code:8} {r.severity.value:8} {r.name:42} {r.summary}\n")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    if args.schema_kind != "megatron":
        raise InputError("guard schema: give a kind: megatron")
    from guard.megatron.schema_gen import build_table, write_table

    source = Path(args.source)
    if not source.is_dir():
        raise InputError(f"guard schema megatron: --source: no such folder: {args.source}")
    try:
        table = build_table(source, ref=args.ref or "", commit=args.commit, repo=args.repo)
    except ValueError as err:
        raise InputError(f"guard schema megatron: {err}") from None
    if not table["source"]["ref"]:
        commit = table["source"]["commit"]
        if not commit:
            raise InputError("guard schema megatron: not a git checkout: give --ref (and --commit)")
        table["source"]["ref"] = commit[:7]
    path = write_table(table, Path(args.out))
    sys.stdout.write(f"{path}: {len(table['flags'])} flags from {table['source']['repo']} "
                     f"{table['source']['ref']} ({table['source']['commit'] or 'commit unknown'})\n")
    for note in table["notes"]:
        sys.stdout.write(f"  note: {note}\n")
    return 0
