"""srun (alone, or inside an sbatch script): it starts the tasks itself, each with SLURM_PROCID."""

from __future__ import annotations

from guard.launchers.record import Launcher, Layer, RankVariables, Scope, Spelling, WorldReading, WorldWriting, number

SLURM = RankVariables("Slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")
SPELLING = Spelling(
    no_value=frozenset({"--exclusive", "--overlap", "-l", "--label", "-u", "--unbuffered", "--pty", "-K", "-X", "-v",
                        "--verbose", "-Q", "--quiet", "--no-kill", "--kill-on-bad-exit", "-W"}),
    aliases={"-N": "--nodes", "-n": "--ntasks", "-G": "--gpus", "-c": "--cpus-per-task"},
    switches_before_program=True)


def read_world(layer: Layer, scope: Scope) -> WorldReading:
    """--ntasks, or --nodes x --ntasks-per-node; a bare srun runs the allocation's tasks (#SBATCH)."""
    tasks, nodes, per_node = (number(layer.get(o)) for o in ("--ntasks", "--nodes", "--ntasks-per-node"))
    if tasks is None and nodes is not None and per_node is not None:
        tasks = nodes * per_node
    reading = WorldReading(tasks, per_node, nodes, where=layer.get("--ntasks") or layer.get("--ntasks-per-node")
                           or layer.name)
    reading.why = f"srun: {tasks} tasks" if tasks else "srun: the task count is not known statically"
    if tasks is None and not any(layer.get(o) for o in ("--ntasks", "--nodes", "--ntasks-per-node")):
        tasks = number(scope.sbatch_value("--ntasks", "-n"))
        nodes = number(scope.sbatch_value("--nodes", "-N"))
        per_node = number(scope.sbatch_value("--ntasks-per-node"))
        if tasks is None and nodes is not None and per_node is not None:
            tasks = nodes * per_node
        if tasks is not None:
            reading = WorldReading(tasks, per_node, nodes, f"srun runs the job's {tasks} tasks (#SBATCH)",
                                   reading.where)
    reading.spawns = False  # srun is no Python process: the tasks it starts are the ranks
    return reading


def refusal(layer: Layer, scope: Scope) -> str:
    """--export without ALL hands the tasks only the variables it names: guard's would not reach them."""
    export = layer.get("--export")
    if export is not None and "ALL" not in export.text.split(","):
        return (f"srun --export={export.text} keeps guard's variables from the tasks: add ALL "
                f"(--export=ALL,{export.text}) or leave --export out")
    return ""


SRUN = Launcher("srun", "srun", executables=("srun",), spelling=SPELLING, read_world=read_world, ranks=(SLURM,),
                writing=WorldWriting(per_node="--ntasks-per-node", nodes="--nodes", total="--ntasks"),
                refusal=refusal)
