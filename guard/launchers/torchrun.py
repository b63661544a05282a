"""torchrun, `python -m torch.distributed.run` and the legacy `python -m torch.distributed.launch`."""

from __future__ import annotations

from guard.launchers.record import Launcher, Layer, RankVariables, Scope, Spelling, WorldReading, WorldWriting, number

# torch/distributed/run.py: every worker gets these (and LOCAL_WORLD_SIZE, GROUP_RANK, ...)
TORCH = RankVariables("torch.distributed", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
SPELLING = Spelling(no_value=frozenset({"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                                        "--run_path", "--use-env", "--use_env"}))
WRITING = WorldWriting(per_node="--nproc-per-node", nodes="--nnodes")
AGENTS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def read_world(layer: Layer, scope: Scope) -> WorldReading:
    """--nnodes (N, or MIN:MAX whose MAX counts) x --nproc-per-node (1 when absent)."""
    nproc = layer.get("--nproc-per-node", "--nproc_per_node")
    nnodes = layer.get("--nnodes")
    nodes_text = nnodes.text if nnodes is not None else "1"
    if nnodes is not None and nnodes.resolved and ":" in nodes_text:
        nodes_text = nodes_text.partition(":")[2]
    per_node = number(nproc) if nproc is not None else 1
    nodes = int(nodes_text) if nodes_text.isdigit() and (nnodes is None or nnodes.resolved) else None
    reading = WorldReading(gpus_per_node=per_node, nodes=nodes, where=nproc or nnodes or layer.name)
    if per_node is not None and nodes is not None:
        reading.size = per_node * nodes
        reading.why = f"{layer.kind} --nnodes {nodes} x --nproc-per-node {per_node}"
    else:
        unknown = nproc if per_node is None else nnodes
        reading.why = f"{layer.kind}: {unknown.raw or unknown.text if unknown else '?'} is not known statically"
    return reading


TORCHRUN = Launcher("torchrun", "torchrun", executables=("torchrun",), modules=("torch.distributed.run",),
                    spelling=SPELLING, read_world=read_world, ranks=(TORCH,), agents=AGENTS, writing=WRITING)
# the legacy launcher appends --local-rank=N to the program's arguments unless --use-env (LCH002)
LEGACY = Launcher("torch.distributed.launch", "python -m torch.distributed.launch",
                  modules=("torch.distributed.launch",), spelling=SPELLING, read_world=read_world, ranks=(TORCH,),
                  agents=AGENTS, writing=WRITING)
