"""Reporters: every feature prints its diagnostics through one of these formats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TextIO

if TYPE_CHECKING:  # `guard estimate` imports its reporters from here without loading the checker
    from guard.checker import CheckResult

Reporter = Callable[["CheckResult", TextIO], None]


def get(name: str) -> Reporter:
    from guard.report import concise, full, github, json_report, sarif

    return {
        "concise": concise.render,
        "full": full.render,
        "json": json_report.render,
        "sarif": sarif.render,
        "github": github.render,
    }[name]


FORMATS = ("concise", "full", "json", "sarif", "github")
