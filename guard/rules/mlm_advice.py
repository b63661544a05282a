"""MLM2xx: layouts Megatron accepts but that run slowly or fail in the schedule, and what guard could not check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

TP_ACROSS_NODES = rule(
    "MLM201", "tp-across-nodes", "warning",
    "Tensor parallelism spans more GPUs than one node has.",
    what="With GPUs per node from the launcher (`--nproc-per-node`, `--num_gpus`, `#SBATCH "
         "--gpus-per-node`), reports TP larger than the GPUs of one node, or not dividing it.",
    why="Tensor-parallel layers all-reduce activations twice per layer; across nodes that traffic "
        "leaves NVLink for the network and throughput collapses. Megatron allows it silently.",
    example="torchrun --nproc-per-node 8 --nnodes 2 ... --tensor-model-parallel-size 16",
    use_instead="... --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2",
)

BUBBLE = rule(
    "MLM202", "pipeline-bubble", "warning",
    "Fewer microbatches than pipeline stages: most of every step is pipeline bubble.",
    what="Computes microbatches per step = global batch / (micro batch x DP) and reports fewer "
         "than PP stages.",
    why="With m microbatches and p stages, 1F1B idles (p - 1) / (m + p - 1) of the time: m = 1 on "
        "p = 4 wastes 75 % of the GPUs.",
    example="--pipeline-model-parallel-size 8 --global-batch-size 16 --micro-batch-size 4   # DP 4: m = 1",
    use_instead="--pipeline-model-parallel-size 8 --global-batch-size 128 --micro-batch-size 4",
)

INTERLEAVED = rule(
    "MLM203", "interleaved-schedule-cannot-fill", "error",
    "The interleaved schedule cannot be built from this number of microbatches.",
    what="With virtual pipeline stages, checks the interleaved schedule's conditions: microbatch "
         "group size (default PP) between PP and the microbatches per step, and the remainder of "
         "microbatches / group size either 0 or at least PP.",
    why="megatron-core's schedule raises 'The number of contiguous micro-batches in a virtual "
        "pipeline stage should range in [PP=4 , M=2]' or 'The remainder of M ... should be 0, or "
        "larger than or equal to the pipeline-parallel size' at the first step.",
    example="--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2   # 2 microbatches",
    use_instead="... with a global batch giving 8 microbatches",
    references=("megatron/core/pipeline_parallel/schedules.py: "
                "forward_backward_pipelining_with_interleaving",),
)

RECOMPUTE_IGNORED = rule(
    "MLM205", "recompute-method-ignored", "warning",
    "--recompute-method without --recompute-granularity: nothing is recomputed.",
    what="Reports `--recompute-method` given without `--recompute-granularity` (and without "
         "`--recompute-activations`).",
    why="validate_args and TransformerConfig accept it and read the method only under `full` "
        "granularity, so the job trains without recompute and may run out of memory where the "
        "author expected recomputation.",
    example="--recompute-method uniform",
    use_instead="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
)

WORLD_UNKNOWN = rule(
    "MLM204", "world-size-unknown", "info",
    "The world size is not known: checks that need it were skipped.",
    what="Says when neither the launcher nor `--world-size` gives the number of ranks, and which "
         "checks (divisibility, batch, MoE groups) were therefore skipped.",
    why="A silent skip reads as a pass. Pass `--world-size N` (and `--gpus-per-node G`) to check "
        "them, or write the launcher into the script.",
    example="pretrain_gpt.py --tensor-model-parallel-size 8 ...   # no launcher",
    use_instead="guard check --world-size 16 train.sh",
)


@check(TP_ACROSS_NODES, target="megatron")
def tp_across_nodes(s: MegatronCheck) -> None:
    lay = s.job.layout
    tp, per_node = lay.tp, lay.gpus_per_node
    if not tp or tp == 1 or "layout.gpus_per_node" not in s.job.origins:  # the node size is not the default's
        return
    if tp > per_node or per_node % tp:
        s.report(TP_ACROSS_NODES, "tensor_model_parallel_size",
                 f"tensor_model_parallel_size {tp} does not fit in one node of {per_node} GPUs: "
                 "tensor-parallel all-reduces cross the network", at_value=True,
                 help=f"keep TP <= {per_node} (a divisor of it) and move the rest to pipeline parallelism")


@check(BUBBLE, INTERLEAVED, target="megatron")
def microbatches(s: MegatronCheck) -> None:
    job, cmd, lay = s.job, s.cmd, s.job.layout
    pp, m = lay.pp, None if "batch" in job.missing else job.num_microbatches
    if not pp or pp <= 1 or not m:
        return
    dest = "global_batch_size" if cmd.given("global_batch_size") else "micro_batch_size"
    per_step = pp * job.micro_batch * (lay.dp or 1)
    if lay.vpp > 1:
        group = job.microbatch_group or pp
        if group > m or group < pp:
            s.report(INTERLEAVED, dest, f"the interleaved schedule needs between PP={pp} and M={m} "
                     f"contiguous microbatches per virtual stage, got {group} ({m} microbatches per step)",
                     help=f"raise the global batch to at least {per_step}")
            return
        remainder = m % group
        if 0 < remainder < pp:
            s.report(INTERLEAVED, dest, f"{m} microbatches leave a final group of {remainder} (< PP={pp}): "
                     "megatron-core refuses the interleaved schedule",
                     help=f"use a multiple of {group} microbatches")
            return
    if m < pp:
        idle = (pp - 1) / (m + pp - 1)
        s.report(BUBBLE, dest, f"{m} microbatch{'es' if m != 1 else ''} per step on {pp} pipeline stages: "
                 f"about {idle:.0%} of each step is pipeline bubble", at_value=cmd.given(dest),
                 help=f"use at least {pp} microbatches (global batch >= {per_step})")


@check(WORLD_UNKNOWN, target="megatron")
def world_unknown(s: MegatronCheck) -> None:
    if s.job.layout.world is not None:
        return
    s.report_at(WORLD_UNKNOWN, s.cmd.anchor, None,
                f"{s.job.missing.get('world_size', 'the world size is unknown')}; world-size divisibility, "
                "data-parallel batch and expert-group checks were skipped", help="pass --world-size N to check them")


@check(RECOMPUTE_IGNORED, target="megatron")
def recompute_ignored(s: MegatronCheck) -> None:
    cmd = s.cmd
    if cmd.given("recompute_method") and s.job.recompute == "none" and cmd.known("recompute_granularity"):
        s.report(RECOMPUTE_IGNORED, "recompute_method", "--recompute-method without --recompute-granularity is "
                 "ignored: nothing is recomputed", help="add --recompute-granularity full")
