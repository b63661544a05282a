"""The launch check inside a training process that guard launch did not start: sample, exchange, decide.

Settings come from the environment, each through the validator of the guard launch option it stands for
(guard/options.py): GUARD_POLICY (abort | warn | rewrite, default abort), GUARD_ALLOW (the knobs a rewrite may
change, default micro_batch,recompute,sharding,offload), GUARD_HEADROOM (a size or a percentage),
GUARD_EXCHANGE_TIMEOUT (seconds, default 120). Under abort, anything that keeps the check from deciding (a bad
setting, a probe error, a bug) stops the rank: SystemExit(3) on every rank. A rank is checked once.
"""

from __future__ import annotations

import os
import sys

from guard.launch.context import DONE_ENV  # set once a rank is checked: the hook and the plugins check once

ABORT = 3


def already_checked() -> bool:
    """True when this rank was checked (by guard launch's hook or another plugin); marks it checked."""
    if os.environ.get(DONE_ENV):
        return True
    os.environ[DONE_ENV] = str(os.getpid())
    return False


def _stop(message: str, policy: str):
    """The check could not decide: under abort the rank stops; under warn it says so and runs."""
    sys.stderr.write(f"guard: {message}; " + ("--policy warn: running unchecked\n" if policy == "warn"
                                               else f"stopping (GUARD_POLICY={policy}: a job never runs unchecked)\n"))
    if policy != "warn":
        raise SystemExit(ABORT)


def guarded(read_subject, apply=None):
    """Run the check on the subject `read_subject()` gives (guard/intake/in_process.py); a verdict to apply, or
    None when the job runs as it is. Failures follow the policy (fail closed under abort)."""
    policy = os.environ.get("GUARD_POLICY", "abort")
    try:
        verdict = run_check(read_subject(), os.environ)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - a bad setting, a probe or exchange error, a bug
        _stop(f"the launch check failed: {type(err).__name__}: {err}", policy)
        return None
    if verdict.action == "abort":
        raise SystemExit(ABORT)
    return verdict if verdict.change else None


def run_check(subject, env):
    """This rank's verdict for `subject` (guard.job.subject.Subject), decided with every rank of the job."""
    from guard import options
    from guard.intake.in_process import environment_world
    from guard.launch.context import DEFAULT_ALLOW, LaunchContext, Ranks
    from guard.launch.in_rank import check
    from guard.launch.preflight import predictions
    from guard.launchers import registry

    policy = options.one_of("abort", "warn", "rewrite")(env.get("GUARD_POLICY", "abort"))
    allow = options.knobs(env.get("GUARD_ALLOW", ",".join(DEFAULT_ALLOW)))
    headroom = options.headroom(env.get("GUARD_HEADROOM", "0"))
    timeout = options.positive_int(env.get("GUARD_EXCHANGE_TIMEOUT", "120"))
    world = environment_world(env).size or 1
    rank, local = 0, 0
    for family in registry.rank_variables():
        if family.rank in env:
            rank, local = int(env[family.rank]), int(env.get(family.local_rank, "0"))
            break
    ctx = LaunchContext(policy, sorted(allow), [headroom.size, headroom.share], list(sys.argv), {}, {}, world,
                        predictions(subject), Ranks("in-process", []),
                        [feature for feature, _ in subject.job.unmodelled], float(timeout))
    return check(ctx, rank, local, lambda: subject)
