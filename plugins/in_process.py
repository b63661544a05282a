"""The launch check inside a training process that guard launch did not start: sample, exchange, decide.

Settings come from the environment: GUARD_POLICY (abort | warn | rewrite, default abort), GUARD_ALLOW (the
knobs a rewrite may change, default micro_batch,recompute,sharding,offload), GUARD_HEADROOM (a size or a
percentage), GUARD_EXCHANGE_TIMEOUT (seconds, default 120). An abort raises SystemExit(3) on every rank.
"""

from __future__ import annotations

import os

from guard.launch.context import DONE_ENV  # set once a rank is checked: the hook and the plugins check once


def already_checked() -> bool:
    """True when this rank was checked (by guard launch's hook or another plugin); marks it checked."""
    if os.environ.get(DONE_ENV):
        return True
    os.environ[DONE_ENV] = str(os.getpid())
    return False


def _abort(code: int) -> None:
    raise SystemExit(code)


def run_check(request, apply=None):
    """The verdict for this rank of `request` (a guard.launch.command.LaunchRequest); a rewrite is applied by
    `apply(ctx, verdict, request, rank)` (None: this process's argv)."""
    from guard.launch.context import DEFAULT_ALLOW, LaunchContext
    from guard.launch.in_rank import check
    from guard.launch.preflight import predictions

    env = os.environ
    allow = [k.strip() for k in env.get("GUARD_ALLOW", ",".join(DEFAULT_ALLOW)).split(",") if k.strip()]
    ctx = LaunchContext(env.get("GUARD_POLICY", "abort"), allow, env.get("GUARD_HEADROOM", "0"), list(request.argv),
                        {}, {}, predictions(request), [f for f, _ in request.source.job.unmodelled],
                        float(env.get("GUARD_EXCHANGE_TIMEOUT", "120")), "")
    return check(ctx, lambda: request, apply, exit_with=_abort)


def settings_from_environment():
    """guard Settings with the world the launcher gave this process (WORLD_SIZE, LOCAL_WORLD_SIZE)."""
    from guard.settings import Settings

    settings = Settings()
    settings.world_size = int(os.environ.get("WORLD_SIZE", "1"))
    settings.world_size_source, settings.world_size_label = "cli", "WORLD_SIZE"
    settings.force_world_size = True  # the process runs `python script.py`: only the environment knows the world
    settings.gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or None
    settings.gpu = os.environ.get("GUARD_GPU") or None
    return settings
