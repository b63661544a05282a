"""guard launch's start-up hook: on PYTHONPATH of the ranks it starts, it runs before the training script.

Inert unless GUARD_LAUNCH is set; runs once per rank (a process with a rank that has not run it: data-loader
and compile workers inherit GUARD_LAUNCH_DONE and skip); runs the user's own sitecustomize first.
"""

import os
import sys


def _chain() -> None:
    """Import the sitecustomize this one shadows (the next one on sys.path), if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _armed() -> bool:
    env = os.environ
    # bare srun starts the ranks itself (SLURM_PROCID); under torchrun or deepspeed only the workers have RANK
    has_rank = ("RANK" in env and "LOCAL_RANK" in env) or \
        (env.get("GUARD_LAUNCH_SLURM") == "1" and "SLURM_PROCID" in env)
    return bool(env.get("GUARD_LAUNCH")) and has_rank and not env.get("GUARD_LAUNCH_DONE")


_chain()
if _armed():
    os.environ["GUARD_LAUNCH_DONE"] = str(os.getpid())
    from guard.launch.in_rank import main

    main()
