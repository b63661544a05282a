"""Time of NCCL's ring collectives and point-to-point sends over NVLink or the network.

Ring algorithms (NCCL's default for large messages): all-reduce moves 2(n-1)/n of the buffer through each
rank's link, reduce-scatter and all-gather (n-1)/n, all-to-all (n-1)/n; each of the n-1 (2(n-1) for
all-reduce) steps pays the link latency. A group whose ranks span nodes runs at each GPU's own NIC
(one NIC per GPU on DGX/HGX nodes, schemas/gpus/catalog.json); inside a node at NVLink speed.
"""

from __future__ import annotations

from guard.job.layout import ParallelLayout
from guard.plan.hardware import Hardware

VOLUME = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0, "all_to_all": 1.0}
STEPS = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}


def collective_seconds(hw: Hardware, kind: str, nbytes: float, ranks: int, across_nodes: bool) -> float:
    """One collective over `ranks` ranks on a buffer of `nbytes` (the whole buffer, not a shard)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    bandwidth, latency = hw.link(across_nodes)
    share = (ranks - 1) / ranks
    return VOLUME[kind] * share * nbytes / bandwidth + STEPS[kind] * (ranks - 1) * latency


def p2p_seconds(hw: Hardware, nbytes: float, across_nodes: bool) -> float:
    if nbytes <= 0:
        return 0.0
    bandwidth, latency = hw.link(across_nodes)
    return nbytes / bandwidth + latency


def spans_nodes(layout: ParallelLayout, kind: str) -> bool:
    """Whether a group of this kind leaves the node, in Megatron's tp-cp-ep-dp-pp rank order with nodes
    holding consecutive ranks: the group's ranks are `stride` apart, so it spans stride x size ranks."""
    tp, cp, dp = layout.tp or 1, layout.seq_shards, layout.dp or 1
    stride, size = {"tp": (1, tp), "cp": (tp, cp), "ep": (tp * cp, layout.ep), "dp": (tp * cp, dp),
                    "expert_dp": (tp * cp * layout.ep, max(1, dp // max(1, layout.ep))),
                    "pp": (tp * cp * dp, layout.pp or 1)}[kind]
    return size > 1 and stride * size > layout.gpus_per_node
