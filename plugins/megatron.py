"""`import guard.plugins.megatron` as the first line of a Megatron training script (pretrain_gpt.py): the
launch check runs on this rank's command line before Megatron parses it, for jobs no guard launch started.

A rewrite appends the changed flags to sys.argv (Megatron's argparse keeps the last of a repeated flag).
"""

from __future__ import annotations

import sys

from guard.plugins.in_process import already_checked, run_check, settings_from_environment


def check_this_rank() -> None:
    from guard.job.from_inputs import JobInputs
    from guard.launch.command import read_launch

    if already_checked():
        return
    request = read_launch([sys.executable, *sys.argv], JobInputs(), settings_from_environment())
    verdict = run_check(request)
    if verdict.argv:
        sys.argv[:] = verdict.argv


check_this_rank()
