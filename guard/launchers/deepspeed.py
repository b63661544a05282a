"""The `deepspeed` launcher (deepspeed/launcher/runner.py), which starts deepspeed.launcher.launch per node."""

from __future__ import annotations

import os

from guard.launchers.record import Launcher, Layer, Scope, Spelling, WorldReading, WorldWriting, number
from guard.launchers.torchrun import TORCH
from guard.shell.located import LText

DEFAULT_HOSTFILE = "/job/hostfile"  # runner.py DLTS_HOSTFILE: read when --hostfile is not given
SPELLING = Spelling(
    no_value=frozenset({"--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check", "--force_multi", "--save_pid",
                        "--bind_cores_to_rank", "--module", "-q", "--quiet", "--autotuning_run"}),
    aliases={"-H": "--hostfile", "-i": "--include", "-e": "--exclude", "--num_accelerators": "--num_gpus"})


def hostfile_slots(hostfile: LText | None, near: str) -> list[tuple[str, int]] | None:
    """(host, slots) of a DeepSpeed hostfile (`host slots=N` lines); relative names from the folder of `near`."""
    if hostfile is None:
        text = DEFAULT_HOSTFILE
    elif not hostfile.resolved:
        return None
    else:
        text = hostfile.text
    path = text if os.path.isabs(text) else os.path.join(os.path.dirname(near) or ".", text)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1_000_000).splitlines()
    except OSError:
        return None
    hosts = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        found = [p.split("=", 1)[1] for p in parts[1:] if p.startswith("slots=")]
        if not found or not found[0].isdigit():
            return None  # DeepSpeed refuses a bad entry; guard does not guess
        hosts.append((parts[0], int(found[0])))
    return hosts or None


def read_world(layer: Layer, scope: Scope) -> WorldReading:
    """--include host:slots@...; else the hostfile's slots (capped by --num_gpus, first --num_nodes hosts); else
    --num_nodes x --num_gpus (one node when only --num_gpus is given)."""
    gpus, nodes, include = layer.get("--num_gpus"), layer.get("--num_nodes"), layer.get("--include")
    reading = WorldReading(where=gpus or include or nodes or layer.name)
    if include is not None and include.resolved:
        hosts = include.text.split("@")
        if all(":" in h for h in hosts):
            total = sum(len(h.partition(":")[2].split(",")) for h in hosts)
            reading.size, reading.nodes = total, len(hosts)
            reading.gpus_per_node = total // len(hosts)
            reading.why = f"deepspeed --include {include.text}"
            return reading
    per_node, node_count = number(gpus), number(nodes)
    hostfile = layer.get("--hostfile")
    slots = hostfile_slots(hostfile, scope.path) if hostfile is not None else None
    if slots:
        hosts = slots[:node_count] if node_count else slots
        counts = [min(n, per_node) if per_node else n for _, n in hosts]
        reading.size, reading.nodes = sum(counts), len(counts)
        reading.gpus_per_node = counts[0] if len(set(counts)) == 1 else None
        reading.why = f"deepspeed hostfile {hostfile.text}: {' + '.join(map(str, counts))} slots"
        return reading
    if gpus is not None and per_node is not None and hostfile is None:
        node_count = node_count or 1
    reading.gpus_per_node, reading.nodes = per_node, node_count
    if per_node is not None and node_count is not None:
        reading.size = per_node * node_count
        reading.why = f"deepspeed --num_nodes {node_count} x --num_gpus {per_node}"
    else:
        reading.why = ("deepspeed: the world size comes from the hostfile or the GPUs of the machine "
                       "(give --num_gpus/--num_nodes, or --world-size)")
    return reading


def refusal(layer: Layer, scope: Scope) -> str:
    """runner.py: more than one active host (or --force_multi) without --no_ssh starts the other nodes' ranks
    over pdsh, ssh or MPI, whose environment guard's hook does not reach."""
    if layer.get("--no_ssh") is not None:
        return ""  # every node runs its own deepspeed (and its own guard launch)
    include = layer.get("--include")
    hosts = {h.partition(":")[0] for h in include.text.split("@")} if include is not None and include.resolved \
        else {h for h, _ in hostfile_slots(layer.get("--hostfile"), scope.path) or []}
    count = number(layer.get("--num_nodes"))
    active = min(len(hosts), count) if count else len(hosts)
    if active > 1 or layer.get("--force_multi") is not None:
        return (f"deepspeed starts the ranks of {active if active > 1 else 'other'} nodes itself (over "
                f"{(layer.get('--launcher') or LText.plain('pdsh')).text}), where guard's start-up hook does not "
                "reach: run `guard launch -- deepspeed --no_ssh --node_rank N ...` on each node")
    return ""


DEEPSPEED = Launcher(
    "deepspeed", "deepspeed", executables=("deepspeed", "deepspeed.pt"), modules=("deepspeed.launcher.runner",),
    spelling=SPELLING, read_world=read_world, ranks=(TORCH,),
    agents=("deepspeed", "deepspeed.pt", "deepspeed.launcher.runner", "deepspeed.launcher.launch"),
    writing=WorldWriting(per_node="--num_gpus", nodes="--num_nodes", blocked_by=("--include", "--hostfile")),
    refusal=refusal,
    plugin="guard.plugins.deepspeed.install() before deepspeed.initialize")
