"""What a fine-tuning rule sees: the training config, the DeepSpeed file it names (filled as the Trainer fills it),
the model when guard can resolve it, and where to report."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import Diagnostic, Related
from guard.job import model_ref, trainer_fill
from guard.job.finetune_config import FineTuneConfig
from guard.job.architecture import Architecture
from guard.job.hf_config import HfConfigError
from guard.rules.registry import Rule
from guard.sources.document import Document, SourceError, pointer_of


@dataclass
class FineTuneCheck:
    ft: FineTuneConfig
    ds_doc: Document | None = None  # the DeepSpeed file it names, as written
    ds_filled: dict[str, Any] | None = None  # ... with "auto" filled from the training config
    mismatches: list[trainer_fill.Mismatch] = field(default_factory=list)
    ds_missing: bool = False  # a `deepspeed:` path that is not there
    ds_error: tuple[str, SourceError] | None = None  # the DeepSpeed file, unreadable or unparsable
    arch: Architecture | None = None
    world: int | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def zero_stage(self) -> int | None:
        zero = (self.ds_filled or {}).get("zero_optimization")
        stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
        return stage if self.ds_filled is not None and isinstance(stage, int) else None

    def zero(self, key: str, default: Any = None) -> Any:
        zero = (self.ds_filled or {}).get("zero_optimization")
        return zero.get(key, default) if isinstance(zero, dict) else default

    def report(self, rule: Rule, name: str, message: str, *, help: str | None = None, value: bool = True,
               related: list[Related] | None = None) -> None:
        place = self.ft.where(name)  # a key of the file, or the flag that wrote it on a command line
        path, pointer = (place.path, place.pointer) if place else (self.ft.path, None)
        self.diagnostics.append(rule.diagnostic(path, message, self.ft.span(name, value=value), pointer,
                                                help=help, related=related or []))

    def ds_related(self, *path: str, message: str) -> list[Related]:
        if self.ds_doc is None:
            return []
        return [Related(message, self.ds_doc.path, self.ds_doc.span(pointer_of(path)))]


def build(ft: FineTuneConfig, world: int | None, load) -> FineTuneCheck:
    """`load(path)` -> Document, or raises SourceError (kept in ds_error for the checker to report)."""
    from guard.job.from_finetune import deepspeed_file

    check = FineTuneCheck(ft, world=world)
    name = ft.get("model")
    if isinstance(name, str) and name:
        try:
            check.arch, _ = model_ref.resolve(name, os.path.dirname(ft.path))
        except (model_ref.UnknownModel, HfConfigError):
            check.arch = None
    written = ft.get("deepspeed")
    path = deepspeed_file(ft)
    if isinstance(written, str) and written and path is None:
        check.ds_missing = True
    elif path:
        try:
            check.ds_doc = load(path)
        except SourceError as err:
            check.ds_error = (path, err)
            return check
        if isinstance(check.ds_doc.data, dict):
            check.ds_filled, check.mismatches = trainer_fill.fill(check.ds_doc.data, ft, world)
    elif isinstance(written, dict):
        check.ds_filled, check.mismatches = trainer_fill.fill(written, ft, world)
    return check
