"""A candidate written back into the user's own files by the job's round-trip writer, as edits and a diff.

The user's files are never touched: the edited texts live in memory (checked through
guard.sources.loader.overlay) and are shown as a unified diff; a Megatron job also gets the flags a
launcher may append instead.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from guard.job.edits import Edit, Refusal, apply_edits
from guard.job.from_inputs import JobSource
from guard.job.training_job import TrainingJob
from guard.sources.document import SourceError
from guard.sources.loader import read_text


@dataclass
class Written:
    edits: list[Edit] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)  # path -> the user's text
    after: dict[str, str] = field(default_factory=dict)  # path -> the edited text
    flags: list[str] = field(default_factory=list)  # Megatron: the changed flags as argv words
    flags_refused: list[Refusal] = field(default_factory=list)

    @property
    def diff(self) -> str:
        out = []
        for path, old in self.before.items():
            new = self.after[path]
            if new != old:
                out.extend(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                path, f"{path} (planned)"))
        return "".join(line if line.endswith("\n") else line + "\n" for line in out)

    def as_json(self) -> list[dict]:
        return [{"path": e.path, "start": list(e.start), "end": list(e.end), "replacement": e.replacement}
                for e in self.edits]


def write_candidate(source: JobSource, new: TrainingJob) -> Written:
    """Edits that turn the user's job into `new`; what the writer refuses is in `.refused`."""
    from guard.job.write_deepspeed import deepspeed_edits
    from guard.job.write_megatron import megatron_edits, megatron_flags

    texts = {source.command.path: source.argv_text} if source.command is not None and source.argv_text else {}
    if source.command is not None:
        rewrite = megatron_edits(source.command, source.job, new, texts)
        flags = megatron_flags(source.job, new, source.command)
    else:
        rewrite, flags = deepspeed_edits(source.config, source.job, new), None
    out = Written(list(rewrite), list(rewrite.refused))
    if flags is not None:
        out.flags, out.flags_refused = list(flags), list(flags.refused)
    for path in sorted({e.path for e in rewrite}):
        try:
            old = texts[path] if path in texts else read_text(path)[0]
        except SourceError as err:
            out.refused.append(Refusal("file", err.message, path))
            continue
        out.before[path] = old
        out.after[path] = apply_edits(old, rewrite.for_path(path))
    return out
