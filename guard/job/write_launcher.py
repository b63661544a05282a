"""A new world size written where the launcher takes it: the options its record (guard/launchers) names for
processes per node and nodes (--nproc-per-node/--nnodes, --num_gpus/--num_nodes), or for the process count."""

from __future__ import annotations

from guard.job.layout import ParallelLayout
from guard.job.write_shell import ShellWriter, written_ltext
from guard.launchers import registry

FIELD = "layout.world"


def world_edits(cmd, old: ParallelLayout, new: ParallelLayout, writer: ShellWriter) -> None:
    """Edit the launcher option(s) that give the world size; refuse where the world is not written literally."""
    if (new.world, new.gpus_per_node) == (old.world, old.gpus_per_node):
        return
    launch = cmd.launch
    if new.world is None:
        writer.refuse(FIELD, "the new world size is unknown", cmd.path, cmd.anchor)
        return
    if launch is None or not launch.layers:
        writer.refuse(FIELD, "the world size comes from outside this file (no launcher in it): start the job "
                      f"with {new.world} processes", cmd.path, cmd.anchor)
        return
    for layer in reversed(launch.layers):  # the innermost launcher decides, as guard's reader says
        record = registry.get(layer.kind)
        if record.read_world is None:
            continue  # a Python layer: the launcher around it decides
        writing = record.writing
        if writing is None or any(layer.get(option) for option in writing.blocked_by):
            break
        total = layer.get(writing.total) if writing.total else None
        if total is not None and not (writing.total_alone and layer.get(writing.total_alone)):
            writer.set_value(FIELD, written_ltext(total), str(new.world), inline=_command(cmd),
                             what=f"{layer.kind} {writing.total}")
            return
        if writing.per_node:
            return _per_node(cmd, layer, writing, old, new, writer)
        break
    writer.refuse(FIELD, f"guard cannot rewrite the world size of this launcher ({launch.why}): start the job "
                  f"with {new.world} processes", cmd.path, cmd.anchor)


def _per_node(cmd, layer, writing, old: ParallelLayout, new: ParallelLayout, writer: ShellWriter) -> None:
    """Keep the GPUs per node unless the new layout changes them; the node count follows the world."""
    per_name, nodes_name = writing.per_node, writing.nodes
    per_value, nodes_value = layer.get(per_name), layer.get(nodes_name)
    kind = layer.kind
    if kind == "srun":  # a bare srun runs the allocation's tasks: #SBATCH --nodes x --ntasks-per-node
        per_value = per_value or _sbatch(cmd, writer, per_name)
        nodes_value = nodes_value or _sbatch(cmd, writer, nodes_name)
    per_old = cmd.launch.gpus_per_node or 1
    nodes_old = cmd.launch.nodes or 1
    per_new = new.gpus_per_node if new.gpus_per_node != old.gpus_per_node else per_old
    if new.world % per_new:
        writer.refuse(FIELD, f"world size {new.world} is not a multiple of {per_new} processes per node",
                      cmd.path, cmd.anchor)
        return
    nodes_new = new.world // per_new
    for name, value, before, after in ((per_name, per_value, per_old, per_new),
                                       (nodes_name, nodes_value, nodes_old, nodes_new)):
        if before == after:
            continue
        if value is not None:
            if ":" in value.text:
                writer.refuse(FIELD, f"{name} {value.text} is an elastic range: edit it by hand", value.path,
                              written_ltext(value).span)
                continue
            writer.set_value(FIELD, written_ltext(value), str(after), inline=_command(cmd),
                             what=f"{layer.kind} {name}")
        elif kind != "srun" and layer.name.pos:
            name_at = written_ltext(layer.name)
            writer.insert(FIELD, name_at.path, name_at.span.stop, [f"{name} {after}"])
        else:
            writer.refuse(FIELD, f"{name} is not written: add {name} {after} to the launcher", cmd.path, cmd.anchor)


def _command(cmd):
    command = cmd.launch.command
    return command.path, command.span


def _sbatch(cmd, writer: ShellWriter, option: str):
    """The `#SBATCH` value a bare srun takes (its node and task counts)."""
    from guard.shell.interpreter import interpret

    text = writer.texts.get(cmd.path)
    if text is None:
        return None
    names = {"--nodes": ("--nodes", "-N"), "--ntasks-per-node": ("--ntasks-per-node",)}[option]
    return next((value for key, value in interpret(cmd.path, text).sbatch if key in names), None)
