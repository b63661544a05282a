"""MLM1xx (second half): batch sizes, sequence length, recompute, precision, schedules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

BATCH = rule(
    "MLM120", "global-batch-not-divisible", "error",
    "The global batch is not a multiple of micro batch x data-parallel size.",
    what="With the data-parallel size from the launcher, checks `--global-batch-size % "
         "(--micro-batch-size x DP) == 0` (DP = world / (TP x PP x CP)).",
    why="The microbatch calculator asserts 'global batch size (100) is not divisible by micro batch "
        "size (4) times data parallel size (8)' when training starts.",
    example="--global-batch-size 100 --micro-batch-size 4   # DP = 8",
    use_instead="--global-batch-size 96 --micro-batch-size 4",
    references=("megatron/core/num_microbatches_calculator.py",),
)

SEQ_POSITIONS = rule(
    "MLM122", "seq-length-exceeds-positions", "error",
    "--seq-length is larger than --max-position-embeddings.",
    what="Checks `--max-position-embeddings >= --seq-length`.",
    why="validate_args asserts 'max_position_embeddings (2048) must be greater than or equal to "
        "seq_length (4096).' Raising the sequence length for long-context runs often forgets it.",
    example="--seq-length 4096 --max-position-embeddings 2048",
    use_instead="--seq-length 4096 --max-position-embeddings 4096",
)

CP_SEQ = rule(
    "MLM123", "context-parallel-seq-length", "error",
    "With context parallelism, the sequence length must be a multiple of 2 x CP.",
    what="Checks `--seq-length % (2 x --context-parallel-size) == 0` when CP > 1.",
    why="validate_args asserts 'seq-length should be a multiple of 2 * context-parallel-size if "
        "context-parallel-size > 1.' (each CP rank holds two chunks for load balance).",
    example="--seq-length 4100 --context-parallel-size 4",
    use_instead="--seq-length 4096 --context-parallel-size 4",
)

RECOMPUTE = rule(
    "MLM124", "recompute-options-invalid", "error",
    "Activation recompute flags that do not go together.",
    what="Checks the recompute flags as validate_args and TransformerConfig do: `full` needs "
         "`--recompute-method` and `--recompute-num-layers`; `selective` takes neither; "
         "`--distribute-saved-activations` needs TP > 1 and `full`, and not sequence parallel "
         "(a lone `--recompute-method` is MLM205).",
    why="TransformerConfig raises 'Using recompute_granularity: full so recompute_method must be "
        "\"block\" or \"uniform\"'; validate_args: 'recompute method is not yet supported for "
        "selective recomputing granularity'.",
    example="--recompute-granularity full",
    use_instead="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
)

PRECISION = rule(
    "MLM125", "precision-flags-invalid", "error",
    "Precision flags that conflict or need another flag.",
    what="Checks `--fp16` with `--bf16`, `--fp16-lm-cross-entropy` without `--fp16`, "
         "`--fp32-residual-connection` without fp16/bf16, `--fp8-param-gather` without the "
         "distributed optimizer or FSDP, `--fp4-format` with `--fp8-format`.",
    why="validate_args asserts each ('lm cross entropy in fp16 only support in fp16 mode.', "
        "'--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron "
        "fsdp, or inference mode', ...).",
    example="--fp16 --bf16",
    use_instead="--bf16",
)

OVERLAP = rule(
    "MLM126", "overlap-param-gather-invalid", "error",
    "--overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce.",
    what="Checks `--overlap-param-gather` against `--use-distributed-optimizer` (or Megatron-FSDP) "
         "and `--overlap-grad-reduce`.",
    why="validate_args asserts '--overlap-param-gather only supported with distributed optimizer, "
        "megatron fsdp, or dist_muon' and 'Must use --overlap-param-gather with --overlap-grad-reduce'.",
    example="--overlap-param-gather",
    use_instead="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
)

SCHEDULE = rule(
    "MLM127", "iteration-sample-mix", "error",
    "Iteration-based and sample-based training flags are mixed.",
    what="With `--train-iters`, reports `--lr-decay-samples`/`--lr-warmup-samples`/"
         "`--train-samples`; with `--train-samples`, reports `--lr-decay-iters`/`--lr-warmup-iters`; "
         "`--lr-warmup-fraction` together with a warmup count; `--step-batch-size-schedule` with "
         "`--global-batch-size`; `--rampup-batch-size` with `--train-iters` (core_v0.16.1 and "
         "Megatron-DeepSpeed).",
    why="validate_args asserts 'expected iteration-based learning rate decay', 'expected "
        "sample-based training', 'can only specify one of lr-warmup-fraction and lr-warmup-iters'.",
    example="--train-iters 1000 --lr-decay-samples 100000",
    use_instead="--train-iters 1000 --lr-decay-iters 1000",
)

# Versions whose validate_args refuses --rampup-batch-size with --train-iters (main dropped the check).
RAMPUP_NEEDS_SAMPLES = {"core_v0.16.1", "megatron-deepspeed-f4157be"}

LR = rule(
    "MLM128", "min-lr-above-lr", "error",
    "--min-lr is larger than --lr.",
    what="Checks `--min-lr <= --lr`.",
    why="validate_args asserts it (a bare `AssertionError`).",
    example="--lr 1e-5 --min-lr 1e-4",
    use_instead="--lr 1e-4 --min-lr 1e-5",
)


@check(BATCH, target="megatron")
def batch(s: MegatronCheck) -> None:
    job, cmd = s.job, s.cmd
    gbs, mbs, dp = job.global_batch, job.micro_batch, job.layout.dp
    if not cmd.given("global_batch_size") or not (gbs and mbs and dp) or \
            cmd.v("decrease_batch_size_if_needed") is True:
        return
    if gbs % (mbs * dp):
        s.report(BATCH, "global_batch_size", f"global batch size ({gbs}) is not divisible by micro batch "
                 f"size ({mbs}) times data parallel size ({dp}) (dp = world {job.layout.world} / "
                 f"model parallel {job.layout.model_parallel})", at_value=True,
                 related=[cmd.related("micro_batch_size", f"micro batch {mbs}")],
                 help=f"use a multiple of {mbs * dp}, e.g. {(gbs // (mbs * dp) or 1) * mbs * dp}")


@check(SEQ_POSITIONS, CP_SEQ, target="megatron")
def sequence(s: MegatronCheck) -> None:
    job, cmd = s.job, s.cmd
    seq = job.seq_length if "sequence" not in job.missing else None
    positions = job.arch.max_positions if job.arch is not None else None
    if seq and positions and positions < seq:
        s.report(SEQ_POSITIONS, "max_position_embeddings", f"max_position_embeddings ({positions}) must be "
                 f"greater than or equal to seq_length ({seq})", at_value=True,
                 related=[cmd.related("seq_length", f"seq_length {seq}")])
    cp = job.layout.cp
    if seq and cp and cp > 1 and seq % (2 * cp):
        s.report(CP_SEQ, "seq_length", f"seq_length ({seq}) is not a multiple of 2 * context_parallel_size "
                 f"({2 * cp})", at_value=True)


@check(RECOMPUTE, target="megatron")
def recompute(s: MegatronCheck) -> None:
    job, cmd = s.job, s.cmd
    asked = cmd.given("recompute_granularity") or cmd.given("recompute_activations")
    granularity = job.recompute if asked else None
    method_given = cmd.given("recompute_method")
    layers_unset = not cmd.given("recompute_num_layers") and cmd.default("recompute_num_layers") is None
    if granularity == "full":
        if not method_given and cmd.default("recompute_method") is None and cmd.known("recompute_method"):
            s.report(RECOMPUTE, "recompute_granularity", "Using recompute_granularity: full so "
                     'recompute_method must be "block" or "uniform"', help="add --recompute-method uniform")
        elif layers_unset and cmd.known("recompute_num_layers") and \
                "recompute_num_layers" in cmd.table.by_dest and cmd.flavour != "megatron-deepspeed":
            s.report(RECOMPUTE, "recompute_granularity", "recompute_granularity full needs "
                     "--recompute-num-layers (1 to the layers of one pipeline stage)",
                     help="add --recompute-num-layers 1")
    elif granularity == "selective":
        if method_given:
            s.report(RECOMPUTE, "recompute_method", "recompute method is not yet supported for selective "
                     "recomputing granularity")
        # written, not defaulted: a fork whose own default is 1 (bigcode's) never runs this check
        elif cmd.given("recompute_num_layers") and cmd.flavour != "megatron-deepspeed":
            s.report(RECOMPUTE, "recompute_num_layers", "with selective recompute, recompute_num_layers must "
                     "be None")
    if cmd.v("distribute_saved_activations") is True:
        if (job.layout.tp or 1) <= 1:
            s.report(RECOMPUTE, "distribute_saved_activations", "can distribute recomputed activations only "
                     "across tensor model parallel groups (TP is 1)")
        elif granularity != "full":
            s.report(RECOMPUTE, "distribute_saved_activations", "--distribute-saved-activations needs "
                     "--recompute-granularity full")
        elif job.layout.sequence_parallel and cmd.flavour != "megatron-deepspeed":
            s.report(RECOMPUTE, "distribute_saved_activations", "distribute_saved_activations cannot be "
                     "used with sequence parallelism")


@check(PRECISION, target="megatron")
def precision(s: MegatronCheck) -> None:
    job, cmd = s.job, s.cmd
    fp16, bf16 = cmd.given("fp16"), cmd.given("bf16")  # switches: written is on
    if fp16 and bf16:
        s.report(PRECISION, "bf16", "--fp16 and --bf16 are mutually exclusive",
                 related=[cmd.related("fp16", "--fp16 given here")])
    if cmd.v("fp16_lm_cross_entropy") is True and not fp16:
        s.report(PRECISION, "fp16_lm_cross_entropy", "lm cross entropy in fp16 only support in fp16 mode.")
    if cmd.v("fp32_residual_connection") is True and job.params_dtype == "fp32":
        s.report(PRECISION, "fp32_residual_connection", "residual connection in fp32 only supported when "
                 "using fp16 or bf16.")
    if cmd.v("fp8_param_gather") is True and not (
            job.distributed_optimizer or cmd.v("use_torch_fsdp2") is True or job.fsdp_sharding is not None):
        s.report(PRECISION, "fp8_param_gather", "--fp8-param-gather only supported with distributed "
                 "optimizer, torch fsdp2, megatron fsdp, or inference mode",
                 help="add --use-distributed-optimizer")
    if cmd.v("fp4") is not None and "fp4" in cmd.table.by_dest and cmd.v("fp8") is not None and \
            cmd.given("fp4") and cmd.given("fp8"):
        s.report(PRECISION, "fp4", "--fp4-format and --fp8-format cannot be used simultaneously")


@check(OVERLAP, target="megatron")
def overlap(s: MegatronCheck) -> None:
    if s.cmd.v("overlap_param_gather") is not True or s.cmd.flavour == "megatron-deepspeed":
        return
    sharded = s.job.distributed_optimizer or s.job.fsdp_sharding is not None
    if not sharded:
        s.report(OVERLAP, "overlap_param_gather", "--overlap-param-gather only supported with distributed "
                   "optimizer, megatron fsdp, or dist_muon", help="add --use-distributed-optimizer")
    elif s.cmd.v("overlap_grad_reduce") is not True:
        s.report(OVERLAP, "overlap_param_gather", "Must use --overlap-param-gather with --overlap-grad-reduce",
                   help="add --overlap-grad-reduce")


@check(SCHEDULE, LR, target="megatron")
def schedule(s: MegatronCheck) -> None:
    if s.cmd.v("skip_train") is True:
        return
    given = lambda d: d in s.cmd.table.by_dest and s.cmd.given(d)  # noqa: E731
    if given("train_iters"):
        for dest, what in (("train_samples", "iteration-based training"),
                           ("lr_decay_samples", "iteration-based learning rate decay"),
                           ("lr_warmup_samples", "iteration-based learning rate warmup")):
            if given(dest) and s.cmd.v(dest) not in (None, 0):
                s.report(SCHEDULE, dest, f"expected {what}: {s.cmd.option(dest)} given with --train-iters",
                           related=[s.cmd.related("train_iters", "--train-iters given here")])
        if given("lr_warmup_fraction") and given("lr_warmup_iters") and s.cmd.v("lr_warmup_iters"):
            s.report(SCHEDULE, "lr_warmup_iters", "can only specify one of lr-warmup-fraction and lr-warmup-iters")
    elif given("train_samples"):
        for dest, what in (("lr_decay_iters", "sample-based learning rate decay"),
                           ("lr_warmup_iters", "sample-based learning rate warmup")):
            if given(dest) and s.cmd.v(dest) not in (None, 0):
                s.report(SCHEDULE, dest, f"expected {what}: {s.cmd.option(dest)} given with --train-samples",
                           related=[s.cmd.related("train_samples", "--train-samples given here")])
        if given("lr_warmup_fraction") and given("lr_warmup_samples") and s.cmd.v("lr_warmup_samples"):
            s.report(SCHEDULE, "lr_warmup_samples",
                       "can only specify one of lr-warmup-fraction and lr-warmup-samples")
    if given("step_batch_size_schedule") and given("global_batch_size"):
        s.report(SCHEDULE, "step_batch_size_schedule",
                   "Cannot specify both --step-batch-size-schedule and --global-batch-size",
                   related=[s.cmd.related("global_batch_size", "--global-batch-size given here")])
    if given("train_iters") and given("rampup_batch_size") and s.cmd.table.ref in RAMPUP_NEEDS_SAMPLES:
        s.report(SCHEDULE, "rampup_batch_size", "expected no batch-size rampup for iteration-based training "
                   f"(Megatron {s.cmd.table.ref}): --rampup-batch-size needs --train-samples")
    lr, min_lr = s.cmd.v("lr"), s.cmd.v("min_lr")
    if isinstance(lr, float) and isinstance(min_lr, float) and min_lr > lr:
        s.report(LR, "min_lr", f"min_lr ({min_lr:g}) is larger than lr ({lr:g})", at_value=True)


LEGACY = rule(
    "MLM129", "legacy-models-checkpoint-format", "error",
    "--use-legacy-models needs --ckpt-format torch (Megatron-LM core_v0.16 and older).",
    what="Reports `--use-legacy-models` without `--ckpt-format torch` (the default is torch_dist).",
    why="validate_args asserts \"legacy model format only supports the 'torch' checkpoint format.\" "
        "The flag itself is gone on Megatron-LM main (MLM001 there).",
    example="--use-legacy-models",
    use_instead="--use-legacy-models --ckpt-format torch",
)


@check(LEGACY, target="megatron")
def legacy_models(s: MegatronCheck) -> None:
    if "use_legacy_models" not in s.cmd.table.by_dest or s.cmd.v("use_legacy_models") is not True:
        return
    if s.cmd.v("ckpt_format") != "torch" and s.cmd.known("ckpt_format"):
        s.report(LEGACY, "use_legacy_models", "legacy model format only supports the 'torch' checkpoint "
                   f"format (--ckpt-format is {s.cmd.v('ckpt_format')!r})", help="add --ckpt-format torch")
