"""Layers to pipeline ranks and model chunks, as megatron-core assigns them (the one split every feature uses)."""

from __future__ import annotations

import re
from dataclasses import dataclass


class LayoutError(ValueError):
    """Layers that do not split the way the flags ask (megatron-core refuses to build the model)."""


@dataclass
class Chunk:
    """One model chunk on one pipeline rank (a virtual stage): its layers and its edge modules."""

    layers: tuple[int, ...]  # global layer indices
    embedding: bool = False
    loss: bool = False
    virtual_stage: int = 0
    mtp: int = 0  # multi-token prediction layers the layout string places here ('m')


def even_chunks(num_layers: int, pp: int, vpp: int = 1, per_stage: list[int] | None = None) -> list[list[Chunk]]:
    """Layers to (pp rank, chunk): virtual stage k = chunk * pp + rank holds a contiguous slice."""
    if per_stage is None:
        stages = pp * vpp
        per_stage = [num_layers // stages] * stages
    chunks: list[list[Chunk]] = [[] for _ in range(pp)]
    start = 0
    total = len(per_stage)
    for vstage, count in enumerate(per_stage):
        chunk = Chunk(tuple(range(start, start + count)), embedding=vstage == 0, loss=vstage == total - 1,
                      virtual_stage=vstage)
        chunks[vstage % pp].append(chunk)
        start += count
    return chunks


def _expand(text: str) -> str:
    """Megatron's layout mini-language: `(t|)*3` and `t*3` repeat; spaces and commas are ignored."""
    text = re.sub(r"[\s,]", "", text)
    pattern = re.compile(r"\(([^()]*)\)\*(\d+)")
    while pattern.search(text):
        text = pattern.sub(lambda mt: mt.group(1) * int(mt.group(2)), text)
    return re.sub(r"([A-Za-z])\*(\d+)", lambda mt: mt.group(1) * int(mt.group(2)), text)


def from_layout_string(text: str, pp: int, num_layers: int) -> list[list[Chunk]]:
    """--pipeline-model-parallel-layout: virtual stages split by '|': E embedding, t layer, L loss."""
    stages = _expand(text).split("|")
    if len(stages) % pp:
        raise LayoutError(f"layout has {len(stages)} stages, not a multiple of --pipeline-model-parallel-size {pp}")
    chunks: list[list[Chunk]] = [[] for _ in range(pp)]
    layer = 0
    for vstage, body in enumerate(stages):
        unknown = set(body) - set("Et L")
        if unknown - {"m"}:
            raise LayoutError(f"layout stage {vstage} has unknown symbols {''.join(sorted(unknown))!r}")
        count = body.count("t")
        chunks[vstage % pp].append(Chunk(tuple(range(layer, layer + count)), embedding="E" in body,
                                         loss="L" in body, virtual_stage=vstage, mtp=body.count("m")))
        layer += count
    if layer != num_layers:
        raise LayoutError(f"layout places {layer} transformer layers, --num-layers is {num_layers}")
    if "E" not in stages[0] or "L" not in stages[-1]:
        raise LayoutError("layout must start with E (embedding) and end with L (loss)")
    return chunks


def virtual_stage_layers(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None,
                         account_embedding: bool, account_loss: bool) -> list[int]:
    """Transformer layers per virtual stage (chunk-major): even split, uneven first/last, accounting flags."""
    stages = pp * vpp
    if first is None and last is None:
        total = num_layers + int(account_embedding) + int(account_loss)
        if total % stages:
            raise LayoutError(f"{num_layers} layers{' (+ accounted embedding/loss)' if total != num_layers else ''} "
                              f"do not split evenly over {pp} pipeline stages x {vpp} virtual stages")
        per = [total // stages] * stages
        per[0] -= int(account_embedding)
        per[-1] -= int(account_loss)
        return per
    middle = pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if middle < 0 or rest < 0 or (middle and rest % middle) or (not middle and rest):
        raise LayoutError(f"first/last pipeline layers ({first}, {last}) leave {rest} layers "
                          f"that do not split over {max(middle, 0)} middle stages")
    per_rank = ([first] if first is not None else []) + [rest // middle if middle else 0] * middle + \
        ([last] if last is not None else [])
    for r in range(pp):
        if per_rank[r] % vpp:
            raise LayoutError(f"stage {r} holds {per_rank[r]} layers, not divisible by {vpp} virtual stages")
    return [per_rank[r] // vpp for _ in range(vpp) for r in range(pp)]


def stage_layers(num_layers: int, pp: int, first: int | None = None, last: int | None = None,
                 account_embedding: bool = False, account_loss: bool = False) -> list[int] | None:
    """Transformer layers per pipeline rank (None: megatron-core cannot build this split)."""
    if pp < 1:
        return None
    try:
        return virtual_stage_layers(num_layers, pp, 1, first, last, account_embedding, account_loss)
    except LayoutError:
        return None


def megatron_chunks(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None,
                    account_embedding: bool, account_loss: bool) -> list[list[Chunk]]:
    """Even split, uneven first/last stage, accounting flags, then virtual stages within each rank."""
    per_vstage = virtual_stage_layers(num_layers, pp, vpp, first, last, account_embedding, account_loss)
    return even_chunks(num_layers, pp, vpp, per_vstage)
