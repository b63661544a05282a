"""A rewrite, made once by the deciding rank and applied the same way by every rank: Megatron flags appended to
argv (argparse keeps the last), or the DeepSpeed config written to a new file on each node (atomically; the
user's file is never touched) and argv pointed at it."""

from __future__ import annotations

import difflib
import os
import tempfile

from guard.job.edits import apply_edits
from guard.job.subject import Subject
from guard.job.training_job import TrainingJob


def change_for(subject: Subject, new: TrainingJob) -> tuple[dict, list[str]]:
    """(the change every rank applies, notes for the report); ValueError with the writer's reasons when it cannot
    be written."""
    if subject.command is not None:
        from guard.job.write_megatron import megatron_flags

        flags = megatron_flags(subject.job, new, subject.command)
        if flags.refused:
            raise ValueError("; ".join(r.describe() for r in flags.refused))
        return {"flags": list(flags)}, [f"appended to the command: {' '.join(flags)}"]
    if subject.kind != "deepspeed":
        raise ValueError("guard does not write training configs (LLaMA-Factory, axolotl, TRL) back yet")
    from guard.job.write_deepspeed import deepspeed_edits

    doc = subject.deepspeed.doc
    rewrite = deepspeed_edits(doc, subject.job, new)
    if rewrite.refused:
        raise ValueError("; ".join(r.describe() for r in rewrite.refused))
    text = apply_edits(doc.text, rewrite.for_path(doc.path))
    diff = "".join(difflib.unified_diff(doc.text.splitlines(keepends=True), text.splitlines(keepends=True),
                                        doc.path, f"{doc.path} (rewritten)"))
    return {"config": doc.path, "text": text}, [f"DeepSpeed config rewritten ({doc.path} is unchanged):",
                                                *diff.rstrip("\n").splitlines()]


def apply_change(change: dict, argv: list[str], rank: int, folder: str | None) -> list[str]:
    """This rank's argv with the change: flags appended, or the config path replaced by a new file in `folder`
    (the launching node's, when this node has it) or a fresh one of this node's."""
    from guard.intake.launch import replace_config

    if "flags" in change:
        return list(argv) + list(change["flags"])
    folder = folder if folder and os.path.isdir(folder) else tempfile.mkdtemp(prefix="guard-launch-")
    old = change["config"]
    target = os.path.join(folder, f"rank{rank}-{os.path.basename(old)}")
    with open(f"{target}.tmp", "w", encoding="utf-8") as handle:
        handle.write(change["text"])
    os.replace(f"{target}.tmp", target)
    return replace_config(argv, old, target)
