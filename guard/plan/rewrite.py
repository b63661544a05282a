"""A candidate written back into the user's own files by the job's round-trip writer, as edits and a diff.

The user's files are never touched: the edited texts live in memory and are shown as a unified diff (the
candidate itself is judged in memory, guard/judge.py); a Megatron job also gets the flags a launcher may
append instead.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from guard.job.edits import Edit, Refusal, apply_edits
from guard.job.subject import Subject
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


def write_candidate(subject: Subject, new: TrainingJob) -> Written:
    """Edits that turn the user's job into `new`; what the writer refuses is in `.refused`."""
    from guard.job.write_deepspeed import deepspeed_edits
    from guard.job.write_megatron import megatron_edits, megatron_flags

    cmd = subject.command
    texts = {cmd.path: subject.argv_text} if cmd is not None and subject.argv_text else {}
    flags = None
    if cmd is not None:
        rewrite = megatron_edits(cmd, subject.job, new, texts)
        flags = megatron_flags(subject.job, new, cmd)
    elif subject.kind == "deepspeed":
        rewrite = deepspeed_edits(subject.deepspeed.doc, subject.job, new)
    else:  # a training config: its keys are not written back yet
        out = Written()
        out.refused.append(Refusal("training config", "guard does not write LLaMA-Factory / axolotl / TRL configs "
                                   "back yet: make the change shown by hand", subject.path))
        return out
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
