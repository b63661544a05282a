"""Time of NCCL's collectives and point-to-point sends over NVLink or the network.

All-reduce moves 2(n-1)/n of the buffer through each rank's link, reduce-scatter and all-gather (n-1)/n,
all-to-all (n-1)/n, at the bus bandwidth nccl-tests measures for that message size (kernels.json); a GPU
without measurements keeps the flat model: the link at Calculon's efficiency, each step paying its latency.
A group whose ranks leave the NVLink domain runs at each GPU's own NIC (one NIC per GPU on DGX/HGX nodes,
schemas/gpus/catalog.json); inside it at NVLink speed.
"""

from __future__ import annotations

from guard.job.layout import ParallelLayout
from guard.plan.hardware import Hardware

VOLUME = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0, "all_to_all": 1.0}
STEPS = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}


def collective_seconds(hw: Hardware, kind: str, nbytes: float, ranks: int, across_nodes: bool) -> float:
    """One collective over `ranks` ranks on a buffer of `nbytes` (the whole buffer, not a shard): the volume a
    ring moves through each rank's link, at NCCL's measured bus bandwidth for a message of that size
    (nccl-tests' busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for the others; its small-message
    latency is inside the measured curve)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    share = (ranks - 1) / ranks
    # below the smallest measured message the time is latency: that message's time
    sized = max(nbytes, hw.smallest_measured_message)
    # an all-to-all sends each peer its own piece: its speed is that of a message of the piece's size
    message = max(sized / ranks, hw.smallest_measured_message) if kind == "all_to_all" else sized
    busbw = hw.bus_bandwidth(message, ranks, across_nodes, kind == "all_reduce")
    if busbw:
        return VOLUME[kind] * share * sized / busbw
    bandwidth, latency = hw.link(across_nodes)
    return VOLUME[kind] * share * nbytes / bandwidth + STEPS[kind] * (ranks - 1) * latency


def p2p_seconds(hw: Hardware, nbytes: float, across_nodes: bool) -> float:
    """One send between two ranks: the link's measured one-way copy rate (NVLink) or the NIC's, plus latency."""
    if nbytes <= 0:
        return 0.0
    bandwidth, latency = hw.link(across_nodes)
    measured = hw.p2p_bandwidth(across_nodes)
    return nbytes / (measured or bandwidth) + latency


def spans_nodes(layout: ParallelLayout, kind: str, domain: int = 0) -> bool:
    """Whether a group of this kind leaves the NVLink domain (the node, or `domain` GPUs where one NVLink
    domain joins several nodes, as NVL72 does), in Megatron's tp-cp-ep-dp-pp rank order with nodes holding
    consecutive ranks: the group's ranks are `stride` apart, so it spans stride x size ranks."""
    tp, cp, dp = layout.tp or 1, layout.seq_shards, layout.dp or 1
    stride, size = {"tp": (1, tp), "cp": (tp, cp), "ep": (tp * cp, layout.ep), "dp": (tp * cp, dp),
                    "expert_dp": (tp * cp * layout.ep, max(1, dp // max(1, layout.ep))),
                    "pp": (tp * cp * dp, layout.pp or 1)}[kind]
    return size > 1 and stride * size > max(layout.gpus_per_node, domain)
