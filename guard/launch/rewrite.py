"""A rank's argv for the rewritten job: Megatron flags appended (argparse keeps the last), or the DeepSpeed
config written to a new file beside the launch context (atomic; the user's file is never touched)."""

from __future__ import annotations

import difflib
import os

from guard.job.edits import apply_edits
from guard.launch.command import LaunchRequest, replace_config


def rewritten_argv(request: LaunchRequest, new, argv: list[str], directory: str, rank: int
                   ) -> tuple[list[str], list[str]]:
    """(argv, notes) for `new`; ValueError with the writer's reasons when the change cannot be written."""
    source = request.source
    if source.command is not None:
        from guard.job.write_megatron import megatron_flags

        flags = megatron_flags(source.job, new, source.command)
        if flags.refused:
            raise ValueError("; ".join(r.describe() for r in flags.refused))
        return list(argv) + list(flags), [f"appended to the command: {' '.join(flags)}"]
    from guard.job.write_deepspeed import deepspeed_edits
    from guard.sources.loader import read_text

    rewrite = deepspeed_edits(source.config, source.job, new)
    if rewrite.refused:
        raise ValueError("; ".join(r.describe() for r in rewrite.refused))
    path = request.config_path
    old = read_text(path)[0]
    text = apply_edits(old, rewrite.for_path(source.config.path))
    target = os.path.join(directory, f"rank{rank}-{os.path.basename(path)}")
    with open(f"{target}.tmp", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(f"{target}.tmp", target)
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True), path, target))
    return replace_config(argv, path, target), [f"DeepSpeed config written to {target} ({path} is unchanged):",
                                                *diff.rstrip("\n").splitlines()]
