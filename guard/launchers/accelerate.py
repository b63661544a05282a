"""`accelerate launch` (accelerate/commands/launch.py): its options, or the accelerate config file it is given."""

from __future__ import annotations

from guard.inputs import find_near
from guard.launchers.record import Launcher, Layer, Scope, Spelling, WorldReading, WorldWriting, number
from guard.launchers.torchrun import TORCH
from guard.shell.located import LText

SPELLING = Spelling(no_value=frozenset({
    "--multi_gpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm", "--cpu", "-m", "--module", "--no_python",
    "--debug", "-q", "--quiet", "--same_network", "--downcast_bf16", "--tpu", "--use_xpu", "--enable_cpu_affinity"}))


def config_file(layer: Layer, near: str) -> tuple[dict, str] | None:
    """(data, path) of the accelerate config `--config_file` names, when it is a file on this machine."""
    from guard.sources.document import SourceError
    from guard.sources.loader import load_document

    named = layer.get("--config_file")
    if named is None or not named.resolved:
        return None
    path = find_near(named.text, near)
    if path is None:
        return None  # a name accelerate resolves itself: guard does not guess it
    try:
        data = load_document(path).data
    except SourceError:
        return None
    return (data, path) if isinstance(data, dict) else None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_world(layer: Layer, scope: Scope) -> WorldReading:
    """--num_processes over all --num_machines; else the config file's num_processes and num_machines."""
    total = layer.get("--num_processes")
    machines = number(layer.get("--num_machines"))
    size = number(total)
    reading = WorldReading(where=total or layer.name)
    why = f"accelerate --num_processes {size}"
    if total is None:
        found = config_file(layer, scope.path)
        if found is not None and _count(found[0].get("num_processes")):
            data, path = found
            size, machines = data["num_processes"], machines or _count(data.get("num_machines"))
            why = f"num_processes {size} in {path}"
            reading.where = layer.get("--config_file")
    machines = machines or 1
    reading.size, reading.nodes = size, machines
    reading.gpus_per_node = size // machines if size else None
    reading.why = why if size else "accelerate: --num_processes is not given (it comes from the accelerate config)"
    return reading


def refusal(layer: Layer, scope: Scope) -> str:
    """launch.py deepspeed_launcher: several machines under DeepSpeed start over its multi-node launcher (pdsh by
    default) unless --deepspeed_multinode_launcher standard, which runs on each machine like torchrun."""
    machines = number(layer.get("--num_machines"))
    chosen = layer.get("--deepspeed_multinode_launcher") or LText.plain("pdsh")
    if layer.get("--use_deepspeed") is not None and machines and machines > 1 and chosen.text != "standard":
        return (f"accelerate launch --use_deepspeed on {machines} machines starts the other machines' ranks over "
                f"{chosen.text}, where guard's start-up hook does not reach: add --deepspeed_multinode_launcher "
                "standard and run guard launch on each machine")
    return ""


ACCELERATE = Launcher(
    "accelerate", "accelerate launch", executables=("accelerate",), subcommand="launch",
    modules=("accelerate.commands.launch",), spelling=SPELLING, read_world=read_world, ranks=(TORCH,),
    agents=("accelerate", "accelerate.commands.launch", "accelerate.commands.accelerate_cli"),
    writing=WorldWriting(total="--num_processes", total_alone="--num_machines"), refusal=refusal,
    plugin="guard.plugins.hf.GuardCallback() in the Trainer")
