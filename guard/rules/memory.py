"""MEM0xx: the memory prediction inside `guard check` (with --gpu): predicted OOM, unmodelled features."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

PREDICTED_OOM = rule(
    "MEM001", "predicted-out-of-memory", "error",
    "The predicted peak memory of some ranks exceeds the GPU's usable memory.",
    what="With a GPU known (`--gpu`, `[tool.guard] gpu`), runs `guard estimate` on the job and reports "
         "the ranks whose predicted peak exceeds the usable memory, with the term that dominates, at "
         "the flag that drives that term.",
    why="An out-of-memory error surfaces minutes after every rank has loaded the model, or only on "
        "the first pipeline stage; the estimate finds it before any GPU is spent.",
    example="guard check --gpu A100-40GB train_llama2_13b.sh   # PP=4, no distributed optimizer",
    use_instead="--use-distributed-optimizer with DP > 1, more TP/PP, recompute, or a smaller micro batch",
    references=("docs/estimate.md",),
)

UNMODELLED = rule(
    "MEM002", "memory-feature-not-modelled", "warning",
    "The job uses a feature whose memory guard does not model: the estimate omits it.",
    what="Lists each flag whose memory effect the estimate does not price (FP8, MLA, MTP, CPU "
         "offloading, capacity factors, ...), so the number is never silently wrong.",
    why="A prediction that silently leaves out a term reads as a guarantee it is not.",
    example="--fp8-format hybrid",
    use_instead="treat the estimate as a lower bound for those ranks, or measure",
)

NOT_ESTIMATED = rule(
    "MEM003", "memory-not-estimated", "info",
    "A GPU was given but the job lacks a value the memory estimate needs.",
    what="Says which value (world size, vocabulary, sequence length, ...) was missing, so a missing "
         "MEM001 does not read as 'fits'.",
    why="A silent skip reads as a pass.",
    example="guard check --gpu H100 train.sh   # tokenizer with no --vocab-size",
    use_instead="guard check --gpu H100 --world-size 16 train.sh",
)

# The flag that drives each component, for locating MEM001.
DRIVERS = {"activations": "micro_batch", "embedding_activations": "micro_batch", "logits": "micro_batch",
           "optimizer": "distributed_optimizer", "params": "tp", "grads": "tp", "buffers": "command",
           "transient": "recompute", "runtime": "command"}


@check(PREDICTED_OOM, UNMODELLED, NOT_ESTIMATED, target="megatron")
def predicted_oom(s: MegatronCheck) -> None:
    if not (s.gpu or s.gpu_memory):
        return
    from guard.diagnostic import Span
    from guard.job.training_job import IncompleteJob
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu
    from guard.units import gib

    setup = s.job
    try:
        setup.require()
    except IncompleteJob as err:
        s.report_at(NOT_ESTIMATED, s.cmd.anchor, None, f"memory not estimated: {err}")
        return
    result = estimate(setup, choose_gpu(s.gpu, s.gpu_memory))
    for feature, flag in setup.unmodelled:
        origin = setup.origins.get(f"unmodelled:{feature}")
        span = Span(origin.line, origin.col) if origin else s.cmd.anchor
        s.report_at(UNMODELLED, span, flag, f"memory of {feature} is not modelled: the estimate leaves it out",
                      path=origin.path if origin else None)
    over = [st for st in result.stages if st.peak_bytes > result.capacity]
    if not over:
        return
    worst = max(over, key=lambda st: st.peak_bytes)
    dominant = max(("params", "grads", "optimizer", "activations", "logits"), key=lambda k: worst.components[k])
    origin = setup.origin(DRIVERS[dominant])
    ranks = ", ".join(_range(r) for r in _merged([result.stage_ranks(st.pp_rank) for st in over]))
    plural = "ranks" if len(over) > 1 or result.ranks_per_stage > 1 else "rank"
    gpu = f"a GPU with {gib(result.capacity)} GiB" if result.gpu.name == "custom" else result.gpu.name
    s.report_at(PREDICTED_OOM, Span(origin.line, origin.col), origin.pointer,
                  f"predicted out of memory on {gpu}: {plural} {ranks} peak at {gib(worst.peak_bytes)} GiB "
                  f"(pipeline stage {worst.pp_rank}) of {gib(result.capacity)} GiB usable; largest term: "
                  f"{dominant} {gib(worst.components[dominant])} GiB",
                  help="run `guard estimate --explain` on this job for every term", path=origin.path)


def _merged(ranges: list[range]) -> list[range]:
    out: list[range] = []
    for r in ranges:
        if out and out[-1].stop == r.start:
            out[-1] = range(out[-1].start, r.stop)
        else:
            out.append(r)
    return out


def _range(ranks: range) -> str:
    return str(ranks.start) if len(ranks) == 1 else f"{ranks.start}-{ranks.stop - 1}"
