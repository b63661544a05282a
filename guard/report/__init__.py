"""Output registries, one per family: check reporters (diagnostics), estimate writers (memory estimates) and
plan writers (ranked layouts)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, TextIO

if TYPE_CHECKING:  # the CLI reads FORMATS without loading a reporter, the checker or the memory model
    from guard.check_result import CheckResult

Reporter = Callable[["CheckResult", TextIO], None]
EstimateWriter = Callable[..., None]  # (Estimate, TextIO, *, explain, color); "plot": (Estimate, path)

# name -> "module:function" in guard/report/, imported when asked for.
CHECK_REPORTERS = {"concise": "concise:render", "full": "full:render", "json": "json_report:render",
                   "sarif": "sarif:render", "github": "github:render"}
ESTIMATE_WRITERS = {"text": "memory_text:write", "json": "memory_json:write", "plot": "memory_plot:plot"}
PLAN_WRITERS = {"text": "plan_text:write", "json": "plan_json:write"}
FORMATS = tuple(CHECK_REPORTERS)  # guard check --format
ESTIMATE_FORMATS = ("text", "json")  # guard estimate --format; "plot" writes the --plot FILE


def _load(ref: str) -> Any:
    module, _, function = ref.partition(":")
    return getattr(import_module(f"guard.report.{module}"), function)


def get(name: str) -> Reporter:
    """The check reporter for `guard check --format NAME`."""
    return _load(CHECK_REPORTERS[name])


def estimate_writer(name: str) -> EstimateWriter:
    """The estimate writer for `guard estimate --format NAME` ("text", "json"), or "plot" for --plot FILE."""
    return _load(ESTIMATE_WRITERS[name])


def plan_writer(name: str) -> Callable[..., None]:
    """The plan writer for `guard plan --format NAME` ("text", "json"): (Plan, TextIO, *, explain)."""
    return _load(PLAN_WRITERS[name])
