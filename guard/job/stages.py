"""Layers to pipeline ranks and model chunks, as megatron-core assigns them (or DeepSpeed, for Megatron-DeepSpeed's
pipeline model): the one split every feature uses.

It refuses what validate_args and TransformerConfig refuse, with their reasons, so `guard check` (MLM106-108)
and `guard estimate` read the same split or the same refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guard.errors import InputError

# what LayoutError.kind names, and the rule that reports it
KINDS = {"even": "MLM106", "virtual": "MLM107", "uneven": "MLM108"}


class LayoutError(InputError):
    """Layers that do not split the way the flags ask (megatron-core refuses to build the model)."""

    def __init__(self, message: str, kind: str = "even", field: str = "arch.num_layers", at_value: bool = True):
        super().__init__(message)
        self.kind = kind  # "even", "virtual" or "uneven"
        self.field = field  # the job field whose setting is at fault (where a rule reports it)
        self.at_value = at_value  # at its value (a wrong number) or at the option (it should not be there)


@dataclass
class Chunk:
    """One model chunk on one pipeline rank (a virtual stage): its layers and its edge modules."""

    layers: tuple[int, ...]  # global layer indices
    embedding: bool = False
    loss: bool = False
    virtual_stage: int = 0
    mtp: int = 0  # multi-token prediction layers the layout string places here ('m')


@dataclass(frozen=True)
class SplitAsk:
    """How the command asks layers to be split (ParallelLayout's fields of the same names)."""

    pp: int = 1
    vpp: int = 1  # --num-virtual-stages-per-pipeline-rank
    virtual_layers: int | None = None  # --num-layers-per-virtual-pipeline-stage
    first: int | None = None
    last: int | None = None
    account_embedding: bool = False
    account_loss: bool = False
    layout_string: str | None = None
    overlap_p2p: bool = True  # --overlap-p2p-communication (the interleaved schedule needs PP > 2 without it)
    ds_pipe: tuple[str, bool, bool] | None = None  # DeepSpeed partitions GPTModelPipe (deepspeed_pipe.py)
    stage_blocks: tuple[int, ...] | None = None  # layers per stage, written out (Yuan 2.0's block method)


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

    def refuse(message: str) -> LayoutError:
        return LayoutError(message, "virtual", "layout.layout_string")

    if len(stages) % pp:
        raise refuse(f"layout has {len(stages)} stages, not a multiple of --pipeline-model-parallel-size {pp}")
    chunks: list[list[Chunk]] = [[] for _ in range(pp)]
    layer = 0
    for vstage, body in enumerate(stages):
        unknown = set(body) - set("Et L")
        if unknown - {"m"}:
            raise refuse(f"layout stage {vstage} has unknown symbols {''.join(sorted(unknown))!r}")
        count = body.count("t")
        chunks[vstage % pp].append(Chunk(tuple(range(layer, layer + count)), embedding="E" in body,
                                         loss="L" in body, virtual_stage=vstage, mtp=body.count("m")))
        layer += count
    if layer != num_layers:
        raise refuse(f"layout places {layer} transformer layers, --num-layers is {num_layers}")
    if "E" not in stages[0] or "L" not in stages[-1]:
        raise refuse("layout must start with E (embedding) and end with L (loss)")
    return chunks


def split(num_layers: int, ask: SplitAsk) -> list[list[Chunk]]:
    """Layers to [pp rank][chunk]: a layout string, uneven first/last stages, the accounting flags or an even
    split, then virtual stages within each rank; LayoutError with the reason megatron gives."""
    pp = ask.pp
    if num_layers < 1 or pp < 1 or ask.vpp < 1 or (ask.virtual_layers or 1) < 1:
        raise LayoutError(f"{num_layers} layers over {pp} pipeline stages cannot be split (every count must be "
                          "positive)")
    if ask.layout_string:
        return from_layout_string(ask.layout_string, pp, num_layers)
    if ask.stage_blocks is not None:
        # Yuan 2.0 megatron/model/transformer.py _get_num_layers: stage i builds blocks[i] layers
        if len(ask.stage_blocks) != pp or sum(ask.stage_blocks) != num_layers or min(ask.stage_blocks) < 1:
            raise LayoutError(f"--pipeline-model-parallel-blocks {','.join(map(str, ask.stage_blocks))} must give "
                              f"{pp} positive counts that add up to num_layers ({num_layers})", "uneven",
                              "layout.stage_blocks")
        return even_chunks(num_layers, pp, 1, list(ask.stage_blocks))
    if ask.ds_pipe and pp > 1:  # no even-split requirement: DeepSpeed's PipelineModule balances the specs
        from guard.job.deepspeed_pipe import stage_layers

        return even_chunks(num_layers, pp, 1, stage_layers(num_layers, pp, *ask.ds_pipe))
    accounted = int(ask.account_embedding) + int(ask.account_loss)
    total = num_layers + accounted
    vpp = _virtual_stages(num_layers, ask, total)
    if vpp > 1 and pp <= (1 if ask.overlap_p2p else 2):
        need = 1 if ask.overlap_p2p else 2
        field = "layout.virtual_layers" if ask.virtual_layers else "layout.vpp"
        raise LayoutError(f"an interleaved schedule needs pipeline_model_parallel_size > {need}, got {pp}",
                          "virtual", field, at_value=False)
    if ask.first is not None or ask.last is not None:
        per_rank = _uneven(num_layers, ask, vpp)
        return even_chunks(num_layers, pp, vpp, [per_rank[r] // vpp for _ in range(vpp) for r in range(pp)])
    if total % pp:
        extra = "".join([" + 1 (embedding)" if ask.account_embedding else "",
                         " + 1 (loss)" if ask.account_loss else ""])
        raise LayoutError(f"num_layers ({num_layers}{extra}) is not divisible by pipeline_model_parallel_size ({pp})")
    if (total // pp) % vpp:
        raise LayoutError(f"num_layers ({total}) is not divisible by pipeline size x virtual stages ({pp} x {vpp} = "
                          f"{pp * vpp})", "virtual", "layout.vpp")
    per_vstage = [total // (pp * vpp)] * (pp * vpp)
    per_vstage[0] -= int(ask.account_embedding)  # the accounted embedding / loss take a layer's place
    per_vstage[-1] -= int(ask.account_loss)
    return even_chunks(num_layers, pp, vpp, per_vstage)


def _virtual_stages(num_layers: int, ask: SplitAsk, total: int) -> int:
    """validate_args: --num-layers-per-virtual-pipeline-stage gives (layers per stage) / it virtual stages."""
    if not ask.virtual_layers:
        return max(ask.vpp, 1)
    if ask.first is not None or ask.last is not None:
        raise LayoutError("uneven first/last stages need --num-virtual-stages-per-pipeline-rank, not "
                          "--num-layers-per-virtual-pipeline-stage", "virtual", "layout.virtual_layers",
                          at_value=False)
    if total % ask.pp:
        raise LayoutError(f"num_layers ({total}) is not divisible by pipeline_model_parallel_size ({ask.pp})")
    per_stage = total // ask.pp
    if per_stage % ask.virtual_layers or per_stage < ask.virtual_layers:
        raise LayoutError(f"layers per pipeline stage ({per_stage}) are not divisible by layers per virtual stage "
                          f"({ask.virtual_layers})", "virtual", "layout.virtual_layers")
    return per_stage // ask.virtual_layers


def _uneven(num_layers: int, ask: SplitAsk, vpp: int) -> list[int]:
    """TransformerConfig.__post_init__: the first/last stages take the given counts, the middle ones share the
    rest evenly; layers on every stage divisible by the virtual stages."""
    first, last, pp = ask.first, ask.last, ask.pp
    field = "layout.first_stage_layers" if first is not None else "layout.last_stage_layers"
    if ask.account_embedding or ask.account_loss:
        raise LayoutError("--decoder-first/last-pipeline-num-layers cannot be combined with "
                          "--account-for-embedding/loss-in-pipeline-split", "uneven", field, at_value=False)
    if pp == 1:
        n = first if first is not None else last
        option = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
        raise LayoutError(f"{option} {n} with pipeline_model_parallel_size 1: there is no other stage, and Megatron "
                          f"may build a {n}-layer model instead of {num_layers}", "uneven", field, at_value=False)
    for value, name, where in ((first, "first", "layout.first_stage_layers"),
                               (last, "last", "layout.last_stage_layers")):
        if value is not None and value <= 0:
            raise LayoutError(f"num_layers_in_{name}_pipeline_stage must be larger than 0, got {value}", "uneven",
                              where)
    middle = pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if rest < 0:
        raise LayoutError(f"the first/last stages take {(first or 0) + (last or 0)} layers, more than num_layers "
                          f"({num_layers})", "uneven", field)
    if bool(rest) != bool(middle > 0):
        raise LayoutError(f"Mismatch: {rest} middle layers remaining but {max(middle, 0)} middle PP stages "
                          "available", "uneven", field)
    if middle and rest % middle:
        raise LayoutError(f"{rest} middle layers are not divisible by the {middle} middle pipeline stages "
                          f"(num_layers {num_layers} - first {first or 0} - last {last or 0})", "uneven", field)
    per_rank = ([first] if first is not None else []) + [rest // middle if middle else 0] * middle + \
        ([last] if last is not None else [])
    if vpp > 1 and any(count % vpp for count in per_rank):
        raise LayoutError(f"stage layer counts {per_rank} must each be divisible by the virtual pipeline degree "
                          f"{vpp}", "uneven", field)
    return per_rank
