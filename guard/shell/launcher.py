"""The launcher chain of a training command (srun -> torchrun -> program) and the world size it starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from guard.shell.launcher_options import TORCH_RUN_MODULES, launcher_kind, read_options
from guard.shell.located import LText
from guard.shell.model import Command, Script


@dataclass
class Layer:
    """One launcher in the chain (srun → torchrun → pretrain_gpt.py) and the options given to it."""

    kind: str
    name: LText
    options: dict[str, LText] = field(default_factory=dict)  # canonical option -> value ("" for flags)

    def get(self, *names: str) -> LText | None:
        for name in names:
            for spelling in (name, name.replace("-", "_"), name.replace("_", "-")):
                if spelling in self.options:
                    return self.options[spelling]
        return None


@dataclass
class Launch:
    command: Command
    layers: list[Layer]
    program: LText | None  # pretrain_gpt.py (or the module after -m)
    args: list[LText]  # what the program receives
    world_size: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    why: str = ""  # how the world size was found, or why it is unknown
    where: LText | None = None  # the option that sets the world size

    @property
    def kind(self) -> str:
        outer = [layer.kind for layer in self.layers if layer.kind != "python"]
        return "+".join(outer) or "python"

    def layer(self, kind: str) -> Layer | None:
        return next((layer for layer in self.layers if layer.kind == kind), None)



def parse_launch(command: Command) -> Launch | None:
    """The launcher chain of a command, or None when the command launches no Python program."""
    words = command.words
    layers: list[Layer] = []
    i = 0
    while i < len(words):
        kind = launcher_kind(words, i)
        if kind is None:
            break
        start = i + (2 if kind == "accelerate" else 1)
        opts, i = read_options(kind, words, start)
        layer = Layer(kind, words[start - 1], opts)
        if kind == "python" and "-m" in opts:
            module = opts["-m"].text
            if module in TORCH_RUN_MODULES:
                layer = Layer("python", words[start - 1], {k: v for k, v in opts.items() if k != "-m"})
                layers.append(layer)
                sub_kind = TORCH_RUN_MODULES[module]
                sub_opts, i = read_options("torchrun", words, i)
                layers.append(Layer(sub_kind, opts["-m"], sub_opts))
                continue
            layers.append(layer)
            return _finish(Launch(command, layers, opts["-m"], words[i:]))
        layers.append(layer)
        if kind in ("torchrun", "deepspeed", "accelerate") and ("-m" in opts or "--module" in opts):
            return _finish(Launch(command, layers, words[i] if i < len(words) else None, words[i + 1:]))
    if not layers or i >= len(words):
        return None
    program = words[i]
    if os.path.basename(program.text) in ("bash", "sh") or program.text.endswith(".sh"):
        return None
    return _finish(Launch(command, layers, program, words[i + 1:]))


def launch_with(command: Command, kind: str, name: LText, words: list[LText]) -> Launch:
    """The world a launcher of `kind` starts with the options `words` (a launcher a tool runs for the user:
    `axolotl train ... -- --num_processes 4`, the options `trl sft` hands accelerate)."""
    opts, _ = read_options(kind, words, 0)
    return _finish(Launch(command, [Layer(kind, name, opts)], None, []))


def _int(value: LText | None) -> int | None:
    if value is None or not value.resolved:
        return None
    try:
        return int(value.text)
    except ValueError:
        return None


def _finish(launch: Launch) -> Launch:
    """Fill the world size from the innermost launcher that decides how many processes run."""
    env_ws = launch.command.env.get("WORLD_SIZE")
    for layer in reversed(launch.layers):
        if layer.kind in ("torchrun", "torch.distributed.launch"):
            return _torchrun(launch, layer)
        if layer.kind == "deepspeed":
            return _deepspeed(launch, layer)
        if layer.kind == "accelerate":
            return _accelerate(launch, layer)
        if layer.kind == "mpirun":
            return _mpirun(launch, layer)
        if layer.kind == "srun":
            return _srun(launch, layer)
    if env_ws is not None and _int(env_ws):
        launch.world_size, launch.why, launch.where = _int(env_ws), "WORLD_SIZE set on the command", env_ws
        return launch
    launch.world_size, launch.gpus_per_node = 1, None
    launch.why = "a single python process (no launcher)"
    launch.where = launch.layers[0].name if launch.layers else None
    return launch


def _torchrun(launch: Launch, layer: Layer) -> Launch:
    nproc = layer.get("--nproc-per-node", "--nproc_per_node")
    nnodes = layer.get("--nnodes")
    nodes_text = nnodes.text if nnodes is not None else "1"
    if nnodes is not None and nnodes.resolved and ":" in nodes_text:
        low, _, high = nodes_text.partition(":")
        nodes_text = high
    per_node = _int(nproc) if nproc is not None else 1
    nodes = int(nodes_text) if nodes_text.isdigit() and (nnodes is None or nnodes.resolved) else None
    launch.gpus_per_node, launch.nodes = per_node, nodes
    if per_node is not None and nodes is not None:
        launch.world_size = per_node * nodes
        launch.why = f"{layer.kind} --nnodes {nodes} x --nproc-per-node {per_node}"
    else:
        unknown = nproc if per_node is None else nnodes
        launch.why = f"{layer.kind}: {unknown.raw or unknown.text if unknown else '?'} is not known statically"
    launch.where = nproc or nnodes or layer.name
    return launch


def _accelerate(launch: Launch, layer: Layer) -> Launch:
    total = layer.get("--num_processes")
    machines = _int(layer.get("--num_machines")) or 1
    launch.world_size, launch.nodes = _int(total), machines
    launch.gpus_per_node = launch.world_size // machines if launch.world_size else None
    launch.why = (f"accelerate --num_processes {launch.world_size}" if launch.world_size
                  else "accelerate: --num_processes is not given (it comes from the accelerate config)")
    launch.where = total or layer.name
    return launch


def _mpirun(launch: Launch, layer: Layer) -> Launch:
    launch.world_size = _int(layer.get("-np"))
    launch.gpus_per_node = _int(layer.get("-npernode"))
    launch.why = f"mpirun -np {launch.world_size}" if launch.world_size else "mpirun: -np unknown"
    launch.where = layer.get("-np") or layer.name
    return launch


def _deepspeed(launch: Launch, layer: Layer) -> Launch:
    gpus = layer.get("--num_gpus")
    nodes = layer.get("--num_nodes")
    include = layer.get("--include")
    launch.where = gpus or include or nodes or layer.name
    if include is not None and include.resolved:
        total = 0
        hosts = include.text.split("@")
        for host in hosts:
            _, _, slots = host.partition(":")
            total += len(slots.split(",")) if slots else 0
        if all(":" in h for h in hosts):
            launch.world_size, launch.nodes = total, len(hosts)
            launch.gpus_per_node = total // len(hosts) if hosts else None
            launch.why = f"deepspeed --include {include.text}"
            return launch
    per_node, node_count = _int(gpus), _int(nodes)
    hostfile = layer.get("--hostfile", "-H")
    slots = _hostfile_slots(hostfile, launch.command.path) if hostfile is not None else None
    if slots:
        hosts = slots[:node_count] if node_count else slots
        counts = [min(n, per_node) if per_node else n for n in hosts]
        launch.world_size, launch.nodes = sum(counts), len(counts)
        launch.gpus_per_node = counts[0] if len(set(counts)) == 1 else None
        launch.why = f"deepspeed hostfile {hostfile.text}: {' + '.join(map(str, counts))} slots"
        return launch
    if gpus is not None and per_node is not None and hostfile is None:
        node_count = node_count or 1
    launch.gpus_per_node, launch.nodes = per_node, node_count
    if per_node is not None and node_count is not None:
        launch.world_size = per_node * node_count
        launch.why = f"deepspeed --num_nodes {node_count} x --num_gpus {per_node}"
    else:
        launch.why = ("deepspeed: the world size comes from the hostfile or the GPUs of the machine "
                      "(give --num_gpus/--num_nodes, or --world-size)")
    return launch


def _hostfile_slots(hostfile: LText, script_path: str) -> list[int] | None:
    """Slots per host of a DeepSpeed hostfile (`host slots=N` lines) found beside the script."""
    if not hostfile.resolved:
        return None
    path = hostfile.text if os.path.isabs(hostfile.text) else \
        os.path.join(os.path.dirname(script_path) or ".", hostfile.text)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1_000_000).splitlines()
    except OSError:
        return None
    slots = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        found = [p.split("=", 1)[1] for p in parts[1:] if p.startswith("slots=")]
        if not found or not found[0].isdigit():
            return None  # DeepSpeed refuses a bad entry; guard does not guess
        slots.append(int(found[0]))
    return slots or None


def _srun(launch: Launch, layer: Layer) -> Launch:
    tasks = _int(layer.get("--ntasks"))
    nodes = _int(layer.get("--nodes"))
    per_node = _int(layer.get("--ntasks-per-node"))
    if tasks is None and nodes is not None and per_node is not None:
        tasks = nodes * per_node
    launch.world_size, launch.nodes, launch.gpus_per_node = tasks, nodes, per_node
    launch.where = layer.get("--ntasks") or layer.get("--ntasks-per-node") or layer.name
    launch.why = f"srun: {tasks} tasks" if tasks else "srun: the task count is not known statically"
    return launch


def find_launches(script: Script) -> list[Launch]:
    """Every command of the script that starts a Python program, outermost launcher first."""
    out = []
    for command in script.commands:
        launch = parse_launch(command)
        if launch is None:
            continue
        srun = launch.layer("srun")
        if srun is not None and launch.world_size is None and launch.layers[-1].kind in ("srun", "python"):
            # srun without counts runs the job's tasks: --ntasks, or --nodes x --ntasks-per-node
            tasks = _int(sbatch_value(script, "--ntasks", "-n"))
            nodes = _int(sbatch_value(script, "--nodes", "-N"))
            per_node = _int(sbatch_value(script, "--ntasks-per-node"))
            if tasks is None and nodes is not None and per_node is not None:
                tasks = nodes * per_node
            if tasks is not None:
                launch.world_size, launch.nodes, launch.gpus_per_node = tasks, nodes, per_node
                launch.why = f"srun runs the job's {tasks} tasks (#SBATCH)"
        if launch.gpus_per_node is None:
            gpus = sbatch_value(script, "--gpus-per-node")
            launch.gpus_per_node = _int(gpus)
        out.append(launch)
    return out


def sbatch_value(script: Script, *names: str) -> LText | None:
    for key, value in script.sbatch:
        if key in names:
            return value
    return None
