"""The `guard` command line: one parser built from the declared options (guard/option_table.py), one dispatch;
bad input is one line and exit 2, a bug in guard is a traceback and a request to report it."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from guard import __version__
from guard.errors import InputError

BUG = 70  # EX_SOFTWARE (sysexits.h): not the user's input, guard's own error
COMMANDS = {
    "check": "lint DeepSpeed configs, Megatron launch scripts and command lines",
    "estimate": "predict peak GPU memory for every rank of a job",
    "plan": "the layouts of a job that fit its GPUs, ranked by predicted step time",
    "launch": "check a job, then start it; abort or rewrite it before it runs out of GPU memory "
              "(guard launch [options] -- torchrun ...)",
    "diagnose": "why a job ran out of memory, from its logs (per rank, cause, fix)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit itself; guard owns its exit codes
        raise InputError(f"{self.prog}: {message}")


def _positionals(name: str, parser: argparse.ArgumentParser) -> None:
    if name == "check":
        parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories")
    elif name in ("estimate", "plan"):
        parser.add_argument("inputs", nargs="*", metavar="PATH",
                            help="a launch script, a command-line file, or a DeepSpeed / training config")
    elif name == "diagnose":
        parser.add_argument("logs", nargs="+", metavar="LOG", help="log files: one per rank, or combined output")
    elif name == "launch":
        parser.add_argument("launcher", nargs=argparse.REMAINDER, help="-- then the launcher command")


def build_parser() -> argparse.ArgumentParser:
    from guard.option_table import OPTIONS
    from guard.options import add_options

    parser = _Parser(prog="guard", description="Catch invalid and out-of-memory training configs "
                                               "before any GPU is spent.")
    parser.add_argument("--version", action="version", version=f"guard {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name, text in COMMANDS.items():
        command = sub.add_parser(name, help=text)
        _positionals(name, command)
        add_options(command, name, OPTIONS)
    schema = sub.add_parser("schema", help="regenerate a data table from a framework's sources")
    schema_sub = schema.add_subparsers(dest="schema_kind", parser_class=_Parser)
    meg = schema_sub.add_parser("megatron", help="flag table from a Megatron-LM or Megatron-DeepSpeed checkout")
    meg.add_argument("--source", required=True, metavar="PATH", help="the checkout (holds megatron/)")
    meg.add_argument("--ref", default=None, help="folder name of the table, e.g. core_v0.16.1 (default: the "
                                                 "commit's short hash)")
    meg.add_argument("--commit", default=None, help="source commit to record (default: git rev-parse HEAD)")
    meg.add_argument("--repo", default=None, help="owner/name to record")
    meg.add_argument("--out", default=os.path.join("schemas", "megatron"), metavar="DIR",
                     help="where <ref>/args.json is written (default schemas/megatron)")
    one = sub.add_parser("rule", help="print the documentation of one rule")
    one.add_argument("code", metavar="CODE")
    rules = sub.add_parser("rules", help="list every rule")
    rules.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in COMMANDS:
        from importlib import import_module

        from guard.option_table import settings_for

        try:
            settings = settings_for(args, args.command)
            return import_module(f"guard.commands.{args.command}").run(args, settings)
        except InputError as err:  # said once, with the command it is about
            text = str(err)
            raise InputError(text if text.startswith("guard ") else f"guard {args.command}: {text}") from None
    from guard.commands import rules

    handler = {"rule": rules.run_rule, "rules": rules.run_rules, "schema": rules.run_schema}.get(args.command)
    if handler is None:
        raise InputError("guard: give a command: check, estimate, plan, launch, diagnose, rule, rules or schema "
                         "(see guard --help)")
    return handler(args)


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(build_parser().parse_args(argv))
    except InputError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except SystemExit as err:  # --help / --version
        return err.code if isinstance(err.code, int) else 0
    except Exception:  # a bug in guard, not the user's input: the traceback, and where to send it
        traceback.print_exc(file=sys.stderr)
        sys.stderr.write(f"guard {__version__}: internal error (a bug in guard, not in your files): please report "
                         "it with the traceback above and the command that gave it\n")
        return BUG
