"""A JSON list of diagnostics (the contract in DESIGN.md: code, severity, path, line, col, pointer, message)."""

from __future__ import annotations

import json
from typing import TextIO

from guard.check_result import CheckResult


def render(result: CheckResult, out: TextIO) -> None:
    json.dump([d.to_json() for d in result.diagnostics], out, indent=2)
    out.write("\n")
