"""`import guard.plugins.megatron` as the first line of a Megatron training script (pretrain_gpt.py): the
launch check runs on this rank's command line before Megatron parses it, for jobs no guard launch started.

A rewrite appends the changed flags to sys.argv (Megatron's argparse keeps the last of a repeated flag).
"""

from __future__ import annotations

import sys

from guard.plugins.in_process import already_checked, guarded


def check_this_rank() -> None:
    from guard.intake.in_process import rank_command

    if already_checked():
        return
    verdict = guarded(lambda: rank_command([sys.executable, *sys.argv]))
    if verdict is not None and "flags" in verdict.change:
        sys.argv[:] = sys.argv + list(verdict.change["flags"])


check_this_rank()
