"""guard launch's start-up hook: on PYTHONPATH of the processes a launch starts, it runs before the training script.

Inert unless GUARD_LAUNCH is set; runs the user's own sitecustomize first; checks each rank once (its children
inherit GUARD_LAUNCH_DONE and skip). It fails closed: under --policy abort (the default) any failure of the check
itself (guard not importable in this Python, an unreadable context, a probe or exchange error, a bug) stops this
process with exit 3 and one line saying why; under --policy warn it says so and lets the job run. Only the
standard library is used until guard itself is imported.
"""

import os
import sys

ABORT = 3


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


def _failed(message: str) -> None:
    """The check could not decide: under abort this process stops (and says so to guard launch), under warn the
    job runs, said so."""
    policy = os.environ.get("GUARD_LAUNCH_POLICY", "abort")
    if policy == "warn":
        sys.stderr.write(f"guard launch: {message}; --policy warn: this process runs unchecked\n")
        return
    sys.stderr.write(f"guard launch: {message}; stopping (--policy {policy}: the job never runs unchecked)\n")
    folder = os.environ.get("GUARD_LAUNCH_DIR")
    if folder and os.path.isdir(folder):
        import json

        path = os.path.join(folder, "verdict.json")
        try:
            with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as handle:
                json.dump({"action": "abort", "reason": message, "rank": None}, handle)
            os.replace(f"{path}.{os.getpid()}", path)
        except OSError:
            pass  # the exit code still says it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ABORT)


def _check() -> None:
    if not os.environ.get("GUARD_LAUNCH") or os.environ.get("GUARD_LAUNCH_DONE"):
        return
    try:
        from guard.launch.in_rank import main
    except BaseException as err:  # noqa: BLE001 - another Python than guard launch's, a broken install, ...
        _failed(f"the check cannot run in {sys.executable}: {type(err).__name__}: {err}")
        return
    try:
        main()
    except BaseException as err:  # noqa: BLE001 - whatever broke, the job must not run unchecked under abort
        _failed(f"the check failed in pid {os.getpid()}: {type(err).__name__}: {err}")


_chain()
_check()
