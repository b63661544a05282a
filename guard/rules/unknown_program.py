"""Upstream's judgements of a command whose program is a fork's, lowered to info: the fork's own parser
and validate_args may accept what upstream Megatron refuses (MLM011 says so once per command)."""

from __future__ import annotations

from dataclasses import replace

from guard.diagnostic import Diagnostic, Severity

KEPT = ("MLM011",)  # the one finding that names the unknown program itself


def soften(cmd, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The Megatron-flag findings of a command run by a program the flag table does not know, as info."""
    if cmd.table.knows_program(cmd.program):
        return diagnostics
    out = []
    for diag in diagnostics:
        if diag.code.startswith("MLM") and diag.code not in KEPT and diag.severity is not Severity.INFO:
            diag = replace(diag, severity=Severity.INFO,
                           message=f"{diag.message} (upstream Megatron {cmd.table.ref} says {diag.severity.value}; "
                                   f"{cmd.program} may judge it otherwise)")
        out.append(diag)
    return out
